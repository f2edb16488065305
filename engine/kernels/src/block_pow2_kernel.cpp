// The block kernel of power-of-two scales under the exact rules (block_pow2-inl.h).
// Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the dispatcher picks
// the best one the CPU supports at run time (the targets are listed in engine/kernels/CMakeLists.txt).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "block_pow2_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "block_pow2-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {

/// Nearest-even, the default of every format, has its own instance; the other modes share one that picks
/// the mode (and draws random bits for stochastic rounding) at run time, as does the input kind.
void pow2_kernel_impl(const BlockParams& p, const BlockCall& call) {
  if (p.cast.rounding == Rounding::NearestEven) return block::block_for_output<RoundingTag<Rounding::NearestEven>>(p, call);
  return block::block_for_output<AnyRounding>(p, call);
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab::kernel_detail {

HWY_EXPORT(pow2_kernel_impl);

void pow2_dispatch(const BlockParams& p, const BlockCall& call) { HWY_DYNAMIC_DISPATCH(pow2_kernel_impl)(p, call); }

}  // namespace mxlab::kernel_detail
#endif  // HWY_ONCE
