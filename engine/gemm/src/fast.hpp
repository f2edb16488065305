// The SIMD path of the models (mxlab/kernels/gemm_kernel.hpp): which models and operands the kernel runs exactly,
// the operands packed for it, and its per-entry accumulator states. gemm.cpp rounds the states to C and sends
// every entry the kernel could not take (special values, lanes it marked) to the scalar definition.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "mxlab/core/progress.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/gemm/model.hpp"

namespace mxlab::gemm::detail {

/// The kernel's accumulators of every entry of C (row-major): with acc=exact the exact value is acc + lo; with
/// promotion, outer is the FP32 accumulator. redo marks the entries the scalar definition computes.
struct KernelStates {
  std::vector<double> acc, lo, outer;
  std::vector<std::uint8_t> redo;
};

/// Progress of one GEMM in entries of C, for workers on several threads: thread 0 reports through the reporter
/// (at most 128 times), and every worker asks whether to stop.
class Ticker {
 public:
  Ticker(const Reporter* reporter, std::int64_t total, std::string stage)
      : reporter_(reporter), total_(total), stage_(std::move(stage)) {}
  /// Adds n entries done by worker `thread`; false once the work is cancelled.
  bool add(std::int64_t n, unsigned thread) {
    const std::int64_t done = done_ += n;
    if (reporter_ == nullptr) return true;
    if (thread == 0 && (done - reported_ >= total_ / 128 || done == total_)) {
      reported_ = done;
      reporter_->report(done, total_, stage_);
    }
    return !reporter_->cancelled();
  }
  bool cancelled() const { return reporter_ != nullptr && reporter_->cancelled(); }
  /// After the workers have joined: the last report, done of total (unless cancelled).
  void finish() {
    if (reporter_ != nullptr && !cancelled() && reported_ != done_) reporter_->report(done_, total_, stage_);
  }

 private:
  const Reporter* reporter_;
  std::int64_t total_;
  std::string stage_;
  std::atomic<std::int64_t> done_{0};
  std::int64_t reported_ = 0;  ///< thread 0's last report
};

/// Runs the model's kernel over all of C, ticking each panel's entries (it stops early when cancelled). Returns
/// why it cannot run (the model or operands outside the kernel's exact range; then nothing is computed), or "".
std::string kernel_states(const Model& m, const Operand& a, const Operand& b, unsigned threads, KernelStates& out,
                          Ticker& ticker);

}  // namespace mxlab::gemm::detail
