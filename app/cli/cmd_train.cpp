// `mxlab train`: a training run with quantized GEMMs on real data, streaming per-step metrics to
// DIR/metrics.csv and writing DIR/summary.json (with provenance) and DIR/recipe.txt.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <sstream>
#include <string_view>

#include "cli/cli.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/core/threads.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/train/model_config.hpp"
#include "mxlab/train/run_record.hpp"
#include "mxlab/train/trainer.hpp"

namespace mxlab::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

constexpr const char* kUsageTail =
    " --data fashion-mnist|digits|text:NAME\n"
    "                   --recipe NAME|FILE\n"
    "                   --steps N --out DIR [--seed S] [--batch B] [--lr X] [--threads N] [options]\n\n"
    "Trains a model with every GEMM operand (weights w, activations a, output gradients g; w_bp and a_bp in\n"
    "backward) quantized per the recipe through the engine's fake quantization; master weights, optimizer\n"
    "and every non-GEMM operation stay in FP32. Writes DIR/metrics.csv (one row per step: loss, accuracy or\n"
    "bits per character, lr, loss scale, skipped steps, validation figures on evaluation steps, and per\n"
    "LAYER.ROLE the gradient underflow ratio and quantization MSE of each quantized operand), DIR/summary.json\n"
    "(final validation and test figures, averages of the operand metrics, provenance) and DIR/recipe.txt.\n"
    "A progress line (step, loss, rate, ETA) goes to standard error. Ctrl-C stops after the current step and\n"
    "still writes the files. Results are bit-identical for any --threads.\n"
    "Every --checkpoint-every steps the run's whole state goes to DIR/checkpoint.bin (written to a temporary\n"
    "file, synced, renamed); --resume continues a killed or stopped run from it bit-identically, and its\n"
    "files equal an uninterrupted run's byte for byte (with --no-timing, which leaves out the times).\n\n"
    "recipes: fp32, fp16 (dynamic loss scaling), fp16-static, fp16-noscale, bf16, fp8_current and fp8_delayed\n"
    "(E4M3, gradients E5M2, one scale per tensor from the current amax or an amax history), mxfp8 (E4M3,\n"
    "gradients E5M2), mxfp8_e4m3, mxfp6, mxfp4, mxint8, mxsf, boost_e2m5, nvfp4; a block format for every\n"
    "role (\"mxfp8_e4m3@32x32\": 2-D tiles); or a recipe file (docs/training.md).\n"
    "data: fashion-mnist and digits (mxlab data fetch; an installed Debian package is read in place),\n"
    "text:sherlock, text:tom-sawyer or text:PATH.\n\n";

std::vector<OptionSpec> train_options() {
  return {{"model", true, "KIND",
           train::model_kind_names([](const train::ModelKindTraits& k) { return k.text; }, ", ", " and ") + " (text); " +
               train::model_kind_names([](const train::ModelKindTraits& k) { return !k.text; }, ", ", " and ") + " (images)"},
          {"data", true, "DATA", "fashion-mnist, digits or text:NAME"},
          {"recipe", true, "NAME|FILE", "formats per tensor role and loss scaling"},
          {"steps", true, "N", "training steps"},
          {"out", true, "DIR", "output folder (created)"},
          {"seed", true, "S", "seed of the initial weights, the batches and the split (default 0)"},
          {"batch", true, "B", "batch size (default 64; transformer: sequences)"},
          {"lr", true, "X", "peak learning rate (default 1e-3)"},
          {"threads", true, "N",
           "threads of the GEMMs, convolutions, pooling and quantization (default: every hardware thread); results "
           "do not depend on it"},
          {"nongemm", true, "FORMAT", "round the non-GEMM layers' outputs to FORMAT (bf16); overrides the recipe's"},
          {"optimizer", true, "adamw|sgd", "optimizer (default adamw; sgd uses momentum 0.9)"},
          {"weight-decay", true, "X", "weight decay of the weights (default 0)"},
          {"warmup", true, "N", "linear warm-up steps (default 0)"},
          {"no-cosine", false, "", "constant learning rate after warm-up (default: cosine decay to 0)"},
          {"eval-every", true, "N", "validation every N steps (default: steps/10; 0 = only at the end)"},
          {"eval-limit", true, "N", "validation on the first N examples (text: windows) during training (default 1000; 0 = all)"},
          {"metrics-every", true, "N", "operand metrics every N steps (default 1; 0 = never)"},
          {"data-dir", true, "DIR", "data folder (default $MXLAB_DATA_DIR or ~/.local/share/mxlab)"},
          {"hidden", true, "W,W", train::model_kinds_reading(train::kHiddenOption, " and ") + ": hidden widths, at most 64 of them (default 256,128)"},
          {"d-model", true, "D", train::model_kinds_reading(train::kBlocksOption, " and ") + ": width (default 128)"},
          {"layers", true, "L", train::model_kinds_reading(train::kBlocksOption, " and ") + ": blocks (default 2)"},
          {"heads", true, "H", train::model_kinds_reading(train::kHeadsOption, " and ") + ": attention heads, dividing --d-model (default 4)"},
          {"patch", true, "P", train::model_kinds_reading(train::kPatchOption, " and ") + ": patch side, dividing the image's sides (default 4)"},
          {"width", true, "W", train::model_kinds_reading(train::kWidthOption, " and ") + ": channel width (resnet: the first stage's channels; mobilenet: channels x W/16; default 16)"},
          {"context", true, "T", train::model_kinds_reading(train::kContextOption, " and ") + ": context length (default 64)"},
          {"checkpoint-every", true, "N", "save DIR/checkpoint.bin every N steps (default 500; 0 = never)"},
          {"resume", false, "", "continue from DIR/checkpoint.bin (without one: start at step 1)"},
          {"keep-checkpoint", false, "", "keep DIR/checkpoint.bin after the last step: the trained model, for direct casts"},
          {"no-timing", false, "", "leave the times out of metrics.csv and summary.json (byte-comparable files)"}};
}

