// The scalar reference block quantizer (docs/quantization.md): its driver, step by step, and the combinations of
// options no rule defines. The steps' own ideas live beside it (docs/architecture.md): block_layout, block_scale,
// block_float_scale, block_plan, block_peer, block_quotient. SIMD twin: engine/kernels/src/block_kernel.cpp.
#include "mxlab/quantize/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "block_float_scale.hpp"
#include "block_layout.hpp"
#include "block_peer.hpp"
#include "block_plan.hpp"
#include "block_quotient.hpp"
#include "block_scale.hpp"
#include "mxlab/core/bits.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "quantize_steps.hpp"

namespace mxlab {

std::uint8_t quantize_detail::flags_of(const CastResult& r) {
  return static_cast<std::uint8_t>((r.inexact ? QuantizedTensor::kInexact : 0) |
                                   (r.overflow ? QuantizedTensor::kOverflow : 0) |
                                   (r.underflow ? QuantizedTensor::kUnderflow : 0) |
                                   (r.invalid ? QuantizedTensor::kInvalid : 0));
}

using namespace quantize_detail;

namespace {

bool float_exact(double v) { return std::isfinite(v) && static_cast<double>(static_cast<float>(v)) == v; }

/// Combinations of options that no rule defines.
std::optional<Error> check_options(const BlockFormat& f, bool pow2_rule) {
  const QuantOptions& o = f.options;
  const ScaleRuleTraits& rule = scale_rule_traits(o.rule);
  if (o.amax_log2 != AmaxLog2::Exact && !rule.float_scale && !rule.reads_amax_log2) {
    std::vector<std::string_view> takers;
    for (const ScaleRuleTraits& t : kScaleRules)
      if (t.reads_amax_log2) takers.push_back(t.name);
    std::string list;
    for (std::size_t i = 0; i < takers.size(); ++i)
      list += std::string(i == 0 ? "" : i + 1 == takers.size() ? " and " : ", ") + std::string(takers[i]);
    return make_error("amax log2 reading '" + std::string(to_string(o.amax_log2)) + "' applies to the " + list +
                      " rules, not " + std::string(rule.name));
  }
  if (o.amax_log2 == AmaxLog2::Float32 && o.rule == ScaleRule::Even)
    return make_error("amax log2 reading 'float32' is not defined for the even rule (use 'field' or 'exact')");
  if (o.amax_log2 == AmaxLog2::Float32 && o.rule == ScaleRule::RCeil && o.rceil_quotient == RceilQuotient::Exact)
    return make_error("amax log2 reading 'float32' under the rceil rule needs a float32 quotient "
                      "(rceil quotient 'f32-div' or 'f32-mul-rcp')");
  const bool pow2_only = o.specials == SpecialsPolicy::TorchaoFloor || o.specials == SpecialsPolicy::TorchaoRceil ||
                         o.specials == SpecialsPolicy::NanSmallest;
  if (pow2_only && !pow2_rule)
    return make_error("NaN/Inf policy '" + std::string(to_string(o.specials)) + "' needs a power-of-two scale rule");
  if (o.zero_block == ZeroBlock::MinNormal && !pow2_rule)
    return make_error("zero-block scale 'min-normal' needs a power-of-two scale rule");
  if (o.amax_subnormal != AmaxSubnormal::Keep && !pow2_rule)
    return make_error("flushing blocks with a subnormal amax needs a power-of-two scale rule");
  if (o.four_over_six != FourOverSixMetric::ExactSse &&
      (o.rule != ScaleRule::FourOverSix || o.nvfp4_arith != Nvfp4Arith::Te))
    return make_error("4over6 metric '" + std::string(to_string(o.four_over_six)) +
                      "' is Transformer Engine's: it needs the 4over6 rule with NVFP4 arithmetic 'te'");
  if (o.nearest_arith != NearestArith::Exact && o.input != InputPrecision::Float32 && o.nvfp4_arith == Nvfp4Arith::Exact)
    return make_error("nearest-rounding arithmetic '" + std::string(to_string(o.nearest_arith)) +
                      "' works on float32 scaled values: it needs input precision 'float32'");
  const FormatSpec& es = f.element.spec();
  if (o.int_encoding == IntEncoding::SignMagnitude && es.kind == FormatKind::Integer && es.is_signed && !es.symmetric)
    return make_error("sign-magnitude integer encoding needs a symmetric integer element: '" + f.element.name() +
                      "' has the code -2^" + std::to_string(es.int_bits - 1) + ", which sign-magnitude cannot hold");
  if (o.tensor_scale_max < 0 || !std::isfinite(o.tensor_scale_max))
    return make_error("the tensor-scale maximum must be a finite non-negative number");
  if (o.nvfp4_arith != Nvfp4Arith::Exact) {
    const std::string what = "NVFP4 arithmetic '" + std::string(to_string(o.nvfp4_arith)) + "'";
    if (pow2_rule) return make_error(what + " needs the amax or 4over6 rule (a float block scale)");
    const Format* f32 = find_catalogue_format("float32");
    if (!f.layout.tensor_scale || f32 == nullptr || f.layout.tensor_scale->name() != f32->name())
      return make_error(what + " needs a float32 tensor scale over the block scales (as in nvfp4)");
    const double smax = o.tensor_scale_max > 0 ? o.tensor_scale_max : f.layout.scale->max_finite();
    if (!float_exact(f.element.max_finite()) || !float_exact(f.layout.scale->max_finite()) || !float_exact(smax) ||
        !float_exact(smax * f.element.max_finite()))
      return make_error(what + " needs element and scale maxima that are float32 numbers");
    if (o.rule == ScaleRule::FourOverSix && o.nvfp4_arith != Nvfp4Arith::Te)
      return make_error("the 4over6 rule is defined for NVFP4 arithmetic 'exact' and 'te' only");
  }
  if (f.layout.geometry().has_subtiles() &&
      (o.code0_multiplier != Code0Multiplier::Exact || o.specials != SpecialsPolicy::BlockNan ||
       o.amax_subnormal != AmaxSubnormal::Keep))
    return make_error("subtiles are defined for the exact code-0 multiplier, block-nan and no block flush only");
  return std::nullopt;
}

}  // namespace

std::optional<Error> check_block_options(const BlockFormat& f) {
  return check_options(f, !scale_rule_traits(f.options.rule).float_scale);
}

namespace {

// The reference, step by step (docs/quantization.md, "The reference, step by step"): prepare_input, then
// either cast_elementwise (no scale) or block_statistics, choose_block_scales, choose_subtile_offsets and
// cast_block_elements, each recording the elements' flags as it casts them.

/// Step 1: the input as the quantizer sees it: the shape checked against the values, every value rounded to
/// float32 first under the peers' input precision (RNE; overflow gives +-inf), then N:M sparsity along the
/// last axis.
Result<std::vector<double>> prepare_input(const BlockFormat& f, std::span<const double> input,
                                          const std::vector<std::int64_t>& shape) {
  std::int64_t total = 1;
  for (auto d : shape) {
    if (d < 0) return make_error("negative dimension in the tensor shape");
    total *= d;
  }
  if (static_cast<std::size_t>(total) != input.size())
    return make_error("tensor shape holds " + std::to_string(total) + " elements but " + std::to_string(input.size()) +
                      " values were given");
  std::vector<double> x(input.begin(), input.end());
  if (f.options.input == InputPrecision::Float32)
    for (double& v : x) v = static_cast<double>(static_cast<float>(v));
  if (f.layout.sparse_m > 0 && !shape.empty()) apply_nm_sparsity(x, shape.back(), f.layout.sparse_n, f.layout.sparse_m);
  return x;
}


/// Step 2 (no scale): every element cast on its own.
void cast_elementwise(const Run& r, QuantizedTensor& q) {
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    const CastResult c = cast(r.f.element, r.x[i], r.elem_opts, r.random(i));
    q.codes[i] = c.code;
    q.flags[i] = flags_of(c);
    q.values[i] = r.f.element.decode(c.code);
  }
}

/// Step 2: each block's largest finite magnitude and whether it holds NaN or Inf; the tensor's amax and NaN.
void block_statistics(Run& r, const BlockIndexer& ix, QuantizedTensor& q) {
  r.block_of = ix.block_of_all();
  const auto nblocks = static_cast<std::size_t>(ix.block_count());
  q.block_grid = ix.grid();
  r.stats.assign(nblocks, BlockStats{});
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    BlockStats& b = r.stats[static_cast<std::size_t>(r.block_of[i])];
    const double v = r.x[i];
    if (std::isnan(v)) {
      b.nan = true;
      r.tensor_nan = true;
    } else if (std::isinf(v)) {
      b.inf = true;
    } else {
      b.amax = std::max(b.amax, std::fabs(v));
      r.tensor_amax = std::max(r.tensor_amax, std::fabs(v));
    }
  }
  q.block_amax.resize(nblocks);
  for (std::size_t b = 0; b < nblocks; ++b) q.block_amax[b] = r.stats[b].amax;
  q.scale_codes.resize(nblocks);
  q.scale_values.resize(nblocks);
  q.shared_exponents.assign(nblocks, QuantizedTensor::kNoExponent);
}

