// BlockKernel: the reduction of a block format to BlockParams, and the split of a tensor's blocks over threads;
// the per-target kernels are in block_*_kernel.cpp (docs/kernels.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "block_params.hpp"
#include "grid_params.hpp"
#include "parallel.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/kernels/block_kernel.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

enum class BlockKernel::Mode : std::uint8_t { Fake, Packed, Metrics, Amax, TensorAmax };

/// Where a run writes (null: not wanted).
struct BlockKernel::Outputs {
  float* fake = nullptr;
  std::uint8_t* elements = nullptr;
  std::uint8_t* scales = nullptr;
  float* amax = nullptr;
  BlockMetrics* metrics = nullptr;
  TensorScale* tensor_scale = nullptr;
  float* tensor_amax = nullptr;
  bool* tensor_nan = nullptr;
  bool* tensor_inf = nullptr;
  std::uint8_t* subtile_offsets = nullptr;
  const void* metrics_x = nullptr;  ///< N:M sparsity: x is the pruned copy, this the tensor itself
};

namespace {

using kernel_detail::BlockParams;
using kernel_detail::CastParams;
using kernel_detail::InputKind;
using kernel_detail::bf16_value;
using kernel_detail::half_value;
using kernel_detail::low_bits;

/// The element cast (the elementwise kernel's reduction) with the block policy's treatment of infinite
/// inputs: block-nan keeps an infinity as the element's infinity, without an overflow.
CastParams element_params(const Format& f, const CastOptions& o, SpecialsPolicy specials) {
  CastParams p = kernel_detail::build_cast_params(f, o);
  if (specials == SpecialsPolicy::BlockNan && f.has_inf()) {
    p.inf_overflows = false;
    p.inf_code[0] = f.inf_code(false);
    p.inf_code[1] = f.inf_code(true);
  }
  return p;
}

/// The nearest-even fast path's constants, when the element format and options allow it (block_params.hpp).
BlockParams::FastRne fast_rne_params(const Format& e, const CastOptions& o, const CastParams& c) {
  BlockParams::FastRne f;
  const FormatSpec& s = e.spec();
  if (s.kind != FormatKind::Float || !s.subnormals || !s.is_signed || s.sub_exponent_bits > 0) return f;
  if (o.rounding != Rounding::NearestEven || c.flush_below != 1 || c.has_tiny) return f;
  const std::uint32_t sign_bit = std::uint32_t{1} << (e.bits() - 1);
  if (c.neg_or != sign_bit || e.zero_code(true) != sign_bit || e.zero_code(false) != 0) return f;
  if (c.overflow_code[1] != (c.overflow_code[0] | sign_bit) || c.limit[1] != c.limit[0]) return f;
  // Half the smallest subnormal must lie above float32's normal range, and 2^(quantum + 23) inside it.
  if (c.quantum_min - 1 <= -126 || c.exponent_clamp + 24 >= 127) return f;
  f.on = true;
  f.mantissa_bits = s.mantissa_bits;
  f.biased_clamp = c.exponent_clamp + 127;
  f.biased_qmin = c.quantum_min + 127;
  f.limit = c.limit[0];
  f.overflow_code = c.overflow_code[0];
  f.sign_bit = sign_bit;
  f.sign_shift = 32 - e.bits();
  return f;
}

/// Whether the options are the exact rules (no peer arithmetic); otherwise *why names the first that is not.
/// With float_rules (float block scales, elements on a grid), the float32 input rounding, the nearest
/// arithmetic on its scaled values and the zero-sign rules count as exact rules too.
bool is_default_peer(const QuantOptions& o, std::string* why, bool float_rules = false) {
  auto bad = [&](const std::string& what) {
    if (why == nullptr) return false;
    *why = "peer arithmetic option " + what + " is not supported by the SIMD block kernel with float block scales";
    return false;
  };
  if (float_rules) {
    QuantOptions exact = o;
    if (o.input == InputPrecision::Float32) exact.nearest_arith = NearestArith::Exact;
    exact.input = InputPrecision::Exact;
    exact.zero_sign = ZeroSign::Keep;
    return is_default_peer(exact, why);
  }
  if (o.input != InputPrecision::Exact) return bad("input precision '" + std::string(to_string(o.input)) + "'");
  if (o.amax_log2 != AmaxLog2::Exact) return bad("amax log2 '" + std::string(to_string(o.amax_log2)) + "'");
  if (o.rceil_quotient != RceilQuotient::Exact)
    return bad("rceil quotient '" + std::string(to_string(o.rceil_quotient)) + "'");
  if (o.code0_multiplier != Code0Multiplier::Exact)
    return bad("code-0 multiplier '" + std::string(to_string(o.code0_multiplier)) + "'");
  if (o.amax_subnormal != AmaxSubnormal::Keep)
    return bad("amax subnormal '" + std::string(to_string(o.amax_subnormal)) + "'");
  if (o.zero_sign != ZeroSign::Keep) return bad("zero sign '" + std::string(to_string(o.zero_sign)) + "'");
  if (o.nearest_arith != NearestArith::Exact)
    return bad("nearest arithmetic '" + std::string(to_string(o.nearest_arith)) + "'");
  if (o.nvfp4_arith != Nvfp4Arith::Exact) return bad("NVFP4 arithmetic '" + std::string(to_string(o.nvfp4_arith)) + "'");
  if (o.four_over_six != FourOverSixMetric::ExactSse) return bad("4over6 metric");
  return true;
}

/// Whether a power-of-two format needs the general path (plan_loop) rather than the plain one.
bool needs_plan(const BlockFormat& f) {
  const QuantOptions& o = f.options;
  std::string why;
  const bool plain_policy = o.specials == SpecialsPolicy::BlockNan || o.specials == SpecialsPolicy::BlockNanAny ||
                            o.specials == SpecialsPolicy::Element;
  return f.layout.tiles[0].subtile > 0 || !plain_policy || !is_default_peer(o, &why);
}

/// How the kernels read scale codes of sf: a table of every code's value (NaN past the format's codes) for
/// codes of at most 8 bits, the format's own decoding for wider ones; the NaN scale code.
void fill_scale_values(const Format& sf, const Format* owned, BlockParams* p) {
  p->wide_scale = sf.bits() > 8;
  p->scale_bytes = (sf.bits() + 7) / 8;
  p->scale_format = owned;
  if (!p->wide_scale) {
    for (std::uint32_t c = 0; c < 256; ++c) {
      const double v = c < (1U << sf.bits()) ? sf.decode(c) : std::numeric_limits<double>::quiet_NaN();
      p->scale_value_d[c] = v;
      p->scale_value[c] = static_cast<float>(v);
    }
  }
  p->scale_has_nan = sf.has_nan();
  p->scale_nan_code = sf.has_nan() ? sf.nan_code(false) : 0;
}

/// Why the values of scale format sf are not all float32 numbers (the kernels multiply by them in float32
/// and double), or an empty string.
std::string scale_values_reason(const Format& sf) {
  if (sf.bits() > 32) return "scale format '" + sf.name() + "' is wider than 32 bits";
  if (sf.bits() > 8 && sf.kind() != FormatKind::Float)
    return "scale format '" + sf.name() + "' is wider than 8 bits and not a float format";
  if (!(sf.min_positive() > 0)) return "scale format '" + sf.name() + "' has no positive values";
  const bool float_range = sf.spec().mantissa_bits <= 23 && sf.max_finite() <= std::numeric_limits<float>::max() &&
                           sf.min_positive() >= std::ldexp(1.0, -149);
  const bool fits = sf.kind() == FormatKind::Float ? float_range : sf.bits() <= 8;
  if (!fits) return "scale format '" + sf.name() + "' has values that are not float32 numbers";
  if (sf.bits() <= 8) {
    for (std::uint32_t c = 0; c < (1U << sf.bits()); ++c) {
      const double v = sf.decode(c);
      if (!std::isnan(v) && !std::isinf(v) && static_cast<double>(static_cast<float>(v)) != v)
        return "scale format '" + sf.name() + "' has values that are not float32 numbers";
    }
  }
  return {};
}

/// Scale codes of every power-of-two scale 2^X, X in the format's range; empty reason when each decodes
/// back to 2^X exactly.
std::string scale_table(const Format& sf, const CastOptions& so, const Format* owned, BlockParams* p) {
  if (std::string why = scale_values_reason(sf); !why.empty()) return why;
  const int x_min = floor_log2(sf.min_positive());
  const int x_max = floor_log2(sf.max_finite());
  if (x_max - x_min >= static_cast<int>(BlockParams::kPow2Span) || x_min < -149 || x_max > 127)
    return "scale format '" + sf.name() + "' spans more powers of two than float32 holds";
  for (int x = x_min; x <= x_max; ++x) {
    const std::uint32_t code = cast(sf, std::ldexp(1.0, x), so).code;
    if (sf.decode(code) != std::ldexp(1.0, x))
      return "scale format '" + sf.name() + "' is not a power-of-two scale (2^" + std::to_string(x) + " is not a value)";
    if (p != nullptr) {
      const auto i = static_cast<std::size_t>(x - x_min);
      p->scale_code[i] = code;
      p->pow2_value[i] = std::ldexp(1.0F, x);
      p->pow2_value_d[i] = std::ldexp(1.0, x);
      p->scale_inverse[i] = std::ldexp(1.0F, -x);
    }
  }
  if (p != nullptr) {
    p->x_min = x_min;
    p->x_max = x_max;
    fill_scale_values(sf, owned, p);
  }
  return {};
}

InputKind input_kind(BlockInputType t) {
  switch (t) {
    case BlockInputType::F32: return InputKind::F32;
    case BlockInputType::BF16: return InputKind::BF16;
    case BlockInputType::F16: return InputKind::F16;
  }
  return InputKind::F32;
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace

double BlockInput::value(std::size_t i) const {
  switch (type) {
    case BlockInputType::F32: return static_cast<const float*>(data)[i];
    case BlockInputType::BF16: return bf16_value(static_cast<const std::uint16_t*>(data)[i]);
    case BlockInputType::F16: return half_value(static_cast<const std::uint16_t*>(data)[i]);
  }
  return 0;
}

std::string BlockKernel::unsupported_reason(const BlockFormat& f) {
  const ScaleLayout& l = f.layout;
  const QuantOptions& o = f.options;
  if (!l.scale) return "a format without scales is an elementwise cast: use CastKernel";
  const bool float_scales = o.rule == ScaleRule::Amax || o.rule == ScaleRule::FourOverSix;
  if (l.tensor_scale && !float_scales) return "a tensor scale needs float block scales (rule amax)";
  if (l.tensor_scale && (l.tensor_scale->kind() != FormatKind::Float || l.tensor_scale->spec().mantissa_bits > 23))
    return "tensor scale format '" + l.tensor_scale->name() + "' is not a float format of at most 24 significant bits";
  if (l.channel_axis != ScaleLayout::kNoAxis) return "per-channel scales are not supported";
  if (l.tiles.empty()) return "a per-tensor scale is not supported (1-D blocks along the last axis only)";
  if (l.tiles.size() != 1) return "2-D tiles are not supported (1-D blocks along the last axis only)";
  if (l.axis != -1) return "blocks along an axis other than the last are not supported";
  if (l.tiles[0].subtile > 0 && float_scales) return "subtiles need a power-of-two scale rule";
  const Format& e = f.element;
  const bool codebook = e.kind() == FormatKind::Codebook;
  if (e.kind() != FormatKind::Float && e.kind() != FormatKind::Integer && !codebook)
    return "element format '" + e.name() + "' is not a float, integer or codebook format";
  if (e.bits() > 16 || (codebook && e.bits() > 8))
    return "element format '" + e.name() + "' is wider than " + (codebook ? "8" : "16") + " bits";
  if (!e.has_zero()) return "element format '" + e.name() + "' has no zero";
  if (!codebook) {
    if (const std::string why = CastKernel::unsupported_reason(e); !why.empty()) return why;
  }
  if (codebook) {
    if (o.four_over_six != FourOverSixMetric::ExactSse)
      return "codebook elements are not supported under Transformer Engine's 4over6 metrics";
    if (o.element.subnormals != SubnormalMode::Keep) return "codebook elements take the subnormal mode keep only";
  }
  for (std::uint32_t c = 0; c < (1U << e.bits()); ++c) {
    const double v = e.decode(c);
    if (!std::isnan(v) && static_cast<double>(static_cast<float>(v)) != v)
      return "element format '" + e.name() + "' has values that are not float32 numbers";
  }
  if (auto err = check_block_options(f)) return err->message;
  const int fraction_bits = e.kind() == FormatKind::Float ? e.spec().mantissa_bits : e.spec().frac_bits;
  if (o.nearest_arith == NearestArith::Float32AddHalf && fraction_bits >= 16)
    return "float32 add-half rounding of elements with 16 or more fraction bits is not supported";
  const bool nvfp4_peer = o.nvfp4_arith != Nvfp4Arith::Exact;  // check_block_options: float32 scales and maxima
  const bool peer_policy = o.specials == SpecialsPolicy::IgnoreNan || o.specials == SpecialsPolicy::TensorNan;
  const bool float_policy = o.specials == SpecialsPolicy::BlockNan || o.specials == SpecialsPolicy::BlockNanAny ||
                            o.specials == SpecialsPolicy::Element || peer_policy;
  if (float_scales && !float_policy)
    return "NaN/Inf policy '" + std::string(to_string(o.specials)) + "' is not supported with float block scales";
  if (std::string why; float_scales && !nvfp4_peer && !is_default_peer(o, &why, true)) return why;
  auto eo = resolve_options(e, o.element);
  if (!eo) return "element options: " + eo.error().message;
  const bool flush_input = eo->subnormals == SubnormalMode::FlushInput || eo->subnormals == SubnormalMode::Flush;
  if (flush_input && eo->source != SourceType::F64)
    return "flushing subnormal quotients of a non-f64 source type is not supported";
  auto so = resolve_options(*l.scale, o.scale);
  if (!so) return "scale options: " + so.error().message;
  if (float_scales) {
    if (l.scale->kind() != FormatKind::Float) return "float scales need a float scale format";
    if (std::string why = scale_values_reason(*l.scale); !why.empty()) return why;
    if (l.scale->spec().sub_exponent_bits > 0)
      return "scale format '" + l.scale->name() + "' re-reads exponent field 0";
    const bool scale_flush_input = so->subnormals == SubnormalMode::FlushInput || so->subnormals == SubnormalMode::Flush;
    if (scale_flush_input && so->source != SourceType::F64)
      return "flushing subnormal scale quotients of a non-f64 source type is not supported";
    return {};
  }
  return scale_table(*l.scale, *so, nullptr, nullptr);
}

Result<BlockKernel> BlockKernel::make(const BlockFormat& f) {
  if (std::string why = unsupported_reason(f); !why.empty())
    return make_error("SIMD block kernel for '" + f.name + "': " + why);
  auto p = std::make_shared<BlockParams>();
  const QuantOptions& o = f.options;
  const Format& e = f.element;
  const CastOptions eo = *resolve_options(e, o.element);
  const CastOptions so = *resolve_options(*f.layout.scale, o.scale);
  if (e.kind() == FormatKind::Codebook) {  // cast in codebook_lanes64, which reads the mode alone
    p->cast.rounding = eo.rounding;
    p->cast.random_bits = eo.random_bits;
    p->cast.zero_code[0] = e.zero_code(false);  // zero_scale_elements
    p->cast.zero_code[1] = e.zero_code(true);
  } else {
    p->cast = element_params(e, eo, o.specials);
  }
  p->bits = e.bits();
  p->block = f.layout.tiles[0].size;
  p->float_scales = o.rule == ScaleRule::Amax || o.rule == ScaleRule::FourOverSix;
  p->four_over_six = o.rule == ScaleRule::FourOverSix;
  p->scale_target_alt = e.max_finite() * 2.0 / 3.0;  // the reference's expression
  p->two_level = f.layout.tensor_scale.has_value();
  p->scale_target = e.max_finite();
  p->scale_opts = so;
  p->element_opts = eo;
  // The rules evaluated by the reference's scale_exponent read the parameters' own copy of the format.
  p->owner = std::make_shared<const BlockFormat>(f);
  p->element = &p->owner->element;
  p->options = &p->owner->options;
  const Format* owned_scale = &*p->owner->layout.scale;
  if (p->float_scales) {
    const Format& sf = *f.layout.scale;
    fill_scale_values(sf, owned_scale, p.get());
    // Significant bits of the block scales, the tensor scale (1 for g = 1) and the element maximum.
    const int s_bits = sf.spec().mantissa_bits + 1;
    const int g_bits = f.layout.tensor_scale ? f.layout.tensor_scale->spec().mantissa_bits + 1 : 1;
    const int max_bits = e.bits();
    p->check_quotients = e.bits() + 1 + s_bits + g_bits > 48;
    p->check_scale_quotients = s_bits + 1 + max_bits + g_bits > 48;
    p->check_f32_quotients = s_bits + g_bits > 29;
    // The float32 pre-pass (float_scale_elements): 2^(1 - qe) of every grid quantum a normal float32.
    const CastParams& c = p->cast;
    p->fast32 = e.kind() != FormatKind::Codebook && eo.rounding != Rounding::Stochastic &&
                e.min_positive() >= std::ldexp(1.0, -24) && e.max_finite() <= std::ldexp(1.0, 24) &&
                c.quantum_min >= -100 && c.exponent_clamp <= 100;
    const int e_bits = e.kind() == FormatKind::Float ? e.spec().mantissa_bits + 1 : e.bits();
    p->fast32_short_scales = e_bits + s_bits <= 24;  // decode * s exact in float32
    p->scale_cast = kernel_detail::build_cast_params(sf, so);
    p->scale_one_code = cast(sf, 1.0, so).code;
    p->min_block_scale = o.min_block_scale;
    if (o.min_block_scale > 0) p->min_block_scale_code = cast(sf, o.min_block_scale, so).code;
  } else if (std::string why = scale_table(*f.layout.scale, so, owned_scale, p.get()); !why.empty()) {
    return make_error(why);
  }
  p->nan_block_code = e.has_nan() ? e.nan_code(false) : e.zero_code(false);
  p->specials = o.specials;
  p->element_has_inf = e.has_inf();
  p->rule = o.rule;
  p->clamp = o.clamp;
  p->emax = e.emax();
  p->fast = fast_rne_params(e, eo, p->cast);
  p->stochastic = eo.rounding == Rounding::Stochastic;
  p->seed_key = splitmix64(o.seed);
  p->low_first = o.nibble_order == NibbleOrder::LowFirst;
  const bool sign_magnitude =
      o.int_encoding == IntEncoding::SignMagnitude && e.kind() == FormatKind::Integer && e.is_signed();
  p->remap = sign_magnitude;
  p->wide_codes = e.bits() > 8;
  const std::uint32_t table_size = std::max(256U, 1U << e.bits());
  p->decode_f32.resize(table_size);
  p->decode_f64.resize(table_size);
  p->code_map.resize(table_size);
  p->code_unmap.resize(table_size);
  for (std::uint32_t c = 0; c < table_size; ++c) {
    const std::uint32_t code = c & low_bits(e.bits());
    const double v = e.decode(code);
    p->decode_f64[c] = v;
    p->decode_f32[c] = static_cast<float>(v);
    p->code_map[c] = static_cast<std::uint16_t>(sign_magnitude ? to_sign_magnitude(code, e.bits()) : code);
    p->code_unmap[c] = static_cast<std::uint16_t>(sign_magnitude ? from_sign_magnitude(code, e.bits()) : code);
  }
  // The peers' element steps (plan_loop, nvfp4_peer_elements).
  p->peer = o.input == InputPrecision::Float32;
  p->add_half = o.nearest_arith == NearestArith::Float32AddHalf &&
                (eo.rounding == Rounding::NearestAway || eo.rounding == Rounding::NearestEven);
  const FormatSpec& es = e.spec();
  p->half_float = es.kind == FormatKind::Float;
  p->half_mbits = p->half_float ? es.mantissa_bits : es.frac_bits;
  p->half_min_exp = p->half_float ? min_normal_exponent(es) : 0;
  p->zero_sign = o.zero_sign;
  p->has_negative_zero = e.has_negative_zero();
  p->zero_code_pos = e.zero_code(false);
  p->zero_code_neg = e.has_negative_zero() ? e.zero_code(true) : e.zero_code(false);
  p->nvfp4_peer = p->float_scales && o.nvfp4_arith != Nvfp4Arith::Exact;
  p->float_peer = p->float_scales && !p->nvfp4_peer && o.input == InputPrecision::Float32;
  if (p->float_peer) {
    // The reference's float32 divide: cast_quotient into float32, nearest-even, overflow to Inf.
    p->f32 = find_catalogue_format("float32");
    CastOptions rne;
    rne.overflow = Overflow::Inf;
    p->f32_opts = *resolve_options(*p->f32, rne);
    p->f32_cast = kernel_detail::build_cast_params(*p->f32, p->f32_opts);
  }
  if (e.kind() == FormatKind::Codebook) {
    p->codebook = true;
    const auto table = e.sorted_values();
    for (std::size_t i = 0; i < table.size(); ++i) {
      p->cb_values.push_back(table[i].value);
      p->cb_codes.push_back(static_cast<std::int64_t>(table[i].code));
      p->cb_mids.push_back(i == 0 ? 0.0 : (table[i - 1].value + table[i].value) * 0.5);
    }
    p->cb_mids.push_back(0.0);  // index n: beyond the top entry
    p->cb_zero_pos = e.zero_code(false);
    p->cb_zero_neg = e.zero_code(true);
  }
  int zx = p->x_min;
  if (p->float_scales) return BlockKernel(f, std::move(p));
  switch (o.zero_block) {
    case ZeroBlock::Smallest: zx = p->x_min; break;
    case ZeroBlock::One: zx = 0; break;
    case ZeroBlock::MinNormal: zx = scale_exponent(e, std::ldexp(1.0, -126), o); break;
  }
  p->zero_block_exponent = std::clamp(zx, p->x_min, p->x_max);
  if (needs_plan(f)) {
    p->planned = true;
    p->subtile = f.layout.tiles[0].subtile;
    p->subtile_dmax = (1 << f.layout.subtile_bits) - 1;
  }
  return BlockKernel(f, std::move(p));
}

BlockKernel::BlockKernel(BlockFormat f, std::shared_ptr<const kernel_detail::BlockParams> p)
    : format_(std::move(f)), params_(std::move(p)) {}

std::int64_t BlockKernel::block_size(std::int64_t row_length) const {
  return params_->block == 0 ? std::max<std::int64_t>(row_length, 1) : params_->block;
}

std::int64_t BlockKernel::block_count(const std::vector<std::int64_t>& shape) const {
  const std::int64_t n = element_count(shape);
  if (n <= 0) return 0;
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t k = block_size(row);
  return n / row * ((row + k - 1) / k);
}

std::int64_t BlockKernel::subtile_count(const std::vector<std::int64_t>& shape) const {
  const std::int64_t n = element_count(shape);
  if (n <= 0 || params_->subtile == 0) return 0;
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  return n / row * ((row + params_->subtile - 1) / params_->subtile);
}

std::size_t BlockKernel::scale_bytes() const { return static_cast<std::size_t>(params_->scale_bytes); }

std::size_t BlockKernel::packed_element_bytes(std::size_t elements) const {
  return (elements * static_cast<std::size_t>(params_->bits) + 7) / 8;
}

Result<std::size_t> BlockKernel::run(Mode mode, BlockInput x, const std::vector<std::int64_t>& shape,
                                     const Outputs& o, const BlockRun& br) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  const std::int64_t n = element_count(shape);
  if (static_cast<std::size_t>(n) != x.size)
    return make_error("tensor shape holds " + std::to_string(n) + " elements but " + std::to_string(x.size) +
                      " values were given");
  if (o.metrics != nullptr) *o.metrics = BlockMetrics{};
  const BlockParams& p = *params_;
  if (format_.layout.sparse_m > 0 && o.metrics_x == nullptr && n > 0) {
    // N:M sparsity: the kernels quantize a pruned copy of the tensor; the metrics compare with the tensor.
    std::vector<std::uint8_t> pruned;
    const BlockInput px = prune_nm(x, shape.empty() ? 1 : shape.back(), br, &pruned);
    Outputs po = o;
    po.metrics_x = x.data;
    return run(mode, px, shape, po, br);
  }
  // Two-level formats: a first pass finds the tensor's largest finite magnitude, which sets the tensor scale;
  // NaN/Inf policy tensor-nan: a NaN anywhere makes every block NaN, so a first pass looks for one. Calls over
  // ranges of blocks take these from BlockRun::facts.
  const bool element_pass = mode == Mode::Fake || mode == Mode::Packed || mode == Mode::Metrics;
  BlockTensorFacts facts;
  if (element_pass && br.facts != nullptr) {
    facts = *br.facts;
  } else if (element_pass) {
    auto f = tensor_facts(x, shape, br);
    if (!f) return f.error();
    facts = *f;
  }
  const double g = p.two_level ? facts.scale.value : 1.0;
  if (p.two_level && o.tensor_scale != nullptr) *o.tensor_scale = facts.scale;
  const bool any_nan = facts.any_nan;
  const Nvfp4PeerTensor& peer_tensor = facts.peer;
  if (n == 0) return std::size_t{0};
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t k = block_size(row);
  const std::int64_t per_row = (row + k - 1) / k;
  const std::int64_t all_blocks = n / row * per_row;
  const std::int64_t rb0 = br.first_block;
  const std::int64_t rb1 = br.end_block < 0 ? all_blocks : br.end_block;
  if (rb0 < 0 || rb0 > rb1 || rb1 > all_blocks)
    return make_error("block range [" + std::to_string(rb0) + ", " + std::to_string(rb1) + ") outside the tensor's " +
                      std::to_string(all_blocks) + " blocks");
  const std::int64_t nblocks = rb1 - rb0;
  const std::int64_t base = block_first_element(rb0, row);
  if (mode == Mode::Packed && (static_cast<std::size_t>(base) * static_cast<std::size_t>(p.bits)) % 8 != 0)
    return make_error("packed quantization of a block range must start on a byte boundary");
  // The outputs hold the range only; the loops index them by tensor position, so they see them shifted back by
  // the range's start (address arithmetic on integers: the shifted pointers are never dereferenced outside
  // the range).
  auto shift = [](auto* ptr, std::int64_t by) {
    using T = std::remove_pointer_t<decltype(ptr)>;
    if (ptr == nullptr) return ptr;
    return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(ptr) -
                                static_cast<std::uintptr_t>(by) * sizeof(T));
  };
  const std::int64_t subtiles_per_row = p.subtile > 0 ? (row + p.subtile - 1) / p.subtile : 0;
  const std::int64_t subtile_base =
      p.subtile > 0 ? rb0 / per_row * subtiles_per_row + (rb0 % per_row) * k / p.subtile : 0;
  float* const fake = shift(o.fake, base);
  std::uint8_t* const elements =
      shift(o.elements, static_cast<std::int64_t>(static_cast<std::size_t>(base) * static_cast<std::size_t>(p.bits) / 8));
  std::uint8_t* const scales = shift(o.scales, rb0 * static_cast<std::int64_t>(p.scale_bytes));
  float* const amax_out = shift(o.amax, rb0);
  std::uint8_t* const subtile_out = shift(o.subtile_offsets, subtile_base);

