// `mxlab train`: a training run with quantized GEMMs on real data, streaming per-step metrics to
// DIR/metrics.csv and writing DIR/summary.json (with provenance) and DIR/recipe.txt.
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "cli/cli.hpp"
#include "mxlab/io/atomic_file.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/train/trainer.hpp"

namespace mxlab::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

constexpr const char* kUsage =
    "usage: mxlab train --model mlp|cnn|transformer --data fashion-mnist|digits|text:NAME --recipe NAME|FILE\n"
    "                   --steps N --out DIR [--seed S] [--batch B] [--lr X] [--threads N] [options]\n\n"
    "Trains a model with every GEMM operand (weights w, activations a, output gradients g; w_bp and a_bp in\n"
    "backward) quantized per the recipe through the engine's fake quantization; master weights, optimizer\n"
    "and every non-GEMM operation stay in FP32. Writes DIR/metrics.csv (one row per step: loss, accuracy or\n"
    "bits per character, lr, loss scale, skipped steps, validation figures on evaluation steps, and per\n"
    "LAYER.ROLE the gradient underflow ratio and quantization MSE of each quantized operand), DIR/summary.json\n"
    "(final validation and test figures, averages of the operand metrics, provenance) and DIR/recipe.txt.\n"
    "A progress line (step, loss, rate, ETA) goes to standard error. Ctrl-C stops after the current step and\n"
    "still writes the files. Results are bit-identical for any --threads.\n\n"
    "recipes: fp32, fp16 (dynamic loss scaling), fp16-static, fp16-noscale, bf16, mxfp8 (E4M3, gradients\n"
    "E5M2), mxfp8_e4m3, mxfp6, mxfp4, mxint8, mxsf, boost_e2m5, nvfp4; a block format for every role\n"
    "(\"mxfp8_e4m3@32x32\": 2-D tiles); or a recipe file (docs/training.md).\n"
    "data: fashion-mnist and digits (mxlab data fetch; an installed Debian package is read in place),\n"
    "text:sherlock, text:tom-sawyer or text:PATH.\n\n";

std::vector<OptionSpec> train_options() {
  return {{"model", true, "KIND", "mlp, cnn or transformer"},
          {"data", true, "DATA", "fashion-mnist, digits or text:NAME"},
          {"recipe", true, "NAME|FILE", "formats per tensor role and loss scaling"},
          {"steps", true, "N", "training steps"},
          {"out", true, "DIR", "output folder (created)"},
          {"seed", true, "S", "seed of the initial weights, the batches and the split (default 0)"},
          {"batch", true, "B", "batch size (default 64; transformer: sequences)"},
          {"lr", true, "X", "peak learning rate (default 1e-3)"},
          {"threads", true, "N", "quantization threads (default 1); results do not depend on it"},
          {"nongemm", true, "FORMAT", "round the non-GEMM layers' outputs to FORMAT (bf16); overrides the recipe's"},
          {"optimizer", true, "adamw|sgd", "optimizer (default adamw; sgd uses momentum 0.9)"},
          {"weight-decay", true, "X", "weight decay of the weights (default 0)"},
          {"warmup", true, "N", "linear warm-up steps (default 0)"},
          {"no-cosine", false, "", "constant learning rate after warm-up (default: cosine decay to 0)"},
          {"eval-every", true, "N", "validation every N steps (default: steps/10; 0 = only at the end)"},
          {"eval-limit", true, "N", "validation on at most N examples (text: windows) during training"},
          {"metrics-every", true, "N", "operand metrics every N steps (default 1; 0 = never)"},
          {"data-dir", true, "DIR", "data folder (default $MXLAB_DATA_DIR or data/external)"},
          {"hidden", true, "W,W", "MLP hidden widths (default 256,128)"},
          {"d-model", true, "D", "transformer width (default 128)"},
          {"layers", true, "L", "transformer blocks (default 2)"},
          {"heads", true, "H", "transformer heads (default 4)"},
          {"context", true, "T", "transformer context length (default 64)"}};
}

bool parse_int(const std::string& s, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size() || v < lo || v > hi) return false;
    out = v;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool parse_positive(const std::string& s, double& out) {
  try {
    std::size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size() && std::isfinite(out) && out >= 0;
  } catch (const std::exception&) {
    return false;
  }
}

std::string num(double v) {
  if (!std::isfinite(v)) return v != v ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else o += c;
  }
  return o + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? num(v) : "null"; }

std::string duration(double s) {
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  return buf;
}

