// BlockKernel::make: the reduction of a block format to BlockParams (block_params.hpp), the numbers the
// per-target kernels read, and the formats and options the kernels refuse (unsupported_reason).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "block_params.hpp"
#include "element_fake.hpp"
#include "grid_params.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/kernels/block_kernel.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

namespace {

using kernel_detail::BlockParams;
using kernel_detail::CastParams;
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
  if (!s.is_signed || o.rounding != Rounding::NearestEven || c.flush_below != 1 || c.has_tiny) return f;
  if (c.limit[1] != c.limit[0]) return f;
  // Half the smallest quantum must lie above float32's normal range, and 2^(quantum + 23) inside it.
  if (c.quantum_min - 1 <= -126 || c.exponent_clamp + 24 >= 127) return f;
  if (s.kind == FormatKind::Float) {
    // Without mantissa bits a tie's even multiple k of the quantum is the next binade, not the even code.
    if (s.mantissa_bits == 0) return f;
    const std::uint32_t sign_bit = std::uint32_t{1} << (e.bits() - 1);
    if (c.neg_or != sign_bit || e.zero_code(true) != sign_bit || e.zero_code(false) != 0) return f;
    if (c.overflow_code[1] != (c.overflow_code[0] | sign_bit)) return f;
    f.sign_bit = sign_bit;
    f.mantissa_bits = s.mantissa_bits;
    f.biased_qmin = c.quantum_min + 127;
    if (c.split) {
      // The first reading's binades start at 2^split_exponent with the quantum 2^q0 = 2^(split_exponent - m):
      // codes ((qe - q0) << m) + k there, ((qe - quantum_min) << low_mantissa_shift) + k below it.
      const int q0 = c.split_exponent - s.mantissa_bits;
      if (c.mantissa_shift != s.mantissa_bits || c.quantum_drop != s.mantissa_bits ||
          c.quantum_min - c.field_offset != q0 || c.low_quantum_drop != c.low_mantissa_shift ||
          c.low_field_base != -c.quantum_min)
        return f;
      f.kind = BlockParams::FastKind::Split;
      f.biased_qmin = q0 + 127;
      f.split_biased = c.split_exponent + 127;
      f.low_mantissa_bits = c.low_mantissa_shift;
      f.low_biased_qmin = c.quantum_min + 127;
    }
  } else if (s.kind == FormatKind::Integer) {
    // One binade of 2^mantissa_bits quanta up to 2^exponent_clamp: every |x| / 2^X below it rounds at
    // 2^quantum_min, by the same magic number 2^(quantum_min + 23) in every lane.
    const std::uint32_t mask = low_bits(e.bits());
    if (e.zero_code(true) != 0 || e.zero_code(false) != 0 || c.neg_mask != mask || c.neg_or != 0 ||
        c.overflow_code[1] != ((0U - c.overflow_code[0]) & mask))
      return f;
    f.kind = BlockParams::FastKind::Integer;
    f.mantissa_bits = c.exponent_clamp - c.quantum_min;
    if (f.mantissa_bits > 22) return f;
    f.biased_qmin = c.quantum_min + 127;
    f.sign_bit = mask;
  } else {
    return f;
  }
  f.on = true;
  f.biased_clamp = c.exponent_clamp + 127;
  f.limit = c.limit[0];
  f.limit_value = static_cast<float>(e.decode(f.limit));
  f.overflow_code = c.overflow_code[0];
  f.sign_shift = 32 - e.bits();
  f.overflow_pos = static_cast<float>(e.decode(f.overflow_code));  // as code_tables' decode_f32
  f.overflow_neg = static_cast<float>(e.decode(c.overflow_code[1]));
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
  // A scale exponent above the scale's largest is a NaN block under --scale-overflow nan (the plan's decision).
  return f.layout.geometry().tile(0).subtile > 0 || !plain_policy || !is_default_peer(o, &why) ||
         o.scale.overflow == Overflow::Nan;
}

