// `mxlab train`: a training run with quantized GEMMs on real data, streaming per-step metrics to
// DIR/metrics.csv and writing DIR/summary.json (with provenance) and DIR/recipe.txt.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string_view>
#include <thread>

#include "cli/cli.hpp"
#include "mxlab/core/atomic_file.hpp"
#include "mxlab/core/folder_lock.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/core/small_file.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/io/sha256.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/train/trainer.hpp"

namespace mxlab::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

constexpr const char* kUsage =
    "usage: mxlab train --model mlp|cnn|transformer|resnet|mobilenet|vit --data fashion-mnist|digits|text:NAME\n"
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
  return {{"model", true, "KIND", "mlp, cnn, transformer (text), resnet, mobilenet or vit (images)"},
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
          {"hidden", true, "W,W", "MLP hidden widths, at most 64 of them (default 256,128)"},
          {"d-model", true, "D", "transformer and vit width (default 128)"},
          {"layers", true, "L", "transformer and vit blocks (default 2)"},
          {"heads", true, "H", "transformer and vit heads (default 4)"},
          {"patch", true, "P", "vit patch side, dividing the image's sides (default 4)"},
          {"width", true, "W", "resnet: first stage's channels; mobilenet: channels x W/16 (default 16)"},
          {"context", true, "T", "transformer context length (default 64)"},
          {"checkpoint-every", true, "N", "save DIR/checkpoint.bin every N steps (default 500; 0 = never)"},
          {"resume", false, "", "continue from DIR/checkpoint.bin (without one: start at step 1)"},
          {"no-timing", false, "", "leave the times out of metrics.csv and summary.json (byte-comparable files)"}};
}

/// The most MLP hidden layers --hidden takes (as --layers for the transformer).
constexpr std::size_t kMaxHiddenLayers = 64;

/// The option the largest part of a memory estimate comes from, for the message: --steps for the per-step
/// records, --batch (or the transformer's --context) for the activations, the model's size options for the
/// weights and optimizer state.
std::string memory_option(const Args& args, const train::MemoryEstimate& e, const std::string& kind) {
  auto named = [&](const std::string& name) {
    const auto v = args.value(name);
    return "option " + (v ? quote_input("--" + name + " " + *v) : "'--" + name + "' (its default)");
  };
  const double model = e.weight_bytes + e.optimizer_bytes + e.checkpoint_bytes,
               records = e.history_bytes + e.record_bytes;
  if (records >= model && records >= e.activation_bytes) return named("steps");
  if (e.activation_bytes >= model)
    return kind == "transformer" && args.value("context") && !args.value("batch") ? named("context") : named("batch");
  if (kind == "mlp") return named("hidden");
  if (kind == "transformer" || kind == "vit")
    return args.value("layers") && !args.value("d-model") ? named("layers") : named("d-model");
  return "the " + kind + " model";
}

std::string num(double v) {
  if (!std::isfinite(v)) return v != v ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
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
  std::int64_t steps = 0, nonzero = 0, underflow = 0, count = 0, saturated = 0;
  double mse_sum = 0;
};

/// One CSV operand: "LAYER.ROLE", and whether it has a delayed scale (then also scale and saturation columns).
struct OperandColumn {
  std::string key;
  bool delayed = false;
};

/// The options that decide a run's results and files, one "name=value" per line (not --out, --threads,
/// --checkpoint-every or --resume): a checkpoint is resumed only under the same ones.
std::string run_identity(const Args& args, const std::vector<OptionSpec>& specs, const std::string& recipe_text) {
  std::string s;
  for (const auto& spec : specs) {
    if (spec.name == "out" || spec.name == "threads" || spec.name == "checkpoint-every" || spec.name == "resume") continue;
    if (spec.takes_value) {
      if (auto v = args.value(spec.name)) s += spec.name + "=" + *v + "\n";
    } else if (args.flag(spec.name)) {
      s += spec.name + "\n";
    }
  }
  return s + "recipe:\n" + recipe_text;
}

