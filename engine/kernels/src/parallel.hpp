// Splitting an index range over threads. Kernels are elementwise with index-keyed randomness, so the
// split changes nothing but speed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace mxlab::kernel_detail {

/// Worker count for a request: 0 means every hardware thread.
inline unsigned resolve_threads(unsigned requested) {
  if (requested != 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}

/// Calls fn(begin, end) on contiguous parts of [0, n), one per thread; small ranges stay on the caller's
/// thread. Part boundaries are multiples of 64 elements so that no part splits a SIMD vector needlessly.
template <typename Fn>
void parallel_ranges(std::size_t n, unsigned threads, Fn&& fn) {
  constexpr std::size_t kMinPerThread = std::size_t{1} << 14;
  const std::size_t useful = std::max<std::size_t>(1, n / kMinPerThread);
  const auto parts = static_cast<std::size_t>(std::min<std::size_t>(resolve_threads(threads), useful));
  if (parts <= 1) {
    fn(std::size_t{0}, n);
    return;
  }
  const std::size_t step = ((n + parts - 1) / parts + 63) / 64 * 64;
  std::vector<std::thread> workers;
  workers.reserve(parts - 1);
  for (std::size_t p = 1; p < parts; ++p) {
    const std::size_t begin = std::min(n, p * step);
    const std::size_t end = std::min(n, begin + step);
    if (begin < end) workers.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(std::size_t{0}, std::min(n, step));
  for (auto& w : workers) w.join();
}

}  // namespace mxlab::kernel_detail
