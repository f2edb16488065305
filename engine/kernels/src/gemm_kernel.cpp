// The GEMM accumulation models' kernel (gemm-inl.h, gemm_kernel.hpp). Highway dynamic dispatch: foreach_target.h
// re-includes this file once per target; the dispatcher picks the best one the CPU supports at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {

void gemm_panel_impl(const GemmKernelModel& m, const GemmPanelCall& call) { gemm::PanelDot(m, call).run(); }

std::size_t gemm_lanes_impl() { return gemm::panel_width(); }

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(gemm_panel_impl);
HWY_EXPORT(gemm_lanes_impl);

}  // namespace kernel_detail

std::size_t gemm_lanes() { return HWY_DYNAMIC_DISPATCH(kernel_detail::gemm_lanes_impl)(); }

void gemm_panel(const GemmKernelModel& m, const GemmPanelCall& call) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::gemm_panel_impl)(m, call);
}

}  // namespace mxlab
#endif  // HWY_ONCE
