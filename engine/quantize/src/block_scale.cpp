// The reference's power-of-two scale rules: the scale exponent X of a block from its amax (scale_exponent), the
// peers' float32 readings of log2, and the exponents of infinite and subnormal amaxes. SIMD twin:
// engine/kernels/src/block_scale-inl.h (block_exponent calls scale_exponent for every rule but floor).
#include "block_scale.hpp"

#include <algorithm>
#include <cmath>

#include "block_quotient.hpp"
#include "mxlab/core/bits.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

using namespace quantize_detail;

// ---- Float32 readings of an amax or quotient (docs/profiles.md). All float arithmetic in this file is
// ---- IEEE binary32 (SSE on x86-64); the module is compiled with -ffp-contract=off so that no product
// ---- is fused into an addition.

namespace {

int ceil_to_int(float v) {
  if (std::isinf(v)) return v < 0 ? kMinusInfExponent : kPlusInfExponent;
  return static_cast<int>(std::ceil(v));
}

/// Exponent field of a float32 minus its bias: -127 for zero and subnormals, 128 for Inf.
int field_exponent(float a) { return static_cast<int>((float_bits(a) >> 23) & 0xFFU) - 127; }
bool field_mantissa_set(float a) { return (float_bits(a) & 0x7FFFFFU) != 0; }

}  // namespace

namespace quantize_detail {

/// fl32(log2 a) taken as the float32 rounding of the double log2 (AmaxLog2::Float32). Near a power of two,
/// where only the floor/ceil can change, this equals the correctly rounded float32 log2 (test_profiles
/// checks it against long double for 600 floats around every power of two).
float fl32_log2(float a) { return static_cast<float>(std::log2(static_cast<double>(a))); }

int floor_to_int(float v) {
  if (std::isinf(v)) return v < 0 ? kMinusInfExponent : kPlusInfExponent;
  return static_cast<int>(std::floor(v));
}

/// floor(log2 a) for a > 0 under the reading m.
int floor_of(double a, AmaxLog2 m) {
  switch (m) {
    case AmaxLog2::Exact: return floor_log2(a);
    case AmaxLog2::Field: return field_exponent(static_cast<float>(a));
    case AmaxLog2::Float32: {
      const auto f = static_cast<float>(a);
      const std::uint32_t b = float_bits(f);
      const std::uint32_t field = (b >> 23) & 0xFFU;
      // A normal f = 2^e m with m < 2 - 2^-11 has log2 f in [e, e + 1 - 3.5e-4]: the double log2 (faithful,
      // exact at 2^e) and its float32 rounding (within 2^-17 for |e + 1| <= 128) stay in [e, e + 1), so the
      // floor is the exponent field and the logarithm need not be computed.
      if (field != 0 && field != 0xFFU && (b & 0x7FFFFFU) < 0x7FF000U) return static_cast<int>(field) - 127;
      return floor_to_int(fl32_log2(f));
    }
  }
  return floor_log2(a);
}

/// Scale exponent of a block whose amax is infinite (policies that let Inf into the amax): the
/// exponent field of Inf reads 128; every other reading gives +inf, which clamps to the largest scale.
int infinite_amax_exponent(const Format& element, const QuantOptions& o) {
  const bool field_rule = o.rule == ScaleRule::Floor || o.rule == ScaleRule::Ceil || o.rule == ScaleRule::Even;
  if (o.amax_log2 == AmaxLog2::Field && field_rule) return 128 - element.emax();
  return kPlusInfExponent;
}

/// Whether a block's amax counts as below the FP32 normal range under the reading that picks the scale
/// (AmaxSubnormal): floor(log2 amax) <= -127. A zero amax counts, unless the zero-block rule replaces it
/// by 2^-126 before the log2 (microxcaling Python).
bool amax_below_normal(double amax, const QuantOptions& o) {
  if (amax == 0) return o.zero_block != ZeroBlock::MinNormal;
  return floor_of(amax, o.amax_log2) <= -127;
}

}  // namespace quantize_detail

