// The record of a training run: operand metric totals, metrics.csv, summary.json, recipe.txt and checkpoints.
#include "mxlab/train/run_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string_view>

#include "mxlab/core/atomic_file.hpp"
#include "mxlab/core/folder_lock.hpp"
#include "mxlab/core/small_file.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/io/sha256.hpp"

namespace mxlab::train {

// ---- totals

void OperandTotals::add(const OperandMetric& m) {
  ++steps;
  nonzero += m.nonzero;
  underflow += m.underflow;
  count += m.count;
  saturated += m.saturated;
  mse_sum += m.mse;
  squared_error += m.mse * static_cast<double>(m.count);
}

double OperandTotals::underflow_ratio() const {
  return nonzero > 0 ? static_cast<double>(underflow) / static_cast<double>(nonzero) : 0.0;
}
double OperandTotals::saturation_ratio() const {
  return count > 0 ? static_cast<double>(saturated) / static_cast<double>(count) : 0.0;
}
double OperandTotals::mean_mse() const { return steps > 0 ? mse_sum / static_cast<double>(steps) : 0.0; }
double OperandTotals::weighted_mse() const { return count > 0 ? squared_error / static_cast<double>(count) : 0.0; }

namespace {
std::string operand_key(const OperandMetric& m) { return m.layer + "." + std::string(role_name(m.role)); }
}  // namespace

void MetricTotals::add(const StepMetrics& m) {
  for (const auto& op : m.operands) {
    const std::string key = operand_key(op);
    auto it = index_.find(key);
    if (it == index_.end()) {
      it = index_.emplace(key, columns_.size()).first;
      columns_.push_back({key, op.layer, op.role, op.delayed});
      totals_.emplace_back();
    }
    totals_[it->second].add(op);
  }
}

void MetricTotals::set(const OperandColumn& column, const OperandTotals& totals) {
  auto it = index_.find(column.key);
  if (it == index_.end()) {
    it = index_.emplace(column.key, columns_.size()).first;
    columns_.push_back(column);
    totals_.emplace_back();
  }
  totals_[it->second] = totals;
}

const OperandTotals& MetricTotals::at(const std::string& key) const {
  static const OperandTotals kNone;
  const auto it = index_.find(key);
  return it == index_.end() ? kNone : totals_[it->second];
}

OperandTotals MetricTotals::of_role(Role role) const {
  OperandTotals sum;
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].role != role) continue;
    const OperandTotals& t = totals_[i];
    sum.steps += t.steps;
    sum.nonzero += t.nonzero;
    sum.underflow += t.underflow;
    sum.count += t.count;
    sum.saturated += t.saturated;
    sum.mse_sum += t.mse_sum;
    sum.squared_error += t.squared_error;
  }
  return sum;
}

// ---- the plan

Result<RecordPlan> plan_record(const TrainData& data, const TrainOptions& o) {
  auto names = gemm_layers(data, o.model);
  if (!names) return names.error();
  auto table = LayerFormatTable::make(o.recipe);
  if (!table) return make_error("option '--recipe': " + table.error().message);
  RecordPlan p;
  for (const auto& l : *names) {
    auto f = table->formats(l);
    if (!f) return make_error("option '--recipe': " + f.error().message);
    for (const auto& role : *f)
      if (role) {
        ++p.operands;
        p.metric_columns += o.recipe.delayed.enabled && !role->layout.scale ? 4 : 2;
      }
    p.longest_key = std::max(p.longest_key, l.size() + 5);
  }
  const double columns = static_cast<double>(p.metric_columns);
  const double metric_rows = o.metrics_every > 0 ? static_cast<double>(o.steps / o.metrics_every + 1) : 0.0;
  const double csv_bytes = static_cast<double>(o.steps) * (100.0 + 2.0 * columns) + metric_rows * 16.0 * columns;
  // metrics.csv so far is kept for the checkpoints, and a checkpoint file holds a copy.
  p.record_bytes = o.checkpoint_every > 0 ? 2 * csv_bytes : csv_bytes;
  return p;
}

