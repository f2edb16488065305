// The multiply-add throughput the cores deliver, measured: the ceiling beside which `mxlab bench` states a GEMM's
// rate (app/cli/cmd_bench.cpp).
#pragma once

#include <cstdint>

namespace mxlab {

/// Runs `iterations` rounds of independent float32 multiply-add chains on the widest vectors of the best target
/// the CPU supports (enough chains to cover the FMA units' latency) and returns the floating-point operations
/// done (two per multiply-add). `sink` receives a value of the chains, so that no compiler drops them.
std::uint64_t fma_chains(std::uint64_t iterations, float* sink);

/// The float32 multiply-add rate of `threads` cores at once in GFLOP/s: fma_chains on that many threads for about
/// `seconds`, the best of three rounds. It is what the cores' FMA units reach at the clock they run at, whatever
/// the width of their data paths (AMD Zen 4 executes a 512-bit FMA as two 256-bit halves).
double measured_fma_peak(unsigned threads, double seconds);

}  // namespace mxlab