/// The first line where two identities differ, for the message.
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream x(a), y(b);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(x, la)), gb = static_cast<bool>(std::getline(y, lb));
    if (!ga && !gb) return "";
    if (!ga) la = "(nothing)";
    if (!gb) lb = "(nothing)";
    if (!ga || !gb || la != lb) return "'" + la + "' there, '" + lb + "' here";
  }
}

/// DIR/checkpoint.bin: "mxlab train checkpoint 2\n", then sections "NAME LENGTH\n" followed by LENGTH bytes:
/// identity (run_identity), state (the trainer's), csv (metrics.csv so far), columns (the operand columns and
/// their running sums, doubles as hexadecimal floats so they come back exactly), and last "sha256 64\n" with the
/// SHA-256 of every byte before it, checked before anything in the file is used.
constexpr std::string_view kCheckpointMagic = "mxlab train checkpoint 2\n";
constexpr std::string_view kCheckpointMagicV1 = "mxlab train checkpoint 1\n";
constexpr std::string_view kChecksumHeader = "sha256 64\n";
constexpr std::size_t kChecksumBytes = kChecksumHeader.size() + 64;

struct CheckpointFile {
  std::map<std::string, std::string> sections;
};

std::string checkpoint_bytes(const std::vector<std::pair<std::string, std::string>>& sections) {
  std::string out(kCheckpointMagic);
  for (const auto& [name, bytes] : sections) out += name + " " + std::to_string(bytes.size()) + "\n" + bytes;
  const std::string digest = sha256_hex(out);
  return out + std::string(kChecksumHeader) + digest;
}

/// Reads a checkpoint of at most max_bytes (the largest the run can write): a regular file whose checksum
/// matches, with every section a run writes. Errors name the file.
Result<CheckpointFile> read_checkpoint(const std::string& path, std::uint64_t max_bytes) {
  auto bytes = read_small_file(path, max_bytes, "checkpoint");
  if (!bytes) return bytes.error();
  const std::string& text = *bytes;
  const std::string name = "checkpoint '" + path + "'";
  if (text.compare(0, kCheckpointMagicV1.size(), kCheckpointMagicV1) == 0)
    return make_error(name + " has format 1, which carries no checksum; remove it to start the run over");
  if (text.compare(0, kCheckpointMagic.size(), kCheckpointMagic) != 0) return make_error(name + " is not a training checkpoint");
  if (text.size() < kCheckpointMagic.size() + kChecksumBytes ||
      text.compare(text.size() - kChecksumBytes, kChecksumHeader.size(), kChecksumHeader) != 0)
    return make_error(name + " is damaged (it does not end in its checksum: cut short?)");
  const std::string_view payload(text.data(), text.size() - kChecksumBytes);
  if (sha256_hex(payload) != std::string_view(text).substr(text.size() - 64))
    return make_error(name + " is damaged: its SHA-256 does not match its contents (changed since it was written)");
  CheckpointFile f;
  std::size_t at = kCheckpointMagic.size();
  while (at < payload.size()) {
    const auto eol = payload.find('\n', at);
    const auto space = payload.find(' ', at);
    if (eol == std::string::npos || space == std::string::npos || space > eol)
      return make_error(name + " is damaged (a section header at byte " + std::to_string(at) + ")");
    const std::string section(payload.substr(at, space - at));
    const auto length = parse_whole_in<std::uint64_t>(payload.substr(space + 1, eol - space - 1), 0, std::uint64_t{1} << 50);
    if (!length || *length > payload.size() - eol - 1)
      return make_error(name + " is damaged (section '" + section + "' runs past the end)");
    if (!f.sections.emplace(section, payload.substr(eol + 1, static_cast<std::size_t>(*length))).second)
      return make_error(name + " is damaged (section '" + section + "' twice)");
    at = eol + 1 + static_cast<std::size_t>(*length);
  }
  for (const char* needed : {"identity", "state", "csv", "columns"})
    if (f.sections.count(needed) == 0) return make_error(name + " is damaged (no section '" + needed + "')");
  return f;
}

