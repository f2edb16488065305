// Per-tensor delayed scaling state: the amax history of one GEMM operand and the scale its next cast uses
// (Transformer Engine's DelayedScaling recipe, transformer_engine/common/recipe/delayed_scaling.cu).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "mxlab/ops/ops.hpp"
#include "mxlab/train/recipe.hpp"

namespace mxlab::train {

/// One tensor's delayed scaling. During a step every cast uses scale() and records the amax of its input;
/// update() at the end of the step pushes the step's amax into the history and computes the next scale:
///   amax_used = max of the last history_len step amaxes (Algo::Max) or the step's own (Algo::MostRecent)
///   scale     = fl32(fl32(fp8_max * 2^-margin) / amax_used)   if amax_used is finite and > 0, else unchanged
///   scale     = FLT_MAX                                         if that quotient overflows float32
/// The first step, with an empty history, uses scale 1 (Transformer Engine initialises its scales to 1).
class AmaxHistory {
 public:
  /// fp8_max: the largest finite value of the operand's element format.
  AmaxHistory(const DelayedScaling& config, double fp8_max);

  /// The scale the casts of the current step multiply by, and its inverse fl32(1 / scale).
  float scale() const { return scale_; }
  float scale_inv() const { return scale_inv_; }
  /// Records a cast's input amax (the largest |x|, NaN ignored) for the current step.
  void record(float amax);
  /// Ends the step: the step's amax enters the history (the oldest leaves) and the scale is recomputed.
  void update();
  /// The largest finite value of the element format.
  float fp8_max() const { return fp8_max_; }

  /// The history in Transformer Engine's layout (slot 0: the current step's amax until update(); slots
  /// history_len-1 down to 1: the previous steps' amaxes, most recent first); for checkpoints.
  const std::vector<float>& history() const { return history_; }
  /// Restores a checkpointed state; false if the history length does not fit the configuration.
  bool restore(const std::vector<float>& history, float scale);

 private:
  DelayedScaling config_;
  float fp8_max_;
  float scaled_max_;
  std::vector<float> history_;
  float scale_ = 1.0F;
  float scale_inv_ = 1.0F;
};

/// The format an operand of format f is cast with under the recipe's delayed scaling, or nothing when it has no
/// delayed scale: delayed scaling on and a plain element format without block scales give one, whose element
/// cast saturates (Transformer Engine's FP8 conversions are satfinite).
std::optional<BlockFormat> delayed_format(const Recipe& r, const BlockFormat& f);

/// Transformer Engine's FP8 cast of one operand (rows x cols, row-major) under its delayed scale, as mxlab train
/// casts it: fl32(x * scale) through the saturating element quantizer q (along the rows, or down the columns with
/// `columns`), the result times fl32(1 / scale) into out; with `record`, the input's amax (NaN ignored) is
/// recorded in the history (training steps; evaluation records none), and given in *amax when amax is not null.
/// Returns the inputs whose scaled magnitude exceeds the format's largest value (clipped by the cast).
Result<std::int64_t> delayed_cast(const ops::FakeQuantizer& q, std::span<const float> x, std::int64_t rows,
                                  std::int64_t cols, std::span<float> out, AmaxHistory& history, bool record,
                                  const ops::Run& run, bool columns = false, float* amax = nullptr);

}  // namespace mxlab::train