  const auto range_elements = static_cast<std::size_t>(block_first_element(rb1, row) - base);
  const unsigned threads = kernel_detail::useful_threads(range_elements, br.threads);

  kernel_detail::BlockOut out = kernel_detail::BlockOut::None;
  if (mode == Mode::Fake) out = kernel_detail::BlockOut::Fake;
  if (mode == Mode::Packed) out = kernel_detail::BlockOut::Packed;

  struct Part {
    std::int64_t b0 = 0, b1 = 0;
    std::unique_ptr<kernel_detail::PackWriter> writer;
    std::unique_ptr<kernel_detail::MetricsAcc> acc;
    float tensor_amax = 0;
    bool tensor_nan = false;
    bool tensor_inf = false;
  };
  std::vector<Part> parts(threads);
  for (unsigned t = 0; t < threads; ++t) {
    Part& part = parts[t];
    part.b0 = rb0 + nblocks * t / threads;
    part.b1 = rb0 + nblocks * (t + 1) / threads;
    const std::int64_t r = part.b0 / per_row;
    const std::int64_t first = r * row + (part.b0 - r * per_row) * k;
    if (mode == Mode::Packed)
      part.writer = std::make_unique<kernel_detail::PackWriter>(
          elements, static_cast<std::size_t>(first) * static_cast<std::size_t>(p.bits), p.bits, p.low_first);
    if (o.metrics != nullptr) part.acc = std::make_unique<kernel_detail::MetricsAcc>();
  }
  // Outputs of this size are written with non-temporal stores (BlockCall::stream).
  constexpr std::size_t kStreamBytes = std::size_t{16} << 20;
  const std::size_t output_bytes = mode == Mode::Fake     ? range_elements * sizeof(float)
                                   : mode == Mode::Packed ? packed_element_bytes(range_elements)
                                                          : 0;
  auto work = [&](Part& part) {
    kernel_detail::BlockCall call;
    call.input = input_kind(x.type);
    call.x = x.data;
    call.row = row;
    call.block = k;
    call.blocks_per_row = per_row;
    call.b0 = part.b0;
    call.b1 = part.b1;
    call.out = out;
    call.fake = fake;
    call.writer = part.writer.get();
    call.elements = elements;
    call.scales = scales;
    call.amax = mode == Mode::Amax ? amax_out : nullptr;
    call.metrics = part.acc.get();
    call.stream = output_bytes >= kStreamBytes;
    call.g = g;
    call.tensor_amax = mode == Mode::TensorAmax ? &part.tensor_amax : nullptr;
    call.tensor_nan = mode == Mode::TensorAmax && o.tensor_nan != nullptr ? &part.tensor_nan : nullptr;
    call.tensor_inf = mode == Mode::TensorAmax && o.tensor_inf != nullptr ? &part.tensor_inf : nullptr;
    call.nvfp4 = p.nvfp4_peer ? &peer_tensor : nullptr;
    call.metrics_x = o.metrics_x;
    call.any_nan = any_nan;
    call.subtile_offsets = subtile_out;
    call.subtiles_per_row = subtiles_per_row;
    kernel_detail::block_dispatch(p, call);
    if (part.writer) part.writer->finish();
  };
  kernel_detail::run_parts(threads, [&](unsigned t) { work(parts[t]); });