/// metrics.csv's header for the operand columns.
std::string csv_header(const std::vector<OperandColumn>& columns) {
  std::string h = "step,loss,accuracy,bpc,lr,loss_scale,skipped,skipped_total,seconds,val_loss,val_accuracy,val_bpc";
  for (const auto& c : columns) {
    h += "," + c.key + ".underflow," + c.key + ".mse";
    if (c.delayed) h += "," + c.key + ".scale," + c.key + ".saturation";
  }
  return h + "\n";
}

/// The checkpoint's "columns" section: one line per operand column, "KEY DELAYED STEPS NONZERO UNDERFLOW COUNT
/// SATURATED MSE_SUM"; nothing when a line does not read whole.
std::optional<std::vector<std::pair<OperandColumn, OperandTotals>>> parse_columns(const std::string& text,
                                                                                  std::int64_t steps_done) {
  std::vector<std::pair<OperandColumn, OperandTotals>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    OperandColumn c;
    OperandTotals t;
    int delayed = -1;
    std::string mse, extra;
    if (!(words >> c.key >> delayed >> t.steps >> t.nonzero >> t.underflow >> t.count >> t.saturated >> mse) ||
        (words >> extra) || (delayed != 0 && delayed != 1) || t.steps < 0 || t.steps > steps_done)
      return std::nullopt;
    char* end = nullptr;
    t.mse_sum = std::strtod(mse.c_str(), &end);
    if (end != mse.c_str() + mse.size()) return std::nullopt;
    c.delayed = delayed == 1;
    out.emplace_back(c, t);
  }
  return out;
}

/// Where the checkpoint's metrics disagree with what it says: a header that is not its operand columns', or
/// other than one row per step it has done. Empty when they agree.
std::string metrics_mismatch(const std::string& csv, const std::vector<OperandColumn>& columns, std::int64_t steps_done) {
  if (csv.rfind(csv_header(columns), 0) != 0) return "its metrics' header is not that of its operand columns";
  std::size_t at = csv_header(columns).size();
  std::int64_t rows = 0;
  while (at < csv.size()) {
    const auto eol = csv.find('\n', at);
    if (eol == std::string::npos) return "its metrics end in a partial row";
    ++rows;
    if (csv.compare(at, std::to_string(rows).size() + 1, std::to_string(rows) + ",") != 0)
      return "row " + std::to_string(rows) + " of its metrics is not step " + std::to_string(rows);
    at = eol + 1;
  }
  if (rows != steps_done)
    return "its metrics have " + std::to_string(rows) + " rows, its state " + std::to_string(steps_done) + " steps";
  return "";
}

