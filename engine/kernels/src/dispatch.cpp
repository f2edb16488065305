// Highway dynamic dispatch: the one translation unit that compiles cast_kernels-inl.h once per target
// and picks the best target the CPU supports at run time. The build passes no -march: the targets are
// Highway's defaults for x86-64 minus SSSE3 (engine/kernels/CMakeLists.txt): AVX3, AVX2, SSE4, and the
// fallback (SCALAR with g++ before 12.3, whose EMU128 code Highway marks broken, EMU128 otherwise).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cast_kernels-inl.h"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cstdint>

#include <hwy/highway.h>
#include <hwy/targets.h>

#include "cast_kernels-inl.h"

#if HWY_ONCE
#include "mxlab/kernels/simd_target.hpp"

namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(cast_kernel_impl);
HWY_EXPORT(decode_kernel_impl);
HWY_EXPORT(target_impl);

void cast_dispatch(const CastParams& p, const CastCall& call) { HWY_DYNAMIC_DISPATCH(cast_kernel_impl)(p, call); }

void decode_dispatch(const DecodeParams& p, const DecodeCall& call) {
  HWY_DYNAMIC_DISPATCH(decode_kernel_impl)(p, call);
}

}  // namespace kernel_detail

std::vector<SimdTarget> simd_targets() {
  // Evaluated once, before any ScopedSimdTarget (whose constructor calls this) can narrow the list.
  static const std::vector<SimdTarget> targets = [] {
    std::vector<SimdTarget> out;
    for (const std::int64_t id : hwy::SupportedAndGeneratedTargets()) out.push_back({id, hwy::TargetName(id)});
    return out;
  }();
  return targets;
}

namespace {
// The CPU's targets, detected once: hwy::SupportedTargets() without a forced target runs CPUID, which a virtual
// machine traps. First called by ScopedSimdTarget's constructor, before it narrows the list.
std::int64_t detected_targets() {
  static const std::int64_t mask = hwy::SupportedTargets();
  return mask;
}
}  // namespace

std::string active_simd_target() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(kernel_detail::target_impl)()); }

ScopedSimdTarget::ScopedSimdTarget(const SimdTarget& target) {
  // A target this CPU lacks would fault on its first instruction: such a request leaves dispatch alone.
  detected_targets();
  for (const SimdTarget& t : simd_targets()) {
    if (t.id != target.id) continue;
    hwy::SetSupportedTargetsForTest(target.id);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    forced_ = true;
  }
}

ScopedSimdTarget::~ScopedSimdTarget() {
  if (!forced_) return;
  hwy::SetSupportedTargetsForTest(0);
  hwy::GetChosenTarget().Update(detected_targets());
}

}  // namespace mxlab
#endif  // HWY_ONCE
