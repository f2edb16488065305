// Which SIMD instruction sets the kernels were compiled for, which one runs, and forcing one (tests, benches).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mxlab {

/// One compiled instruction-set target of the kernels (a Highway target: "AVX3", "AVX2", "SSE4", "SCALAR", ...).
struct SimdTarget {
  std::int64_t id = 0;  ///< Highway's bit for the target
  std::string name;
};

/// Targets that are both compiled into the kernels and supported by this CPU, best first.
std::vector<SimdTarget> simd_targets();

/// Name of the target the kernels dispatch to now (the best one, or the one a ScopedSimdTarget forces).
std::string active_simd_target();

/// Restricts kernel dispatch to one target while it lives, so every target can be tested and timed on one
/// machine. Process-wide and not nestable: create it only while no kernel runs on another thread. A target
/// not listed by simd_targets() is not forced (forced() is false).
class ScopedSimdTarget {
 public:
  explicit ScopedSimdTarget(const SimdTarget& target);
  bool forced() const { return forced_; }
  ~ScopedSimdTarget();
  ScopedSimdTarget(const ScopedSimdTarget&) = delete;
  ScopedSimdTarget& operator=(const ScopedSimdTarget&) = delete;

 private:
  bool forced_ = false;
};

}  // namespace mxlab
