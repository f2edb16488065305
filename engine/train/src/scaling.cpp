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

}  // namespace mxlab::train