/// The most MLP hidden layers --hidden takes (as --layers for the transformer).
constexpr std::size_t kMaxHiddenLayers = 64;

/// The option the largest part of a memory estimate comes from, for the message: --steps for the per-step
/// records, --batch (or the transformer's --context) for the activations, the model's size options for the
/// weights and optimizer state.
std::string memory_option(const Args& args, const train::MemoryEstimate& e, const train::ModelKindField& kind) {
  using train::ModelKind;
  auto named = [&](const std::string& name) {
    const auto v = args.value(name);
    return "option " + (v ? quote_input("--" + name + " " + *v) : "'--" + name + "' (its default)");
  };
  const double model = e.weight_bytes + e.optimizer_bytes + e.checkpoint_bytes,
               records = e.history_bytes + e.record_bytes;
  if (records >= model && records >= e.activation_bytes) return named("steps");
  if (e.activation_bytes >= model)
    return kind == ModelKind::Transformer && args.value("context") && !args.value("batch") ? named("context") : named("batch");
  if (kind == ModelKind::Mlp) return named("hidden");
  if (kind == ModelKind::Transformer || kind == ModelKind::Vit)
    return args.value("layers") && !args.value("d-model") ? named("layers") : named("d-model");
  return "the " + std::string(kind.name()) + " model";
}

std::string duration(double s) {
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  return buf;
}

/// The options that decide a run's results and files, one "name=value" per line (not --out, --threads,
/// --checkpoint-every or --resume): a checkpoint is resumed only under the same ones.
std::string run_identity(const Args& args, const std::vector<OptionSpec>& specs, const std::string& recipe_text) {
  std::string s;
  for (const auto& spec : specs) {
    if (spec.name == "out" || spec.name == "threads" || spec.name == "checkpoint-every" || spec.name == "resume" ||
        spec.name == "keep-checkpoint")
      continue;
    if (spec.takes_value) {
      if (auto v = args.value(spec.name)) s += spec.name + "=" + *v + "\n";
    } else if (args.flag(spec.name)) {
      s += spec.name + "\n";
    }
  }
  return s + "recipe:\n" + recipe_text;
}

/// TrainOptions from the command line (all but the data); errors are the messages for bad_input.
Result<train::TrainOptions> options_from_args(const Args& args) {
  train::TrainOptions o;
  o.model.kind = *args.value("model");
  if (!o.model.kind.known())
    return make_error("option '--model' must be " + train::model_kind_list() + ", got '" + *args.value("model") + "'");
  std::optional<Error> bad;
  auto integer = [&](const char* name, std::int64_t lo, std::int64_t hi, auto& out) {
    auto r = args.integer(name, lo, hi, static_cast<std::int64_t>(out));
    if (!r && !bad) bad = r.error();
    if (r) out = static_cast<std::remove_reference_t<decltype(out)>>(*r);
  };
  auto real = [&](const char* name, bool positive, double& out) {
    auto r = args.real(name, positive, out);
    if (!r && !bad) bad = r.error();
    if (r) out = *r;
  };
  o.checkpoint_every = 500;
  o.threads = hardware_threads();
  integer("steps", 1, 100000000, o.steps);
  integer("seed", 0, std::int64_t{1} << 62, o.seed);
  integer("batch", 1, 1 << 20, o.batch);
  integer("threads", 1, 1024, o.threads);
  integer("warmup", 0, 100000000, o.optimizer.warmup_steps);
  integer("eval-every", 0, 100000000, o.eval_every);
  integer("eval-limit", 0, 100000000, o.eval_limit);
  integer("metrics-every", 0, 100000000, o.metrics_every);
  integer("checkpoint-every", 0, 100000000, o.checkpoint_every);
  integer("d-model", 1, 4096, o.model.d_model);
  integer("layers", 1, 64, o.model.layers);
  integer("heads", 1, 64, o.model.heads);
  integer("context", 2, 4096, o.model.context);
  integer("patch", 1, 4096, o.model.patch);
  integer("width", 1, 256, o.model.width);
  real("lr", true, o.optimizer.lr);
  real("weight-decay", false, o.optimizer.weight_decay);
  static constexpr Named<std::string_view> kOptimizers[] = {{"adamw", "adamw"}, {"sgd", "sgd"}};
  if (auto r = args.choice<std::string_view>("optimizer", kOptimizers, "adamw")) o.optimizer.kind = std::string(*r);
  else if (!bad) bad = r.error();
  if (bad) return *bad;
  o.optimizer.cosine = !args.flag("no-cosine");
  return o;
}

