// Progress reports and cancellation of long work: every front end (terminal bar, GUI, experiment runner)
// passes the same two things to the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

namespace mxlab {

/// How far a job has come: `done` of `total` units (elements, points, steps) of the stage named.
struct Progress {
  std::int64_t done = 0;
  std::int64_t total = 0;
  std::string stage;
  /// Within the current unit (a training point's steps inside a run's points): `part_done` of `part_total`
  /// of `part`; part_total = 0 when there is none.
  std::int64_t part_done = 0, part_total = 0;
  std::string part;
};

/// Where a job reports progress and learns that it should stop. Both are optional.
struct Reporter {
  std::function<void(const Progress&)> on_progress;
  const std::atomic<bool>* cancel = nullptr;

  bool cancelled() const { return cancel != nullptr && cancel->load(std::memory_order_relaxed); }
  void report(std::int64_t done, std::int64_t total, const std::string& stage) const {
    if (!on_progress) return;
    Progress p;
    p.done = done;
    p.total = total;
    p.stage = stage;
    on_progress(p);
  }
};

}  // namespace mxlab
