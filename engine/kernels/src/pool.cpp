// pool_2x2_row (pool.hpp). Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the
// dispatcher picks the best one the CPU supports at run time. Compares, selects and one rounded sum per input:
// the vector lanes and the scalar remainder give the same bits, forward and backward.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pool.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cstdint>
#include <limits>

#include <hwy/highway.h>

#include "mxlab/kernels/pool.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void pool_2x2_row_impl(const float* top, const float* bottom, std::int64_t ow, std::int64_t c, bool max, float* out,
                       std::uint8_t* at) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<std::uint8_t, decltype(d)> d8;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t ox = 0; ox < ow; ++ox) {
    const float* v[4] = {top + 2 * ox * c, top + (2 * ox + 1) * c, bottom + 2 * ox * c, bottom + (2 * ox + 1) * c};
    float* o = out + ox * c;
    std::uint8_t* a = at + ox * c;
    std::int64_t ch = 0;
    for (; ch + lanes <= c; ch += lanes) {
      auto best = hn::Set(d, neg_inf), sum = hn::Zero(d), first = hn::Set(d, static_cast<float>(kPoolNoMaximum));
      for (int q = 0; q < 4; ++q) {
        const auto value = hn::LoadU(d, v[q] + ch);
        sum = hn::Add(sum, value);
        const auto above = hn::Gt(value, best);
        best = hn::IfThenElse(above, value, best);
        first = hn::IfThenElse(above, hn::Set(d, static_cast<float>(q)), first);
      }
      hn::StoreU(max ? best : hn::Mul(sum, hn::Set(d, 0.25F)), d, o + ch);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, first)), d8, a + ch);
    }
    for (; ch < c; ++ch) pool_2x2_window(v, ch, max, o[ch], a[ch]);
  }
}

void pool_2x2_backward_row_impl(const float* g, const std::uint8_t* at, std::int64_t ow, std::int64_t c, bool max,
                                float* top, float* bottom) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<std::uint8_t, decltype(d)> d8;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  for (std::int64_t ox = 0; ox < ow; ++ox) {
    float* v[4] = {top + 2 * ox * c, top + (2 * ox + 1) * c, bottom + 2 * ox * c, bottom + (2 * ox + 1) * c};
    const float* gr = g + ox * c;
    const std::uint8_t* a = at + ox * c;
    std::int64_t ch = 0;
    for (; ch + lanes <= c; ch += lanes) {
      const auto gv = hn::LoadU(d, gr + ch);
      if (max) {
        const auto first = hn::PromoteTo(du, hn::LoadU(d8, a + ch));
        const auto taken = hn::Add(hn::Zero(d), gv);
        for (std::uint32_t q = 0; q < 4; ++q)
          hn::StoreU(hn::IfThenElseZero(hn::RebindMask(d, hn::Eq(first, hn::Set(du, q))), taken), d, v[q] + ch);
      } else {
        const auto share = hn::Add(hn::Zero(d), hn::Mul(gv, hn::Set(d, 0.25F)));
        for (int q = 0; q < 4; ++q) hn::StoreU(share, d, v[q] + ch);
      }
    }
    for (; ch < c; ++ch)
      for (std::uint8_t q = 0; q < 4; ++q) v[q][ch] = pool_2x2_input_gradient(gr[ch], a[ch], max, q);
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(pool_2x2_row_impl);
HWY_EXPORT(pool_2x2_backward_row_impl);

}  // namespace kernel_detail

void pool_2x2_row(const float* top, const float* bottom, std::int64_t ow, std::int64_t c, bool max, float* out,
                  std::uint8_t* at) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::pool_2x2_row_impl)(top, bottom, ow, c, max, out, at);
}

void pool_2x2_backward_row(const float* g, const std::uint8_t* at, std::int64_t ow, std::int64_t c, bool max,
                           float* top, float* bottom) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::pool_2x2_backward_row_impl)(g, at, ow, c, max, top, bottom);
}

}  // namespace mxlab
#endif  // HWY_ONCE
