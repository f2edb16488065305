// Per-target SIMD building blocks shared by the cast kernels (cast_kernels-inl.h) and the block kernels
// (block_*-inl.h): vector types, input widening, stochastic-rounding bits, the grid cast of float32
// bits to codes (the reference cast of formats/src/cast.cpp, docs/casting.md) and decoding. Included by
// those files once per Highway target.

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_GRID_CAST_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_GRID_CAST_INL_H_
#undef MXLAB_KERNELS_GRID_CAST_INL_H_
#else
#define MXLAB_KERNELS_GRID_CAST_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <hwy/highway.h>

#include "kernel_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DU = hn::ScalableTag<std::uint32_t>;
using DI = hn::RebindToSigned<DU>;
using DF = hn::Rebind<float, DU>;
using D16 = hn::Rebind<std::uint16_t, DU>;
using D8 = hn::Rebind<std::uint8_t, DU>;
using VU = hn::Vec<DU>;
using VI = hn::Vec<DI>;
using VF = hn::Vec<DF>;
using MU = hn::Mask<DU>;
// 64-bit lanes, as many as DU has 32-bit ones / 2: the quotients x / d of float block scales in doubles.
using D64 = hn::Repartition<std::uint64_t, DU>;
using DI64 = hn::RebindToSigned<D64>;
using DF64 = hn::RebindToFloat<D64>;
using DUh = hn::Rebind<std::uint32_t, D64>;  ///< uint32_t lanes, as many as D64 has
using DFh = hn::Rebind<float, D64>;
using V64 = hn::Vec<D64>;
using VI64 = hn::Vec<DI64>;
using VF64 = hn::Vec<DF64>;
using M64 = hn::Mask<D64>;

/// Largest number of 32-bit lanes of any target, for the buffers of the last partial vector.
constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(std::uint32_t);

// ---------------------------------------------------------------------------------------------------
// Inputs, widened to float32 bits.

/// float16 bits to float32 bits, exactly: subnormal halves go through an exact int->float conversion.
/// D is any tag of uint32_t lanes (the full vector DU, or a narrower one).
template <class D>
HWY_INLINE hn::Vec<D> f16_to_f32_bits(D du, hn::Vec<D> h) {
  const hn::Rebind<float, D> df;
  const hn::RebindToSigned<D> di;
  using V = hn::Vec<D>;
  const V sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000U)));
  const V exp = hn::And(h, hn::Set(du, 0x7C00U));
  const V man = hn::And(h, hn::Set(du, 0x03FFU));
  // Normal: rebias 15 -> 127 (112 = 127 - 15). Inf/NaN: all-ones exponent, payload kept.
  const V normal = hn::Add(hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7FFFU))), hn::Set(du, 112U << 23));
  const V special = hn::Or(hn::ShiftLeft<13>(man), hn::Set(du, 0x7F800000U));
  // Subnormal: man * 2^-24; float(man) is exact and its exponent is lowered by 24.
  const V man_f = hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, man)));
  const V sub = hn::IfThenElseZero(hn::Not(hn::Eq(man, hn::Zero(du))), hn::Sub(man_f, hn::Set(du, 24U << 23)));
  V bits = hn::IfThenElse(hn::Eq(exp, hn::Set(du, 0x7C00U)), special, normal);
  bits = hn::IfThenElse(hn::Eq(exp, hn::Zero(du)), sub, bits);
  return hn::Or(bits, sign);
}

/// Elements [i, i + Lanes(du)) of an input array as float32 bits (exact for every input kind).
template <InputKind kIn, class D = DU>
HWY_INLINE hn::Vec<D> load_input(const void* in, std::size_t i, D du = D()) {
  if constexpr (kIn == InputKind::F32) {
    return hn::LoadU(du, static_cast<const std::uint32_t*>(in) + i);
  } else {
    const hn::Rebind<std::uint16_t, D> d16;
    const auto h = hn::PromoteTo(du, hn::LoadU(d16, static_cast<const std::uint16_t*>(in) + i));
    if constexpr (kIn == InputKind::BF16) {
      return hn::ShiftLeft<16>(h);
    } else {
      return f16_to_f32_bits(du, h);
    }
  }
}