/// Step 3: every block's scale: the tensor scale first (two-level formats), then per block the power-of-two
/// plan (pow2_block_plan) or the float scale (float_block_scale), NaN scales for NaN blocks.
std::optional<Error> choose_block_scales(Run& r, QuantizedTensor& q) {
  const BlockFormat& f = r.f;
  const QuantOptions& o = f.options;
  const Format& sf = *f.layout.scale;
  if (f.layout.tensor_scale) {
    auto ts = choose_tensor_scale(f, r.tensor_amax);
    if (!ts) return ts.error();
    q.has_tensor_scale = true;
    q.tensor_scale_code = ts->code;
    q.tensor_scale = r.g = ts->value;
  }
  const int x_min = floor_log2(sf.min_positive());
  const int x_max = floor_log2(sf.max_finite());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::size_t nblocks = r.stats.size();
  r.plans.assign(nblocks, Pow2BlockPlan{});
  // Members of each block, for the rules that quantize a block several ways (4over6).
  const bool by_elements = scale_rule_traits(o.rule).compares_candidates;
  std::vector<std::vector<std::size_t>> members(by_elements ? nblocks : 0);
  if (by_elements)
    for (std::size_t i = 0; i < r.x.size(); ++i) members[static_cast<std::size_t>(r.block_of[i])].push_back(i);
  static const std::vector<std::size_t> kNone;
  for (std::size_t b = 0; b < nblocks; ++b) {
    const BlockStats& st = r.stats[b];
    Pow2BlockPlan& plan = r.plans[b];
    if (r.pow2_rule) {
      plan = pow2_block_plan(f, st.amax, st.nan, st.inf, r.tensor_nan, x_min, x_max);
      if (plan.nan_scale) {
        q.scale_codes[b] = sf.nan_code(false);
        q.scale_values[b] = nan;
      } else {
        q.shared_exponents[b] = plan.exponent;
        q.scale_codes[b] = cast(sf, std::ldexp(1.0, plan.exponent), r.scale_opts).code;
        q.scale_values[b] = sf.decode(q.scale_codes[b]);
      }
      continue;
    }
    const bool block_nan = o.specials == SpecialsPolicy::TensorNan ? r.tensor_nan : block_is_nan(f, st.nan, st.inf);
    if (block_nan && sf.has_nan()) {
      q.scale_codes[b] = sf.nan_code(false);
      q.scale_values[b] = nan;
      plan.kind = Pow2BlockPlan::Kind::NanCodes;
      continue;
    }
    q.scale_codes[b] = float_block_scale(r, b, members.empty() ? kNone : members[b]);
    q.scale_values[b] = sf.decode(q.scale_codes[b]);
  }
  return std::nullopt;
}