  if (mode == Mode::Fake && negative_zero_values(format_)) {
    // Integer elements under ZeroSign::MinusZeroPlus: a negative input that became zero has the value -0.
    kernel_detail::run_parts(threads, [&](unsigned t) {
      const std::int64_t i0 = block_first_element(parts[t].b0, row), i1 = block_first_element(parts[t].b1, row);
      for (std::int64_t i = i0; i < i1; ++i)
        if (fake[i] == 0.0F && x.value(static_cast<std::size_t>(i)) < 0) fake[i] = -0.0F;
    });
  }
  if (mode == Mode::Packed) {
    // Bytes shared by two parts (or the tensor's last partial byte): zero, then OR every contribution.
    for (const Part& part : parts)
      for (const auto& e : part.writer->edge) elements[e.index] = 0;
    for (const Part& part : parts)
      for (const auto& e : part.writer->edge)
        elements[e.index] = static_cast<std::uint8_t>(elements[e.index] | e.bits);
  }
  if (mode == Mode::TensorAmax) {
    float m = 0;
    for (const Part& part : parts) m = std::max(m, part.tensor_amax);
    *o.tensor_amax = m;
    if (o.tensor_nan != nullptr)
      for (const Part& part : parts) *o.tensor_nan = *o.tensor_nan || part.tensor_nan;
    if (o.tensor_inf != nullptr)
      for (const Part& part : parts) *o.tensor_inf = *o.tensor_inf || part.tensor_inf;
  }
  if (o.metrics != nullptr) {
    for (const Part& part : parts) {
      const kernel_detail::MetricsAcc& a = *part.acc;
      BlockMetrics& m = *o.metrics;
      m.count += a.count;
      m.nonzero_inputs += a.nonzero_inputs;
      m.underflows += a.underflows;
      m.saturations += a.saturations;
      m.nan_outputs += a.nan_outputs;
      a.sse.add_to(m.sse);
      m.sse.add(a.rare);
      a.signal.add_to(m.signal);
      m.max_abs_error = std::max(m.max_abs_error, a.max_abs_error);
    }
  }
  return range_elements;
}