/// Whether this target reads and writes a partial vector with masked loads and stores (AVX-512), which touch
/// no memory past the lanes kept; elsewhere a partial vector goes through a zero-padded buffer.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kMaskedTail = true;
#else
constexpr bool kMaskedTail = false;
#endif

/// Elements [i, i + count) of an input array as float32 bits in the first count lanes, zeros in the others
/// (count < Lanes(du)); only where kMaskedTail.
template <InputKind kIn, class D = DU>
HWY_INLINE hn::Vec<D> load_input_n(const void* in, std::size_t i, std::size_t count, D du = D()) {
  if constexpr (kIn == InputKind::F32) {
    return hn::MaskedLoad(hn::FirstN(du, count), du, static_cast<const std::uint32_t*>(in) + i);
  } else {
    const hn::Rebind<std::uint16_t, D> d16;
    const auto h = hn::PromoteTo(du, hn::MaskedLoad(hn::FirstN(d16, count), d16, static_cast<const std::uint16_t*>(in) + i));
    if constexpr (kIn == InputKind::BF16) {
      return hn::ShiftLeft<16>(h);
    } else {
      return f16_to_f32_bits(du, h);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Stochastic rounding bits: stochastic_bits(seed, index) of core/random.hpp, one index per lane.

template <class V>
HWY_INLINE V mix32_lanes(V x) {
  const hn::DFromV<V> du;
  x = hn::Xor(x, hn::ShiftRight<16>(x));
  x = hn::Mul(x, hn::Set(du, 0x7FEB352DU));
  x = hn::Xor(x, hn::ShiftRight<15>(x));
  x = hn::Mul(x, hn::Set(du, 0x846CA68BU));
  return hn::Xor(x, hn::ShiftRight<16>(x));
}

/// The random words of stream indices index, index + 1, ... (one per uint32_t lane of D).
template <class D = DU>
HWY_INLINE hn::Vec<D> stochastic_bits_lanes(std::uint64_t key, std::uint64_t index, D du = D()) {
  using V = hn::Vec<D>;
  const auto lo0 = static_cast<std::uint32_t>(index);
  const auto hi0 = static_cast<std::uint32_t>(index >> 32);
  const V lo = hn::Add(hn::Set(du, lo0), hn::Iota(du, 0));
  // A lane whose low word wrapped past 2^32 carries into the high word (mask lanes are all ones = -1).
  const V hi = hn::Sub(hn::Set(du, hi0), hn::VecFromMask(du, hn::Lt(lo, hn::Set(du, lo0))));
  V x = mix32_lanes(hn::Xor(lo, hn::Set(du, static_cast<std::uint32_t>(key))));
  x = hn::Xor(x, hn::Set(du, static_cast<std::uint32_t>(key >> 32)));
  x = hn::Xor(x, hn::Mul(hi, hn::Set(du, 0x9E3779B9U)));
  return mix32_lanes(x);
}

// ---------------------------------------------------------------------------------------------------
// The cast of one vector of float32 bit patterns to codes.

/// CastParams as vectors of 32-bit lanes (float32 sources, D = DU) or 64-bit lanes (doubles, D = D64),
/// broadcast once per call (the loop's stores may alias the parameters).
template <class D>
struct GridVectors {
  using DIx = hn::RebindToSigned<D>;
  using VUx = hn::Vec<D>;
  using VIx = hn::Vec<DIx>;
  explicit GridVectors(const CastParams& p)
      : exponent_clamp(hn::Set(DIx(), p.exponent_clamp)),
        quantum_drop(hn::Set(DIx(), p.quantum_drop)),
        quantum_min(hn::Set(DIx(), p.quantum_min)),
        field_base(hn::Set(DIx(), p.field_offset - p.quantum_min)),
        tiny_below(hn::Set(DIx(), p.tiny_below_exponent)),
        split_exponent(hn::Set(DIx(), p.split_exponent)),
        low_quantum_drop(hn::Set(DIx(), p.low_quantum_drop)),
        low_field_base(hn::Set(DIx(), p.low_field_base)),
        low_mantissa_shift(hn::Set(DIx(), p.low_mantissa_shift)),
        high_mantissa_shift(hn::Set(DIx(), p.mantissa_shift)),
        tiny_code(hn::Set(D(), p.tiny_code)),
        limit_pos(hn::Set(D(), p.limit[0])),
        limit_neg(hn::Set(D(), p.limit[1])),
        flush_below(hn::Set(D(), p.flush_below)),
        neg_xor(hn::Set(D(), p.neg_xor)),
        neg_add(hn::Set(D(), p.neg_add)),
        neg_mask(hn::Set(D(), p.neg_mask)),
        neg_or(hn::Set(D(), p.neg_or)),
        zero_pos(hn::Set(D(), p.zero_code[0])),
        zero_neg(hn::Set(D(), p.zero_code[1])),
        overflow_pos(hn::Set(D(), p.overflow_code[0])),
        overflow_neg(hn::Set(D(), p.overflow_code[1])),
        zero_input_pos(hn::Set(D(), p.zero_input_code[0])),
        zero_input_neg(hn::Set(D(), p.zero_input_code[1])),
        inf_pos(hn::Set(D(), p.inf_code[0])),
        inf_neg(hn::Set(D(), p.inf_code[1])),
        nan_pos(hn::Set(D(), p.nan_code[0])),
        nan_neg(hn::Set(D(), p.nan_code[1])),
        negative_unsigned(hn::Set(D(), p.negative_unsigned_code)),
        zero_input_below(hn::Set(D(), p.flush_input_below_bits > 0 ? p.flush_input_below_bits : 1U)),
        mantissa_shift(p.mantissa_shift),
        random_bits(p.random_bits),
        rounding(p.rounding),
        split(p.split),
        has_tiny(p.has_tiny),
        is_unsigned(p.is_unsigned),
        inf_overflows(p.inf_overflows) {}

  VIx exponent_clamp, quantum_drop, quantum_min, field_base, tiny_below;
  VIx split_exponent, low_quantum_drop, low_field_base, low_mantissa_shift, high_mantissa_shift;
  VUx tiny_code, limit_pos, limit_neg, flush_below, neg_xor, neg_add, neg_mask, neg_or;
  VUx zero_pos, zero_neg, overflow_pos, overflow_neg, zero_input_pos, zero_input_neg;
  VUx inf_pos, inf_neg, nan_pos, nan_neg, negative_unsigned;
  VUx zero_input_below;  ///< float32 sources: flush-input (doubles: zero only)
  int mantissa_shift;
  int random_bits;
  Rounding rounding;
  bool split;
  bool has_tiny;
  bool is_unsigned;
  bool inf_overflows;
};

using CastVectors = GridVectors<DU>;
using CastVectors64 = GridVectors<D64>;

/// The rounding decision on magnitudes (reference choose_away): whether to take the neighbour away from
/// zero of the truncated code tz, given the discarded bits rem, half a quantum, k discarded bits, and for
/// stochastic rounding the random word (below 2^32) and its bit count R. For 32- and 64-bit lanes.
template <Rounding kRound, class V, class M, class VK>
HWY_INLINE M round_away(M neg, V tz, V rem, V half, VK k, V random, int random_bits) {
  const hn::DFromV<V> du;
  const V one = hn::Set(du, 1U);
  if constexpr (kRound == Rounding::NearestEven) {
    return hn::Or(hn::Gt(rem, half), hn::And(hn::Eq(rem, half), hn::TestBit(tz, one)));
  } else if constexpr (kRound == Rounding::NearestAway) {
    return hn::Not(hn::Lt(rem, half));
  } else if constexpr (kRound == Rounding::NearestZero) {
    return hn::Gt(rem, half);
  } else if constexpr (kRound == Rounding::TowardZero) {
    return hn::FirstN(du, 0);
  } else if constexpr (kRound == Rounding::Up) {
    return hn::AndNot(neg, hn::Not(hn::Eq(rem, hn::Zero(du))));
  } else if constexpr (kRound == Rounding::Down) {
    return hn::And(neg, hn::Not(hn::Eq(rem, hn::Zero(du))));
  } else if constexpr (kRound == Rounding::Odd) {
    return hn::AndNot(hn::TestBit(tz, one), hn::Not(hn::Eq(rem, hn::Zero(du))));
  } else {
    static_assert(kRound == Rounding::Stochastic);
    // t = floor(rem / 2^k * 2^R); one of the two shifts is zero. Away iff t + r >= 2^R with
    // r = random >> (32 - R), i.e. t > (2^R - 1) - r, the top R bits of the complement of the 32-bit word.
    const hn::DFromV<VK> di;
    constexpr int kTopShift = static_cast<int>(sizeof(hn::TFromV<V>) * 8 - 1);
    const VK kr = hn::Sub(k, hn::Set(di, random_bits));
    const V down = hn::BitCast(du, hn::Min(hn::Max(kr, hn::Zero(di)), hn::Set(di, kTopShift)));
    const V up = hn::BitCast(du, hn::Max(hn::Neg(kr), hn::Zero(di)));
    const V t = (rem << up) >> down;
    const V threshold = hn::ShiftRightSame(hn::Xor(random, hn::Set(du, 0xFFFFFFFFU)), 32 - random_bits);
    return hn::Gt(t, threshold);
  }
}

/// Rounding chosen at run time (CastParams::rounding): one predictable branch per vector.
struct AnyRounding {};

template <class Round, class V, class M, class VK>
HWY_INLINE M choose_away(Rounding rounding, M neg, V tz, V rem, V half, VK k, V random, int random_bits) {
  if constexpr (std::is_same_v<Round, AnyRounding>) {
    switch (rounding) {
      case Rounding::NearestEven: return round_away<Rounding::NearestEven>(neg, tz, rem, half, k, random, random_bits);
      case Rounding::NearestAway: return round_away<Rounding::NearestAway>(neg, tz, rem, half, k, random, random_bits);
      case Rounding::NearestZero: return round_away<Rounding::NearestZero>(neg, tz, rem, half, k, random, random_bits);
      case Rounding::TowardZero: return round_away<Rounding::TowardZero>(neg, tz, rem, half, k, random, random_bits);
      case Rounding::Up: return round_away<Rounding::Up>(neg, tz, rem, half, k, random, random_bits);
      case Rounding::Down: return round_away<Rounding::Down>(neg, tz, rem, half, k, random, random_bits);
      case Rounding::Odd: return round_away<Rounding::Odd>(neg, tz, rem, half, k, random, random_bits);
      case Rounding::Stochastic: return round_away<Rounding::Stochastic>(neg, tz, rem, half, k, random, random_bits);
    }
    return hn::FirstN(hn::DFromV<V>(), 0);
  } else {
    return round_away<Round::value>(neg, tz, rem, half, k, random, random_bits);
  }
}

/// The grid cast of magnitudes on 32-bit lanes (float32 sources) or 64-bit lanes (doubles), shared by cast_lanes
/// and cast_lanes64: |x| = sig * 2^(e - m) with sig in [2^m, 2^(m+1)) (m = 23 or 52); abs and neg the input's
/// magnitude bits and sign; zero_input the lanes the reference sends to the zero-input code before rounding.
/// Rounding, overflow, zero and flush-output results, the sign, then the inputs the reference decides before
/// rounding (tiny, zero, Inf, negatives of unsigned formats, NaN), lowest priority first.
template <class Round, class D>
HWY_INLINE hn::Vec<D> grid_code(const GridVectors<D>& c, hn::Vec<D> abs, hn::Mask<D> neg, hn::Vec<D> sig,
                                hn::Vec<hn::RebindToSigned<D>> e, hn::Vec<D> random, hn::Mask<D> zero_input,
                                hn::Mask<D>* over_out) {
  using V = hn::Vec<D>;
  using M = hn::Mask<D>;
  const D du;
  const hn::RebindToSigned<D> di;
  constexpr bool kWide = sizeof(hn::TFromD<D>) == 8;
  constexpr int kSigBits = kWide ? 52 : 23;
  const V one = hn::Set(du, 1U);
  // Grid position: quantum 2^qe, k = number of significand bits below the quantum.
  const auto ec = hn::Min(e, c.exponent_clamp);
  // A format with a re-read field 0 takes the second reading's grid below split_exponent.
  const auto high = hn::Not(hn::Lt(ec, c.split_exponent));
  const auto qe = hn::Max(hn::Sub(ec, c.split ? hn::IfThenElse(high, c.quantum_drop, c.low_quantum_drop) : c.quantum_drop),
                          c.quantum_min);
  const auto k = hn::Add(hn::Sub(qe, ec), hn::Set(di, kSigBits));
  // Past m + 1 discarded bits nothing is kept; m + 2 keeps the half-quantum test (sig < 2^(m+1) = half) exact.
  const V ks = hn::BitCast(du, hn::Min(k, hn::Set(di, kSigBits + 2)));
  const V kept = sig >> ks;
  const V rem = hn::And(sig, hn::Sub(one << ks, one));
  const V half = one << hn::Sub(ks, one);
  V tz;
  if (c.split) {
    const V field = hn::BitCast(du, hn::Add(qe, hn::IfThenElse(high, c.field_base, c.low_field_base)));
    tz = hn::Add(field << hn::BitCast(du, hn::IfThenElse(high, c.high_mantissa_shift, c.low_mantissa_shift)), kept);
  } else {
    tz = hn::Add(hn::ShiftLeftSame(hn::BitCast(du, hn::Add(qe, c.field_base)), c.mantissa_shift), kept);
  }
  const M away = choose_away<Round>(c.rounding, neg, tz, rem, half, k, random, c.random_bits);
  const V chosen = hn::Sub(tz, hn::VecFromMask(du, away));  // mask lanes are -1

  // Past the clamp every magnitude overflows, also one whose clamped code lands on a two's complement
  // integer's most negative value.
  M over = hn::Or(hn::Gt(chosen, hn::IfThenElse(neg, c.limit_neg, c.limit_pos)),
                  hn::RebindMask(du, hn::Gt(e, c.exponent_clamp)));
  const V negative = hn::Or(hn::And(hn::Add(hn::Xor(chosen, c.neg_xor), c.neg_add), c.neg_mask), c.neg_or);
  V code = hn::IfThenElse(neg, negative, chosen);
  code = hn::IfThenElse(hn::Lt(chosen, c.flush_below), hn::IfThenElse(neg, c.zero_neg, c.zero_pos), code);
  code = hn::IfThenElse(over, hn::IfThenElse(neg, c.overflow_neg, c.overflow_pos), code);

  if (c.has_tiny) code = hn::IfThenElse(hn::RebindMask(du, hn::Lt(e, c.tiny_below)), c.tiny_code, code);
  code = hn::IfThenElse(zero_input, hn::IfThenElse(neg, c.zero_input_neg, c.zero_input_pos), code);
  const V inf_bits = hn::Set(du, static_cast<hn::TFromD<D>>(kWide ? 0x7FF0000000000000ULL : 0x7F800000ULL));
  const M is_inf = hn::Eq(abs, inf_bits);
  code = hn::IfThenElse(is_inf, hn::IfThenElse(neg, c.inf_neg, c.inf_pos), code);
  const M negative_nonzero = hn::AndNot(hn::Eq(abs, hn::Zero(du)), neg);
  if (c.is_unsigned) code = hn::IfThenElse(negative_nonzero, c.negative_unsigned, code);
  code = hn::IfThenElse(hn::Gt(abs, inf_bits), hn::IfThenElse(neg, c.nan_neg, c.nan_pos), code);
  if (over_out != nullptr) {
    over = hn::AndNot(zero_input, hn::And(over, hn::Lt(abs, inf_bits)));
    if (c.inf_overflows) over = hn::Or(over, is_inf);
    if (c.is_unsigned) over = hn::AndNot(negative_nonzero, over);  // invalid, not an overflow
    *over_out = over;
  }
  return code;
}

/// Codes of the float32 bit patterns u divided by 2^X, with minus_x = -X added to their exponents (zero for
/// a plain cast; exact for every quotient, float32-subnormal ones included). *over receives the lanes whose
/// cast overflowed (the reference's overflow flag: finite nonzero inputs rounding past the largest value,
/// and infinite inputs when inf_overflows). kRound is a Rounding, or AnyRounding for c.rounding.
template <class Round>
HWY_INLINE VU cast_lanes(const CastVectors& c, VU u, VU random, VI minus_x, MU* over_out) {
  const DU du;
  const DI di;
  const DF df;
  const VU abs = hn::And(u, hn::Set(du, 0x7FFFFFFFU));
  const MU neg = hn::RebindMask(du, hn::Lt(hn::BitCast(di, u), hn::Zero(di)));

  // |x| = sig * 2^(e - 23) with sig in [2^23, 2^24). A float32 subnormal is normalised by converting its
  // fraction to float (exact below 2^24) and reading that float's exponent and fraction.
  const VU biased = hn::ShiftRight<23>(abs);
  const VU fraction = hn::And(abs, hn::Set(du, 0x007FFFFFU));
  const MU input_subnormal = hn::Eq(biased, hn::Zero(du));
  const VU fraction_f = hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, fraction)));
  const VU sig = hn::Or(hn::And(hn::IfThenElse(input_subnormal, fraction_f, abs), hn::Set(du, 0x007FFFFFU)),
                        hn::Set(du, 0x00800000U));
  const VU biased_e =
      hn::IfThenElse(input_subnormal, hn::Sub(hn::ShiftRight<23>(fraction_f), hn::Set(du, 149U)), biased);
  const VI e = hn::Add(hn::Sub(hn::BitCast(di, biased_e), hn::Set(di, 127)), minus_x);

  const MU zero_input = hn::Lt(abs, c.zero_input_below);
  return grid_code<Round>(c, abs, neg, sig, e, random, zero_input, over_out);
}

