// The block kernel of float block scales and two-level scales (block_float_scale-inl.h), and its blocks down
// columns (block_float_columns-inl.h).
// Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the dispatcher picks
// the best one the CPU supports at run time (the targets are listed in engine/kernels/CMakeLists.txt).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "block_float_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "block_float_columns-inl.h"
#include "block_float_scale-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {

/// One instance: rounding mode, input kind and output chosen at run time.
void float_scale_kernel_impl(const BlockParams& p, const BlockCall& call) { block::float_scale_loop(p, call); }

void float_columns_kernel_impl(const BlockParams& p, const ColumnsCall& call) { block::fast_float_columns(p, call); }

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab::kernel_detail {

HWY_EXPORT(float_scale_kernel_impl);
HWY_EXPORT(float_columns_kernel_impl);

void float_scale_dispatch(const BlockParams& p, const BlockCall& call) { HWY_DYNAMIC_DISPATCH(float_scale_kernel_impl)(p, call); }
void float_columns_dispatch(const BlockParams& p, const ColumnsCall& call) {
  HWY_DYNAMIC_DISPATCH(float_columns_kernel_impl)(p, call);
}

}  // namespace mxlab::kernel_detail
#endif  // HWY_ONCE