BlockKernel::RangeSize BlockKernel::range_size(const std::vector<std::int64_t>& shape, const BlockRun& br) const {
  RangeSize r;
  const std::int64_t all = block_count(shape);
  if (all <= 0) return r;
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t b0 = std::clamp<std::int64_t>(br.first_block, 0, all);
  const std::int64_t b1 = br.end_block < 0 ? all : std::clamp<std::int64_t>(br.end_block, b0, all);
  r.blocks = b1 - b0;
  r.elements = block_first_element(b1, row) - block_first_element(b0, row);
  if (params_->subtile > 0) {
    const std::int64_t k = block_size(row);
    const std::int64_t per_row = (row + k - 1) / k;
    const std::int64_t spr = (row + params_->subtile - 1) / params_->subtile;
    auto first_subtile = [&](std::int64_t b) {
      return b / per_row * spr + std::min((b % per_row) * k, row + params_->subtile - 1) / params_->subtile;
    };
    r.subtiles = first_subtile(b1) - first_subtile(b0);
  }
  return r;
}

bool BlockKernel::needs_tensor_facts() const {
  const BlockParams& p = *params_;
  return p.two_level || p.nvfp4_peer ||
         ((p.planned || p.float_scales) && p.specials == SpecialsPolicy::TensorNan);
}

