// Training-loop simulation with quantized GEMMs: models on Eigen whose every GEMM operand (weights,
// activations, output gradients; forward and backward) is quantized through the engine's entry points with its
// own format, recipes as data, loss scaling, optimizers, per-step metrics (docs/training.md). Eigen stays in
// this module's sources.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/progress.hpp"

namespace mxlab::train {

/// The operands of a GEMM a recipe quantizes: forward Y = X W (a = X, w = W); backward dX = dY W^T
/// (g = dY, w_bp = W) and dW = X^T dY (a_bp = X, g = dY).
inline constexpr const char* kRoles[] = {"w", "a", "g", "w_bp", "a_bp"};

/// How a role's operand is cast: "" or "fp32" (kept), a block format ("mxfp8_e4m3", "nvfp4", "e4m3:float32" for a
/// per-tensor current scale) or an element format cast without scale ("fp16", "bf16", "e4m3", "e5m2").
using RoleSpecs = std::map<std::string, std::string>;

struct LossScaling {
  enum class Kind { None, Static, Dynamic } kind = Kind::None;
  double initial = 65536;     ///< the scale the loss is multiplied by before backward
  int growth_interval = 200;  ///< dynamic: steps without overflow before the scale doubles
  double backoff = 0.5;       ///< dynamic: factor after an overflow (the step is skipped)
  double growth = 2;
};

/// A recipe: formats per role, per-layer overrides by layer-name glob, loss scaling.
struct Recipe {
  std::string name;
  RoleSpecs roles;
  std::vector<std::pair<std::string, RoleSpecs>> overrides;  ///< (layer pattern, roles) applied in order
  LossScaling loss_scaling;
  /// The roles of a layer: the defaults with every matching override on top.
  RoleSpecs for_layer(const std::string& layer) const;
};

/// Named recipes: fp32, fp16, fp16-static, fp16-dynamic, bf16, fp8 (E4M3 forward, E5M2 backward), fp8-current
/// (per-tensor current scaling), mxfp8, mxfp6, mxfp4, mxint8, mxsf, boost_e2m5, nvfp4.
std::vector<std::string> recipe_names();
Result<Recipe> recipe(const std::string& name);
/// Applies "ROLE=SPEC" or "PATTERN:ROLE=SPEC" (e.g. "a=mxfp4", "fc3:w=mxfp8_e4m3"); the error names the text.
std::optional<Error> apply_setting(Recipe& r, const std::string& setting);

struct Config {
  std::string model = "mlp";          ///< mlp, cnn
  std::string data = "fashion-mnist"; ///< fashion-mnist, digits (installed with mxlab data fetch)
  std::string data_dir;               ///< "" = the default data folder
  Recipe recipe;
  std::string optimizer = "adamw";    ///< sgd (with momentum), adamw
  double lr = 1e-3;
  double momentum = 0.9;
  double weight_decay = 0.0;
  int warmup = 0;                     ///< steps of linear warm-up; then cosine decay to 0 over the rest
  bool cosine = true;
  int steps = 1000;
  int batch = 64;
  std::uint64_t seed = 0;
  unsigned threads = 1;               ///< for the quantization kernels; results never depend on it
  int eval_every = 0;                 ///< test accuracy every N steps (0: at the end only)
  double validation = 0.1;            ///< fraction of the training set held out for validation
  int hidden = 256;                   ///< MLP width
};

/// One quantized operand's figures over a step (all GEMMs of the layer in that role).
struct RoleMetrics {
  std::string layer, role;
  std::int64_t nonzero = 0, underflows = 0, count = 0;
  double sse = 0;
  double underflow_ratio() const { return nonzero ? static_cast<double>(underflows) / static_cast<double>(nonzero) : 0; }
  double mse() const { return count ? sse / static_cast<double>(count) : 0; }
};

struct StepMetrics {
  int step = 0;
  double loss = 0;          ///< mean cross-entropy of the batch (unscaled)
  double accuracy = 0;      ///< of the batch
  double lr = 0;
  double loss_scale = 1;
  bool skipped = false;     ///< an overflow in the scaled gradients: no update
  std::int64_t skipped_total = 0;
  double test_accuracy = -1;  ///< when evaluated at this step
  double val_loss = -1;
  std::vector<RoleMetrics> roles;
};

struct TrainResult {
  std::vector<StepMetrics> steps;
  double test_accuracy = 0;
  double val_loss = 0;
  double val_accuracy = 0;
  double seconds = 0;
  std::string engine;  ///< the engine that quantized the operands
};

/// Trains; `on_step` sees every step's metrics as it finishes; the reporter gets steps done and can cancel.
Result<TrainResult> run(const Config& c, const Reporter& reporter = {}, const std::function<void(const StepMetrics&)>& on_step = {});

/// One training step's wall time for a model and recipe on random data (mxlab bench), with the FP32 GEMM rate.
struct StepTiming {
  double seconds_per_step = 0;
  double gemm_gflops = 0;  ///< FP32 GEMM rate of Eigen here, for the largest GEMM of the model
};
Result<StepTiming> time_steps(const std::string& model, const Recipe& recipe, int steps, int batch, unsigned threads);

/// Finite-difference gradient check of every layer type (FP32): the largest relative difference between the
/// backward pass and central differences, per layer kind.
std::map<std::string, double> gradient_check(std::uint64_t seed);

/// Gradient underflow of FP16 training on synthetic data, without and with dynamic loss scaling (tests, docs).
struct UnderflowStudy {
  double without_scaling = 0, with_dynamic_scaling = 0;
};
Result<UnderflowStudy> fp16_underflow_study(std::uint64_t seed);

}  // namespace mxlab::train
