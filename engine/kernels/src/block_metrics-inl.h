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

/// The fused metrics of elements [index, index + count) from their float32 input bits u, codes and overflow
/// lanes (all ones where the cast overflowed), each dequantized as decode(code) * scale.
template <class D>
HWY_INLINE void add_lane_metrics(const BlockParams& p, const BlockCall& call, std::size_t index, std::size_t count,
                                 D d, hn::Vec<D> u, hn::Vec<D> code, hn::Vec<D> over, double scale) {
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_code[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  hn::Store(u, d, lane_x);
  hn::Store(code, d, lane_code);
  hn::Store(over, d, lane_over);
  for (std::size_t l = 0; l < count; ++l) {
    add_metric_at(call, index + l, static_cast<double>(std::bit_cast<float>(lane_x[l])),
                  p.decode_f64[lane_code[l]] * scale, lane_over[l] != 0);
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
