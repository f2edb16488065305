// Per-tensor delayed scaling: the amax history and scale update of Transformer Engine's DelayedScaling.
#include "mxlab/train/scaling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "mxlab/core/threads.hpp"

namespace mxlab::train {

AmaxHistory::AmaxHistory(const DelayedScaling& config, double fp8_max)
    : config_(config),
      fp8_max_(static_cast<float>(fp8_max)),
      // TE: scaled_max = fp8_max * 2^-margin, in float32.
      scaled_max_(static_cast<float>(fp8_max) * std::ldexp(1.0F, -config.margin)),
      history_(static_cast<std::size_t>(std::max<std::int64_t>(1, config.history_len)), 0.0F) {}

void AmaxHistory::record(float amax) { history_[0] = std::fmax(history_[0], amax); }

void AmaxHistory::update() {
  // The roll of TE's amax_and_scale_update kernel: slot i takes slot i+1, the last slot takes the step's
  // amax (slot 0), slot 0 starts the next step at zero (the oldest amax, slot 1, leaves). The max covers
  // every slot before the roll: the step's amax and the history_len - 1 before it.
  const float last = history_[0];
  float amax = 0.0F;
  for (float a : history_) amax = std::fmax(amax, a);
  if (config_.algo == DelayedScaling::Algo::MostRecent) amax = last;
  std::rotate(history_.begin(), history_.begin() + 1, history_.end());
  history_[0] = 0.0F;
  if (std::isfinite(amax) && amax > 0.0F) {
    scale_ = scaled_max_ / amax;
    if (std::isinf(scale_)) scale_ = std::numeric_limits<float>::max();
  }
  scale_inv_ = 1.0F / scale_;
}

bool AmaxHistory::restore(const std::vector<float>& history, float scale) {
  if (history.size() != history_.size() || !(scale > 0.0F) || !std::isfinite(scale)) return false;
  history_ = history;
  scale_ = scale;
  scale_inv_ = 1.0F / scale_;
  return true;
}

std::optional<BlockFormat> delayed_format(const Recipe& r, const BlockFormat& f) {
  if (!r.delayed.enabled || f.layout.scale) return std::nullopt;
  BlockFormat g = f;
  g.options.element.overflow = Overflow::Saturate;
  return g;
}

Result<std::int64_t> delayed_cast(const ops::FakeQuantizer& q, std::span<const float> x, std::int64_t rows,
                                  std::int64_t cols, std::span<float> out, AmaxHistory& history, bool record,
                                  const ops::Run& run, bool columns, float* amax) {
  // The input times the tensor's scale in float32, cast with saturation; the GEMM sees the cast value times
  // scale_inv. One pass over x gives the amax (NaN ignored, as fmax does), the scaled values and the saturations,
  // in parts of at least kPart elements over the run's threads: a maximum and a count do not depend on the order
  // they are taken in, so neither does the result.
  constexpr std::size_t kPart = std::size_t{1} << 16, kLanes = 8;
  thread_local std::vector<float> buffer;
  const std::size_t n = x.size();
  buffer.resize(n);
  const std::span<float> scaled(buffer);  // the caller's buffer (a worker's thread_local would be its own)
  const float scale = history.scale(), limit = history.fp8_max();
  const auto parts = static_cast<unsigned>(
      std::clamp<std::size_t>(n / kPart, 1, resolve_threads(static_cast<unsigned>(run.threads))));
  std::vector<float> part_amax(parts, 0.0F);
  std::vector<std::int64_t> part_saturated(parts, 0);
  auto range = [&](unsigned t) { return std::pair{n * t / parts, n * (t + 1) / parts}; };
  run_parts(parts, [&](unsigned t) {
    const auto [begin, end] = range(t);
    float lane[kLanes] = {};  // interleaved partial maxima: a loop that vectorizes
    std::int64_t over = 0;
    std::size_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (std::size_t j = 0; j < kLanes; ++j) {
        const float v = x[i + j], a = std::fabs(v), s = v * scale;
        lane[j] = lane[j] < a ? a : lane[j];
        scaled[i + j] = s;
        over += std::fabs(s) > limit ? 1 : 0;
      }
    for (; i < end; ++i) {
      const float v = x[i], s = v * scale;
      lane[0] = std::max(lane[0], std::fabs(v));
      scaled[i] = s;
      over += std::fabs(s) > limit ? 1 : 0;
    }
    part_amax[t] = *std::max_element(lane, lane + kLanes);
    part_saturated[t] = over;
  });
  auto r = columns ? q.run_columns(scaled, rows, cols, out, run) : q.run(scaled, {rows, cols}, out, run);
  if (!r) return r.error();
  const float inv = history.scale_inv();
  run_parts(parts, [&](unsigned t) {
    const auto [begin, end] = range(t);
    for (std::size_t i = begin; i < end; ++i) out[i] *= inv;
  });
  const float largest = *std::max_element(part_amax.begin(), part_amax.end());
  if (record) history.record(largest);
  if (amax != nullptr) *amax = largest;
  std::int64_t saturated = 0;
  for (const std::int64_t c : part_saturated) saturated += c;
  return saturated;
}

}  // namespace mxlab::train