Result<BlockTensorFacts> BlockKernel::tensor_facts(BlockInput x, const std::vector<std::int64_t>& shape,
                                                   const BlockRun& br) const {
  const BlockParams& p = *params_;
  BlockRun whole = br;
  whole.first_block = 0;
  whole.end_block = -1;
  whole.facts = nullptr;
  BlockTensorFacts f;
  if (p.nvfp4_peer) {
    auto t = nvfp4_peer_tensor(x, shape, whole);
    if (!t) return t.error();
    f.peer = *t;
    f.scale = t->scale;
  } else if (p.two_level) {
    auto ts = tensor_scale(x, shape, whole);
    if (!ts) return ts.error();
    f.scale = *ts;
  }
  if ((p.planned || (p.float_scales && !p.nvfp4_peer)) && p.specials == SpecialsPolicy::TensorNan) {
    float unused = 0;
    Outputs first;
    first.tensor_amax = &unused;
    first.tensor_nan = &f.any_nan;
    auto r = run(Mode::TensorAmax, x, shape, first, whole);
    if (!r) return r.error();
  }
  return f;
}

std::int64_t BlockKernel::block_first_element(std::int64_t b, std::int64_t row_length) const {
  const std::int64_t k = block_size(row_length);
  const std::int64_t per_row = (row_length + k - 1) / k;
  const std::int64_t r = b / per_row;
  return r * row_length + std::min((b - r * per_row) * k, row_length);
}

