// Block kernels, codebook element formats: the reference's table cast in double lanes, and the element pass of
// a block whose elements are a codebook.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_CODEBOOK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_CODEBOOK_INL_H_
#undef MXLAB_KERNELS_BLOCK_CODEBOOK_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_CODEBOOK_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include <hwy/highway.h>

#include "block_io-inl.h"
#include "block_lanes-inl.h"
#include "block_metrics-inl.h"
#include "mxlab/quantize/quantize.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// Codes of the finite doubles q in a codebook element format: the reference's table cast (formats/src/cast.cpp
/// cast_table) lane by lane. The entries at or below q are counted by a binary search (gathers from the
/// sorted values; -0 and +0 compare equal, as in the reference's upper_bound); an exact value takes its entry
/// (a zero the zero of q's sign); beyond the ends the end entry, with the overflow flag; between two entries
/// the rounding mode decides with the exact midpoint (sums of two neighbours, exact doubles), the parities of
/// the two codes, and for stochastic rounding the fraction |q - tz| / |az - tz| computed in double as the
/// reference does.
HWY_INLINE V64 codebook_lanes64(const BlockParams& p, VF64 q, V64 random, M64* over, M64* near = nullptr) {
  const DF64 df;
  const D64 du;
  const DI64 di;
  using VI64 = hn::Vec<DI64>;
  const auto n = static_cast<std::int64_t>(p.cb_values.size());
  const double* vals = p.cb_values.data();
  VI64 pos = hn::Zero(di);
  if (n <= 16) {
    // Few entries: count them directly (each comparison adds 1 where the entry is at or below q).
    for (std::int64_t i = 0; i < n; ++i)
      pos = hn::Sub(pos, hn::BitCast(di, hn::VecFromMask(df, hn::Le(hn::Set(df, vals[i]), q))));
  } else {
    for (std::int64_t step = n / 2; step >= 1; step /= 2) {
      const VI64 cand = hn::Add(pos, hn::Set(di, step));
      const VF64 v = hn::GatherIndex(df, vals, hn::Sub(cand, hn::Set(di, 1)));
      pos = hn::IfThenElse(hn::RebindMask(di, hn::Le(v, q)), cand, pos);
    }
    pos = hn::IfThenElse(hn::RebindMask(di, hn::Le(hn::GatherIndex(df, vals, pos), q)), hn::Add(pos, hn::Set(di, 1)),
                         pos);
  }
  const VI64 lo_i = hn::Max(hn::Sub(pos, hn::Set(di, 1)), hn::Zero(di));
  const VI64 hi_i = hn::Min(pos, hn::Set(di, n - 1));
  const VF64 lo = hn::GatherIndex(df, vals, lo_i);
  const VF64 hi = hn::GatherIndex(df, vals, hi_i);
  const VI64 lo_code = hn::GatherIndex(di, p.cb_codes.data(), lo_i);
  const VI64 hi_code = hn::GatherIndex(di, p.cb_codes.data(), hi_i);
  const VF64 mid = hn::GatherIndex(df, p.cb_mids.data(), pos);
  if (near != nullptr) {
    // Lanes within twice the reference's window (cast_quotient: 4 ulp of q) of a value or midpoint: there the
    // reference may move q, so the caller casts them as the reference does.
    const VF64 tol = hn::Add(hn::Mul(hn::Abs(q), hn::Set(df, 8 * std::numeric_limits<double>::epsilon())),
                             hn::Set(df, 8 * std::numeric_limits<double>::denorm_min()));
    const auto close = [&](VF64 b) { return hn::Le(hn::Abs(hn::Sub(q, b)), tol); };
    *near = hn::RebindMask(du, hn::Or(hn::Or(close(lo), close(hi)), close(mid)));
  }
  const auto below = hn::RebindMask(df, hn::Eq(pos, hn::Zero(di)));
  const auto above = hn::RebindMask(df, hn::Eq(pos, hn::Set(di, n)));
  const auto neg = hn::RebindMask(df, hn::Lt(hn::BitCast(di, q), hn::Zero(di)));  // the sign bit: -0 too
  const auto exact = hn::AndNot(below, hn::Eq(lo, q));

  // Between lo and hi: which side of the midpoint, on magnitudes (tz toward zero, az away from it).
  const auto at_mid = hn::Eq(q, mid);
  const auto closer_tz = hn::AndNot(at_mid, hn::Xor(hn::Lt(q, mid), neg));
  const auto farther = hn::AndNot(at_mid, hn::Not(hn::Xor(hn::Lt(q, mid), neg)));
  const auto one = hn::Set(di, 1);
  const auto lo_odd = hn::RebindMask(df, hn::Eq(hn::And(lo_code, one), one));
  const auto hi_odd = hn::RebindMask(df, hn::Eq(hn::And(hi_code, one), one));
  const auto tz_odd = hn::Or(hn::And(neg, hi_odd), hn::AndNot(neg, lo_odd));
  const auto az_odd = hn::Or(hn::And(neg, lo_odd), hn::AndNot(neg, hi_odd));
  const auto none = hn::Lt(q, hn::Set(df, -std::numeric_limits<double>::infinity()));  // all false
  auto away = none;
  switch (p.cast.rounding) {
    case Rounding::NearestEven: away = hn::Or(farther, hn::And(at_mid, hn::AndNot(az_odd, tz_odd))); break;
    case Rounding::NearestAway: away = hn::Not(closer_tz); break;
    case Rounding::NearestZero: away = farther; break;
    case Rounding::TowardZero: break;
    case Rounding::Up: away = hn::Not(neg); break;
    case Rounding::Down: away = neg; break;
    case Rounding::Odd: away = hn::AndNot(tz_odd, az_odd); break;
    case Rounding::Stochastic: {
      const VF64 tz = hn::IfThenElse(neg, hi, lo);
      const VF64 az = hn::IfThenElse(neg, lo, hi);
      const int bits = p.cast.random_bits;
      // Exact lanes and the ends have no gap (tz = az); their fraction is unused, and kept finite.
      const VF64 gap = hn::Abs(hn::Sub(az, tz));
      const VF64 fraction = hn::IfThenElseZero(hn::Gt(gap, hn::Zero(df)), hn::Div(hn::Abs(hn::Sub(q, tz)), gap));
      const VI64 t = hn::ConvertTo(di, hn::Mul(fraction, hn::Set(df, std::ldexp(1.0, bits))));
      const VI64 r = hn::BitCast(di, hn::ShiftRightSame(random, 32 - bits));
      away = hn::RebindMask(df, hn::Not(hn::Lt(hn::Add(t, r), hn::Set(di, std::int64_t{1} << bits))));
      break;
    }
  }
  const auto pick_hi = hn::Xor(away, neg);
  const VF64 chosen = hn::IfThenElse(pick_hi, hi, lo);
  VI64 code = hn::IfThenElse(hn::RebindMask(di, pick_hi), hi_code, lo_code);
  const VI64 zero_code =
      hn::IfThenElse(hn::RebindMask(di, neg), hn::Set(di, p.cb_zero_neg), hn::Set(di, p.cb_zero_pos));
  code = hn::IfThenElse(hn::RebindMask(di, hn::Eq(chosen, hn::Zero(df))), zero_code, code);
  const VI64 exact_code = hn::IfThenElse(hn::RebindMask(di, hn::Eq(lo, hn::Zero(df))), zero_code, lo_code);
  // Beyond the ends (the top entry itself is exact): clamped to the end entry, with the overflow flag.
  code = hn::IfThenElse(hn::RebindMask(di, above), hn::Set(di, p.cb_codes.back()), code);
  code = hn::IfThenElse(hn::RebindMask(di, below), hn::Set(di, p.cb_codes.front()), code);
  code = hn::IfThenElse(hn::RebindMask(di, exact), exact_code, code);
  if (over != nullptr) *over = hn::RebindMask(du, hn::AndNot(exact, hn::Or(below, above)));
  return hn::BitCast(du, code);
}