namespace {

/// ceil(log2 a) for a > 0 under the reading m (Field: torchao CEIL adds 1 for any mantissa bit).
int ceil_of(double a, AmaxLog2 m) {
  switch (m) {
    case AmaxLog2::Exact: return is_pow2(a) ? floor_log2(a) : floor_log2(a) + 1;
    case AmaxLog2::Field: {
      const auto f = static_cast<float>(a);
      return field_exponent(f) + (field_mantissa_set(f) ? 1 : 0);
    }
    case AmaxLog2::Float32: return ceil_to_int(fl32_log2(static_cast<float>(a)));
  }
  return floor_log2(a);
}

/// Mantissa width the Even rule rounds amax to.
int even_precision(const Format& element) {
  const FormatSpec& s = element.spec();
  return s.kind == FormatKind::Float ? s.mantissa_bits : std::max(0, s.int_bits - 2);
}

/// The scale exponent under a non-exact reading (amax_log2 or rceil_quotient not Exact).
int peer_scale_exponent(const Format& element, double amax, const QuantOptions& o) {
  const int emax = element.emax();
  switch (o.rule) {
    case ScaleRule::Floor: return floor_of(amax, o.amax_log2) - emax;
    case ScaleRule::Ceil: return ceil_of(amax, o.amax_log2) - emax;
    case ScaleRule::Even: {
      const int p = even_precision(element);
      if (o.amax_log2 == AmaxLog2::Field && p < 23) {
        // torchao EVEN: (bits + (1 << (23 - mbits - 1))) & sign_and_exponent_mask, then the field.
        const std::uint32_t b = (float_bits(static_cast<float>(amax)) + (std::uint32_t{1} << (22 - p))) & 0xFF800000U;
        return static_cast<int>((b >> 23) & 0xFFU) - 127 - emax;
      }
      const int e = floor_of(amax, o.amax_log2);
      const double unit = std::ldexp(1.0, e - p);
      return floor_log2(std::nearbyint(amax / unit) * unit) - emax;
    }
    case ScaleRule::RCeil: {
      const double m = element.max_finite();
      if (o.rceil_quotient == RceilQuotient::Exact) {
        // Only reachable through direct calls (quantize rejects float32 log2 of an exact quotient): the
        // double quotient stands in for the exact one.
        return ceil_to_int(static_cast<float>(std::log2(amax / m)));
      }
      const auto a = static_cast<float>(amax);
      const float q = o.rceil_quotient == RceilQuotient::F32Div ? a / static_cast<float>(m)
                                                                : a * static_cast<float>(1.0 / m);
      if (o.amax_log2 == AmaxLog2::Float32) return ceil_to_int(fl32_log2(q));
      // Exact round-up of the float32 quotient (cvt.rp.ue8m0x2.f32), FP32 subnormals included.
      if (q == 0) return kMinusInfExponent;
      if (std::isinf(q)) return kPlusInfExponent;
      return ceil_of(static_cast<double>(q), AmaxLog2::Exact);
    }
    case ScaleRule::MidMax:
    case ScaleRule::Amax:
    case ScaleRule::FourOverSix:
    case ScaleRule::RFloor: break;
  }
  return floor_of(amax, o.amax_log2) - emax;
}

}  // namespace

int scale_exponent(const Format& element, double amax, const QuantOptions& o) {
  if (o.amax_log2 != AmaxLog2::Exact || (o.rule == ScaleRule::RCeil && o.rceil_quotient != RceilQuotient::Exact))
    return peer_scale_exponent(element, amax, o);
  const int emax = element.emax();
  int e = floor_log2(amax);
  if (o.clamp == ClampSite::Amax) e = std::clamp(e, -126, 127);
  switch (o.rule) {
    case ScaleRule::Floor: return e - emax;
    case ScaleRule::Ceil: return (is_pow2(amax) ? e : e + 1) - emax;
    case ScaleRule::RCeil: {
      // Smallest X with amax <= max_elem * 2^X (both sides exact: scaling by powers of two).
      const double m = element.max_finite();
      int x = e - floor_log2(m);
      while (amax > std::ldexp(m, x)) ++x;
      while (amax <= std::ldexp(m, x - 1)) --x;
      return x;
    }
    case ScaleRule::RFloor: {
      // Largest X with max_elem * 2^X <= amax (both sides exact: scaling by powers of two).
      const double m = element.max_finite();
      int x = e - floor_log2(m);
      while (amax < std::ldexp(m, x)) --x;
      while (amax >= std::ldexp(m, x + 1)) ++x;
      return x;
    }
    case ScaleRule::Even: {
      // Round amax to the element's significand width (ties to even), then take its exponent.
      const int p = even_precision(element);
      const double unit = std::ldexp(1.0, e - p);
      const double r = std::nearbyint(amax / unit) * unit;  // amax/unit exact: power-of-two scaling
      return floor_log2(r) - emax;
    }
    case ScaleRule::MidMax: {
      const int x = e - emax;
      CastOptions co = o.element;
      co.overflow = Overflow::Saturate;
      const CastResult r = cast(element, std::ldexp(amax, -x), co);
      return r.overflow ? x + 1 : x;
    }
    case ScaleRule::Amax:
    case ScaleRule::FourOverSix: return e - emax;
  }
  return e - emax;
}

}  // namespace mxlab
