// `mxlab gradients`: how far each recipe's training gradient is from FP32's on a trained model's weights, next to
// the FP32 gradient's own batch-sampling noise (docs/training.md, "Why the formats do not separate").
#include "cli/cli.hpp"
#include "cli/interrupt.hpp"
#include "cli/progress_bar.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/train/direct_cast.hpp"
#include "mxlab/train/run_record.hpp"

namespace mxlab::cli {

int cmd_gradients(const std::vector<std::string>& argv, Io io) {
  auto specs = table_output_options();
  specs.push_back({"recipes", true, "R,R,...", "recipes to compare with FP32 (names or recipe files, as mxlab train --recipe)"});
  specs.push_back({"batches", true, "N", "training batches to sum over (default 20)"});
  specs.push_back({"batch", true, "B", "batch size of the compared gradients, even (default: the run's)"});
  specs.push_back({"all", false, "", "a row per parameter tensor (default: only the whole model and the GEMM weights)"});
  specs.push_back({"data-dir", true, "DIR", "data folder (default: the training run's, else $MXLAB_DATA_DIR or ~/.local/share/mxlab)"});
  specs.push_back({"threads", true, "N", "threads (default 1); results do not depend on it"});
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "gradients", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab gradients CHECKPOINT --recipes R,R,... [--batches N] [--batch B] [--all] [--data-dir DIR]\n"
              "                       [--threads N] [--csv|--json|--md] [--out FILE]\n\n"
              "On the model of CHECKPOINT (a folder of mxlab train with a checkpoint, or its checkpoint.bin) and the N\n"
              "training batches that follow it, computes the FP32 gradient of each batch, the gradient each recipe's\n"
              "step computes (every GEMM operand quantized as in training, loss scaling undone), and the FP32\n"
              "gradients of the batch's two halves. Per recipe and parameter tensor: rel_error = |g_r - g| / |g|,\n"
              "the cosine of g_r and g, and batch_noise = |g_1 - g_2| / (2 |g|), the relative distance of a batch's\n"
              "gradient from the expected gradient (squares summed over the batches before the ratios). A recipe\n"
              "whose rel_error stays far below batch_noise changes the update less than the choice of batch does.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (args->positional.size() != 1) return bad_input(io, "gradients", "expected one checkpoint (a run folder or its checkpoint.bin)");
  if (!args->value("recipes")) return bad_input(io, "gradients", "option '--recipes' is required");
  auto batches = args->integer("batches", 1, 100000, 20);
  if (!batches) return bad_input(io, "gradients", batches.error().message);
  auto threads = args->integer("threads", 1, 1024, 1);
  if (!threads) return bad_input(io, "gradients", threads.error().message);
  std::vector<train::Recipe> recipes;
  for (const auto& name : split_trimmed(*args->value("recipes"))) {
    auto r = train::load_recipe(name);
    if (!r) return bad_input(io, "gradients", "option '--recipes': " + r.error().message);
    recipes.push_back(std::move(*r));
  }
  auto model = train::load_checkpoint_model(args->positional[0], args->value("data-dir"), static_cast<unsigned>(*threads));
  if (!model) return bad_input(io, "gradients", model.error().message);
  train::TrainOptions& o = model->options;
  const train::TrainData* data = &model->data;
  auto batch = args->integer("batch", 2, 1 << 20, o.batch);
  if (!batch) return bad_input(io, "gradients", batch.error().message);
  if (*batch % 2 != 0)
    return bad_input(io, "gradients", (args->value("batch") ? "option '--batch': " : args->positional[0] + ": the run's ") +
                                          "batch size " + std::to_string(*batch) + " is odd; its halves estimate the noise");
  auto done = train::check_resume_state(*data, o);
  if (!done) return bad_input(io, "gradients", args->positional[0] + ": " + done.error().message);
  o.batch = *batch;  // after the state is checked: the batches follow the state's data position at any size
  InterruptGuard guard;
  ProgressBar bar(io.err, "batch passes", ProgressBar::stderr_is_tty());
  auto rows = train::gradient_fidelity(*data, o, recipes, *batches, bar.reporter(InterruptGuard::flag()));
  bar.finish();
  if (!rows) {
    if (rows.error().message == ops::kCancelled) {
      io.err << "mxlab gradients: interrupted; nothing written\n";
      return kExitInterrupted;
    }
    io.err << "mxlab gradients: " << rows.error().message << "\n";
    return kExitFailure;
  }
  Table t;
  for (const char* c : {"recipe", "param"}) t.add_column(c);
  for (const char* c : {"fp32_norm", "rel_error", "cosine", "batch_noise", "error_to_noise"}) t.add_column(c, true);
  const bool all = args->flag("all");
  for (const auto& r : *rows) {
    // Without --all: the whole model and the weights of the GEMM layers (biases and norm gains left out).
    if (!all && r.param != "(all)" && !r.weight) continue;
    t.rows.push_back({r.recipe, r.param, shortest_decimal(r.fp32_norm), shortest_decimal(r.rel_error),
                      shortest_decimal(r.cosine), shortest_decimal(r.batch_noise),
                      shortest_decimal(r.batch_noise > 0 ? r.rel_error / r.batch_noise : 0.0)});
  }
  Provenance prov = build_provenance();
  prov.simd_target = active_simd_target();
  prov.inputs.emplace_back("checkpoint", args->positional[0]);
  prov.inputs.emplace_back("checkpoint_step", std::to_string(*done));
  prov.inputs.emplace_back("batches", std::to_string(*batches));
  train::add_run_inputs(prov, *data, o);
  return emit_table(io, "gradients", *args, t, prov,
                    {{}, std::string(o.model.kind.name()) + " on " + data->name + ", checkpoint after step " + std::to_string(*done) +
                             " of " + std::to_string(o.steps) + "; " + std::to_string(*batches) + " batches of " +
                             std::to_string(o.batch)});
}

}  // namespace mxlab::cli