Result<TensorScale> BlockKernel::tensor_scale(BlockInput x, const std::vector<std::int64_t>& shape,
                                              const BlockRun& br) const {
  if (!params_->two_level) return make_error("format '" + format_.name + "' has no tensor scale");
  if (params_->nvfp4_peer) {
    auto t = nvfp4_peer_tensor(x, shape, br);
    if (!t) return t.error();
    return t->scale;
  }
  float amax = 0;
  Outputs o;
  o.tensor_amax = &amax;
  auto r = run(Mode::TensorAmax, x, shape, o, br);
  if (!r) return r.error();
  return choose_tensor_scale(*params_->owner, static_cast<double>(amax));
}

BlockInput BlockKernel::prune_nm(BlockInput x, std::int64_t row, const BlockRun& br,
                                 std::vector<std::uint8_t>* storage) const {
  const int keep = format_.layout.sparse_n;
  const auto m = static_cast<std::int64_t>(format_.layout.sparse_m);
  const std::size_t bytes = x.type == BlockInputType::F32 ? 4 : 2;
  storage->assign(static_cast<const std::uint8_t*>(x.data), static_cast<const std::uint8_t*>(x.data) + x.size * bytes);
  std::uint8_t* out = storage->data();
  const auto rows = static_cast<std::int64_t>(x.size) / row;
  const unsigned threads = kernel_detail::useful_threads(x.size, br.threads);
  kernel_detail::run_parts(threads, [&](unsigned t) {
    std::vector<double> group(static_cast<std::size_t>(m));
    for (std::int64_t r = rows * t / threads; r < rows * (t + 1) / threads; ++r) {
      for (std::int64_t g = 0; g < row; g += m) {
        const std::size_t first = static_cast<std::size_t>(r * row + g);
        const auto len = static_cast<std::size_t>(std::min(m, row - g));
        bool nan = false;
        for (std::size_t j = 0; j < len; ++j) {
          group[j] = x.value(first + j);
          nan = nan || std::isnan(group[j]);
        }
        if (nan) {
          // The reference's own selection (its comparisons with NaN decide the order).
          std::vector<double> kept(group.begin(), group.begin() + static_cast<std::ptrdiff_t>(len));
          apply_nm_sparsity(kept, static_cast<std::int64_t>(len), keep, static_cast<int>(m));
          for (std::size_t j = 0; j < len; ++j)
            if (std::bit_cast<std::uint64_t>(kept[j]) == 0 && std::bit_cast<std::uint64_t>(group[j]) != 0)
              std::memset(out + (first + j) * bytes, 0, bytes);
          continue;
        }
        // Element j survives when fewer than n elements rank before it: larger magnitudes, or equal ones at
        // lower indices (the reference's stable sort by decreasing magnitude).
        for (std::size_t j = 0; j < len; ++j) {
          const double a = std::fabs(group[j]);
          int before = 0;
          for (std::size_t i = 0; i < len; ++i) {
            const double b = std::fabs(group[i]);
            if (b > a || (b == a && i < j)) ++before;
          }
          if (before >= keep) std::memset(out + (first + j) * bytes, 0, bytes);
        }
      }
    }
  });
  BlockInput px = x;
  px.data = out;
  return px;
}

