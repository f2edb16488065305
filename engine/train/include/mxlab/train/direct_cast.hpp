// Direct-cast inference of a trained model: its checkpoint read back, and the inference recipes that cast its
// weights (and, as an option, its activations) to a format while the trainer evaluates it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mxlab/core/error.hpp"
#include "mxlab/train/recipe.hpp"
#include "mxlab/train/trainer.hpp"

namespace mxlab::train {

/// A trained model from a checkpoint file of `mxlab train` (DIR/checkpoint.bin; `--keep-checkpoint` keeps the one
/// after the last step): the options of the run that wrote it, with options.resume_state holding its state.
struct ModelCheckpoint {
  TrainOptions options;
  std::string data;      ///< the run's --data
  std::string data_dir;  ///< the run's --data-dir (empty: the default data folder)
};

/// Reads a checkpoint (a file, or a run folder holding checkpoint.bin): its checksum is checked, then the run's
/// settings (model, sizes, data, seed, batch, optimizer, steps, recipe) are read back. Errors name the file.
Result<ModelCheckpoint> read_model_checkpoint(const std::string& path);

/// A checkpoint's model with the data its run trained on, for the jobs that study a trained model (direct casts,
/// gradients): read_model_checkpoint, then load_train_data with the run's data, its data folder (`data_dir`
/// instead, when given) and its seed, checked to fit the model (check_data_fit); options.threads = `threads`.
/// Errors name the checkpoint, or begin "the checkpoint's data: ".
struct CheckpointModel {
  TrainOptions options;
  TrainData data;
};
Result<CheckpointModel> load_checkpoint_model(const std::string& path, const std::optional<std::string>& data_dir,
                                              unsigned threads);

/// What a direct cast quantizes.
enum class CastOperands : std::uint8_t { Weights, WeightsActivations };

/// "weights" or "weights+activations".
std::string_view cast_operands_name(CastOperands c);
/// The names cast_operands_name gives; errors list them.
Result<CastOperands> parse_cast_operands(std::string_view text);

/// The inference recipe of a direct cast: `format` (a block format, an element format such as fp16, or fp32 for
/// none) for the weights of every GEMM (role w) and, with activations, its activations (role a: the layer inputs,
/// attention's Q, K, P and V); nothing else quantized; non-GEMM outputs rounded to `nongemm` (the training
/// recipe's). Errors name the format.
Result<Recipe> cast_recipe(const std::string& format, CastOperands operands, const std::string& nongemm);

}  // namespace mxlab::train
