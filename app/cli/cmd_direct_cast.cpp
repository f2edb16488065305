// `mxlab direct-cast`: a trained model (a checkpoint of mxlab train --keep-checkpoint) evaluated with its GEMM
// weights, and optionally activations, cast to each format, next to FP32 (docs/training.md).
#include "cli/cli.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/train/direct_cast.hpp"
#include "mxlab/train/run_record.hpp"

namespace mxlab::cli {
int cmd_direct_cast(const std::vector<std::string>& argv, Io io) {
  auto specs = table_output_options();
  specs.push_back({"formats", true, "F,F,...", "formats to cast to (block formats, fp16, ...); FP32 is always the first row"});
  specs.push_back({"cast", true, "C,C", "weights (default), weights+activations, or both, comma-separated"});
  specs.push_back({"data-dir", true, "DIR", "data folder (default: the training run's, else $MXLAB_DATA_DIR or ~/.local/share/mxlab)"});
  specs.push_back({"threads", true, "N", "quantization threads (default 1); results do not depend on it"});
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "direct-cast", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab direct-cast CHECKPOINT --formats F,F,... [--cast weights,weights+activations]\n"
              "                         [--data-dir DIR] [--threads N] [--csv|--json|--md] [--out FILE]\n\n"
              "Evaluates the model of CHECKPOINT (a folder of mxlab train --keep-checkpoint, or its checkpoint.bin)\n"
              "in FP32 and with every GEMM's weights (and, with weights+activations, its activations) cast to each\n"
              "format, on the whole test split (images) or validation text (the transformer). One row per format\n"
              "and cast: the loss, the accuracy or bits per character, and its difference from FP32.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (args->positional.size() != 1) return bad_input(io, "direct-cast", "expected one checkpoint (a run folder or its checkpoint.bin)");
  if (!args->value("formats")) return bad_input(io, "direct-cast", "option '--formats' is required");
  const auto formats = split_trimmed(*args->value("formats"));
  const auto casts = split_trimmed(args->value("cast").value_or("weights"));
  auto threads = args->integer("threads", 1, 1024, 1);
  if (!threads) return bad_input(io, "direct-cast", threads.error().message);
  // Every format and cast is checked before the checkpoint or the data are read.
  std::vector<std::pair<std::string, train::CastOperands>> points;
  for (const auto& c : casts) {
    auto operands = train::parse_cast_operands(c);
    if (!operands) return bad_input(io, "direct-cast", "option '--cast': " + operands.error().message);
    for (const auto& f : formats) {
      auto r = train::cast_recipe(f, *operands, "");
      if (!r) return bad_input(io, "direct-cast", "option '--formats': " + r.error().message);
      if (train::role_format(f).value()) points.emplace_back(f, *operands);
    }
  }
  auto model = train::load_checkpoint_model(args->positional[0], args->value("data-dir"), static_cast<unsigned>(*threads));
  if (!model) return bad_input(io, "direct-cast", model.error().message);
  const train::TrainOptions& o = model->options;
  const train::TrainData* data = &model->data;
  std::vector<train::Recipe> recipes;
  recipes.push_back(*train::cast_recipe("fp32", train::CastOperands::Weights, o.recipe.nongemm));
  for (const auto& [f, operands] : points) recipes.push_back(*train::cast_recipe(f, operands, o.recipe.nongemm));
  auto evals = train::evaluate_casts(*data, o, recipes);
  if (!evals) {
    io.err << "mxlab direct-cast: " << evals.error().message << "\n";
    return kExitFailure;
  }
  const bool text = data->is_text;
  const std::string split = text || data->test.count() == 0 ? "val" : "test";
  Table t;
  for (const char* c : {"format", "cast"}) t.add_column(c);
  for (const std::string& c : {split + "_loss", split + (text ? "_bpc" : "_accuracy"), std::string("delta"), std::string("examples")})
    t.add_column(c, true);
  auto score = [&](const train::EvalMetrics& m) { return text ? m.bpc : m.accuracy; };
  const double fp32 = score((*evals)[0]);
  for (std::size_t i = 0; i < evals->size(); ++i) {
    const auto& m = (*evals)[i];
    t.rows.push_back({i == 0 ? "fp32" : points[i - 1].first,
                      i == 0 ? "none" : std::string(train::cast_operands_name(points[i - 1].second)),
                      shortest_decimal(m.loss), shortest_decimal(score(m)), shortest_decimal(score(m) - fp32),
                      std::to_string(m.examples)});
  }
  Provenance prov = build_provenance();
  prov.simd_target = active_simd_target();
  prov.inputs.emplace_back("checkpoint", args->positional[0]);
  train::add_run_inputs(prov, *data, o);
  return emit_table(io, "direct-cast", *args, t, prov,
                    {{}, std::string(o.model.kind.name()) + " on " + data->name + " (" + split + " split)"});
}

}  // namespace mxlab::cli