/// The element pass of a block with a codebook element format, scale s and tensor scale g (g = 1 and s = 2^X
/// for power-of-two scales): the codebook cast of the quotients x / (s * g) in double lanes. A power of two
/// gives the exact quotient. Otherwise the correctly rounded quotient is the value the reference's
/// cast_quotient casts unless it lies within the reference's window of a value or midpoint; vectors with
/// such a lane (or with NaN or Inf) take cast_quotient itself. Values are (decode * s) * g in double, as the
/// reference forms them.
/// Codes of the quotients x / d (d = s * g, positive or +Inf) in a codebook element format, as the reference's
/// cast_quotient gives them: codebook_lanes64 of the double quotient, or cast_quotient itself for a vector with
/// a lane near a value or midpoint (unless d is a power of two: exact quotients), or with NaN or Inf.
HWY_INLINE V64 codebook_quotient_codes64(const BlockParams& p, VF64 x, double d, V64 random, M64* over) {
  const DF64 df;
  const D64 du;
  const bool exact_quotient = power_of_two(d);
  M64 over_v = hn::FirstN(du, 0);
  M64 near = hn::FirstN(du, 0);
  V64 code = hn::Zero(du);
  const bool finite = hn::AllTrue(df, hn::Lt(hn::Abs(x), hn::Set(df, std::numeric_limits<double>::infinity())));
  if (finite) code = codebook_lanes64(p, hn::Div(x, hn::Set(df, d)), random, &over_v, exact_quotient ? nullptr : &near);
  if (!finite || !hn::AllFalse(du, near)) {
    HWY_ALIGN double lane_x[kMaxLanes];
    HWY_ALIGN std::uint64_t lane_random[kMaxLanes];
    HWY_ALIGN std::uint64_t lane_codes[kMaxLanes];
    HWY_ALIGN std::uint64_t lane_over[kMaxLanes];
    hn::Store(x, df, lane_x);
    hn::Store(random, du, lane_random);
    for (std::size_t l = 0; l < hn::Lanes(du); ++l) {
      const CastResult r =
          cast_quotient(*p.element, lane_x[l], d, p.element_opts, static_cast<std::uint32_t>(lane_random[l]));
      lane_codes[l] = r.code;
      lane_over[l] = r.overflow ? ~std::uint64_t{0} : 0;
    }
    code = hn::Load(du, lane_codes);
    over_v = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
  }
  if (over != nullptr) *over = over_v;
  return code;
}