namespace {

// ---- numbers and files

std::string num(double v) {
  if (!std::isfinite(v)) return v != v ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string json_number(double v) { return std::isfinite(v) ? num(v) : "null"; }

std::string hexfloat(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

/// The names of a run's files in its folder.
constexpr const char* kRunFiles[] = {"metrics.csv", "summary.json", "recipe.txt", "checkpoint.bin"};

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

// ---- the checkpoint

/// DIR/checkpoint.bin: "mxlab train checkpoint 2\n", then sections "NAME LENGTH\n" followed by LENGTH bytes:
/// identity (RecordSettings::identity), state (the trainer's), csv (metrics.csv so far), columns (the operand
/// columns and their running sums, doubles as hexadecimal floats so they come back exactly), and last
/// "sha256 64\n" with the SHA-256 of every byte before it, checked before anything in the file is used.
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
    const auto mse_sum = parse_double(mse);
    const auto dot = c.key.rfind('.');
    const auto role = dot == std::string::npos ? Result<Role>(make_error("")) : parse_role(c.key.substr(dot + 1));
    if (!mse_sum || !role) return std::nullopt;
    t.mse_sum = *mse_sum;
    c.layer = c.key.substr(0, dot);
    c.role = *role;
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

}  // namespace

// ---- the record

std::optional<Error> check_data_fit(const TrainData& data, const TrainOptions& o) {
  if (o.model.kind.traits().text != data.is_text)
    return make_error("option '--model' " + std::string(o.model.kind.name()) + " does not fit the data " + data.name +
                      " (the transformer takes text:NAME, the other models images)");
  if (!data.is_text) return std::nullopt;
  // Training draws windows of context + 1 characters; validation needs at least one.
  const std::string context = "option '--context " + std::to_string(o.model.context) + "': ";
  const std::string window = std::to_string(o.model.context + 1);
  if (static_cast<std::int64_t>(data.train_tokens.size()) <= o.model.context + 1)
    return make_error(context + "the training text of " + data.name + " (" + std::to_string(data.train_tokens.size()) +
                      " characters) is too short for windows of " + window);
  if (static_cast<std::int64_t>(data.validation_tokens.size()) < o.model.context + 1)
    return make_error(context + "the validation text of " + data.name + " (its last " +
                      std::to_string(data.validation_tokens.size()) + " characters) holds no window of " + window +
                      ", so nothing would be validated");
  return std::nullopt;
}

std::optional<Error> check_out_dir(const std::string& out_dir) {
  if (out_dir.empty()) return make_error("option '--out' needs a folder name");
  if (std::error_code ec; std::filesystem::exists(out_dir, ec) && !std::filesystem::is_directory(out_dir, ec))
    return make_error("option '--out': '" + out_dir + "' exists and is not a folder");
  // The run's files replace what is there at the end; a folder or a device under one of their names would make
  // the run fail only then.
  for (const char* file : kRunFiles) {
    const std::string path = out_dir + "/" + file;
    std::error_code ec;
    const auto type = std::filesystem::symlink_status(path, ec).type();
    if (!ec && type != std::filesystem::file_type::not_found && type != std::filesystem::file_type::regular &&
        type != std::filesystem::file_type::symlink)
      return make_error("option '--out': '" + path + "' is not a regular file, so the run could not replace it");
  }
  return std::nullopt;
}

struct RunRecord::State {
  const TrainData* data = nullptr;
  const TrainOptions* options = nullptr;
  RecordSettings settings;
  FolderLock lock;
  std::optional<AtomicFile> csv;
  std::vector<OperandColumn> columns;  ///< metrics.csv's operand columns: those of the first step
  MetricTotals totals;
  bool header = false;
  std::string csv_text;  ///< metrics.csv so far: what a checkpoint holds
  std::string note;

  std::string checkpoint_path() const { return settings.out_dir + "/checkpoint.bin"; }
  void emit(const std::string& line) {
    csv->write(line);
    csv_text += line;
  }
  /// Resumes from the checkpoint: the options' resume_state, the columns, their totals and the metrics so far.
  std::optional<Error> resume(TrainOptions& o, const RecordPlan& plan, const MemoryEstimate& estimate);
};

std::optional<Error> RunRecord::State::resume(TrainOptions& o, const RecordPlan& plan, const MemoryEstimate& estimate) {
  // Its size is checked against the largest checkpoint this run can write before it is read.
  const double limit =
      static_cast<double>(kCheckpointMagic.size() + kChecksumBytes + 5 * 40 + settings.identity.size()) +
      static_cast<double>(estimate.max_state_bytes) +
      static_cast<double>(plan.operands) * static_cast<double>(4 * (plan.longest_key + 13) + plan.longest_key + 160) +
      300.0 + static_cast<double>(o.steps) * (12.0 * 24 + static_cast<double>(plan.metric_columns) * 24);
  auto cp = read_checkpoint(checkpoint_path(), limit >= 1.8e19 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(limit));
  if (!cp) return make_error("option '--resume': " + cp.error().message);
  const std::string cp_name = "option '--resume': checkpoint '" + checkpoint_path() + "'";
  if (cp->sections["identity"] != settings.identity)
    return make_error(cp_name + " belongs to a run with other options (" +
                      first_difference(cp->sections["identity"], settings.identity) + ")");
  o.resume_state = std::move(cp->sections["state"]);
  auto done = check_resume_state(*data, o);
  if (!done) return make_error(cp_name + ": " + done.error().message);
  if (*done == o.steps)
    return make_error(cp_name + " holds a finished run (step " + std::to_string(*done) + " of " + std::to_string(o.steps) +
                      "): nothing to resume");
  auto cols = parse_columns(cp->sections["columns"], *done);
  if (!cols) return make_error(cp_name + " is damaged (its operand columns)");
  for (const auto& [c, t] : *cols) {
    columns.push_back(c);
    totals.set(c, t);
  }
  csv_text = std::move(cp->sections["csv"]);
  if (const auto why = metrics_mismatch(csv_text, columns, *done); !why.empty())
    return make_error(cp_name + " does not hold together: " + why);
  if (const auto why = disk_metrics_mismatch(settings.out_dir + "/metrics.csv", csv_text); !why.empty())
    return make_error("option '--resume': '" + settings.out_dir + "/metrics.csv' " + why +
                      " (another run's; move it away to resume)");
  header = true;
  return std::nullopt;
}

RunRecord::RunRecord(std::unique_ptr<State> s) : s_(std::move(s)) {}
RunRecord::RunRecord(RunRecord&&) noexcept = default;
RunRecord& RunRecord::operator=(RunRecord&&) noexcept = default;
RunRecord::~RunRecord() = default;

Result<RunRecord> RunRecord::open(const TrainData& data, TrainOptions& o, const RecordSettings& settings,
                                  const RecordPlan& plan, const MemoryEstimate& estimate) {
  const std::string& out_dir = settings.out_dir;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return make_error("option '--out': cannot create '" + out_dir + "': " + ec.message());
  // One run per folder: a second one would remove the first's temporary files and checkpoint.
  auto lock = FolderLock::acquire(out_dir, "mxlab train");
  if (!lock) return make_error("option '--out': " + lock.error().message);
  auto s = std::make_unique<State>(State{&data, &o, settings, std::move(*lock), std::nullopt, {}, {}, false, {}, {}});
  const bool checkpoint_there =
      std::filesystem::symlink_status(s->checkpoint_path(), ec).type() != std::filesystem::file_type::not_found;
  if (settings.resume && checkpoint_there) {
    if (auto e = s->resume(o, plan, estimate)) return *e;
  } else {
    if (settings.resume) s->note = "no checkpoint in " + out_dir + "; starting at step 1";
    std::filesystem::remove(s->checkpoint_path(), ec);  // a finished or other run's checkpoint is not resumed later
  }
  // Temporary files of a killed run (".NAME.tmp-PID-N", never renamed) are removed before this run writes.
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* own : kRunFiles)
      if (name.rfind("." + std::string(own) + ".tmp-", 0) == 0) std::filesystem::remove(entry.path(), ec);
  }
  auto csv = AtomicFile::create(out_dir + "/metrics.csv", "CSV");
  if (!csv) return csv.error();
  s->csv.emplace(std::move(*csv));
  s->csv->write(s->csv_text);
  return RunRecord(std::move(s));
}