/// Running sums of one operand's metrics over the metric steps.
struct OperandTotals {
  std::int64_t steps = 0, nonzero = 0, underflow = 0;
  double mse_sum = 0;
};

}  // namespace

int cmd_train(const std::vector<std::string>& argv, Io io) {
  const auto specs = train_options();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "train", args.error().message);
  if (args->help) {
    io.out << kUsage << options_help(specs);
    return kExitOk;
  }
  if (!args->positional.empty()) return bad_input(io, "train", "unexpected argument '" + args->positional[0] + "'");
  for (const char* required : {"model", "data", "recipe", "steps", "out"})
    if (!args->value(required)) return bad_input(io, "train", std::string("option '--") + required + "' is required");

  train::TrainOptions o;
  o.model.kind = *args->value("model");
  if (o.model.kind != "mlp" && o.model.kind != "cnn" && o.model.kind != "transformer")
    return bad_input(io, "train", "option '--model' must be mlp, cnn or transformer, got '" + o.model.kind + "'");
  auto int_option = [&](const char* name, std::int64_t lo, std::int64_t hi, std::int64_t& out) -> bool {
    if (auto v = args->value(name)) {
      if (!parse_int(*v, lo, hi, out)) {
        bad_input(io, "train", std::string("option '--") + name + "' needs a whole number " + std::to_string(lo) + ".." +
                                   std::to_string(hi) + ", got '" + *v + "'");
        return false;
      }
    }
    return true;
  };
  auto real_option = [&](const char* name, double& out, bool positive) -> bool {
    if (auto v = args->value(name)) {
      if (!parse_positive(*v, out) || (positive && out <= 0)) {
        bad_input(io, "train", std::string("option '--") + name + "' needs a " + (positive ? "positive" : "non-negative") +
                                   " number, got '" + *v + "'");
        return false;
      }
    }
    return true;
  };
  std::int64_t seed = 0, threads = 1, eval_every = -1;
  if (!int_option("steps", 1, 100000000, o.steps) || !int_option("seed", 0, std::int64_t{1} << 62, seed) ||
      !int_option("batch", 1, 1 << 20, o.batch) || !int_option("threads", 1, 1024, threads) ||
      !int_option("warmup", 0, 100000000, o.optimizer.warmup_steps) ||
      !int_option("eval-every", 0, 100000000, eval_every) || !int_option("eval-limit", 1, 100000000, o.eval_limit) ||
      !int_option("metrics-every", 0, 100000000, o.metrics_every) ||
      !int_option("d-model", 1, 4096, o.model.d_model) || !int_option("layers", 1, 64, o.model.layers) ||
      !int_option("heads", 1, 64, o.model.heads) || !int_option("context", 2, 4096, o.model.context) ||
      !real_option("lr", o.optimizer.lr, true) || !real_option("weight-decay", o.optimizer.weight_decay, false))
    return kExitBadInput;
  o.seed = static_cast<std::uint64_t>(seed);
  o.threads = static_cast<unsigned>(threads);
  o.optimizer.cosine = !args->flag("no-cosine");
  if (auto v = args->value("optimizer")) {
    if (*v != "adamw" && *v != "sgd") return bad_input(io, "train", "option '--optimizer' must be adamw or sgd, got '" + *v + "'");
    o.optimizer.kind = *v;
  }
  if (o.model.d_model % o.model.heads != 0)
    return bad_input(io, "train", "option '--d-model' must be a multiple of '--heads'");
  if (auto v = args->value("hidden")) {
    o.model.hidden.clear();
    std::stringstream s(*v);
    std::string part;
    std::int64_t w = 0;
    while (std::getline(s, part, ','))
      if (parse_int(part, 1, 65536, w)) o.model.hidden.push_back(w);
      else return bad_input(io, "train", "option '--hidden' needs widths 1..65536 separated by commas, got '" + *v + "'");
  }
  auto recipe = train::load_recipe(*args->value("recipe"));
  if (!recipe) return bad_input(io, "train", "option '--recipe': " + recipe.error().message);
  o.recipe = *recipe;
  if (auto v = args->value("nongemm")) {
    auto f = train::role_format(*v);
    if (!f) return bad_input(io, "train", "option '--nongemm': " + f.error().message);
    o.recipe.nongemm = *f ? *v : "";
  }
  o.eval_every = eval_every >= 0 ? eval_every : std::max<std::int64_t>(1, o.steps / 10);
  const std::string out_dir = *args->value("out");
  if (out_dir.empty()) return bad_input(io, "train", "option '--out' needs a folder name");
  if (std::error_code ec; std::filesystem::exists(out_dir, ec) && !std::filesystem::is_directory(out_dir, ec))
    return bad_input(io, "train", "option '--out': '" + out_dir + "' exists and is not a folder");

  train::DataOptions dopt;
  dopt.dir = args->value("data-dir").value_or(default_data_dir());
  dopt.seed = o.seed;
  auto data = train::load_train_data(*args->value("data"), dopt);
  if (!data) return bad_input(io, "train", "option '--data': " + data.error().message);
  if ((o.model.kind == "transformer") != data->is_text)
    return bad_input(io, "train", "option '--model' " + o.model.kind + " does not fit the data " + data->name +
                                      " (the transformer takes text:NAME, the MLP and CNN images)");
  // Formats of every layer (overrides included) before anything is written.
  if (auto layers = train::gemm_layers(*data, o.model)) {
    for (const auto& l : *layers)
      if (auto f = train::layer_formats(o.recipe, l); !f) return bad_input(io, "train", "option '--recipe': " + f.error().message);
  } else {
    return bad_input(io, "train", layers.error().message);
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return bad_input(io, "train", "option '--out': cannot create '" + out_dir + "': " + ec.message());
  auto csv = AtomicFile::create(out_dir + "/metrics.csv", "CSV");
  if (!csv) return bad_input(io, "train", csv.error().message);

  std::vector<std::string> operand_keys;
  std::map<std::string, OperandTotals> totals;
  bool header = false;
  const auto start = std::chrono::steady_clock::now();
  double last_print = -1;
  auto on_step = [&](const train::StepMetrics& m) {
    if (!header) {
      for (const auto& op : m.operands) operand_keys.push_back(op.layer + "." + std::string(train::role_name(op.role)));
      std::string h = "step,loss,accuracy,bpc,lr,loss_scale,skipped,skipped_total,seconds,val_loss,val_accuracy,val_bpc";
      for (const auto& k : operand_keys) h += "," + k + ".underflow," + k + ".mse";
      csv->write(h + "\n");
      header = true;
    }
    std::string row = std::to_string(m.step) + "," + num(m.loss) + "," + (data->is_text ? "" : num(m.accuracy)) + "," +
                      (data->is_text ? num(m.bpc) : "") + "," + num(m.lr) + "," + num(m.loss_scale) + "," +
                      (m.skipped ? "1" : "0") + "," + std::to_string(m.skipped_total) + "," + num(m.seconds) + ",";
    if (m.validation)
      row += num(m.validation->loss) + "," + (data->is_text ? "" : num(m.validation->accuracy)) + "," +
             (data->is_text ? num(m.validation->bpc) : "");
    else row += ",,";
    std::map<std::string, const train::OperandMetric*> by_key;
    for (const auto& op : m.operands) by_key[op.layer + "." + std::string(train::role_name(op.role))] = &op;
    for (const auto& k : operand_keys) {
      auto it = by_key.find(k);
      if (it == by_key.end()) {
        row += ",,";
        continue;
      }
      row += "," + num(it->second->underflow_ratio()) + "," + num(it->second->mse);
      auto& t = totals[k];
      ++t.steps;
      t.nonzero += it->second->nonzero;
      t.underflow += it->second->underflow;
      t.mse_sum += it->second->mse;
    }
    csv->write(row + "\n");
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (now - last_print >= 1.0 || m.step == m.steps) {
      last_print = now;
      const double rate = m.seconds > 0 ? static_cast<double>(m.step) / m.seconds : 0.0;
      io.err << "step " << m.step << "/" << m.steps << "  loss " << fixed_digits(m.loss, 4) << "  "
             << fixed_digits(rate, 1) << " steps/s  ETA " << duration(rate > 0 ? static_cast<double>(m.steps - m.step) / rate : 0)
             << (m.validation ? "  val " + (data->is_text ? "bpc " + fixed_digits(m.validation->bpc, 3)
                                                          : "acc " + fixed_digits(m.validation->accuracy, 4))
                              : std::string())
             << "\n" << std::flush;
    }
  };
  g_interrupted = false;
  auto previous = std::signal(SIGINT, on_interrupt);
  Reporter reporter;
  reporter.cancel = &g_interrupted;
  auto result = train::run_training(*data, o, on_step, reporter);
  std::signal(SIGINT, previous);
  if (!result) {
    csv->discard();
    io.err << "mxlab train: " << result.error().message << "\n";
    return kExitFailure;
  }

  Provenance prov = build_provenance();
  prov.simd_target = active_simd_target();
  prov.inputs.emplace_back("seed", std::to_string(o.seed));
  prov.inputs.emplace_back("model", o.model.kind);
  prov.inputs.emplace_back("data", data->name);
  for (std::size_t i = 0; i < data->files.size(); ++i) prov.inputs.emplace_back("file" + std::to_string(i + 1), data->files[i]);
  prov.inputs.emplace_back("recipe", o.recipe.name);
  prov.inputs.emplace_back("steps", std::to_string(o.steps));
  prov.inputs.emplace_back("batch", std::to_string(o.batch));
  prov.inputs.emplace_back("lr", num(o.optimizer.lr));
  prov.inputs.emplace_back("optimizer", o.optimizer.kind);
  prov.inputs.emplace_back("threads", std::to_string(o.threads));
  std::ostringstream j;
  j << "{\n  \"model\": " << json_string(o.model.kind) << ",\n  \"data\": " << json_string(data->name)
    << ",\n  \"recipe\": " << json_string(o.recipe.name) << ",\n  \"recipe_text\": " << json_string(train::recipe_text(o.recipe))
    << ",\n  \"parameters\": " << result->parameters << ",\n  \"steps\": " << result->steps_done
    << ",\n  \"cancelled\": " << (result->cancelled ? "true" : "false") << ",\n  \"skipped_steps\": " << result->skipped
    << ",\n  \"final_loss_scale\": " << json_number(result->final_loss_scale)
    << ",\n  \"train_seconds\": " << json_number(result->seconds)
    << ",\n  \"seconds_per_step\": " << json_number(result->seconds / static_cast<double>(std::max<std::int64_t>(1, result->steps_done)))
    << ",\n  \"final_train_loss\": " << json_number(result->losses.empty() ? NAN : result->losses.back());
  auto eval_json = [&](const char* name, const std::optional<train::EvalMetrics>& e) {
    if (!e) return;
    j << ",\n  \"" << name << "\": {\"loss\": " << json_number(e->loss) << ", "
      << (data->is_text ? "\"bpc\": " + json_number(e->bpc) : "\"accuracy\": " + json_number(e->accuracy))
      << ", \"examples\": " << e->examples << "}";
  };
  eval_json("validation", result->validation);
  eval_json("test", result->test);
  if (data->is_text)
    j << ",\n  \"unigram_entropy_bpc\": " << json_number(train::unigram_entropy_bits(data->validation_tokens, data->vocabulary()));
  j << ",\n  \"operands\": [";
  for (std::size_t i = 0; i < operand_keys.size(); ++i) {
    const auto& t = totals[operand_keys[i]];
    j << (i ? "," : "") << "\n    {\"operand\": " << json_string(operand_keys[i]) << ", \"metric_steps\": " << t.steps
      << ", \"underflow_ratio\": "
      << json_number(t.nonzero > 0 ? static_cast<double>(t.underflow) / static_cast<double>(t.nonzero) : 0.0)
      << ", \"mean_mse\": " << json_number(t.steps > 0 ? t.mse_sum / static_cast<double>(t.steps) : 0.0) << "}";
  }
  j << (operand_keys.empty() ? "]" : "\n  ]") << ",\n  \"provenance\": " << provenance_json(prov) << "\n}\n";
  if (auto c = csv->commit(); !c) {
    io.err << "mxlab train: " << c.error().message << "\n";
    return kExitFailure;
  }
  if (auto w = write_file_atomic(out_dir + "/recipe.txt", train::recipe_text(o.recipe), "recipe"); !w) {
    io.err << "mxlab train: " << w.error().message << "\n";
    return kExitFailure;
  }
  if (auto w = write_file_atomic(out_dir + "/summary.json", j.str(), "JSON"); !w) {
    io.err << "mxlab train: " << w.error().message << "\n";
    return kExitFailure;
  }
  io.out << "trained " << o.model.kind << " on " << data->name << " with " << o.recipe.name << ": "
         << result->steps_done << " steps" << (result->cancelled ? " (cancelled)" : "") << ", " << result->skipped
         << " skipped";
  if (result->validation)
    io.out << ", validation " << (data->is_text ? "bpc " + fixed_digits(result->validation->bpc, 4)
                                                : "accuracy " + fixed_digits(result->validation->accuracy, 4));
  if (result->test) io.out << ", test accuracy " << fixed_digits(result->test->accuracy, 4);
  io.out << "\nwrote " << out_dir << "/metrics.csv, summary.json, recipe.txt\n";
  return kExitOk;
}

}  // namespace mxlab::cli
