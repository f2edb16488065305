// The training loop: a model, a data set and a recipe of formats per tensor role; FP32 master weights, loss
// scaling, SGD with momentum or AdamW, warm-up and cosine decay, per-step metrics and evaluation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/progress.hpp"
#include "mxlab/train/data.hpp"
#include "mxlab/train/model_config.hpp"
#include "mxlab/train/recipe.hpp"

namespace mxlab::train {

/// Optimizer and learning-rate schedule.
struct OptimizerConfig {
  std::string kind = "adamw";  ///< adamw (Loshchilov and Hutter 2019) or sgd (heavy-ball momentum)
  double lr = 1e-3;
  double momentum = 0.9;       ///< sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  ///< adamw
  double weight_decay = 0.0;   ///< decoupled (adamw) or added to the gradient (sgd); weights only
  std::int64_t warmup_steps = 0;  ///< linear warm-up from lr / warmup_steps to lr
  bool cosine = true;          ///< cosine decay from lr to min_lr_ratio * lr over the steps after warm-up
  double min_lr_ratio = 0.0;
};

/// Everything one training run needs besides the data.
struct TrainOptions {
  ModelConfig model;
  OptimizerConfig optimizer;
  Recipe recipe;
  std::int64_t steps = 1000;
  std::int64_t batch = 64;
  std::uint64_t seed = 0;            ///< initial weights, batch order
  unsigned threads = 1;              ///< GEMM, convolution, pooling, quantization threads; never changes a result
  std::int64_t metrics_every = 1;    ///< operand metrics on every Nth step (0: never)
  /// Validation every Nth step (0: only at the end; -1: every steps/10, at least every step), the same in
  /// mxlab train, experiments and the GUI.
  std::int64_t eval_every = -1;
  bool final_eval = true;            ///< validation and test after the last step
  bool eval_on_cancel = true;        ///< final_eval: a cancelled run still validates (false: a cancel returns at once)
  std::int64_t eval_limit = 1000;    ///< periodic validation on the first this many examples (text: windows); 0 = all;
                                     ///< the final validation and test always use everything
  /// Checkpoints: after every Nth step (0: never), and after the last step done when the run is cancelled,
  /// on_checkpoint receives the number of steps done and the run's whole state (weights, optimizer moments and
  /// step count, loss-scale state, delayed-scaling histories, data order position, losses so far). An error
  /// it returns stops the run with that error.
  std::int64_t checkpoint_every = 0;
  /// Also a checkpoint after the last step (whatever checkpoint_every says): the trained model's state, for
  /// evaluate_casts and `mxlab train --keep-checkpoint`.
  bool checkpoint_last = false;
  std::function<std::optional<Error>(std::int64_t steps_done, const std::string& state)> on_checkpoint;
  /// A state on_checkpoint received: the run continues from it bit-identically (empty: from step 0). The
  /// options and data must be the run's that wrote it; a state that does not fit the model is an error.
  std::string resume_state;
};

/// Counts of one quantized GEMM operand over a step.
struct OperandMetric {
  std::string layer;
  Role role = Role::W;
  std::int64_t count = 0;
  std::int64_t nonzero = 0;
  std::int64_t underflow = 0;  ///< nonzero values that quantized to zero
  double mse = 0;              ///< mean squared quantization error
  bool delayed = false;        ///< cast with a delayed per-tensor scale (Recipe::delayed)
  std::int64_t saturated = 0;  ///< delayed: values clipped because their scaled magnitude exceeded the format
  double scale = 0;            ///< delayed: the scale of the step
  double underflow_ratio() const { return nonzero > 0 ? static_cast<double>(underflow) / static_cast<double>(nonzero) : 0.0; }
  double saturation_ratio() const { return count > 0 ? static_cast<double>(saturated) / static_cast<double>(count) : 0.0; }
};

/// Validation (or test) figures.
struct EvalMetrics {
  double loss = 0;
  double accuracy = 0;  ///< images
  double bpc = 0;       ///< text: loss / ln 2
  std::int64_t examples = 0;
};

/// One step's figures.
struct StepMetrics {
  std::int64_t step = 0;      ///< 1-based
  std::int64_t steps = 0;
  double loss = 0;            ///< training batch loss (nats), before the update
  double accuracy = 0;        ///< images: batch accuracy
  double bpc = 0;             ///< text: loss / ln 2
  double lr = 0;
  double loss_scale = 1;
  bool skipped = false;       ///< the update was skipped (non-finite gradients)
  std::int64_t skipped_total = 0;
  double seconds = 0;         ///< since the start of training
  std::optional<EvalMetrics> validation;  ///< on evaluation steps
  std::vector<OperandMetric> operands;    ///< on metric steps: every quantized operand
};

/// A finished (or cancelled) run.
struct TrainResult {
  std::vector<double> losses;     ///< per step (a resumed run: from step 1, the checkpoint's included)
  std::int64_t steps_done = 0;
  std::int64_t skipped = 0;
  bool cancelled = false;
  std::int64_t parameters = 0;
  double seconds = 0;             ///< training steps only (no evaluation; a resumed run adds the checkpoint's)
  std::optional<EvalMetrics> validation, test;
  double final_loss_scale = 1;
};

/// Trains a model on the data under the options; calls on_step after every step and reports progress
/// ("train", steps) to the reporter, stopping early (cancelled = true) when it asks. Deterministic: the same
/// options and data give bit-identical losses for any thread count.
Result<TrainResult> run_training(const TrainData& data, const TrainOptions& options,
                          const std::function<void(const StepMetrics&)>& on_step = {}, const Reporter& reporter = {});

/// The GEMM layer names of a model on this data (what recipe overrides match against).
Result<std::vector<std::string>> gemm_layers(const TrainData& data, const ModelConfig& model);

/// What a run asks of memory, from its options and the data's shapes alone (nothing is allocated): an upper
/// estimate, for refusing sizes that cannot fit before any allocation.
struct MemoryEstimate {
  std::uint64_t parameters = 0;   ///< trainable values
  std::uint64_t tensors = 0;      ///< parameter tensors
  double weight_bytes = 0;        ///< FP32 master weights, their gradients, quantized copies and gradient temporaries
  double optimizer_bytes = 0;     ///< optimizer moments (AdamW two per weight, SGD one)
  double activation_bytes = 0;    ///< one step's saved activations, quantized operand copies and temporaries (or an
                                  ///< evaluation chunk's, the larger)
  double history_bytes = 0;       ///< the per-step losses kept for the whole run
  /// The largest checkpoint state (TrainOptions::on_checkpoint) the run can write: after its last step.
  std::uint64_t max_state_bytes = 0;
  double checkpoint_bytes = 0;    ///< with checkpoints: the largest state and the caller's copy of it in a file
  double record_bytes = 0;        ///< the caller's own per-step records (its metrics); 0 here
  double total() const {
    return weight_bytes + optimizer_bytes + activation_bytes + history_bytes + checkpoint_bytes + record_bytes;
  }
};

/// The estimate for a run (the recipe decides the delayed-scaling histories of the state).
Result<MemoryEstimate> estimate_memory(const TrainData& data, const TrainOptions& options);

/// An error "WHAT: training needs about 61.0 GB (parameters and gradients ..., ...), more than the memory budget
/// of ..." when the estimate's total exceeds the memory budget (mxlab/core/memory.hpp), else nothing.
std::optional<Error> check_memory_budget(const MemoryEstimate& estimate, const std::string& what);

/// Checks TrainOptions::resume_state against the run without taking a step: the model the options build, the
/// optimizer, the data position and the delayed-scaling histories must all fit. Returns the steps it has done;
/// errors name what does not fit.
Result<std::int64_t> check_resume_state(const TrainData& data, const TrainOptions& options);

/// Evaluates the model of a checkpoint state (TrainOptions::resume_state, read under the options that wrote it:
/// model, sizes, optimizer, steps and recipe) once per recipe of `inference`, each in place of the training recipe:
/// its formats quantize the GEMM operands of the forward pass (w the weights, a the activations) and its nongemm
/// rounds the non-GEMM outputs. Images: the whole test split (the validation split when there is no test split);
/// text: the whole validation text, as the trainer's final evaluation. Reports progress ("cast", recipes done)
/// and stops with ops::kCancelled when the reporter asks.
Result<std::vector<EvalMetrics>> evaluate_casts(const TrainData& data, const TrainOptions& options,
                                                const std::vector<Recipe>& inference, const Reporter& reporter = {});

/// How far the gradient of a recipe's training step is from the FP32 step's on the same weights and batches, set
/// against the FP32 gradient's own sampling noise at that batch size: one row per recipe and parameter tensor,
/// then a row "(all)" for the whole model. Sums run over the batches (b):
///   rel_error   = sqrt(sum_b |g_r - g|^2 / sum_b |g|^2)
///   cosine      = sum_b <g_r, g> / sqrt(sum_b |g_r|^2 * sum_b |g|^2)
///   batch_noise = sqrt(sum_b |g_1 - g_2|^2 / 4 / sum_b |g|^2)
/// where g is the FP32 gradient of the batch, g_r the recipe's (loss scaling undone) and g_1, g_2 the FP32
/// gradients of the batch's two halves: g_1 - g_2 has twice the variance of each half's mean, four times the
/// batch's, so batch_noise estimates the batch gradient's relative distance from the expected gradient.
struct GradientFidelity {
  std::string recipe;
  std::string param;      ///< the parameter tensor ("layer2.1.conv2.weight"), or "(all)"
  bool weight = false;    ///< a GEMM or convolution weight (not a bias or a normalisation gain)
  double fp32_norm = 0;   ///< sqrt(sum_b |g|^2 / batches): the FP32 gradient's norm
  double rel_error = 0;
  double cosine = 0;
  double batch_noise = 0;
};

/// The gradient fidelity of each recipe on the model of a checkpoint state (TrainOptions::resume_state, read
/// under the options that wrote it), over the `batches` training batches that follow it (batch size of the
/// options, even; BatchNorm in training mode, as in a step; nothing is updated). One model is built at a time, so
/// it needs about a training step's memory (refused, as training is, beyond the memory budget). Reports progress
/// ("gradients", batch passes done of batches x (recipes + 1)) and stops with ops::kCancelled when the reporter asks.
Result<std::vector<GradientFidelity>> gradient_fidelity(const TrainData& data, const TrainOptions& options,
                                                        const std::vector<Recipe>& recipes, std::int64_t batches,
                                                        const Reporter& reporter = {});

/// One training step's time: what `mxlab bench` compares between recipes and thread counts.
struct StepTime {
  double seconds = 0;       ///< per step
  double gemm_seconds = 0;  ///< per step, in the float32 GEMMs (OpenBLAS; none under an accumulation model)
  double gemm_flops = 0;    ///< per step, of those GEMMs
};

/// The time per training step (the best of `reps` runs, each timing `steps` steps after two untimed steps that
/// allocate the run's buffers and optimizer state) of the model on seeded random 28x28 images in 10 classes,
/// without operand metrics or evaluation, on `threads` threads.
/// Timing only; the values do not matter.
Result<StepTime> step_time(const ModelConfig& model, const Recipe& recipe, std::int64_t batch, std::int64_t steps,
                           int reps, unsigned threads);

/// Best-of-reps FP32 GEMM throughput in GFLOP/s of an m x k by k x n product on the trainer's GEMM (OpenBLAS's
/// SGEMM in pieces over `threads` threads).
double fp32_gemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int reps, unsigned threads = 1);

/// The SGEMM kernel OpenBLAS picked for this CPU ("Haswell", "SkylakeX", "Cooperlake", ...).
std::string blas_kernel();

}  // namespace mxlab::train
