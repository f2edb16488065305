// The dequantization kernel of packed block formats (block_dequant-inl.h).
// Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the dispatcher picks
// the best one the CPU supports at run time (the targets are listed in engine/kernels/CMakeLists.txt).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "block_dequant_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "block_dequant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {

void dequant_kernel_impl(const BlockParams& p, const DequantCall& call) { block::dequant_blocks(p, call); }

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab::kernel_detail {

HWY_EXPORT(dequant_kernel_impl);

void dequant_dispatch(const BlockParams& p, const DequantCall& call) { HWY_DYNAMIC_DISPATCH(dequant_kernel_impl)(p, call); }

}  // namespace mxlab::kernel_detail
#endif  // HWY_ONCE