const std::string& RunRecord::note() const { return s_->note; }
const MetricTotals& RunRecord::totals() const { return s_->totals; }

void RunRecord::step(const StepMetrics& m) {
  State& s = *s_;
  const bool text = s.data->is_text;
  if (!s.header) {
    for (const auto& op : m.operands) s.columns.push_back({operand_key(op), op.layer, op.role, op.delayed});
    s.emit(csv_header(s.columns));
    s.header = true;
  }
  std::string row = std::to_string(m.step) + "," + num(m.loss) + "," + (text ? "" : num(m.accuracy)) + "," +
                    (text ? num(m.bpc) : "") + "," + num(m.lr) + "," + num(m.loss_scale) + "," + (m.skipped ? "1" : "0") +
                    "," + std::to_string(m.skipped_total) + "," + (s.settings.timing ? num(m.seconds) : "") + ",";
  if (m.validation)
    row += num(m.validation->loss) + "," + (text ? "" : num(m.validation->accuracy)) + "," + (text ? num(m.validation->bpc) : "");
  else row += ",,";
  std::map<std::string, const OperandMetric*> by_key;
  for (const auto& op : m.operands) by_key[operand_key(op)] = &op;
  StepMetrics counted;  // the operands of metrics.csv's columns: those the totals take
  counted.operands.reserve(s.columns.size());
  for (const auto& c : s.columns) {
    auto it = by_key.find(c.key);
    if (it == by_key.end()) {
      row += c.delayed ? ",,,," : ",,";
      continue;
    }
    const OperandMetric& op = *it->second;
    row += "," + num(op.underflow_ratio()) + "," + num(op.mse);
    if (c.delayed) row += "," + num(op.scale) + "," + num(op.saturation_ratio());
    counted.operands.push_back(op);
  }
  s.totals.add(counted);
  s.emit(row + "\n");
}

