// Nearest-even rounding of float32 lanes to an element grid by one float32 addition (BlockParams::FastRne):
// the fast path of the power-of-two scales and of float scales.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_RNE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_RNE_INL_H_
#undef MXLAB_KERNELS_BLOCK_RNE_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_RNE_INL_H_
#endif

#include <cstdint>
#include <type_traits>

#include <hwy/highway.h>

#include "block_io-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

using FastKind = BlockParams::FastKind;

/// FastRne (block_params.hpp) as vectors.
struct FastVectors {
  explicit FastVectors(const BlockParams::FastRne& f)
      : biased_clamp(hn::Set(DI(), f.biased_clamp)),
        magic_min(hn::Set(DI(), f.biased_qmin + 23)),
        limit(hn::Set(DU(), f.limit)),
        overflow_code(hn::Set(DU(), f.overflow_code)),
        sign_bit(hn::Set(DU(), f.sign_bit)),
        magic_drop(23 - f.mantissa_bits),
        mantissa_bits(f.mantissa_bits),
        sign_shift(f.sign_shift),
        overflow_pos(hn::Set(DF(), f.overflow_pos)),
        limit_value(hn::Set(DF(), f.limit_value)),
        overflow_neg(hn::Set(DF(), f.overflow_neg)),
        split_biased(hn::Set(DI(), f.split_biased)),
        low_magic_min(hn::Set(DI(), f.low_biased_qmin + 23)),
        low_magic_drop(hn::Set(DI(), 23 - f.low_mantissa_bits)),
        low_mantissa_bits(f.low_mantissa_bits),
        kind(f.kind) {}
  VI biased_clamp, magic_min;
  VU limit, overflow_code, sign_bit;
  int magic_drop, mantissa_bits, sign_shift;
  VF overflow_pos, limit_value, overflow_neg;
  VI split_biased, low_magic_min, low_magic_drop;
  int low_mantissa_bits;
  FastKind kind;
};

/// The rounding step of fast_rne_lanes: the float32 sum a + 2^(qe + 23) of the magnitudes a = |x| / 2^X, the
/// bits of 2^(qe + 23) (magic), and the code field added to the sum's bits minus magic (Float and Split).
struct RneSum {
  VF sum;
  VU magic;
  VU field;
};
template <FastKind kKind>
HWY_INLINE RneSum fast_rne_sum(const FastVectors& f, VF a) {
  const DU du;
  const DI di;
  const DF df;
  RneSum s;
  if constexpr (kKind == FastKind::Integer) {
    s.magic = hn::BitCast(du, hn::ShiftLeft<23>(f.magic_min));
    s.field = hn::Zero(du);
  } else {
    const VI biased = hn::BitCast(di, hn::ShiftRight<23>(hn::BitCast(du, a)));
    VI magic_biased = hn::Max(hn::Add(hn::Min(biased, f.biased_clamp), hn::Set(di, f.magic_drop)), f.magic_min);
    s.field = hn::ShiftLeftSame(hn::BitCast(du, hn::Sub(magic_biased, f.magic_min)), f.mantissa_bits);
    if constexpr (kKind == FastKind::Split) {
      const VI low_biased = hn::Max(hn::Add(biased, f.low_magic_drop), f.low_magic_min);
      const VU low_field = hn::ShiftLeftSame(hn::BitCast(du, hn::Sub(low_biased, f.low_magic_min)), f.low_mantissa_bits);
      const auto low = hn::Lt(biased, f.split_biased);
      magic_biased = hn::IfThenElse(low, low_biased, magic_biased);
      s.field = hn::IfThenElse(hn::RebindMask(du, low), low_field, s.field);
    }
    s.magic = hn::BitCast(du, hn::ShiftLeft<23>(magic_biased));
  }
  s.sum = hn::Add(a, hn::BitCast(df, s.magic));
  return s;
}

/// a = |x| * 2^-X of the finite float32 bit patterns u (inverse = 2^-X): exact, or below 2^-126 where the
/// nearest grid point is zero.
HWY_INLINE VF scaled_magnitudes(VU u, VF inverse) {
  return hn::Mul(hn::BitCast(DF(), hn::And(u, hn::Set(DU(), 0x7FFFFFFFU))), inverse);
}

