// Progress of long work on standard error: a bar with counts, rate and ETA on a terminal, plain lines otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "mxlab/core/progress.hpp"

namespace mxlab::cli {

/// Inputs from this size on show a progress bar on a terminal (counts, rate, ETA).
inline constexpr std::size_t kProgressElements = std::size_t{1} << 24;

class ProgressBar {
 public:
  /// `unit` names what is counted ("points", "steps"); `tty` chooses the redrawn bar over plain lines.
  ProgressBar(std::ostream& err, std::string unit, bool tty);
  /// Shows `done` of `total`; redraws at most every 0.1 s on a terminal, prints a line at most every 5 s otherwise
  /// (and always the last).
  void update(std::int64_t done, std::int64_t total);
  /// The same, with the progress within the current unit (a training point's steps) after the count: its own
  /// count, rate and ETA, timed from its first report.
  void update(const Progress& p);
  /// Ends the bar's line.
  void finish();
  /// A Reporter whose progress goes to this bar.
  Reporter reporter(const std::atomic<bool>* cancel = nullptr);

  /// Whether standard error is a terminal.
  static bool stderr_is_tty();

 private:
  std::ostream& err_;
  std::string unit_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
  /// When each unit in progress ("point 3 train") first reported.
  std::map<std::string, std::chrono::steady_clock::time_point> part_starts_;
  std::string part_text_;
};

}  // namespace mxlab::cli