/// The model's own options: those of another model are refused (they cannot be meant), --hidden is read.
std::optional<Error> model_options(const Args& args, train::ModelConfig& m) {
  const std::pair<const char*, train::ModelOption> size_options[] = {
      {"d-model", train::kBlocksOption}, {"layers", train::kBlocksOption}, {"heads", train::kHeadsOption},
      {"context", train::kContextOption}, {"patch", train::kPatchOption},  {"width", train::kWidthOption},
      {"hidden", train::kHiddenOption}};
  for (const auto& [option, bit] : size_options) {
    if (!args.value(option) || (m.kind.traits().options & bit) != 0) continue;
    return make_error(std::string("option '--") + option + "' applies to --model " + train::model_kinds_reading(bit) + " only, not " +
                      std::string(m.kind.name()));
  }
  if ((m.kind.traits().options & train::kHeadsOption) != 0 && m.d_model % m.heads != 0)
    return make_error("option '--d-model' must be a multiple of '--heads'");
  if (auto v = args.value("hidden")) {
    m.hidden.clear();
    std::stringstream s(*v);
    std::string part;
    const bool listed = !v->empty() && v->back() != ',';  // getline drops a trailing empty width
    while (listed && std::getline(s, part, ','))
      if (const auto w = parse_whole_in<std::int64_t>(part, 1, 65536)) m.hidden.push_back(*w);
      else break;
    if (!listed || m.hidden.empty() || !s.eof() || m.hidden.size() > kMaxHiddenLayers)
      return make_error("option '--hidden' needs 1.." + std::to_string(kMaxHiddenLayers) +
                        " widths 1..65536 separated by commas, got " + quote_input(*v));
  }
  return std::nullopt;
}

/// The recipe of --recipe, with --nongemm's format for the non-GEMM layers; `syntax` says how its file is written.
std::optional<Error> recipe_options(const Args& args, train::Recipe& r, train::RecipeSyntax& syntax) {
  auto recipe = train::load_recipe(*args.value("recipe"), &syntax);
  if (!recipe) return make_error("option '--recipe': " + recipe.error().message);
  r = *recipe;
  if (auto v = args.value("nongemm")) {
    auto f = train::role_format(*v);
    if (!f) return make_error("option '--nongemm': " + f.error().message);
    r.nongemm = *f ? *v : "";
  }
  return std::nullopt;
}

/// The progress line on standard error, at most once a second and after the last step.
void print_progress(Io io, const train::StepMetrics& m, bool text, double& last_print,
                    std::chrono::steady_clock::time_point start) {
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (now - last_print < 1.0 && m.step != m.steps) return;
  last_print = now;
  const double rate = m.seconds > 0 ? static_cast<double>(m.step) / m.seconds : 0.0;
  io.err << "step " << m.step << "/" << m.steps << "  loss " << fixed_digits(m.loss, 4) << "  " << fixed_digits(rate, 1)
         << " steps/s  ETA " << duration(rate > 0 ? static_cast<double>(m.steps - m.step) / rate : 0)
         << (m.validation ? "  val " + (text ? "bpc " + fixed_digits(m.validation->bpc, 3)
                                             : "acc " + fixed_digits(m.validation->accuracy, 4))
                          : std::string())
         << "\n" << std::flush;
}