Result<Nvfp4PeerTensor> BlockKernel::nvfp4_peer_tensor(BlockInput x, const std::vector<std::int64_t>& shape,
                                                       const BlockRun& br) const {
  float amax = 0;
  bool nan = false;
  bool inf = false;
  Outputs o;
  o.tensor_amax = &amax;
  o.tensor_nan = &nan;
  o.tensor_inf = &inf;
  auto r = run(Mode::TensorAmax, x, shape, o, br);
  if (!r) return r.error();
  return mxlab::nvfp4_peer_tensor(*params_->owner, nan, inf, static_cast<double>(amax));
}

Result<std::size_t> BlockKernel::fake_quantize(BlockInput x, const std::vector<std::int64_t>& shape,
                                               std::span<float> out, const BlockRun& br, BlockMetrics* metrics) const {
  const auto need = static_cast<std::size_t>(range_size(shape, br).elements);
  if (out.size() < need)
    return make_error("fake quantization: output holds " + std::to_string(out.size()) + " values for " +
                      std::to_string(need) + " inputs");
  Outputs o;
  o.fake = out.data();
  o.metrics = metrics;
  return run(Mode::Fake, x, shape, o, br);
}

Result<std::size_t> BlockKernel::quantize_packed(BlockInput x, const std::vector<std::int64_t>& shape,
                                                 std::span<std::uint8_t> elements, std::span<std::uint8_t> scales,
                                                 const BlockRun& br, BlockMetrics* metrics,
                                                 TensorScale* tensor_scale,
                                                 std::span<std::uint8_t> subtile_offsets) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  const RangeSize range = range_size(shape, br);
  const std::size_t element_need = packed_element_bytes(static_cast<std::size_t>(range.elements));
  if (elements.size() < element_need)
    return make_error("packed quantization: element output holds " + std::to_string(elements.size()) +
                      " bytes, " + std::to_string(element_need) + " needed");
  const std::size_t scale_need = static_cast<std::size_t>(range.blocks) * scale_bytes();
  if (scales.size() < scale_need)
    return make_error("packed quantization: scale output holds " + std::to_string(scales.size()) + " bytes, " +
                      std::to_string(scale_need) + " needed");
  if (subtile_offsets.size() < static_cast<std::size_t>(range.subtiles))
    return make_error("packed quantization: subtile output holds " + std::to_string(subtile_offsets.size()) +
                      " bytes, " + std::to_string(range.subtiles) + " needed");
  Outputs o;
  o.elements = elements.data();
  o.scales = scales.data();
  o.metrics = metrics;
  o.tensor_scale = tensor_scale;
  o.subtile_offsets = subtile_offsets.data();
  return run(Mode::Packed, x, shape, o, br);
}

