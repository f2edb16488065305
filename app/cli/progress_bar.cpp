// Progress of long work on standard error.
#include "cli/progress_bar.hpp"

#include <cmath>
#include <cstdio>

#include <unistd.h>

namespace mxlab::cli {

namespace {

std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(std::ostream& err, std::string unit, bool tty)
    : err_(err), unit_(std::move(unit)), tty_(tty), start_(std::chrono::steady_clock::now()), last_(start_) {}

bool ProgressBar::stderr_is_tty() { return ::isatty(2) == 1; }

void ProgressBar::update(std::int64_t done, std::int64_t total) {
  Progress p;
  p.done = done;
  p.total = total;
  update(p);
}

void ProgressBar::update(const Progress& p) {
  const std::int64_t done = p.done, total = p.total;
  const auto now = std::chrono::steady_clock::now();
  if (p.part_total > 0) {
    // Each unit is timed from its own first report: points run side by side (--jobs) report in turn.
    const auto start = part_starts_.try_emplace(p.part, now).first->second;
    if (p.part_done >= p.part_total) part_starts_.erase(p.part);
    const double t = std::chrono::duration<double>(now - start).count();
    const double rate = t > 0 ? static_cast<double>(p.part_done) / t : 0;
    const double eta = rate > 0 ? static_cast<double>(p.part_total - p.part_done) / rate : NAN;
    char text[200];
    std::snprintf(text, sizeof text, "  | %s %lld/%lld  %.1f/s  ETA %s", p.part.c_str(), static_cast<long long>(p.part_done),
                  static_cast<long long>(p.part_total), rate, duration(eta).c_str());
    part_text_ = p.part_done < p.part_total ? text : "";
  } else {
    part_text_.clear();
  }
  const double since_last = std::chrono::duration<double>(now - last_).count();
  const bool last = done >= total;
  if (drawn_ && !last && since_last < (tty_ ? 0.1 : 5.0)) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : NAN;
  char stats[160];
  std::snprintf(stats, sizeof stats, "%lld/%lld %s  %.2f/s  elapsed %s  ETA %s", static_cast<long long>(done),
                static_cast<long long>(total), unit_.c_str(), rate, duration(elapsed).c_str(),
                last ? "0:00" : duration(eta).c_str());
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
    err_ << "\r[" << std::string(static_cast<std::size_t>(filled), '#') << std::string(static_cast<std::size_t>(kWidth - filled), ' ')
         << "] " << stats << part_text_ << "\x1b[K" << std::flush;
  } else {
    err_ << "progress: " << stats << part_text_ << "\n" << std::flush;
  }
  drawn_ = true;
}

void ProgressBar::finish() {
  if (tty_ && drawn_) err_ << "\n" << std::flush;
  drawn_ = false;
}

Reporter ProgressBar::reporter(const std::atomic<bool>* cancel) {
  Reporter r;
  r.on_progress = [this](const Progress& p) { update(p); };
  r.cancel = cancel;
  return r;
}

}  // namespace mxlab::cli
