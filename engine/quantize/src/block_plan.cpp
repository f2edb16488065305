// The reference's per-block plan under a power-of-two scale rule (pow2_block_plan: NaN blocks, the peers'
// special codes and flushes, the clamped exponent, the code-0 divisor) and the element step it drives
// (pow2_element_cast). SIMD twin: engine/kernels/src/block_plan-inl.h, which calls both.
#include "block_plan.hpp"

#include <algorithm>
#include <cmath>

#include "block_quotient.hpp"
#include "block_scale.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {
namespace quantize_detail {

/// Whether a block with NaN (nan) or Inf (inf) is all NaN under the block NaN policies.
bool block_is_nan(const BlockFormat& f, bool nan, bool inf) {
  switch (f.options.specials) {
    case SpecialsPolicy::BlockNan: return nan || (inf && !f.element.has_inf());
    case SpecialsPolicy::BlockNanAny: return nan || inf;
    default: return false;
  }
}

}  // namespace quantize_detail

using namespace quantize_detail;

namespace {

bool policy_takes_inf(SpecialsPolicy p) {
  return p == SpecialsPolicy::IgnoreNan || p == SpecialsPolicy::TorchaoFloor || p == SpecialsPolicy::TorchaoRceil ||
         p == SpecialsPolicy::TensorNan || p == SpecialsPolicy::NanSmallest;
}

}  // namespace

int pow2_divisor_exponent(const QuantOptions& o, int exponent, int x_min) {
  if (exponent == x_min && o.code0_multiplier == Code0Multiplier::One) return 0;
  if (o.code0_multiplier == Code0Multiplier::MinNormal) return std::max(exponent, -126);
  return exponent;
}

Pow2BlockPlan pow2_block_plan(const BlockFormat& f, double amax, bool nan, bool inf, bool tensor_nan, int x_min,
                              int x_max) {
  const QuantOptions& o = f.options;
  const Format& sf = *f.layout.scale;
  Pow2BlockPlan plan;
  bool block_nan = false;
  switch (o.specials) {
    case SpecialsPolicy::BlockNan: block_nan = nan || (inf && !f.element.has_inf()); break;
    case SpecialsPolicy::BlockNanAny: block_nan = nan || inf; break;
    case SpecialsPolicy::TensorNan: block_nan = tensor_nan; break;
    default: break;
  }
  if (block_nan && sf.has_nan()) {
    plan.nan_scale = true;
    plan.kind = Pow2BlockPlan::Kind::NanCodes;
    return plan;
  }
  const bool torchao = o.specials == SpecialsPolicy::TorchaoFloor || o.specials == SpecialsPolicy::TorchaoRceil;
  if (torchao && nan && sf.has_nan()) {
    // Code 0xFF; FLOOR divides by the float32 with that exponent field (+inf), RCEIL multiplies by
    // exp2(127 - 255) = 2^-128. x / inf equals x * 0 for every float (and NaN stays NaN).
    plan.nan_scale = true;
    plan.kind = Pow2BlockPlan::Kind::Multiply;
    plan.factor = o.specials == SpecialsPolicy::TorchaoFloor ? 0.0 : std::ldexp(1.0, -128);
    return plan;
  }
  int xe = 0;
  const bool amax_nan = nan && o.specials == SpecialsPolicy::NanSmallest;
  const bool amax_inf = inf && policy_takes_inf(o.specials);
  if (amax_nan) {
    xe = x_min;  // torch.where(descale > 0, log2(descale), -127) is -127 for NaN
  } else if (amax_inf) {
    xe = infinite_amax_exponent(f.element, o);
  } else if (amax == 0) {
    switch (o.zero_block) {
      case ZeroBlock::Smallest: xe = x_min; break;
      case ZeroBlock::One: xe = 0; break;
      case ZeroBlock::MinNormal: xe = scale_exponent(f.element, std::ldexp(1.0, -126), o); break;
    }
  } else {
    xe = scale_exponent(f.element, amax, o);
  }
  if (xe > x_max && o.scale.overflow == Overflow::Nan && sf.has_nan() && !amax_inf) {
    // A scale exponent above the scale format's largest (a float32 log2 that rounds up to 2^128 for an amax
    // just below it, minus emax 0 of an integer element) under --scale-overflow nan: the block is NaN, as
    // microxcaling's shared_exp[shared_exp > scale_emax] = NaN.
    plan.nan_scale = true;
    plan.kind = Pow2BlockPlan::Kind::NanCodes;
    return plan;
  }
  xe = std::clamp(xe, x_min, x_max);
  plan.exponent = xe;
  plan.divisor_exponent = pow2_divisor_exponent(o, xe, x_min);
  if (o.specials == SpecialsPolicy::IgnoreNan && xe == x_max) {
    // Transformer Engine's exp2f_rcp builds 2^(127 - code) from bits; for code 0xFE that is the
    // pattern 0, so the block is multiplied by 0.0 (Inf becomes NaN, finite values +-0).
    plan.kind = Pow2BlockPlan::Kind::Multiply;
    plan.factor = 0.0;
  }
  if (o.amax_subnormal != AmaxSubnormal::Keep && !amax_nan && !amax_inf && amax_below_normal(amax, o)) {
    // flush_fp32_subnorms: Python multiplies the block by 0 (signed zeros), C++ stores +0.
    plan.kind = o.amax_subnormal == AmaxSubnormal::Flush ? Pow2BlockPlan::Kind::Multiply : Pow2BlockPlan::Kind::Zero;
    plan.factor = 0.0;
  }
  return plan;
}

CastResult pow2_element_cast(const BlockFormat& f, const CastOptions& element_opts, const Pow2BlockPlan& plan,
                             int offset, double x, std::uint32_t random) {
  const QuantOptions& o = f.options;
  const Format& e = f.element;
  CastResult r;
  switch (plan.kind) {
    case Pow2BlockPlan::Kind::Zero:
      r.code = e.zero_code(false);
      if (x != 0) r.inexact = r.underflow = true;
      return r;
    case Pow2BlockPlan::Kind::NanCodes:
      r.code = e.has_nan() ? e.nan_code(false) : e.zero_code(false);
      return r;
    default: break;
  }
  if (std::isinf(x) && o.specials == SpecialsPolicy::BlockNan && e.has_inf()) {
    r.code = e.inf_code(x < 0);  // kept as Inf (docs/quantization.md)
    return r;
  }
  const bool multiply = plan.kind == Pow2BlockPlan::Kind::Multiply;
  const double divisor = std::ldexp(1.0, plan.divisor_exponent - offset);
  if (o.input == InputPrecision::Float32) {
    // The peer's float32 multiply or divide by a power of two: the exact value rounded once to float32.
    const auto v = static_cast<float>(multiply ? x * plan.factor : x / divisor);
    return peer_element_cast(e, v, x, element_opts, random, o);
  }
  r = multiply ? cast(e, x * plan.factor, element_opts, random) : cast_quotient(e, x, divisor, element_opts, random);
  exact_zero_sign(e, x, r, o);
  return r;
}

}  // namespace mxlab