/// The closing lines on standard output.
void print_result(Io io, const train::TrainOptions& o, const train::TrainData& data, const train::TrainResult& r,
                  const std::string& out_dir) {
  io.out << "trained " << o.model.kind.name() << " on " << data.name << " with " << o.recipe.name << ": " << r.steps_done
         << " steps" << (r.cancelled ? " (cancelled)" : "") << ", " << r.skipped << " skipped";
  if (r.validation)
    io.out << ", validation " << (data.is_text ? "bpc " + fixed_digits(r.validation->bpc, 4)
                                               : "accuracy " + fixed_digits(r.validation->accuracy, 4));
  if (r.test) io.out << ", test accuracy " << fixed_digits(r.test->accuracy, 4);
  io.out << "\nwrote " << out_dir << "/metrics.csv, summary.json, recipe.txt"
         << (r.cancelled && o.checkpoint_every > 0 ? ", checkpoint.bin (--resume continues)" : "")
         << (!r.cancelled && o.checkpoint_last ? ", checkpoint.bin (the trained model)" : "") << "\n";
}

/// Checks the options against the data and the memory budget, and opens the run's record.
Result<train::RunRecord> open_record(const Args& args, const std::vector<OptionSpec>& specs,
                                     const train::TrainData& data, train::TrainOptions& o) {
  if (auto e = train::check_data_fit(data, o)) return *e;
  // Formats of every layer (overrides included) and the memory the run needs, before anything is written.
  auto plan = train::plan_record(data, o);
  if (!plan) return plan.error();
  auto estimate = train::estimate_memory(data, o);
  if (!estimate) return make_error("option '--recipe': " + estimate.error().message);
  estimate->record_bytes = plan->record_bytes;
  if (auto e = train::check_memory_budget(*estimate, memory_option(args, *estimate, o.model.kind))) return *e;
  train::RecordSettings settings;
  settings.out_dir = *args.value("out");
  settings.identity = run_identity(args, specs, train::recipe_text(o.recipe));
  settings.timing = !args.flag("no-timing");
  settings.resume = args.flag("resume");
  settings.keep_checkpoint = args.flag("keep-checkpoint");
  o.checkpoint_last = settings.keep_checkpoint;
  return train::RunRecord::open(data, o, settings, *plan, *estimate);
}

}  // namespace

int cmd_train(const std::vector<std::string>& argv, Io io) {
  const auto specs = train_options();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "train", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab train --model " << train::model_kind_names([](const train::ModelKindTraits&) { return true; }, "|", "|")
           << kUsageTail << options_help(specs);
    return kExitOk;
  }
  if (!args->positional.empty()) return bad_input(io, "train", "unexpected argument '" + args->positional[0] + "'");
  for (const char* required : {"model", "data", "recipe", "steps", "out"})
    if (!args->value(required)) return bad_input(io, "train", std::string("option '--") + required + "' is required");
  auto o = options_from_args(*args);
  if (!o) return bad_input(io, "train", o.error().message);
  if (auto e = model_options(*args, o->model)) return bad_input(io, "train", e->message);
  auto syntax = train::RecipeSyntax::Toml;
  if (auto e = recipe_options(*args, o->recipe, syntax)) return bad_input(io, "train", e->message);
  if (auto e = train::check_out_dir(*args->value("out"))) return bad_input(io, "train", e->message);
  train::DataOptions dopt;
  dopt.dir = args->value("data-dir").value_or(default_data_dir());
  dopt.seed = o->seed;
  auto data = train::load_train_data(*args->value("data"), dopt);
  if (!data) return bad_input(io, "train", "option '--data': " + data.error().message);
  auto record = open_record(*args, specs, *data, *o);
  if (!record) return bad_input(io, "train", record.error().message);
  if (!record->note().empty()) io.err << "mxlab train: " << record->note() << "\n";
  if (syntax == train::RecipeSyntax::KeyValue)
    io.err << "mxlab train: warning: " << train::recipe_syntax_warning(*args->value("recipe")) << ": "
           << *args->value("out") << "/recipe.txt holds this recipe so\n";

  const auto start = std::chrono::steady_clock::now();
  double last_print = -1;
  auto on_step = [&](const train::StepMetrics& m) {
    record->step(m);
    print_progress(io, m, data->is_text, last_print, start);
  };
  o->on_checkpoint = [&](std::int64_t, const std::string& state) { return record->checkpoint(state); };
  g_interrupted = false;
  auto previous = std::signal(SIGINT, on_interrupt);
  Reporter reporter;
  reporter.cancel = &g_interrupted;
  auto result = train::run_training(*data, *o, on_step, reporter);
  std::signal(SIGINT, previous);
  if (!result) {
    record->discard();
    io.err << "mxlab train: " << result.error().message << "\n";
    return kExitFailure;
  }
  Provenance prov = build_provenance();
  prov.simd_target = active_simd_target();
  if (auto e = record->finish(*result, prov)) {
    io.err << "mxlab train: " << e->message << "\n";
    return kExitFailure;
  }
  print_result(io, *o, *data, *result, *args->value("out"));
  return kExitOk;
}

}  // namespace mxlab::cli