/// A Rounding as a type for cast_lanes.
template <Rounding kRound>
using RoundingTag = std::integral_constant<Rounding, kRound>;

// ---------------------------------------------------------------------------------------------------
// Casts of doubles in 64-bit lanes, for the quotients x / d of float block scales (block_quotient-inl.h).


/// Codes of the doubles q (never subnormal: quotients of float32 values by moderate divisors), with the
/// same rules as cast_lanes (flush-input does not apply to f64 sources). *over as there.
template <class Round>
HWY_INLINE V64 cast_lanes64(const CastVectors64& c, VF64 q, V64 random, M64* over_out) {
  const D64 du;
  const DI64 di;
  const V64 u = hn::BitCast(du, q);
  const V64 abs = hn::And(u, hn::Set(du, 0x7FFFFFFFFFFFFFFFULL));
  const M64 neg = hn::RebindMask(du, hn::Lt(hn::BitCast(di, u), hn::Zero(di)));
  const V64 sig = hn::Or(hn::And(abs, hn::Set(du, 0x000FFFFFFFFFFFFFULL)), hn::Set(du, 0x0010000000000000ULL));
  const VI64 e = hn::Sub(hn::BitCast(di, hn::ShiftRight<52>(abs)), hn::Set(di, 1023));
  return grid_code<Round>(c, abs, neg, sig, e, random, hn::Eq(abs, hn::Zero(du)), over_out);
}