Result<BlockPacked> BlockKernel::quantize_packed(BlockInput x, const std::vector<std::int64_t>& shape,
                                                 const BlockRun& br, BlockMetrics* metrics) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  BlockPacked out;
  out.elements.resize(packed_element_bytes(x.size));
  out.scales.resize(static_cast<std::size_t>(std::max<std::int64_t>(block_count(shape), 0)) * scale_bytes());
  out.subtile_offsets.resize(static_cast<std::size_t>(subtile_count(shape)));
  TensorScale ts;
  auto r = quantize_packed(x, shape, out.elements, out.scales, br, metrics, &ts, out.subtile_offsets);
  if (!r) return r.error();
  if (params_->two_level) {
    // Little-endian code bytes, as mxlab::pack stores the tensor scale.
    const int bytes = (format_.layout.tensor_scale->bits() + 7) / 8;
    for (int i = 0; i < bytes; ++i) out.tensor_scale.push_back(static_cast<std::uint8_t>(ts.code >> (8 * i)));
  }
  return out;
}

Result<BlockMetrics> BlockKernel::metrics(BlockInput x, const std::vector<std::int64_t>& shape,
                                          const BlockRun& br) const {
  BlockMetrics m;
  Outputs o;
  o.metrics = &m;
  auto r = run(Mode::Metrics, x, shape, o, br);
  if (!r) return r.error();
  return m;
}

Result<std::size_t> BlockKernel::block_amax(BlockInput x, const std::vector<std::int64_t>& shape,
                                            std::span<float> amax, const BlockRun& br) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  const auto need = static_cast<std::size_t>(range_size(shape, br).blocks);
  if (amax.size() < need)
    return make_error("block amax: output holds " + std::to_string(amax.size()) + " values for " +
                      std::to_string(need) + " blocks");
  Outputs o;
  o.amax = amax.data();
  return run(Mode::Amax, x, shape, o, br);
}

Result<std::size_t> BlockKernel::dequantize(std::span<const std::uint8_t> elements,
                                            std::span<const std::uint8_t> scales,
                                            const std::vector<std::int64_t>& shape, std::span<float> out,
                                            const BlockRun& br, double tensor_scale,
                                            std::span<const std::uint8_t> subtile_offsets) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  const std::int64_t n = element_count(shape);
  if (out.size() < static_cast<std::size_t>(n))
    return make_error("dequantization: output holds " + std::to_string(out.size()) + " values for " +
                      std::to_string(n) + " elements");
  if (elements.size() < packed_element_bytes(static_cast<std::size_t>(n)))
    return make_error("dequantization: " + std::to_string(elements.size()) + " bytes of codes, " +
                      std::to_string(packed_element_bytes(static_cast<std::size_t>(n))) + " needed");
  if (scales.size() < static_cast<std::size_t>(block_count(shape)) * scale_bytes())
    return make_error("dequantization: " + std::to_string(scales.size()) + " bytes of scale codes for " +
                      std::to_string(block_count(shape)) + " blocks of " + std::to_string(scale_bytes()) + " bytes");
  if (subtile_offsets.size() < static_cast<std::size_t>(subtile_count(shape)))
    return make_error("dequantization: " + std::to_string(subtile_offsets.size()) + " subtile offsets for " +
                      std::to_string(subtile_count(shape)) + " subtiles");
  // The tensor scale as quantization reported it: NaN under the tensor-nan policy and 0 for ModelOpt's
  // all-zero tensor are values the reference dequantizes with.
  if (tensor_scale < 0) return make_error("dequantization: the tensor scale must not be negative");
  if (n == 0) return std::size_t{0};
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t k = block_size(row);
  const std::int64_t per_row = (row + k - 1) / k;
  const std::int64_t nblocks = n / row * per_row;
  const unsigned threads = kernel_detail::useful_threads(static_cast<std::size_t>(n), br.threads);
  auto work = [&](unsigned t) {
    kernel_detail::DequantCall call;
    call.elements = elements.data();
    call.element_bytes = elements.size();
    call.scales = scales.data();
    call.out = out.data();
    call.row = row;
    call.block = k;
    call.blocks_per_row = per_row;
    call.b0 = nblocks * t / threads;
    call.b1 = nblocks * (t + 1) / threads;
    call.g = params_->two_level ? tensor_scale : 1.0;
    call.subtile_offsets = subtile_offsets.data();
    call.subtiles_per_row = params_->subtile > 0 ? (row + params_->subtile - 1) / params_->subtile : 0;
    kernel_detail::dequant_dispatch(*params_, call);
  };
  kernel_detail::run_parts(threads, work);
  return static_cast<std::size_t>(n);
}

Result<BlockPacked> BlockKernel::reference_packed(const BlockFormat& f, BlockInput x,
                                                  const std::vector<std::int64_t>& shape) {
  std::vector<double> xd(x.size);
  for (std::size_t i = 0; i < x.size; ++i) xd[i] = x.value(i);
  auto q = quantize(f, xd, shape);
  if (!q) return q.error();
  PackedTensor p = pack(f, *q);
  BlockPacked out;
  out.elements = std::move(p.elements);
  out.scales = std::move(p.scales);
  out.tensor_scale = std::move(p.tensor_scale);
  out.subtile_offsets = std::move(p.subtile_offsets);
  return out;
}

}  // namespace mxlab
