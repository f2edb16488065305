// The block kernel of the general power-of-two path (block_plan-inl.h).
// Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the dispatcher picks
// the best one the CPU supports at run time (the targets are listed in engine/kernels/CMakeLists.txt).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "block_plan_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "block_plan-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {

/// One instance: rounding mode, input kind and output chosen at run time.
void plan_kernel_impl(const BlockParams& p, const BlockCall& call) { block::plan_loop(p, call); }

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab::kernel_detail {

HWY_EXPORT(plan_kernel_impl);

void plan_dispatch(const BlockParams& p, const BlockCall& call) { HWY_DYNAMIC_DISPATCH(plan_kernel_impl)(p, call); }

}  // namespace mxlab::kernel_detail
#endif  // HWY_ONCE
