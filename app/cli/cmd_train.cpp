// `mxlab train`: a training run with quantized GEMMs (docs/training.md).
#include <charconv>
#include <filesystem>
#include <iostream>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/progress_bar.hpp"
#include "mxlab/core/provenance.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/train/train.hpp"

namespace mxlab::cli {

namespace {

template <class T>
std::optional<Error> number(const Args& args, const char* name, T& field, T lo, T hi) {
  const auto v = args.value(name);
  if (!v) return std::nullopt;
  T x{};
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
  if (ec != std::errc() || p != v->data() + v->size() || !(x >= lo) || !(x <= hi))
    return make_error("option '--" + std::string(name) + " " + *v + "': expected a number from " + std::to_string(lo) +
                      " to " + std::to_string(hi));
  field = x;
  return std::nullopt;
}

}  // namespace

int cmd_train(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = {
      {"model", true, "M", "mlp or cnn (default mlp)"},
      {"data", true, "D", "fashion-mnist (default) or digits (mxlab data fetch NAME installs them)"},
      {"data-dir", true, "DIR", "where data sets are installed (default data/external or $MXLAB_DATA_DIR)"},
      {"recipe", true, "R", "fp32, fp16, fp16-static, fp16-dynamic, bf16, fp8, fp8-current, mxfp8, mxfp6, mxfp4, mxint8, "
                            "mxsf, boost_e2m5, nvfp4 (default fp32)"},
      {"set", true, "ROLE=SPEC", "override a role (w, a, g, w_bp, a_bp), optionally for layers matching PATTERN: "
                                 "PATTERN:ROLE=SPEC; several separated by ';'"},
      {"steps", true, "N", "optimizer steps (default 1000)"},
      {"batch", true, "B", "batch size (default 64)"},
      {"lr", true, "X", "peak learning rate (default 1e-3)"},
      {"optimizer", true, "O", "adamw (default) or sgd (momentum 0.9)"},
      {"weight-decay", true, "X", "decoupled weight decay (default 0)"},
      {"warmup", true, "N", "steps of linear warm-up before the cosine decay (default 0)"},
      {"seed", true, "S", "seed of initialisation and data order (default 0)"},
      {"eval-every", true, "N", "test accuracy every N steps (default: at the end)"},
      {"out", true, "DIR", "writes DIR/metrics.csv, DIR/layers.csv and DIR/summary.json"},
      threads_option(),
      {"quiet", false, "", "no progress"}};
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "train", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab train [--model mlp|cnn] [--data fashion-mnist|digits] [--recipe R] [--set ROLE=SPEC]\n"
              "                   [--steps N] [--batch B] [--lr X] [--optimizer adamw|sgd] [--seed S] [--out DIR]\n\n"
              "Trains a model whose every GEMM operand (weights w, activations a, output gradients g; backward\n"
              "weights w_bp and activations a_bp) is quantized through the engine with the recipe's format, and\n"
              "reports per step the loss, accuracy, learning rate, loss scale, skipped steps, and per layer and role\n"
              "the underflow ratio and MSE of the quantized operands. docs/training.md.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (!args->positional.empty()) return bad_input(io, "train", "unexpected argument '" + args->positional[0] + "'");
  train::Config c;
  c.model = args->value("model").value_or("mlp");
  c.data = args->value("data").value_or("fashion-mnist");
  c.data_dir = args->value("data-dir").value_or("");
  c.optimizer = args->value("optimizer").value_or("adamw");
  if (c.model != "mlp" && c.model != "cnn") return bad_input(io, "train", "option '--model " + c.model + "': expected mlp or cnn");
  if (c.data != "fashion-mnist" && c.data != "digits")
    return bad_input(io, "train", "option '--data " + c.data + "': expected fashion-mnist or digits");
  if (c.optimizer != "adamw" && c.optimizer != "sgd")
    return bad_input(io, "train", "option '--optimizer " + c.optimizer + "': expected adamw or sgd");
  auto r = train::recipe(args->value("recipe").value_or("fp32"));
  if (!r) return bad_input(io, "train", "option '--recipe': " + r.error().message);
  c.recipe = *r;
  if (auto v = args->value("set")) {
    std::size_t pos = 0;
    while (pos <= v->size()) {
      const std::size_t end = std::min(v->find(';', pos), v->size());
      if (auto e = train::apply_setting(c.recipe, v->substr(pos, end - pos))) return bad_input(io, "train", "option '--set': " + e->message);
      pos = end + 1;
    }
    c.recipe.name += " (" + *v + ")";
  }
  for (auto e : {number(*args, "steps", c.steps, 1, 10000000), number(*args, "batch", c.batch, 1, 65536),
                 number(*args, "warmup", c.warmup, 0, 10000000), number(*args, "eval-every", c.eval_every, 0, 10000000)})
    if (e) return bad_input(io, "train", e->message);
  for (auto e : {number(*args, "lr", c.lr, 0.0, 10.0), number(*args, "weight-decay", c.weight_decay, 0.0, 1.0)})
    if (e) return bad_input(io, "train", e->message);
  if (auto e = number(*args, "seed", c.seed, std::uint64_t{0}, UINT64_MAX)) return bad_input(io, "train", e->message);
  auto threads = threads_from_args(*args);
  if (!threads) return bad_input(io, "train", threads.error().message);
  c.threads = *threads ? *threads : 1;
  const auto out = args->value("out");
  if (out && std::filesystem::exists(*out) && !std::filesystem::is_directory(*out))
    return bad_input(io, "train", "option '--out " + *out + "': not a folder");

  // Per-step rows, written at the end (atomically) so a stopped run leaves no half file.
  std::string metrics = "step,loss,accuracy,lr,loss_scale,skipped,skipped_total,test_accuracy,val_loss\n";
  std::string layers = "step,layer,role,underflow_ratio,mse,nonzero,underflows\n";
  auto g = [](double v) { return g17(v); };
  ProgressBar bar(io.err, "steps", ProgressBar::stderr_is_tty());
  double last_loss = 0;
  Reporter rep;
  if (!args->flag("quiet"))
    rep.on_progress = [&](const Progress& p) { bar.update(p.done, p.total); };
  auto result = train::run(c, rep, [&](const train::StepMetrics& m) {
    last_loss = m.loss;
    metrics += std::to_string(m.step) + "," + g(m.loss) + "," + g(m.accuracy) + "," + g(m.lr) + "," + g(m.loss_scale) + "," +
               (m.skipped ? "1" : "0") + "," + std::to_string(m.skipped_total) + "," +
               (m.test_accuracy >= 0 ? g(m.test_accuracy) : "") + "," + (m.val_loss >= 0 ? g(m.val_loss) : "") + "\n";
    for (const auto& rm : m.roles)
      layers += std::to_string(m.step) + "," + rm.layer + "," + rm.role + "," + g(rm.underflow_ratio()) + "," + g(rm.mse()) + "," +
                std::to_string(rm.nonzero) + "," + std::to_string(rm.underflows) + "\n";
  });
  bar.finish();
  if (!result) return bad_input(io, "train", result.error().message);
  io.out << "model " << c.model << ", data " << c.data << ", recipe " << c.recipe.name << ", " << c.steps << " steps in "
         << fixed_digits(result->seconds, 1) << " s\n"
         << "final batch loss " << g(last_loss) << ", validation loss " << g(result->val_loss) << ", validation accuracy "
         << g(result->val_accuracy) << ", test accuracy " << g(result->test_accuracy) << "\n";
  if (out) {
    std::filesystem::create_directories(*out);
    Provenance p = build_provenance();
    p.simd_target = ops::simd_target();
    p.inputs = {{"model", c.model}, {"data", c.data}, {"recipe", c.recipe.name}, {"steps", std::to_string(c.steps)},
                {"batch", std::to_string(c.batch)}, {"lr", g(c.lr)}, {"optimizer", c.optimizer}, {"seed", std::to_string(c.seed)},
                {"engine", result->engine}};
    const std::string summary = "{\"test_accuracy\": " + g(result->test_accuracy) + ", \"val_loss\": " + g(result->val_loss) +
                                ", \"val_accuracy\": " + g(result->val_accuracy) + ", \"seconds\": " + g(result->seconds) +
                                ", \"provenance\": " + provenance_json(p) + "}\n";
    for (const auto& [name, text] : {std::pair{"metrics.csv", metrics}, std::pair{"layers.csv", layers}, std::pair{"summary.json", summary}})
      if (auto e = write_file_atomic(*out + "/" + name, text)) return bad_input(io, "train", e->message);
    io.out << "wrote " << *out << "/metrics.csv, layers.csv, summary.json\n";
  }
  return kExitOk;
}

}  // namespace mxlab::cli
