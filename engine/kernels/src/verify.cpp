// verify_cast: every float32 bit pattern of a range through the SIMD cast and the scalar reference.
// The reference (tens of ns per call) dominates; blocks are handed to all workers through one counter,
// so the cores stay busy to the end, and the SIMD side of a block costs a few percent of its reference side.
#include "mxlab/kernels/verify.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "mxlab/core/ceil_div.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "parallel.hpp"

namespace mxlab {
namespace {

constexpr std::uint64_t kBlock = std::uint64_t{1} << 16;
constexpr auto kProgressInterval = std::chrono::milliseconds(250);

struct WorkerResult {
  std::uint64_t checked = 0;
  std::uint64_t mismatches = 0;
  std::vector<CastMismatch> examples;
};

}  // namespace

Result<VerifyReport> verify_cast(const Format& f, const CastOptions& options, const VerifyOptions& verify) {
  if (verify.begin > verify.end || verify.end > (std::uint64_t{1} << 32))
    return make_error("verify_cast: the range [" + std::to_string(verify.begin) + ", " + std::to_string(verify.end) +
                      ") is not inside [0, 2^32)");
  auto made = CastKernel::make(f, options);
  if (!made) return made.error();
  const CastKernel kernel = std::move(*made);
  const CastOptions o = kernel.options();
  const bool stochastic = o.rounding == Rounding::Stochastic;

  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t total = verify.end - verify.begin;
  const std::uint64_t blocks = ceil_div(total, kBlock);
  const unsigned threads = static_cast<unsigned>(
      std::min<std::uint64_t>(kernel_detail::resolve_threads(verify.threads), std::max<std::uint64_t>(blocks, 1)));
  std::atomic<std::uint64_t> next_block{0};
  std::atomic<std::uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::atomic<unsigned> running{threads};
  std::mutex mutex;
  std::condition_variable finished;
  std::vector<WorkerResult> results(threads);

  auto work = [&](WorkerResult& r) {
    std::vector<float> in(kBlock);
    std::vector<std::uint16_t> simd(kBlock);
    for (;;) {
      if (stop.load(std::memory_order_relaxed)) break;
      const std::uint64_t b = next_block.fetch_add(1);
      if (b >= blocks) break;
      const std::uint64_t first = verify.begin + b * kBlock;
      const auto n = static_cast<std::size_t>(std::min(kBlock, verify.end - first));
      for (std::size_t i = 0; i < n; ++i) in[i] = std::bit_cast<float>(static_cast<std::uint32_t>(first + i));
      KernelRun run;
      run.seed = verify.seed;
      run.first_index = first;
      (void)kernel.cast_f32(std::span<const float>(in.data(), n), std::span<std::uint16_t>(simd.data(), n), run);
      for (std::size_t i = 0; i < n; ++i) {
        const auto bits = static_cast<std::uint32_t>(first + i);
        const std::uint32_t random = stochastic ? stochastic_bits(verify.seed, bits) : 0;
        const std::uint32_t ref = cast(f, static_cast<double>(in[i]), o, random).code;
        if (ref == simd[i]) continue;
        ++r.mismatches;
        if (r.examples.size() < verify.max_examples) r.examples.push_back({bits, simd[i], ref});
      }
      r.checked += n;
      done.fetch_add(n, std::memory_order_relaxed);
    }
    if (running.fetch_sub(1) == 1) {
      const std::lock_guard<std::mutex> lock(mutex);
      finished.notify_all();
    }
  };

  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) workers.emplace_back(work, std::ref(results[t]));
  {
    std::unique_lock<std::mutex> lock(mutex);
    while (running.load() != 0) {
      finished.wait_for(lock, kProgressInterval);
      if (verify.progress && running.load() != 0 && !stop.load()) {
        lock.unlock();
        if (!verify.progress(done.load(), total)) stop.store(true);
        lock.lock();
      }
    }
  }
  for (auto& w : workers) w.join();

  VerifyReport report;
  for (const WorkerResult& r : results) {
    report.checked += r.checked;
    report.mismatches += r.mismatches;
    report.examples.insert(report.examples.end(), r.examples.begin(), r.examples.end());
  }
  // Each worker's examples are its smallest inputs (it takes blocks in increasing order), so the smallest
  // of their union are the smallest overall whatever the thread count.
  std::sort(report.examples.begin(), report.examples.end(),
            [](const CastMismatch& a, const CastMismatch& b) { return a.input_bits < b.input_bits; });
  if (report.examples.size() > verify.max_examples) report.examples.resize(verify.max_examples);
  report.cancelled = stop.load() && report.checked < total;
  report.simd_target = active_simd_target();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (verify.progress && !report.cancelled) verify.progress(report.checked, total);
  return report;
}

}  // namespace mxlab
