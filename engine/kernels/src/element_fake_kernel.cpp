// The element cast's nearest-even fast path as fake values under a factor (element_fake.hpp).
// Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the dispatcher picks
// the best one the CPU supports at run time (the targets are listed in engine/kernels/CMakeLists.txt).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "element_fake_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "block_lanes-inl.h"
#include "block_rne-inl.h"
#include "element_fake.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {

/// Whole vectors through fast_rne_fake with scale 2^0 and the factor as the value's scale; the last partial
/// vector through a zero-padded copy. Every input's magnitude bits are folded into one maximum: an input at
/// or above Inf's bits (NaN or Inf) makes the call false, whatever it wrote.
template <block::FastKind kKind>
HWY_NOINLINE bool element_fake_loop(const ElementFake& p, const float* in, std::size_t n, float factor, float* out) {
  const DU du;
  const DF df;
  const std::size_t lanes = hn::Lanes(df);
  const block::FastVectors fv(p.fast);
  const VF one = hn::Set(df, 1.0F);
  const VF scale = hn::Set(df, factor);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  VU most = hn::Zero(du);
  const auto step = [&](VU u) {
    most = hn::Max(most, hn::And(u, abs_mask));
    return block::fast_rne_fake<kKind>(fv, u, one, scale);
  };
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(step(hn::BitCast(du, hn::LoadU(df, in + i))), df, out + i);
  if (i < n) {
    HWY_ALIGN float buf[kMaxLanes] = {};
    std::memcpy(buf, in + i, (n - i) * sizeof(float));
    hn::Store(step(hn::BitCast(du, hn::Load(df, buf))), df, buf);
    std::memcpy(out + i, buf, (n - i) * sizeof(float));
  }
  return hn::GetLane(hn::MaxOfLanes(du, most)) < 0x7F800000U;
}

bool element_fake_impl(const ElementFake& p, const float* in, std::size_t n, float factor, float* out) {
  if (!block::default_fp_environment()) return false;
  bool finite = false;
  block::with_fast_kind(p.fast.kind, [&](auto kind) {
    finite = element_fake_loop<decltype(kind)::value>(p, in, n, factor, out);
  });
  return finite;
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab::kernel_detail {

HWY_EXPORT(element_fake_impl);

bool element_fake_dispatch(const ElementFake& p, const float* in, std::size_t n, float factor, float* out) {
  return HWY_DYNAMIC_DISPATCH(element_fake_impl)(p, in, n, factor, out);
}

}  // namespace mxlab::kernel_detail
#endif
