// The block kernel of power-of-two scales down the columns of a matrix, and over its 2-D tiles
// (block_columns-inl.h).
// Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the dispatcher picks
// the best one the CPU supports at run time (the targets are listed in engine/kernels/CMakeLists.txt).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "block_columns_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "block_columns-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {

void columns_kernel_impl(const BlockParams& p, const ColumnsCall& call) {
  block::with_fast_kind(p.fast.kind, [&](auto kind) { block::fast_floor_columns<decltype(kind)::value>(p, call); });
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab::kernel_detail {

HWY_EXPORT(columns_kernel_impl);

void columns_dispatch(const BlockParams& p, const ColumnsCall& call) {
  HWY_DYNAMIC_DISPATCH(columns_kernel_impl)(p, call);
}

}  // namespace mxlab::kernel_detail
#endif  // HWY_ONCE
