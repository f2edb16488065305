// Block kernels, fused metrics: the exact error sums of analysis.cpp's ErrorStats, element by element, from
// the codes an element loop has just formed.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_METRICS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_METRICS_INL_H_
#undef MXLAB_KERNELS_BLOCK_METRICS_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_METRICS_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "block_params.hpp"
#include "grid_cast-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// analysis.cpp ErrorStats::add for one element, with the sums in fast exact accumulators.
HWY_INLINE void add_metric(MetricsAcc& m, double x, double deq, bool over) {
  if (std::isnan(deq)) {
    ++m.nan_outputs;
    return;
  }
  if (!std::isfinite(x) || !std::isfinite(deq)) return;
  ++m.count;
  if (x != 0) {
    ++m.nonzero_inputs;
    if (deq == 0) ++m.underflows;
  }
  if (over) ++m.saturations;
  // deq - x = s + t exactly (two-sum); s^2 = p + lo exactly (an FP32 input keeps both normal doubles).
  const double s = deq - x;
  const double bb = s - deq;
  const double t = (deq - (s - bb)) + (-x - bb);
  const double sq = s * s;
  m.sse.add(sq);
  m.sse.add(std::fma(s, s, -sq));
  if (t != 0) {
    m.rare.add_product(s, t);
    m.rare.add_product(s, t);
    m.rare.add_product(t, t);
    m.error.add(t);
  }
  m.error.add(s);
  m.signal.add(x * x);  // exact: a float32 squared has at most 48 significant bits
  const double ae = std::fabs(s);
  if (ae > m.max_abs_error) m.max_abs_error = ae;
  // The relative error's division only where it can exceed the largest so far: ae <= max |x| (1 - 2^-50) in
  // double arithmetic (a product rounded once, relative error below 2^-52) means ae / |x| < max exactly, so
  // the rounded quotient does not exceed max either.
  const double ax = std::fabs(x);
  if (x != 0 && ae > m.max_rel_error * ax * (1 - 0x1p-50)) {
    const double re = ae / ax;
    if (re > m.max_rel_error) m.max_rel_error = re;
  }
}

/// add_metric for element i of the tensor, whose quantized input value is x: the metrics compare with the
/// tensor's own element (BlockCall::metrics_x, the input before N:M pruning) when it differs.
HWY_INLINE void add_metric_at(const BlockCall& call, std::size_t i, double x, double deq, bool over) {
  if (call.metrics_x != nullptr) {
    switch (call.input) {
      case InputKind::F32: x = static_cast<const float*>(call.metrics_x)[i]; break;
      case InputKind::BF16: x = bf16_value(static_cast<const std::uint16_t*>(call.metrics_x)[i]); break;
      case InputKind::F16: x = half_value(static_cast<const std::uint16_t*>(call.metrics_x)[i]); break;
    }
  }
  add_metric(*call.metrics, x, deq, over);
}

#if HWY_TARGET != HWY_SCALAR
static_assert(kMaxLanes <= MetricsAcc::kSlots, "one lane-sum slot per 32-bit lane");

/// a + b = sum + err exactly (TwoSum: no ordering of |a| and |b| needed, no overflow for the sums here).
HWY_INLINE VF64 two_sum(VF64 a, VF64 b, VF64& err) {
  const VF64 sum = hn::Add(a, b);
  const VF64 bb = hn::Sub(sum, a);
  err = hn::Add(hn::Sub(a, hn::Sub(sum, bb)), hn::Sub(b, bb));
  return sum;
}

/// Adds the lanes of term to the lane sums at slot: hi + term = hi' + e1 and lo + e1 = lo' + e2 exactly,
/// so hi + lo + term = hi' + lo' + e2; e2 (rare: lo holds the rounding errors of hi, far below it) goes to
/// the scalar accumulator.
HWY_INLINE void add_lane_sum(MetricsAcc::LaneSums& ls, std::size_t slot, VF64 term, FastExactSum& spill) {
  const DF64 dd;
  VF64 e1, e2;
  const VF64 hi = two_sum(hn::Load(dd, ls.hi + slot), term, e1);
  const VF64 lo = two_sum(hn::Load(dd, ls.lo + slot), e1, e2);
  hn::Store(hi, dd, ls.hi + slot);
  hn::Store(lo, dd, ls.lo + slot);
  if (HWY_UNLIKELY(!hn::AllTrue(dd, hn::Eq(e2, hn::Zero(dd))))) {
    HWY_ALIGN double rest[kMaxLanes];
    hn::Store(e2, dd, rest);
    for (std::size_t l = 0; l < hn::Lanes(dd); ++l) spill.add(rest[l]);
  }
}

/// s * s - round(s * s), exactly: a fused multiply-subtract where the target has one, Dekker's product
/// otherwise (s splits into two halves of 26 bits whose products are exact doubles).
HWY_INLINE VF64 square_error(VF64 s, VF64 sq) {
#if HWY_NATIVE_FMA
  return hn::MulSub(s, s, sq);
#else
  const DF64 dd;
  const VF64 c = hn::Mul(s, hn::Set(dd, 134217729.0));  // 2^27 + 1
  const VF64 sh = hn::Sub(c, hn::Sub(c, s));
  const VF64 sl = hn::Sub(s, sh);
  const VF64 cross = hn::Mul(hn::Mul(sh, sl), hn::Set(dd, 2.0));
  return hn::Add(hn::Add(hn::Sub(hn::Mul(sh, sh), sq), cross), hn::Mul(sl, sl));
#endif
}
#endif

