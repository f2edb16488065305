// Block kernels, quotients x / d in double (and float32) lanes for float block scales: the correctly rounded
// quotient and the lanes near a rounding boundary that the reference's cast_quotient may move.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_QUOTIENT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_QUOTIENT_INL_H_
#undef MXLAB_KERNELS_BLOCK_QUOTIENT_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_QUOTIENT_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "block_lanes-inl.h"
#include "block_params.hpp"
#include "mxlab/quantize/quantize.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// Lanes whose double q lies within twice the reference's adjustment window (cast_quotient: 4 ulp of q plus
/// 4 times the smallest double) of a multiple of half the grid quantum at q. Every rounding boundary of the
/// grid c (its values, the midpoints between them, and the first point past the largest value and the
/// midpoint to it) is such a multiple: the quantum of q's binade (the smaller one of a format whose field 0
/// is read again) divides every grid point from there down and the binade's own power of two. Zero, NaN and
/// infinite q are not flagged.
HWY_INLINE M64 near_boundary64(const CastVectors64& c, VF64 q) {
  const D64 du;
  const DI64 di;
  const DF64 df;
  const V64 abs = hn::And(hn::BitCast(du, q), hn::Set(du, 0x7FFFFFFFFFFFFFFFULL));
  const VI64 e = hn::Sub(hn::BitCast(di, hn::ShiftRight<52>(abs)), hn::Set(di, 1023));
  const VI64 drop = c.split ? hn::Max(c.quantum_drop, c.low_quantum_drop) : c.quantum_drop;
  const VI64 qe = hn::Max(hn::Sub(hn::Min(e, c.exponent_clamp), drop), c.quantum_min);
  // m = |q| / 2^(qe - 1), exact: 2^(1 - qe) built from its exponent field.
  const VF64 scale = hn::BitCast(df, hn::ShiftLeft<52>(hn::Sub(hn::Set(di, 1024), qe)));
  const VF64 m = hn::Mul(hn::BitCast(df, abs), scale);
  // The window in units of 2^(qe - 1): 2 * 4 * 2^-52 * m, plus far more than 2 * 4 * 2^-1074 * 2^(1 - qe).
  const VF64 tol = hn::MulAdd(m, hn::Set(df, 0x1p-49), hn::Set(df, 0x1p-900));
  const auto near = hn::Le(hn::Abs(hn::Sub(m, hn::Round(m))), tol);
  return hn::RebindMask(du, hn::AndNot(hn::Eq(q, hn::Zero(df)), near));
}

/// Codes of the quotients x / d as the reference's cast_quotient gives them, d = s * g positive or +Inf.
///
/// cast_quotient casts the double q = x / d, except that a q within 4 ulp of a rounding boundary b (a grid
/// point or a midpoint of the element grid) is moved to b or next to it, on the side of the exact quotient.
/// With scales of at most 8 bits, b has at most 9 significant bits (8-bit elements), the scale s at most 8
/// and the tensor scale g at most 24 (BlockKernel::unsupported_reason), so b * d has at most 41 and x (a
/// float32) 24: a nonzero x - b * d is at least 2^-42 of b * d, and q, within 2^-53 of x / d, lies more than
/// 2^-43 of b away from b, far outside the window of 2^-50. Inside it q = b exactly and stays. The quotient
/// the reference casts is therefore the correctly rounded x / d, which the vector cast takes.
///
/// Longer scale significands (float16, float32 scales) break that count when b * d may exceed 48 bits
/// (BlockParams::check_quotients): lanes near a boundary (near_boundary64) are cast by cast_quotient itself;
/// elsewhere q is again what the reference casts. An infinite d (a scale that overflowed to Inf) sends every
/// lane there.
template <class Round>
HWY_INLINE V64 quotient_codes64(const BlockParams& p, const CastVectors64& c64, VF64 x, double d, V64 random,
                                M64* over) {
  const DF64 df;
  const D64 du;
  const VF64 q = hn::Div(x, hn::Set(df, d));
  V64 code = cast_lanes64<Round>(c64, q, random, over);
  const bool finite_d = std::isfinite(d);
  if (!p.check_quotients && finite_d) return code;
  const M64 fix = finite_d ? near_boundary64(c64, q) : hn::FirstN(du, hn::Lanes(du));
  if (hn::AllFalse(du, fix)) return code;
  const std::size_t lanes = hn::Lanes(du);
  HWY_ALIGN double lane_x[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_random[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_code[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_over[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_fix[kMaxLanes];
  hn::Store(x, df, lane_x);
  hn::Store(random, du, lane_random);
  hn::Store(code, du, lane_code);
  hn::Store(over != nullptr ? hn::VecFromMask(du, *over) : hn::Zero(du), du, lane_over);
  hn::Store(hn::VecFromMask(du, fix), du, lane_fix);
  for (std::size_t l = 0; l < lanes; ++l) {
    if (lane_fix[l] == 0) continue;
    const double v = lane_x[l];
    if (std::isinf(v) && p.specials == SpecialsPolicy::BlockNan && p.element_has_inf) {
      lane_code[l] = p.cast.inf_code[v < 0 ? 1 : 0];  // kept as Inf, without an overflow (the reference's rule)
      lane_over[l] = 0;
      continue;
    }
    const CastResult r = cast_quotient(*p.element, v, d, p.element_opts, static_cast<std::uint32_t>(lane_random[l]));
    lane_code[l] = r.code;
    lane_over[l] = r.overflow ? ~std::uint64_t{0} : 0;
  }
  if (over != nullptr) *over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
  return hn::Load(du, lane_code);
}

/// Lanes of float32 quotients q = fl32(x * fl32(1 / d)) that may round differently from the exact x / d: those
/// within 2^-21 relative of a multiple of half the grid quantum at q (every rounding boundary is one, as in
/// near_boundary64), beyond the grid's exponent clamp (Inf and NaN included), and zeros of nonzero inputs. q is
/// within 2^-22.9 relative of x / d (two float32 roundings, and the double 1 / d), so elsewhere no boundary lies
/// between the two and every deterministic rounding mode gives the same code.
HWY_INLINE MU near_boundary32(const CastVectors& c, VF q, VU x_bits) {
  const DU du;
  const DI di;
  const DF df;
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU abs = hn::And(hn::BitCast(du, q), abs_mask);
  const VI e = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(abs)), hn::Set(di, 127));
  const VI drop = c.split ? hn::Max(c.quantum_drop, c.low_quantum_drop) : c.quantum_drop;
  const VI qe = hn::Max(hn::Sub(hn::Min(e, c.exponent_clamp), drop), c.quantum_min);
  // m = |q| / 2^(qe - 1), exact (BlockParams::fast32 keeps 2^(1 - qe) a normal float32).
  const VF scale = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(hn::Set(di, 128), qe)));
  const VF m = hn::Mul(hn::BitCast(df, abs), scale);
  const auto near = hn::Le(hn::Abs(hn::Sub(m, hn::Round(m))), hn::Mul(m, hn::Set(df, 0x1p-21F)));
  const MU zero_q = hn::Eq(abs, hn::Zero(du));
  const MU lost = hn::AndNot(hn::Eq(hn::And(x_bits, abs_mask), hn::Zero(du)), zero_q);  // x != 0, q == 0
  return hn::Or(hn::Or(hn::AndNot(zero_q, hn::RebindMask(du, near)), lost),
                hn::RebindMask(du, hn::Gt(e, c.exponent_clamp)));
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
