// fma_chains and measured_fma_peak (fma_peak.hpp). Highway dynamic dispatch: foreach_target.h re-includes this
// file once per target; the dispatcher picks the best one the CPU supports at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include <hwy/highway.h>

#include "mxlab/kernels/fma_peak.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Twelve chains: an FMA's latency (4 cycles on current x86 cores) times two FMA units is eight in flight.
std::uint64_t fma_chains_impl(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 12;
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.9999999F), c = hn::Set(d, 1e-7F);
  hn::Vec<decltype(d)> acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = hn::Set(d, 0.1F * static_cast<float>(j + 1));
  for (std::uint64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = hn::MulAdd(acc[j], m, c);  // unrolled: the chains stay in registers
  auto s = acc[0];
  for (int j = 1; j < kChains; ++j) s = hn::Add(s, acc[j]);
  *sink = hn::GetLane(hn::SumOfLanes(d, s));
  return iterations * kChains * hn::Lanes(d) * 2;
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(fma_chains_impl);

}  // namespace kernel_detail

std::uint64_t fma_chains(std::uint64_t iterations, float* sink) {
  return HWY_DYNAMIC_DISPATCH(kernel_detail::fma_chains_impl)(iterations, sink);
}

double measured_fma_peak(unsigned threads, double seconds) {
  using clock = std::chrono::steady_clock;
  threads = std::max(threads, 1U);
  // Calibrate: the iterations one thread runs in about `seconds`.
  float sink = 0.0F;
  std::uint64_t iterations = 1 << 16;
  for (;;) {
    const auto t0 = clock::now();
    fma_chains(iterations, &sink);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s >= seconds / 4 || iterations >= (std::uint64_t{1} << 40)) {
      iterations = static_cast<std::uint64_t>(static_cast<double>(iterations) * seconds / std::max(s, 1e-9)) + 1;
      break;
    }
    iterations *= 4;
  }
  double best = 0.0;
  std::vector<float> sinks(threads);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::uint64_t> flops(threads);
    const auto t0 = clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back([&, t] { flops[t] = fma_chains(iterations, &sinks[t]); });
    flops[0] = fma_chains(iterations, &sinks[0]);
    for (std::thread& th : pool) th.join();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    double total = 0.0;
    for (const std::uint64_t f : flops) total += static_cast<double>(f);
    best = std::max(best, total / s / 1e9);
  }
  return best;
}

}  // namespace mxlab
#endif  // HWY_ONCE