/// Nearest-even codes of the finite float32 bit patterns u divided by 2^X (inverse = 2^-X); *r_out gets the
/// rounded magnitude |x| / 2^X on the element grid, *over the lanes that overflowed (BlockParams::FastRne).
///
/// With the grid quantum 2^qe of a = |x| / 2^X (qe = max(min(e, emax + 1) - m, qmin)), the float32 sum
/// a + 2^(qe + 23) rounds a to a multiple k * 2^qe, ties to even k, and its bits minus those of 2^(qe + 23)
/// are k. The code magnitude is k + ((qe - qmin) << m): subnormals have qe = qmin and code k; a normal
/// binade e starts at code (e - emin + 1) << m = ((qe - qmin) << m) + 2^m with k in [2^m, 2^(m+1)].
/// kKind Split: below 2^split_exponent the same with the second reading's m and qmin (its codes below the
/// first reading's, consecutive across the split). kKind Integer: qe = qmin in every lane (below 2^(emax + 1),
/// m = emax + 1 - qmin; above it k exceeds the limit), code k, negatives in two's complement.
template <bool kValue, FastKind kKind = FastKind::Float>
HWY_INLINE VU fast_rne_lanes(const FastVectors& f, VU u, VF inverse, VF* r_out, MU* over) {
  const DU du;
  const DI di;
  const DF df;
  const RneSum s = fast_rne_sum<kKind>(f, scaled_magnitudes(u, inverse));
  if constexpr (kValue) *r_out = hn::Sub(s.sum, hn::BitCast(df, s.magic));
  VU code = hn::Add(hn::Sub(hn::BitCast(du, s.sum), s.magic), s.field);
  *over = hn::Gt(code, f.limit);
  code = hn::IfThenElse(*over, f.overflow_code, code);
  if constexpr (kKind == FastKind::Integer) {
    // -k for negative inputs: (k ^ s) - s with s all ones there, in the code's bits.
    const VU sign = hn::BitCast(du, hn::ShiftRight<31>(hn::BitCast(di, u)));
    return hn::And(hn::Sub(hn::Xor(code, sign), sign), f.sign_bit);
  } else {
    return hn::Or(code, hn::And(hn::ShiftRightSame(u, f.sign_shift), f.sign_bit));
  }
}

/// The float32 values of fast_rne_lanes' codes times a scale: the rounded magnitude r with the input's sign u,
/// times scale (rounded once, as the reference's value); lanes that overflowed take their code's value (the
/// overflow code with the input's sign), selected without a branch: which lanes overflow is data-dependent,
/// and a branch on it mispredicted often enough to cost more than the selects. Integer elements have one
/// zero, +0: a negative input rounded to zero keeps no sign.
template <FastKind kKind = FastKind::Float>
HWY_INLINE VF fast_rne_values(const FastVectors& f, VU u, VF r, MU over, VF scale) {
  const DU du;
  const DF df;
  const VU sign = hn::And(u, hn::Set(du, 0x80000000U));
  VU value_sign = sign;
  if constexpr (kKind == FastKind::Integer) value_sign = hn::IfThenZeroElse(hn::Eq(hn::BitCast(du, r), hn::Zero(du)), sign);
  const VF value = hn::BitCast(df, hn::Or(hn::BitCast(du, r), value_sign));
  const VF special = hn::IfThenElse(hn::RebindMask(df, hn::Eq(sign, hn::Zero(du))), f.overflow_pos, f.overflow_neg);
  return hn::Mul(hn::IfThenElse(hn::RebindMask(df, over), special, value), scale);
}

/// fast_rne_values(u, r, over, scale) of fast_rne_lanes' rounding, without forming the codes: the lanes that
/// overflow are those whose rounded magnitude exceeds the limit's value (codes increase with the magnitude,
/// and the code limit has the magnitude limit_value).
template <FastKind kKind = FastKind::Float>
HWY_INLINE VF fast_rne_fake(const FastVectors& f, VU u, VF inverse, VF scale) {
  const DU du;
  const DF df;
  const RneSum s = fast_rne_sum<kKind>(f, scaled_magnitudes(u, inverse));
  const VF r = hn::Sub(s.sum, hn::BitCast(df, s.magic));
  return fast_rne_values<kKind>(f, u, r, hn::RebindMask(du, hn::Gt(r, f.limit_value)), scale);
}

/// fn(std::integral_constant<FastKind, k>) for the fast path's kind k: loops over elements are compiled once
/// per kind.
template <class Fn>
HWY_INLINE void with_fast_kind(FastKind kind, Fn&& fn) {
  switch (kind) {
    case FastKind::Float: return fn(std::integral_constant<FastKind, FastKind::Float>());
    case FastKind::Split: return fn(std::integral_constant<FastKind, FastKind::Split>());
    case FastKind::Integer: return fn(std::integral_constant<FastKind, FastKind::Integer>());
  }
}

/// A whole vector of fake-quantized values at dst, streamed past the caches when the call asks for it.
HWY_INLINE void store_values(const BlockCall& call, VF value, float* dst) {
  const DF df;
  if (call.stream && reinterpret_cast<std::uintptr_t>(dst) % (hn::Lanes(df) * sizeof(float)) == 0) {
    hn::Stream(value, df, dst);
  } else {
    hn::StoreU(value, df, dst);
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
