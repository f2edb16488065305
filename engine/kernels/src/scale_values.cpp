// scale_values (scale_values.hpp): a tensor times a scale, its amax and the scaled values past a limit, in one
// pass. Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the dispatcher picks
// the best one the CPU supports at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "scale_values.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "mxlab/kernels/scale_values.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

ScaleStats scale_values_impl(const float* x, std::size_t n, float scale, float limit, float* scaled) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto vscale = hn::Set(d, scale);
  const auto vlimit = hn::Set(d, limit);
  auto vmax = hn::Zero(d);
  std::int64_t above = 0;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    const auto a = hn::Abs(v);
    vmax = hn::IfThenElse(hn::Lt(vmax, a), a, vmax);  // a NaN compares false: ignored
    const auto s = hn::Mul(v, vscale);
    hn::StoreU(s, d, scaled + i);
    above += static_cast<std::int64_t>(hn::CountTrue(d, hn::Gt(hn::Abs(s), vlimit)));
  }
  float amax = hn::GetLane(hn::MaxOfLanes(d, vmax));  // no lane holds NaN
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]), s = x[i] * scale;
    amax = amax < a ? a : amax;
    scaled[i] = s;
    above += std::fabs(s) > limit ? 1 : 0;
  }
  return {amax, above};
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(scale_values_impl);

}  // namespace kernel_detail

ScaleStats scale_values(std::span<const float> x, float scale, float limit, std::span<float> scaled) {
  return HWY_DYNAMIC_DISPATCH(kernel_detail::scale_values_impl)(x.data(), x.size(), scale, limit, scaled.data());
}

}  // namespace mxlab
#endif  // HWY_ONCE
