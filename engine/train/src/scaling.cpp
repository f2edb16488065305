// Per-tensor delayed scaling: the amax history and scale update of Transformer Engine's DelayedScaling.
#include "mxlab/train/scaling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "mxlab/core/threads.hpp"
#include "mxlab/kernels/scale_values.hpp"

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
  // scale_inv; the amax ignores NaN, as fmax does.
  const float scale = history.scale(), limit = history.fp8_max();
  if (q.scaled_native(columns)) {
    // An element cast's values do not depend on where an element lies: the kernels' one pass in chunks.
    auto st = q.run_scaled(x, scale, history.scale_inv(), limit, out, run);
    if (!st) return st.error();
    if (record) history.record(st->amax);
    if (amax != nullptr) *amax = st->amax;
    return st->above;
  }
  // Elsewhere: one pass over x for the amax, the scaled values and the saturations, in parts of at least kPart
  // elements over the run's threads; the element cast of the scaled values; the result times scale_inv.
  constexpr std::size_t kPart = std::size_t{1} << 16;
  thread_local std::vector<float> buffer;
  const std::size_t n = x.size();
  buffer.resize(n);
  const std::span<float> scaled(buffer);  // the caller's buffer (a worker's thread_local would be its own)
  const auto parts = static_cast<unsigned>(
      std::clamp<std::size_t>(n / kPart, 1, resolve_threads(static_cast<unsigned>(run.threads))));
  std::vector<ScaleStats> part(parts);
  auto range = [&](unsigned t) { return std::pair{n * t / parts, n * (t + 1) / parts}; };
  run_parts(parts, [&](unsigned t) {
    const auto [begin, end] = range(t);
    part[t] = scale_values(x.subspan(begin, end - begin), scale, limit, scaled.subspan(begin, end - begin));
  });
  auto r = columns ? q.run_columns(scaled, rows, cols, out, run) : q.run(scaled, {rows, cols}, out, run);
  if (!r) return r.error();
  const float inv = history.scale_inv();
  run_parts(parts, [&](unsigned t) {
    const auto [begin, end] = range(t);
    for (std::size_t i = begin; i < end; ++i) out[i] *= inv;
  });
  float largest = 0.0F;
  std::int64_t saturated = 0;
  for (const auto& p : part) largest = std::max(largest, p.amax), saturated += p.above;
  if (record) history.record(largest);
  if (amax != nullptr) *amax = largest;
  return saturated;
}

}  // namespace mxlab::train
