// Per-tensor delayed scaling: the amax history and scale update of Transformer Engine's DelayedScaling.
#include "mxlab/train/scaling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

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
                                  const ops::Run& run, bool columns) {
  // The input times the tensor's scale in float32, cast with saturation; the GEMM sees the cast value times
  // scale_inv.
  thread_local std::vector<float> scaled;
  scaled.resize(x.size());
  const float scale = history.scale(), limit = history.fp8_max();
  // Three simple loops that vectorize: the amax (NaN ignored, as fmax does) over kParts interleaved partial
  // maxima (a maximum does not depend on the order it is taken in), the scaled values, the saturations.
  constexpr std::size_t kParts = 8;
  const std::size_t n = x.size();
  float part[kParts] = {};
  std::size_t i = 0;
  for (; i + kParts <= n; i += kParts)
    for (std::size_t j = 0; j < kParts; ++j) {
      const float a = std::fabs(x[i + j]);
      part[j] = part[j] < a ? a : part[j];
    }
  for (; i < n; ++i) part[0] = std::max(part[0], std::fabs(x[i]));
  const float amax = *std::max_element(part, part + kParts);
  std::int64_t saturated = 0;
  for (std::size_t k = 0; k < n; ++k) scaled[k] = x[k] * scale;
  for (std::size_t k = 0; k < n; ++k) saturated += std::fabs(scaled[k]) > limit ? 1 : 0;
  auto r = columns ? q.run_columns(scaled, rows, cols, out, run) : q.run(scaled, {rows, cols}, out, run);
  if (!r) return r.error();
  const float inv = history.scale_inv();
  for (float& v : out.first(n)) v *= inv;
  if (record) history.record(amax);
  return saturated;
}

}  // namespace mxlab::train