HWY_NOINLINE inline void codebook_elements(const BlockParams& p, const BlockCall& call, CodeSink& sink,
                                    const std::uint8_t* xb, std::size_t len, std::size_t start, double s, double g) {
  const DF64 df;
  const D64 du;
  const DUh duh;
  const DFh dfh;
  const std::size_t lanes = hn::Lanes(df);
  const InputKind in_kind = call.input;
  const double d = s * g;
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN double lane_x[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_over[kMaxLanes];
  HWY_ALIGN float out_buf[kMaxLanes];
  for (std::size_t k = 0; k < len; k += lanes) {
    const std::size_t count = std::min(lanes, len - k);
    const hn::Vec<DUh> u = load_part(in_kind, xb, k, count, in_buf, duh);
    const VF64 x = hn::PromoteTo(df, hn::BitCast(dfh, u));
    M64 over = hn::FirstN(du, 0);
    // The zero-sign rule on the input (exact arithmetic: the quotient is zero when x is).
    const hn::Vec<DUh> code32 = apply_zero_sign(
        p, hn::TruncateTo(duh, codebook_quotient_codes64(p, x, d, random_lanes64(p, start + k), &over)), u, duh);
    const V64 code = hn::PromoteTo(du, code32);
    if (call.out == BlockOut::Packed) sink.put(duh, code32, start + k, count);
    if (call.out == BlockOut::Fake) {
      // (decode * s) * g in double, rounded once to float32.
      const VF64 e = hn::GatherIndex(df, p.decode_f64.data(), hn::BitCast(DI64(), code));
      store_as_float(hn::Mul(hn::Mul(e, hn::Set(df, s)), hn::Set(df, g)), out_buf);
      std::memcpy(call.fake + start + k, out_buf, count * sizeof(float));
    }
    if (call.metrics != nullptr) {
      hn::Store(x, df, lane_x);
      hn::Store(code, du, lane_codes);
      hn::Store(hn::VecFromMask(du, over), du, lane_over);
      for (std::size_t l = 0; l < count; ++l)
        add_metric_at(call, start + k + l, lane_x[l], p.decode_f64[lane_codes[l]] * s * g, lane_over[l] != 0);
    }
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