// ---------------------------------------------------------------------------------------------------
// Decoding codes to float32.

/// float32 bits of sig * 2^p (sig < 2^17, the value representable): a normal result is float(sig) with
/// p added to its exponent field; a subnormal one is its count of 2^-149 steps. No float arithmetic,
/// so flush-to-zero modes of the FPU cannot change the result.
HWY_INLINE VU magnitude_bits(VU sig, VI p) {
  const DU du;
  const DI di;
  const DF df;
  const VU sig_f = hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, sig)));
  const VI exponent = hn::Add(hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(sig_f)), hn::Set(di, 127)), p);
  const VU normal = hn::Add(sig_f, hn::BitCast(du, hn::ShiftLeft<23>(p)));
  const VU steps = hn::BitCast(du, hn::Min(hn::Max(hn::Add(p, hn::Set(di, 149)), hn::Zero(di)), hn::Set(di, 31)));
  const VU subnormal = sig << steps;
  const VU bits = hn::IfThenElse(hn::RebindMask(du, hn::Lt(exponent, hn::Set(di, -126))), subnormal, normal);
  return hn::IfThenElseZero(hn::Not(hn::Eq(sig, hn::Zero(du))), bits);
}

template <DecodeKind kKind>
HWY_INLINE VU decode_lanes(const DecodeParams& p, VU code) {
  const DU du;
  const DI di;
  const VU c = hn::And(code, hn::Set(du, p.code_mask));
  if constexpr (kKind == DecodeKind::Table) {
    return hn::GatherIndex(du, p.table, hn::BitCast(di, c));
  } else if constexpr (kKind == DecodeKind::Integer) {
    VI k = hn::BitCast(di, c);
    if (p.int_signed) k = hn::ShiftRightSame(hn::ShiftLeftSame(k, 32 - p.int_bits), 32 - p.int_bits);
    const VU sign = hn::And(hn::BitCast(du, k), hn::Set(du, 0x80000000U));
    return hn::Or(sign, magnitude_bits(hn::BitCast(du, hn::Abs(k)), hn::Set(di, -p.frac_bits)));
  } else {
    const VU sign = hn::ShiftLeft<31>(hn::And(hn::ShiftRightSame(c, p.sign_shift), hn::Set(du, p.sign_mask)));
    const VU field = hn::And(hn::ShiftRightSame(c, p.mantissa_bits), hn::Set(du, p.exponent_mask));
    const VU mant = hn::And(c, hn::Set(du, (1U << p.mantissa_bits) - 1U));
    const MU sub = p.subnormals ? hn::Eq(field, hn::Zero(du)) : hn::FirstN(du, 0);
    const VU sig = hn::IfThenElse(sub, mant, hn::Or(mant, hn::Set(du, 1U << p.mantissa_bits)));
    const VI exp_sub = hn::Set(di, 1 - p.bias - p.mantissa_bits);
    const VI exp_normal = hn::Sub(hn::BitCast(di, field), hn::Set(di, p.bias + p.mantissa_bits));
    VU bits = magnitude_bits(sig, hn::IfThenElse(hn::RebindMask(di, sub), exp_sub, exp_normal));
    const VU nan_bits = hn::Set(du, 0x7FC00000U);
    if (p.ieee_specials) {
      const VU special = hn::IfThenElse(hn::Eq(mant, hn::Zero(du)), hn::Set(du, 0x7F800000U), nan_bits);
      bits = hn::IfThenElse(hn::Eq(field, hn::Set(du, p.exponent_mask)), special, bits);
    }
    if (p.has_nan_codes) {
      bits = hn::IfThenElse(hn::Eq(hn::And(c, hn::Set(du, p.nan_code_mask)), hn::Set(du, p.nan_code)), nan_bits, bits);
    }
    return hn::Or(bits, sign);
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