/// How the kernels read scale codes of sf: a table of every code's value (NaN past the format's codes) for
/// codes of at most 8 bits, the format's own decoding for wider ones; the NaN scale code.
void fill_scale_values(const Format& sf, const Format* owned, BlockParams* p) {
  p->wide_scale = sf.bits() > 8;
  p->scale_bytes = ceil_div(sf.bits(), 8);
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

/// Float block scales: the scale values, when the quotients need the reference's boundary checks, and the
/// float32 pre-pass's conditions (float_scale_elements).
void float_scale_params(const BlockFormat& f, const CastOptions& eo, const CastOptions& so, BlockParams* p) {
  const Format& e = f.element;
  const Format& sf = *f.layout.scale;
  const QuantOptions& o = f.options;
  fill_scale_values(sf, &*p->owner->layout.scale, p);
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
}

/// The element codes' tables: values (float32 and double), and the writer's code map (sign-magnitude integers).
void code_tables(const Format& e, const QuantOptions& o, BlockParams* p) {
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
}

/// The peers' element steps (plan_loop, peer_float_elements) and the zero-sign rule.
void peer_params(const Format& e, const QuantOptions& o, const CastOptions& eo, BlockParams* p) {
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
}

/// A codebook element format's sorted values, their codes and midpoints (codebook_lanes64).
void codebook_params(const Format& e, BlockParams* p) {
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

/// Power-of-two scales: the zero block's exponent, and whether the general path (plan_loop) is needed.
void pow2_path_params(const BlockFormat& f, BlockParams* p) {
  int zx = p->x_min;
  switch (f.options.zero_block) {
    case ZeroBlock::Smallest: zx = p->x_min; break;
    case ZeroBlock::One: zx = 0; break;
    case ZeroBlock::MinNormal: zx = scale_exponent(f.element, std::ldexp(1.0, -126), f.options); break;
  }
  p->zero_block_exponent = std::clamp(zx, p->x_min, p->x_max);
  if (needs_plan(f)) {
    p->planned = true;
    p->subtile = f.layout.geometry().tile(0).subtile;
    p->subtile_dmax = (1 << f.layout.subtile_bits) - 1;
    p->plan_negative_zeros = negative_zero_values(f) && p->subtile == 0;
  }
}

/// BlockKernel::unsupported_reason, with or without its last check: that the power-of-two scales' table can be
/// made (which BlockKernel::make does while filling the table, so it need not make it twice).
std::string unsupported_reason_of(const BlockFormat& f, bool check_scale_table) {
  const ScaleLayout& l = f.layout;
  const QuantOptions& o = f.options;
  if (!l.scale) return "a format without scales is an elementwise cast: use CastKernel";
  const bool float_scales = scale_rule_traits(o.rule).float_scale;
  if (l.tensor_scale && !float_scales) return "a tensor scale needs float block scales (rule amax)";
  if (l.tensor_scale && (l.tensor_scale->kind() != FormatKind::Float || l.tensor_scale->spec().mantissa_bits > 23))
    return "tensor scale format '" + l.tensor_scale->name() + "' is not a float format of at most 24 significant bits";
  const BlockGeometry g = l.geometry();
  if (g.per_channel()) return "per-channel scales are not supported";
  if (g.per_tensor()) return "a per-tensor scale is not supported (1-D blocks along the last axis only)";
  if (!g.one_d()) return "2-D tiles are not supported (1-D blocks along the last axis only)";
  if (!g.along_last_axis()) return "blocks along an axis other than the last are not supported";
  if (g.has_subtiles() && float_scales) return "subtiles need a power-of-two scale rule";
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
  return check_scale_table ? scale_table(*l.scale, *so, nullptr, nullptr) : std::string();
}

}  // namespace

kernel_detail::BlockParams::FastRne kernel_detail::element_fast_rne(const Format& f, const CastOptions& o,
                                                                     const CastParams& c) {
  return fast_rne_params(f, o, c);
}

std::string BlockKernel::unsupported_reason(const BlockFormat& f) { return unsupported_reason_of(f, true); }

Result<BlockKernel> BlockKernel::make(const BlockFormat& f) {
  if (std::string why = unsupported_reason_of(f, false); !why.empty())
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
  p->block = f.layout.geometry().block_size();
  p->float_scales = scale_rule_traits(o.rule).float_scale;
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
  if (p->float_scales) {
    float_scale_params(f, eo, so, p.get());
  } else if (std::string why = scale_table(*f.layout.scale, so, &*p->owner->layout.scale, p.get()); !why.empty()) {
    return make_error("SIMD block kernel for '" + f.name + "': " + why);
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
  code_tables(e, o, p.get());
  peer_params(e, o, eo, p.get());
  if (e.kind() == FormatKind::Codebook) codebook_params(e, p.get());
  if (!p->float_scales) pow2_path_params(f, p.get());
  return BlockKernel(f, std::move(p));
}

}  // namespace mxlab