/// Whether an existing DIR/metrics.csv agrees with the checkpoint's metrics: one begins with the other (a
/// stopped run wrote the same rows; a run killed after writing its files has more). Reads at most csv.size()
/// bytes. Empty when they agree (or there is no file), else the problem.
std::string disk_metrics_mismatch(const std::string& path, const std::string& csv) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno == ENOENT ? "" : std::string("cannot be read: ") + std::strerror(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return "is not a regular file";
  }
  std::string head(std::min<std::size_t>(csv.size(), static_cast<std::size_t>(st.st_size)), '\0');
  std::size_t got = 0;
  while (got < head.size()) {
    const ssize_t n = ::read(fd, head.data() + got, head.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  head.resize(got);
  const auto differ = std::mismatch(head.begin(), head.end(), csv.begin()).first;
  if (differ == head.end()) return "";
  const auto line = 1 + std::count(head.begin(), differ, '\n');
  return "differs from the checkpoint's metrics at line " + std::to_string(line);
}

std::string hexfloat(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

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
  if (!train::is_model_kind(o.model.kind))
    return bad_input(io, "train", "option '--model' must be mlp, cnn, transformer, resnet, mobilenet or vit, got '" +
                                      o.model.kind + "'");
  std::optional<Error> bad;
  auto integer = [&](const char* name, std::int64_t lo, std::int64_t hi, auto& out) {
    auto r = args->integer(name, lo, hi, static_cast<std::int64_t>(out));
    if (!r && !bad) bad = r.error();
    if (r) out = static_cast<std::remove_reference_t<decltype(out)>>(*r);
  };
  auto real = [&](const char* name, bool positive, double& out) {
    auto r = args->real(name, positive, out);
    if (!r && !bad) bad = r.error();
    if (r) out = *r;
  };
  std::int64_t eval_every = -1;
  o.checkpoint_every = 500;
  integer("steps", 1, 100000000, o.steps);
  integer("seed", 0, std::int64_t{1} << 62, o.seed);
  integer("batch", 1, 1 << 20, o.batch);
  integer("threads", 1, 1024, o.threads);
  integer("warmup", 0, 100000000, o.optimizer.warmup_steps);
  integer("eval-every", 0, 100000000, eval_every);
  integer("eval-limit", 1, 100000000, o.eval_limit);
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
  if (auto r = args->choice<std::string_view>("optimizer", kOptimizers, "adamw")) o.optimizer.kind = std::string(*r);
  else if (!bad) bad = r.error();
  if (bad) return bad_input(io, "train", bad->message);
  o.optimizer.cosine = !args->flag("no-cosine");
  // Size options of another model would be ignored: refused, as they cannot be meant.
  for (const char* t : {"d-model", "layers", "heads"})
    if (o.model.kind != "transformer" && o.model.kind != "vit" && args->value(t))
      return bad_input(io, "train", std::string("option '--") + t + "' applies to --model transformer or vit only, not " +
                                        o.model.kind);
  if (o.model.kind != "transformer" && args->value("context"))
    return bad_input(io, "train", "option '--context' applies to --model transformer only, not " + o.model.kind);
  if (o.model.kind != "vit" && args->value("patch"))
    return bad_input(io, "train", "option '--patch' applies to --model vit only, not " + o.model.kind);
  if (o.model.kind != "resnet" && o.model.kind != "mobilenet" && args->value("width"))
    return bad_input(io, "train", "option '--width' applies to --model resnet or mobilenet only, not " + o.model.kind);
  if (o.model.kind != "mlp" && args->value("hidden"))
    return bad_input(io, "train", "option '--hidden' applies to --model mlp only, not " + o.model.kind);
  if (o.model.d_model % o.model.heads != 0)
    return bad_input(io, "train", "option '--d-model' must be a multiple of '--heads'");
  if (auto v = args->value("hidden")) {
    o.model.hidden.clear();
    std::stringstream s(*v);
    std::string part;
    const bool listed = !v->empty() && v->back() != ',';  // getline drops a trailing empty width
    while (listed && std::getline(s, part, ','))
      if (const auto w = parse_whole_in<std::int64_t>(part, 1, 65536)) o.model.hidden.push_back(*w);
      else break;
    if (!listed || o.model.hidden.empty() || !s.eof() || o.model.hidden.size() > kMaxHiddenLayers)
      return bad_input(io, "train", "option '--hidden' needs 1.." + std::to_string(kMaxHiddenLayers) +
                                        " widths 1..65536 separated by commas, got " + quote_input(*v));
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
  // The run's files replace what is there at the end; a folder or a device under one of their names would make
  // the run fail only then.
  for (const char* file : {"metrics.csv", "summary.json", "recipe.txt", "checkpoint.bin"}) {
    const std::string path = out_dir + "/" + file;
    std::error_code ec;
    const auto type = std::filesystem::symlink_status(path, ec).type();
    if (!ec && type != std::filesystem::file_type::not_found && type != std::filesystem::file_type::regular &&
        type != std::filesystem::file_type::symlink)
      return bad_input(io, "train", "option '--out': '" + path + "' is not a regular file, so the run could not replace it");
  }

  train::DataOptions dopt;
  dopt.dir = args->value("data-dir").value_or(default_data_dir());
  dopt.seed = o.seed;
  auto data = train::load_train_data(*args->value("data"), dopt);
  if (!data) return bad_input(io, "train", "option '--data': " + data.error().message);
  if ((o.model.kind == "transformer") != data->is_text)
    return bad_input(io, "train", "option '--model' " + o.model.kind + " does not fit the data " + data->name +
                                      " (the transformer takes text:NAME, the other models images)");
  if (data->is_text) {
    // Training draws windows of context + 1 characters; validation needs at least one.
    const std::string window = std::to_string(o.model.context + 1);
    if (static_cast<std::int64_t>(data->train_tokens.size()) <= o.model.context + 1)
      return bad_input(io, "train", "option '--context " + std::to_string(o.model.context) + "': the training text of " +
                                        data->name + " (" + std::to_string(data->train_tokens.size()) +
                                        " characters) is too short for windows of " + window);
    if (static_cast<std::int64_t>(data->validation_tokens.size()) < o.model.context + 1)
      return bad_input(io, "train", "option '--context " + std::to_string(o.model.context) + "': the validation text of " +
                                        data->name + " (its last " + std::to_string(data->validation_tokens.size()) +
                                        " characters) holds no window of " + window + ", so nothing would be validated");
  }
  // Formats of every layer (overrides included) before anything is written; the operand columns they give.
  auto names = train::gemm_layers(*data, o.model);
  if (!names) return bad_input(io, "train", names.error().message);
  std::size_t operands = 0, metric_columns = 0, longest_key = 0;
  for (const auto& l : *names) {
    auto f = train::layer_formats(o.recipe, l);
    if (!f) return bad_input(io, "train", "option '--recipe': " + f.error().message);
    for (const auto& role : *f)
      if (role) {
        ++operands;
        metric_columns += o.recipe.delayed.enabled && !role->layout.scale ? 4 : 2;
      }
    longest_key = std::max(longest_key, l.size() + 5);
  }
  // Memory: the model, its optimizer state, a step's activations and the per-step records, before anything
  // is allocated.
  auto estimate = train::estimate_memory(*data, o);
  if (!estimate) return bad_input(io, "train", "option '--recipe': " + estimate.error().message);
  const double metric_rows = o.metrics_every > 0 ? static_cast<double>(o.steps / o.metrics_every + 1) : 0.0;
  const double csv_bytes = static_cast<double>(o.steps) * (100.0 + 2.0 * static_cast<double>(metric_columns)) +
                           metric_rows * 16.0 * static_cast<double>(metric_columns);
  // metrics.csv so far is kept for the checkpoints, and a checkpoint file holds a copy.
  estimate->record_bytes = o.checkpoint_every > 0 ? 2 * csv_bytes : csv_bytes;
  if (auto e = train::check_memory_budget(*estimate, memory_option(*args, *estimate, o.model.kind)))
    return bad_input(io, "train", e->message);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return bad_input(io, "train", "option '--out': cannot create '" + out_dir + "': " + ec.message());
  // One run per folder: a second one would remove the first's temporary files and checkpoint.
  auto lock = FolderLock::acquire(out_dir, "mxlab train");
  if (!lock) return bad_input(io, "train", "option '--out': " + lock.error().message);
  const bool timing = !args->flag("no-timing");
  const std::string identity = run_identity(*args, specs, train::recipe_text(o.recipe));
  const std::string checkpoint_path = out_dir + "/checkpoint.bin";
  std::vector<OperandColumn> columns;
  std::map<std::string, OperandTotals> totals;
  bool header = false;
  std::string csv_text;  // metrics.csv so far: what a checkpoint holds
  const bool checkpoint_there = std::filesystem::symlink_status(checkpoint_path, ec).type() != std::filesystem::file_type::not_found;
  if (args->flag("resume") && checkpoint_there) {
    // Its size is checked against the largest checkpoint this run can write before it is read.
    const double limit = static_cast<double>(kCheckpointMagic.size() + kChecksumBytes + 5 * 40 + identity.size()) +
                         static_cast<double>(estimate->max_state_bytes) +
                         static_cast<double>(operands) * static_cast<double>(4 * (longest_key + 13) + longest_key + 160) +
                         300.0 + static_cast<double>(o.steps) * (12.0 * 24 + static_cast<double>(metric_columns) * 24);
    auto cp = read_checkpoint(checkpoint_path, limit >= 1.8e19 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(limit));
    if (!cp) return bad_input(io, "train", "option '--resume': " + cp.error().message);
    const std::string cp_name = "checkpoint '" + checkpoint_path + "'";
    if (cp->sections["identity"] != identity)
      return bad_input(io, "train", "option '--resume': " + cp_name + " belongs to a run with other options (" +
                                        first_difference(cp->sections["identity"], identity) + ")");
    o.resume_state = std::move(cp->sections["state"]);
    auto done = train::check_resume_state(*data, o);
    if (!done) return bad_input(io, "train", "option '--resume': " + cp_name + ": " + done.error().message);
    auto cols = parse_columns(cp->sections["columns"], *done);
    if (!cols) return bad_input(io, "train", "option '--resume': " + cp_name + " is damaged (its operand columns)");
    for (const auto& [c, t] : *cols) {
      columns.push_back(c);
      totals[c.key] = t;
    }
    csv_text = std::move(cp->sections["csv"]);
    if (const auto why = metrics_mismatch(csv_text, columns, *done); !why.empty())
      return bad_input(io, "train", "option '--resume': " + cp_name + " does not hold together: " + why);
    if (const auto why = disk_metrics_mismatch(out_dir + "/metrics.csv", csv_text); !why.empty())
      return bad_input(io, "train", "option '--resume': '" + out_dir + "/metrics.csv' " + why +
                                        " (another run's; move it away to resume)");
    header = true;
  } else {
    if (args->flag("resume")) io.err << "mxlab train: no checkpoint in " << out_dir << "; starting at step 1\n";
    std::filesystem::remove(checkpoint_path, ec);  // a finished or other run's checkpoint is not resumed later
  }
  // Temporary files of a killed run (".NAME.tmp-PID-N", never renamed) are removed before this run writes.
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* own : {".metrics.csv.tmp-", ".summary.json.tmp-", ".recipe.txt.tmp-", ".checkpoint.bin.tmp-"})
      if (name.rfind(own, 0) == 0) std::filesystem::remove(entry.path(), ec);
  }
  auto csv = AtomicFile::create(out_dir + "/metrics.csv", "CSV");
  if (!csv) return bad_input(io, "train", csv.error().message);
  csv->write(csv_text);
  auto emit = [&](const std::string& line) {
    csv->write(line);
    csv_text += line;
  };

  const auto start = std::chrono::steady_clock::now();
  double last_print = -1;
  auto on_step = [&](const train::StepMetrics& m) {
    if (!header) {
      for (const auto& op : m.operands)
        columns.push_back({op.layer + "." + std::string(train::role_name(op.role)), op.delayed});
      emit(csv_header(columns));
      header = true;
    }
    std::string row = std::to_string(m.step) + "," + num(m.loss) + "," + (data->is_text ? "" : num(m.accuracy)) + "," +
                      (data->is_text ? num(m.bpc) : "") + "," + num(m.lr) + "," + num(m.loss_scale) + "," +
                      (m.skipped ? "1" : "0") + "," + std::to_string(m.skipped_total) + "," +
                      (timing ? num(m.seconds) : "") + ",";
    if (m.validation)
      row += num(m.validation->loss) + "," + (data->is_text ? "" : num(m.validation->accuracy)) + "," +
             (data->is_text ? num(m.validation->bpc) : "");
    else row += ",,";
    std::map<std::string, const train::OperandMetric*> by_key;
    for (const auto& op : m.operands) by_key[op.layer + "." + std::string(train::role_name(op.role))] = &op;
    for (const auto& c : columns) {
      auto it = by_key.find(c.key);
      if (it == by_key.end()) {
        row += c.delayed ? ",,,," : ",,";
        continue;
      }
      const train::OperandMetric& op = *it->second;
      row += "," + num(op.underflow_ratio()) + "," + num(op.mse);
      if (c.delayed) row += "," + num(op.scale) + "," + num(op.saturation_ratio());
      auto& t = totals[c.key];
      ++t.steps;
      t.nonzero += op.nonzero;
      t.underflow += op.underflow;
      t.count += op.count;
      t.saturated += op.saturated;
      t.mse_sum += op.mse;
    }
    emit(row + "\n");
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
  o.on_checkpoint = [&](std::int64_t, const std::string& state) -> std::optional<Error> {
    std::string cols;
    for (const auto& c : columns) {
      const auto& t = totals[c.key];
      cols += c.key + " " + (c.delayed ? "1" : "0") + " " + std::to_string(t.steps) + " " + std::to_string(t.nonzero) +
              " " + std::to_string(t.underflow) + " " + std::to_string(t.count) + " " + std::to_string(t.saturated) +
              " " + hexfloat(t.mse_sum) + "\n";
    }
    auto w = write_file_atomic(checkpoint_path,
                               checkpoint_bytes({{"identity", identity}, {"state", state}, {"csv", csv_text}, {"columns", cols}}),
                               "checkpoint");
    if (!w) return w.error();
    return std::nullopt;
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
  j << "{\n  \"model\": " << json_quote(o.model.kind) << ",\n  \"data\": " << json_quote(data->name)
    << ",\n  \"recipe\": " << json_quote(o.recipe.name) << ",\n  \"recipe_text\": " << json_quote(train::recipe_text(o.recipe))
    << ",\n  \"parameters\": " << result->parameters << ",\n  \"steps\": " << result->steps_done
    << ",\n  \"cancelled\": " << (result->cancelled ? "true" : "false") << ",\n  \"skipped_steps\": " << result->skipped
    << ",\n  \"final_loss_scale\": " << json_number(result->final_loss_scale)
    << ",\n  \"train_seconds\": " << (timing ? json_number(result->seconds) : "null")
    << ",\n  \"seconds_per_step\": "
    << (timing ? json_number(result->seconds / static_cast<double>(std::max<std::int64_t>(1, result->steps_done))) : "null")
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
  for (std::size_t i = 0; i < columns.size(); ++i) {
    const auto& t = totals[columns[i].key];
    j << (i ? "," : "") << "\n    {\"operand\": " << json_quote(columns[i].key) << ", \"metric_steps\": " << t.steps
      << ", \"underflow_ratio\": "
      << json_number(t.nonzero > 0 ? static_cast<double>(t.underflow) / static_cast<double>(t.nonzero) : 0.0)
      << ", \"mean_mse\": " << json_number(t.steps > 0 ? t.mse_sum / static_cast<double>(t.steps) : 0.0);
    if (columns[i].delayed)
      j << ", \"saturation_ratio\": "
        << json_number(t.count > 0 ? static_cast<double>(t.saturated) / static_cast<double>(t.count) : 0.0);
    j << "}";
  }
  j << (columns.empty() ? "]" : "\n  ]") << ",\n  \"provenance\": " << provenance_json(prov) << "\n}\n";
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
  // A finished run's checkpoint is spent; a stopped run keeps it for --resume.
  if (!result->cancelled) std::filesystem::remove(checkpoint_path, ec);
  io.out << "\nwrote " << out_dir << "/metrics.csv, summary.json, recipe.txt"
         << (result->cancelled && o.checkpoint_every > 0 ? ", checkpoint.bin (--resume continues)" : "") << "\n";
  return kExitOk;
}

}  // namespace mxlab::cli