std::optional<Error> RunRecord::checkpoint(const std::string& state) {
  const State& s = *s_;
  std::string cols;
  for (const auto& c : s.columns) {
    const auto& t = s.totals.at(c.key);
    cols += c.key + " " + (c.delayed ? "1" : "0") + " " + std::to_string(t.steps) + " " + std::to_string(t.nonzero) + " " +
            std::to_string(t.underflow) + " " + std::to_string(t.count) + " " + std::to_string(t.saturated) + " " +
            hexfloat(t.mse_sum) + "\n";
  }
  auto w = write_file_atomic(
      s.checkpoint_path(),
      checkpoint_bytes({{"identity", s.settings.identity}, {"state", state}, {"csv", s.csv_text}, {"columns", cols}}),
      "checkpoint");
  if (!w) return w.error();
  return std::nullopt;
}

void RunRecord::discard() {
  if (s_->csv) s_->csv->discard();
}

Result<CheckpointContents> read_checkpoint_file(const std::string& path, std::uint64_t max_bytes) {
  auto cp = read_checkpoint(path, max_bytes);
  if (!cp) return cp.error();
  return CheckpointContents{std::move(cp->sections["identity"]), std::move(cp->sections["state"])};
}

void add_run_inputs(Provenance& prov, const TrainData& data, const TrainOptions& o) {
  prov.inputs.emplace_back("seed", std::to_string(o.seed));
  prov.inputs.emplace_back("model", std::string(o.model.kind.name()));
  prov.inputs.emplace_back("data", data.name);
  for (std::size_t i = 0; i < data.files.size(); ++i) prov.inputs.emplace_back("file" + std::to_string(i + 1), data.files[i]);
  prov.inputs.emplace_back("recipe", o.recipe.name);
  prov.inputs.emplace_back("steps", std::to_string(o.steps));
  prov.inputs.emplace_back("batch", std::to_string(o.batch));
  prov.inputs.emplace_back("lr", num(o.optimizer.lr));
  prov.inputs.emplace_back("optimizer", o.optimizer.kind);
  prov.inputs.emplace_back("threads", std::to_string(o.threads));
}

