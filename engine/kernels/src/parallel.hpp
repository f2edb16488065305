// Splitting an index range over threads. Kernels are elementwise with index-keyed randomness, so the
// split changes nothing but speed.
#pragma once

#include <algorithm>
#include <cstddef>

#include "mxlab/core/ceil_div.hpp"
#include "mxlab/core/threads.hpp"

namespace mxlab::kernel_detail {

using mxlab::resolve_threads;
using mxlab::run_parts;
using mxlab::useful_threads;

/// Calls fn(begin, end) on contiguous parts of [0, n), one per thread; small ranges stay on the caller's
/// thread. Part boundaries are multiples of 64 elements so that no part splits a SIMD vector needlessly.
template <typename Fn>
void parallel_ranges(std::size_t n, unsigned threads, Fn&& fn) {
  const std::size_t parts = useful_threads(n, threads);
  if (parts <= 1) {
    fn(std::size_t{0}, n);
    return;
  }
  const std::size_t step = ceil_div(ceil_div(n, parts), 64) * 64;
  run_parts(static_cast<unsigned>(parts), [&](unsigned p) {
    const std::size_t begin = std::min(n, p * step);
    const std::size_t end = std::min(n, begin + step);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace mxlab::kernel_detail