/// Step 4 (subtile layouts): shared microexponents. Each subtile of a block with scale 2^X takes 2^(X - d), d in
/// 0..2^bits-1 as large as its own amax allows (the subtile's exponent under the same rule).
std::optional<Error> choose_subtile_offsets(Run& r, const std::vector<std::int64_t>& shape, QuantizedTensor& q) {
  const BlockFormat& f = r.f;
  if (!has_subtiles(f.layout)) return std::nullopt;
  if (!r.pow2_rule) return make_error("subtiles need a power-of-two scale rule");
  const BlockIndexer sx = BlockIndexer::subtiles(shape, f.layout);
  r.sub_of = sx.block_of_all();
  q.subtile_grid = sx.grid();
  const auto nsub = static_cast<std::size_t>(sx.block_count());
  std::vector<double> sub_amax(nsub, 0.0);
  std::vector<std::int64_t> sub_block(nsub, 0);
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    const auto k = static_cast<std::size_t>(r.sub_of[i]);
    sub_block[k] = r.block_of[i];
    if (std::isfinite(r.x[i])) sub_amax[k] = std::max(sub_amax[k], std::fabs(r.x[i]));
  }
  const int x_min = floor_log2(f.layout.scale->min_positive());
  const int dmax = (1 << f.layout.subtile_bits) - 1;
  q.subtile_offsets.assign(nsub, 0);
  for (std::size_t k = 0; k < nsub; ++k) {
    const auto b = static_cast<std::size_t>(sub_block[k]);
    if (q.shared_exponents[b] == QuantizedTensor::kNoExponent || sub_amax[k] == 0) continue;
    const int xb = q.shared_exponents[b];
    const int xs = std::clamp(scale_exponent(f.element, sub_amax[k], f.options), std::max(xb - dmax, x_min), xb);
    q.subtile_offsets[k] = static_cast<std::uint32_t>(xb - xs);
  }
  return std::nullopt;
}