namespace {

/// summary.json: the run's final figures, its operands' averages and the provenance.
std::string summary_json(const TrainData& data, const TrainOptions& o, const TrainResult& result,
                         const std::vector<OperandColumn>& columns, const MetricTotals& totals, bool timing,
                         const Provenance& prov) {
  std::ostringstream j;
  j << "{\n  \"model\": " << json_quote(o.model.kind.name()) << ",\n  \"data\": " << json_quote(data.name)
    << ",\n  \"recipe\": " << json_quote(o.recipe.name) << ",\n  \"recipe_text\": " << json_quote(recipe_text(o.recipe))
    << ",\n  \"parameters\": " << result.parameters << ",\n  \"steps\": " << result.steps_done
    << ",\n  \"cancelled\": " << (result.cancelled ? "true" : "false") << ",\n  \"skipped_steps\": " << result.skipped
    << ",\n  \"final_loss_scale\": " << json_number(result.final_loss_scale)
    << ",\n  \"train_seconds\": " << (timing ? json_number(result.seconds) : "null") << ",\n  \"seconds_per_step\": "
    << (timing ? json_number(result.seconds / static_cast<double>(std::max<std::int64_t>(1, result.steps_done))) : "null")
    << ",\n  \"final_train_loss\": " << json_number(result.losses.empty() ? NAN : result.losses.back());
  auto eval_json = [&](const char* name, const std::optional<EvalMetrics>& e) {
    if (!e) return;
    j << ",\n  \"" << name << "\": {\"loss\": " << json_number(e->loss) << ", "
      << (data.is_text ? "\"bpc\": " + json_number(e->bpc) : "\"accuracy\": " + json_number(e->accuracy))
      << ", \"examples\": " << e->examples << "}";
  };
  eval_json("validation", result.validation);
  eval_json("test", result.test);
  if (data.is_text)
    j << ",\n  \"unigram_entropy_bpc\": " << json_number(unigram_entropy_bits(data.validation_tokens, data.vocabulary()));
  j << ",\n  \"operands\": [";
  for (std::size_t i = 0; i < columns.size(); ++i) {
    const auto& t = totals.at(columns[i].key);
    j << (i ? "," : "") << "\n    {\"operand\": " << json_quote(columns[i].key) << ", \"metric_steps\": " << t.steps
      << ", \"underflow_ratio\": " << json_number(t.underflow_ratio()) << ", \"mean_mse\": " << json_number(t.mean_mse());
    if (columns[i].delayed) j << ", \"saturation_ratio\": " << json_number(t.saturation_ratio());
    j << "}";
  }
  j << (columns.empty() ? "]" : "\n  ]") << ",\n  \"provenance\": " << provenance_json(prov) << "\n}\n";
  return j.str();
}

}  // namespace

std::optional<Error> RunRecord::finish(const TrainResult& result, Provenance provenance) {
  State& s = *s_;
  add_run_inputs(provenance, *s.data, *s.options);
  const std::string summary =
      summary_json(*s.data, *s.options, result, s.columns, s.totals, s.settings.timing, provenance);
  if (auto c = s.csv->commit(); !c) return c.error();
  if (auto w = write_file_atomic(s.settings.out_dir + "/recipe.txt", recipe_text(s.options->recipe), "recipe"); !w)
    return w.error();
  if (auto w = write_file_atomic(s.settings.out_dir + "/summary.json", summary, "JSON"); !w) return w.error();
  // A finished run's checkpoint is spent; a stopped run keeps it for --resume.
  std::error_code ec;
  if (!result.cancelled && !s.settings.keep_checkpoint) std::filesystem::remove(s.checkpoint_path(), ec);
  return std::nullopt;
}

}  // namespace mxlab::train
