// Ctrl-C for long commands: while an InterruptGuard lives, SIGINT and SIGTERM set a flag that the work's Reporter
// reads as its cancel, so the command stops cleanly and leaves no partial output (`mxlab run`, `mxlab gemm`).
#pragma once

#include <atomic>
#include <csignal>

namespace mxlab::cli {

/// The exit code of a command stopped by Ctrl-C: 128 + SIGINT, as a shell reports a process the signal ended.
inline constexpr int kExitInterrupted = 130;

/// Set by SIGINT or SIGTERM while an InterruptGuard lives.
inline std::atomic<bool> g_interrupted{false};

inline void on_interrupt_signal(int) { g_interrupted.store(true); }

/// Ctrl-C (and SIGTERM) set g_interrupted instead of ending the process while this lives.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = false;
    previous_ = std::signal(SIGINT, on_interrupt_signal);
    previous_term_ = std::signal(SIGTERM, on_interrupt_signal);
  }
  ~InterruptGuard() {
    std::signal(SIGINT, previous_);
    std::signal(SIGTERM, previous_term_);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  /// The flag a Reporter's cancel points to.
  static const std::atomic<bool>* flag() { return &g_interrupted; }

 private:
  void (*previous_)(int) = nullptr;
  void (*previous_term_)(int) = nullptr;
};

}  // namespace mxlab::cli