/// Step 5: every element cast under its block's scale (and subtile offset), with its flags: power-of-two
/// plans through pow2_element_cast, float scales through float_scale_element.
void cast_block_elements(const Run& r, QuantizedTensor& q) {
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    const auto b = static_cast<std::size_t>(r.block_of[i]);
    const double s = q.scale_values[b];
    CastResult c;
    if (r.pow2_rule) {
      const int off = r.sub_of.empty() ? 0 : static_cast<int>(q.subtile_offsets[static_cast<std::size_t>(r.sub_of[i])]);
      c = pow2_element_cast(r.f, r.elem_opts, r.plans[b], off, r.x[i], r.random(i));
      q.values[i] = r.f.element.decode(c.code) * std::ldexp(s, -off);
    } else {
      c = float_scale_element(r, i, s, &q.values[i]);
    }
    q.codes[i] = c.code;
    q.flags[i] = flags_of(c);
  }
}

Result<QuantizedTensor> quantize_codes(const BlockFormat& f, std::span<const double> input,
                                       const std::vector<std::int64_t>& shape) {
  const QuantOptions& o = f.options;
  auto eo = resolve_options(f.element, o.element);
  if (!eo) return make_error("element format: " + eo.error().message);
  auto x = prepare_input(f, input, shape);
  if (!x) return x.error();
  Run r(f, *x, *eo);
  r.stochastic = r.elem_opts.rounding == Rounding::Stochastic;
  QuantizedTensor q;
  q.shape = shape;
  q.codes.resize(r.x.size());
  q.values.resize(r.x.size());
  q.flags.assign(r.x.size(), 0);
  if (!f.layout.scale) {
    cast_elementwise(r, q);
    return q;
  }
  auto so = resolve_options(*f.layout.scale, o.scale);
  if (!so) return make_error("scale format: " + so.error().message);
  r.scale_opts = *so;
  r.pow2_rule = !scale_rule_traits(o.rule).float_scale;
  if (r.pow2_rule && f.layout.tensor_scale)
    return make_error("scale rule '" + std::string(to_string(o.rule)) +
                      "' gives power-of-two block scales and cannot sit under a tensor scale; use 'amax'");
  if (auto err = check_options(f, r.pow2_rule)) return *err;
  block_statistics(r, BlockIndexer(shape, f.layout), q);
  if (o.nvfp4_arith != Nvfp4Arith::Exact) {
    return quantize_nvfp4_peer(r, std::move(q));
  }
  if (auto err = choose_block_scales(r, q)) return *err;
  if (auto err = choose_subtile_offsets(r, shape, q)) return *err;
  cast_block_elements(r, q);
  return q;
}

}  // namespace

bool negative_zero_values(const BlockFormat& f) {
  return f.options.zero_sign == ZeroSign::MinusZeroPlus && f.element.kind() == FormatKind::Integer;
}

Result<QuantizedTensor> quantize(const BlockFormat& f, std::span<const double> input,
                                 const std::vector<std::int64_t>& shape) {
  auto q = quantize_codes(f, input, shape);
  if (!q || !negative_zero_values(f)) return q;
  // Integers have one zero code; under this rule the value of a negative input (after the float32 input
  // rounding and N:M pruning) that becomes zero is -0, as sign(x) * 0 is in microxcaling's fake values.
  std::vector<double> x(input.begin(), input.end());
  if (f.options.input == InputPrecision::Float32)
    for (double& v : x) v = static_cast<double>(static_cast<float>(v));
  if (f.layout.sparse_m > 0 && !shape.empty()) apply_nm_sparsity(x, shape.back(), f.layout.sparse_n, f.layout.sparse_m);
  const int x_min = floor_log2(f.layout.scale->min_positive());
  std::vector<std::int64_t> block_of;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (q->values[i] != 0 || !(x[i] < 0)) continue;
    if (block_of.empty()) block_of = BlockIndexer(shape, f.layout).block_of_all();
    const int xe = q->shared_exponents[static_cast<std::size_t>(block_of[i])];
    if (negative_zero_value(f, x[i], pow2_divisor_exponent(f.options, xe, x_min))) q->values[i] = -0.0;
  }
  return q;
}

bool negative_zero_value(const BlockFormat& f, double x, int divisor_exponent) {
  if (!(x < 0)) return false;
  if (f.options.input != InputPrecision::Float32 || divisor_exponent == QuantizedTensor::kNoExponent) return true;
  // fl32(|x| / 2^d) is 0 up to half the smallest float32 subnormal (2^-150, a tie that goes to 0).
  return -x > std::ldexp(1.0, divisor_exponent - 150);
}

}  // namespace mxlab