/// The fused metrics of elements [index, index + count) from their float32 input bits u, codes and overflow
/// lanes (all ones where the cast overflowed), each dequantized as decode(code) * scale.
///
/// The same sums as add_metric, a vector of doubles at a time: counts by masks, the exact sums in lane sums
/// (add_lane_sum), the largest errors lane by lane. A group of lanes holding a non-finite input or output,
/// or an error that is no exact double (rare, rounding far from x), and the inputs of N:M sparsity go through
/// add_metric instead.
template <class D>
HWY_INLINE void add_lane_metrics(const BlockParams& p, const BlockCall& call, std::size_t index, std::size_t count,
                                 D d, hn::Vec<D> u, hn::Vec<D> code, hn::Vec<D> over, double scale) {
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_code[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  hn::Store(u, d, lane_x);
  hn::Store(code, d, lane_code);
  hn::Store(over, d, lane_over);
  auto scalar = [&](std::size_t l0, std::size_t l1) {
    for (std::size_t l = l0; l < l1; ++l) {
      add_metric_at(call, index + l, static_cast<double>(std::bit_cast<float>(lane_x[l])),
                    p.decode_f64[lane_code[l]] * scale, lane_over[l] != 0);
    }
  };
#if HWY_TARGET == HWY_SCALAR
  scalar(0, count);
#else
  if (call.metrics_x != nullptr) {
    scalar(0, count);
    return;
  }
  MetricsAcc& m = *call.metrics;
  const DF64 dd;
  const D64 du64;
  const DUh duh;
  const std::size_t lanes = hn::Lanes(dd);
  const VF64 scale_v = hn::Set(dd, scale);
  const VF64 zero = hn::Zero(dd);
  for (std::size_t j = 0; j < count; j += lanes) {
    const std::size_t n = std::min(lanes, count - j);
    const auto active = hn::FirstN(dd, n);
    const VF64 x = hn::PromoteTo(dd, hn::BitCast(DFh(), hn::LoadU(duh, lane_x + j)));
    const auto idx = hn::IfThenElseZero(hn::RebindMask(DI64(), active),
                                        hn::BitCast(DI64(), hn::PromoteTo(du64, hn::LoadU(duh, lane_code + j))));
    const VF64 deq = hn::Mul(hn::GatherIndex(dd, p.decode_f64.data(), idx), scale_v);
    // deq - x = s + t exactly (two-sum, as add_metric).
    const VF64 s = hn::Sub(deq, x);
    const VF64 bb = hn::Sub(s, deq);
    const VF64 t = hn::Add(hn::Sub(deq, hn::Sub(s, bb)), hn::Sub(hn::Neg(x), bb));
    const auto plain = hn::And(hn::And(hn::IsFinite(x), hn::IsFinite(deq)), hn::Eq(t, zero));
    if (HWY_UNLIKELY(!hn::AllTrue(dd, hn::Or(plain, hn::Not(active))))) {
      scalar(j, j + n);
      continue;
    }
    m.count += static_cast<std::int64_t>(n);
    const auto nonzero = hn::And(active, hn::Ne(x, zero));
    m.nonzero_inputs += static_cast<std::int64_t>(hn::CountTrue(dd, nonzero));
    m.underflows += static_cast<std::int64_t>(hn::CountTrue(dd, hn::And(nonzero, hn::Eq(deq, zero))));
    const auto overflow = hn::RebindMask(dd, hn::Ne(hn::PromoteTo(du64, hn::LoadU(duh, lane_over + j)), hn::Zero(du64)));
    m.saturations += static_cast<std::int64_t>(hn::CountTrue(dd, hn::And(active, overflow)));
    const VF64 sa = hn::IfThenElseZero(active, s);
    const VF64 xa = hn::IfThenElseZero(active, x);
    const VF64 sq = hn::Mul(sa, sa);
    add_lane_sum(m.lane_sse, j, sq, m.sse);
    const VF64 sq_error = square_error(sa, sq);
    if (HWY_UNLIKELY(!hn::AllTrue(dd, hn::Eq(sq_error, zero)))) add_lane_sum(m.lane_sse, j, sq_error, m.sse);
    add_lane_sum(m.lane_error, j, sa, m.error);
    add_lane_sum(m.lane_signal, j, hn::Mul(xa, xa), m.signal);  // exact: a float32 squared
    const VF64 ae = hn::Abs(sa);
    hn::Store(hn::Max(hn::Load(dd, m.lane_max_abs + j), ae), dd, m.lane_max_abs + j);
    // The division only where the quotient can exceed the lane's largest so far (add_metric has the argument).
    const VF64 ax = hn::Abs(xa);
    const VF64 max_rel = hn::Load(dd, m.lane_max_rel + j);
    const auto may_exceed =
        hn::And(nonzero, hn::Gt(ae, hn::Mul(hn::Mul(max_rel, ax), hn::Set(dd, 1 - 0x1p-50))));
    if (!hn::AllFalse(dd, may_exceed)) {
      const VF64 re = hn::IfThenElseZero(may_exceed, hn::Div(ae, ax));
      hn::Store(hn::Max(max_rel, re), dd, m.lane_max_rel + j);
    }
  }
#endif
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
