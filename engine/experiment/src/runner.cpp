// The experiment runner: parallel points, the SQLite results database, resume, shards, merge and outputs.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include <sqlite3.h>

#include "mxlab/core/folder_lock.hpp"
#include "mxlab/core/provenance.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/core/threads.hpp"
#include "mxlab/experiment/runner.hpp"
#include "mxlab/io/sha256.hpp"
#include "mxlab/ops/ops.hpp"
#include "file_kind.hpp"

namespace mxlab::experiment {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDatabase = "results.sqlite";
/// The layout of the database (meta 'schema'); databases of another layout are refused, not guessed at.
constexpr const char* kSchema = "mxlab results 2";
/// Most points an experiment can have (as the parser's limit; a database claiming more is damaged).
constexpr std::size_t kMaxStoredPoints = std::size_t{1} << 20;
/// Marks the messages of a failing disk (is_storage_failure).
constexpr std::string_view kStorageFailure = "storage failed: ";

/// Text read from a database, quoted for a one-line message.
std::string shown(const std::string& text) { return quote_input(printable(text)); }

bool parse_count(const std::string& text, std::size_t& out) {
  const auto v = parse_whole<std::size_t>(text);
  if (v) out = *v;
  return v.has_value();
}

/// "I/N" with 0 <= I < N.
bool parse_shard_text(const std::string& text, std::size_t& shard, std::size_t& shards) {
  const auto slash = text.find('/');
  return slash != std::string::npos && parse_count(text.substr(0, slash), shard) &&
         parse_count(text.substr(slash + 1), shards) && shards >= 1 && shard < shards;
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

/// A text column of the current row; nullopt when it holds NULL, a number or a blob.
std::optional<std::string> text_column(sqlite3_stmt* st, int col) {
  if (sqlite3_column_type(st, col) != SQLITE_TEXT) return std::nullopt;
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, col));
  if (!p) return std::nullopt;
  return std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(st, col)));
}

std::string column_type_name(sqlite3_stmt* st, int col) {
  switch (sqlite3_column_type(st, col)) {
    case SQLITE_NULL: return "NULL";
    case SQLITE_INTEGER: return "an integer";
    case SQLITE_FLOAT: return "a number";
    case SQLITE_BLOB: return "a blob";
    default: return "text";
  }
}

/// A prepared statement, finalized when it goes.
class Statement {
 public:
  Statement() = default;
  ~Statement() {
    if (st_) sqlite3_finalize(st_);
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  sqlite3_stmt** out() { return &st_; }
  sqlite3_stmt* get() const { return st_; }

 private:
  sqlite3_stmt* st_ = nullptr;
};

/// The results database of one folder: a table of meta data (the experiment, its checksum, the shard, the
/// version) and one row per finished point with its checksum.
class Store {
 public:
  ~Store() {
    if (db_) sqlite3_close(db_);
  }
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Opens the database at `path`: created when `create`, else it must exist. `write`: it will be written (a
  /// read-only database is refused now, not at the first point).
  static Result<std::unique_ptr<Store>> open(const std::string& path, bool create, bool write) {
    auto s = std::make_unique<Store>();
    s->path_ = path;
    s->name_ = "results database " + quote_input(path);
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) return make_error(s->name_ + ": " + ec.message());
    if (fs::exists(st) && !fs::is_regular_file(st)) return make_error(s->name_ + ": is " + file_kind(st) + ", not a database");
    if (!fs::exists(st) && !create) return make_error(s->name_ + ": does not exist");
    const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX;
    if (const int rc = sqlite3_open_v2(path.c_str(), &s->db_, flags, nullptr); rc != SQLITE_OK) return s->fail(rc, "");
    sqlite3_extended_result_codes(s->db_, 1);
    if (write && sqlite3_db_readonly(s->db_, "main") == 1)
      return make_error(s->name_ + ": is read-only; points are recorded in it (make it writable or choose another folder)");
    sqlite3_busy_timeout(s->db_, 10000);
    // Reading the list of tables is the first access: a file that is not SQLite fails here, unchanged.
    Statement q;
    int rc = sqlite3_prepare_v2(s->db_, "SELECT name FROM sqlite_master WHERE type = 'table'", -1, q.out(), nullptr);
    if (rc != SQLITE_OK) return s->fail(rc, "");
    std::set<std::string> tables;
    while ((rc = sqlite3_step(q.get())) == SQLITE_ROW)
      if (auto name = text_column(q.get(), 0)) tables.insert(*name);
    if (rc != SQLITE_DONE) return s->fail(rc, "");
    s->empty_ = tables.empty();
    if (!s->empty_ && (!tables.count("meta") || !tables.count("points")))
      return make_error(s->name_ + ": is not a results database (it has no table '" +
                        std::string(tables.count("meta") ? "points" : "meta") + "')");
    if (write) {
      // WAL: a commit survives the process being killed right after it; one transaction per point.
      if (auto err = s->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")) return *err;
    }
    return s;
  }

  /// Whether the file holds no tables yet (new, or created by a run killed before its first commit).
  bool empty() const { return empty_; }

  /// Creates the tables and records the meta data in one transaction.
  std::optional<Error> init(const std::vector<std::pair<std::string, std::string>>& meta) {
    if (auto e = exec("BEGIN;"
                      "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                      "CREATE TABLE IF NOT EXISTS points(idx INTEGER PRIMARY KEY, key TEXT NOT NULL, result TEXT NOT NULL,"
                      " seconds REAL NOT NULL, sha256 TEXT NOT NULL);"))
      return e;
    auto kv = meta;
    kv.emplace_back("schema", kSchema);
    if (auto e = insert_meta(kv)) {
      exec("ROLLBACK");
      return e;
    }
    empty_ = false;
    return exec("COMMIT");
  }

  std::optional<Error> exec(const std::string& sql) {
    char* msg = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg);
    if (rc != SQLITE_OK) {
      const std::string text = msg ? msg : sqlite3_errstr(rc);
      sqlite3_free(msg);
      return fail(rc, "", text);
    }
    return std::nullopt;
  }

  std::optional<Error> set_meta(const std::vector<std::pair<std::string, std::string>>& kv) {
    if (auto e = exec("BEGIN")) return e;
    if (auto e = insert_meta(kv)) {
      exec("ROLLBACK");
      return e;
    }
    return exec("COMMIT");
  }

  /// Records one finished point (in its own transaction unless one is open).
  std::optional<Error> put(std::size_t idx, const StoredPoint& p) {
    Statement st;
    int rc = sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO points(idx, key, result, seconds, sha256) VALUES(?, ?, ?, ?, ?)",
                                -1, st.out(), nullptr);
    if (rc == SQLITE_OK) {
      sqlite3_bind_int64(st.get(), 1, static_cast<sqlite3_int64>(idx));
      sqlite3_bind_text(st.get(), 2, p.key.data(), static_cast<int>(p.key.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(st.get(), 3, p.result.data(), static_cast<int>(p.result.size()), SQLITE_TRANSIENT);
      sqlite3_bind_double(st.get(), 4, p.seconds);
      sqlite3_bind_text(st.get(), 5, p.sha256.data(), static_cast<int>(p.sha256.size()), SQLITE_TRANSIENT);
      rc = sqlite3_step(st.get());
    }
    if (rc != SQLITE_DONE) return fail(rc, "recording point " + std::to_string(idx));
    return std::nullopt;
  }

  /// Every meta value and point, checked (read_results_database).
  Result<ResultsDatabase> load() {
    ResultsDatabase d;
    d.path = path_;
    if (empty_) return make_error(name_ + ": holds no results (an empty database)");
    std::map<std::string, std::string> meta;
    {
      Statement st;
      int rc = sqlite3_prepare_v2(db_, "SELECT key, value FROM meta", -1, st.out(), nullptr);
      if (rc != SQLITE_OK) return fail(rc, "reading table 'meta'");
      while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
        auto k = text_column(st.get(), 0);
        if (!k) return make_error(name_ + ": table 'meta' holds a key that is " + column_type_name(st.get(), 0) + ", not text");
        auto v = text_column(st.get(), 1);
        if (!v) return make_error(name_ + ": meta " + shown(*k) + " is " + column_type_name(st.get(), 1) + ", not text");
        meta[*k] = std::move(*v);
      }
      if (rc != SQLITE_DONE) return fail(rc, "reading table 'meta'");
    }
    auto need = [&](const char* key) -> Result<std::string> {
      auto it = meta.find(key);
      if (it == meta.end()) return make_error(name_ + ": meta '" + key + "' is missing");
      return it->second;
    };
    auto schema = need("schema");
    if (!schema) return make_error(name_ + ": has no meta 'schema' (written by an older mxlab, or not a results database)");
    if (*schema != kSchema)
      return make_error(name_ + ": has schema " + shown(*schema) + ", not '" + kSchema + "' (written by another mxlab)");
    for (const char* key : {"experiment_sha256", "experiment_text", "experiment_path", "points", "shard", "version"})
      if (auto v = need(key); !v) return v.error();
    d.experiment_sha256 = meta["experiment_sha256"];
    d.experiment_text = meta["experiment_text"];
    d.experiment_path = meta["experiment_path"];
    d.version = meta["version"];
    if (!is_sha256_hex(d.experiment_sha256))
      return make_error(name_ + ": meta 'experiment_sha256' is " + shown(d.experiment_sha256) + ", not a SHA-256");
    if (sha256_hex(d.experiment_text) != d.experiment_sha256)
      return make_error(name_ + ": the experiment text does not match its checksum (edited or damaged)");
    if (!parse_count(meta["points"], d.points) || d.points < 1 || d.points > kMaxStoredPoints)
      return make_error(name_ + ": meta 'points' is " + shown(meta["points"]) + ", not a count from 1 to " +
                        std::to_string(kMaxStoredPoints));
    if (!parse_shard_text(meta["shard"], d.shard, d.shards))
      return make_error(name_ + ": meta 'shard' is " + shown(meta["shard"]) + ", not I/N with 0 <= I < N");
    if (d.version.empty()) return make_error(name_ + ": meta 'version' is empty");
    Statement st;
    int rc = sqlite3_prepare_v2(db_, "SELECT idx, key, result, seconds, sha256 FROM points ORDER BY idx", -1, st.out(), nullptr);
    if (rc != SQLITE_OK) return fail(rc, "reading table 'points'");
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      sqlite3_stmt* s = st.get();
      if (sqlite3_column_type(s, 0) != SQLITE_INTEGER)
        return make_error(name_ + ": a point's index is " + column_type_name(s, 0) + ", not an integer");
      const sqlite3_int64 idx = sqlite3_column_int64(s, 0);
      const std::string point = "point " + std::to_string(idx);
      if (idx < 0 || static_cast<std::uint64_t>(idx) >= d.points)
        return make_error(name_ + ": holds " + point + ", but the experiment has " + std::to_string(d.points) + " points (0 to " +
                          std::to_string(d.points - 1) + ")");
      const auto i = static_cast<std::size_t>(idx);
      if (i % d.shards != d.shard)
        return make_error(name_ + ": holds " + point + ", which is not in its shard " + meta["shard"]);
      StoredPoint p;
      const char* columns[] = {"key", "result", "seconds", "sha256"};
      for (int c = 1; c <= 4; ++c) {
        const int type = sqlite3_column_type(s, c);
        const bool ok = c == 3 ? (type == SQLITE_FLOAT || type == SQLITE_INTEGER) : type == SQLITE_TEXT;
        if (!ok)
          return make_error(name_ + ": " + point + ": column '" + columns[c - 1] + "' is " + column_type_name(s, c) + ", not " +
                            (c == 3 ? "a number" : "text"));
      }
      p.key = *text_column(s, 1);
      p.result = *text_column(s, 2);
      p.seconds = sqlite3_column_double(s, 3);
      p.sha256 = *text_column(s, 4);
      if (p.sha256 != result_checksum(d.experiment_sha256, i, p.key, p.result))
        return make_error(name_ + ": " + point + " does not match its checksum (its row was edited or damaged)");
      d.stored.emplace(i, std::move(p));
    }
    if (rc != SQLITE_DONE) return fail(rc, "reading table 'points'");
    return d;
  }

 private:
  std::optional<Error> insert_meta(const std::vector<std::pair<std::string, std::string>>& kv) {
    for (const auto& [k, v] : kv) {
      Statement st;
      int rc = sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", -1, st.out(), nullptr);
      if (rc == SQLITE_OK) {
        sqlite3_bind_text(st.get(), 1, k.data(), static_cast<int>(k.size()), SQLITE_TRANSIENT);
        sqlite3_bind_text(st.get(), 2, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
        rc = sqlite3_step(st.get());
      }
      if (rc != SQLITE_DONE) return fail(rc, "recording meta '" + k + "'");
    }
    return std::nullopt;
  }

  /// The error of a failed SQLite call (its message read before anything else clears it): a failing disk is
  /// a storage failure, everything else a problem of the file.
  Error fail(int rc, const std::string& doing, std::string text = "") const {
    if (text.empty()) text = db_ && sqlite3_errcode(db_) == rc ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    text = printable(text);  // SQLite's messages quote names read from the file
    const std::string what = doing.empty() ? "" : " (" + doing + ")";
    switch (rc & 0xff) {
      case SQLITE_FULL:
      case SQLITE_IOERR:
      case SQLITE_NOMEM:
      case SQLITE_BUSY:
      case SQLITE_LOCKED:
      case SQLITE_PROTOCOL:
        return make_error(name_ + ": " + std::string(kStorageFailure) + text + what);
      case SQLITE_READONLY:
        return make_error(name_ + ": is read-only" + what + "; points are recorded in it (make it writable or choose another folder)");
      case SQLITE_CORRUPT:
      case SQLITE_NOTADB:
        return make_error(name_ + ": is damaged or not a database (" + text + ")" + what);
      default:
        return make_error(name_ + ": " + text + what);
    }
  }

  sqlite3* db_ = nullptr;
  std::string path_, name_;
  bool empty_ = true;
};

void remove_database(const fs::path& dir) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(dir / (std::string(kDatabase) + suffix), ec);
}

Provenance run_provenance(const Experiment& e, std::size_t points) {
  Provenance p = build_provenance();
  p.simd_target = ops::simd_target();
  p.inputs.emplace_back("experiment", e.path);
  p.inputs.emplace_back("experiment_sha256", sha256_hex(e.text));
  p.inputs.emplace_back("points", std::to_string(points));
  for (const auto& in : e.inputs) {
    if (!in.source.empty()) {
      p.inputs.emplace_back("input." + in.name, in.source + (in.shape.empty() ? "" : " shape " + in.shape));
      if (in.source.rfind("gen:", 0) == 0) p.inputs.emplace_back("input." + in.name + ".seed", std::to_string(in.seed));
    } else {
      p.inputs.emplace_back("input." + in.name, "weights " + in.weights + " select " + in.select);
    }
  }
  for (const auto& file : input_files(e)) {
    // Only regular files are hashed: a merge's stored experiment may name a FIFO or a device on this machine.
    std::error_code ec;
    auto h = fs::is_regular_file(file, ec) ? sha256_file(file) : Result<std::string>(make_error("not a file"));
    p.inputs.emplace_back("sha256:" + file, h ? *h : "unreadable");
  }
  return p;
}

/// Every output of a complete run, built in memory before any is written.
struct Outputs {
  std::vector<std::pair<std::string, std::string>> files;  ///< relative path, bytes (before the plots)
  std::vector<std::pair<std::string, Figure>> figures;     ///< by [[plot]] name
  std::string checks;                                       ///< checks.md ("" = no expectations)
  std::vector<ExpectOutcome> expectations;
};

/// Builds every output of a complete run: a mistake in a table or plot is found before anything is written.
/// `computed_by`: the mxlab version that computed stored results redrawn by another (render), else "".
Result<Outputs> build_outputs(const Experiment& e, const std::vector<PointResult>& results, const std::string& computed_by = "") {
  for (std::size_t i = 0; i < results.size(); ++i)
    if (auto c = repeated_column(results[i]))
      return make_error("point " + std::to_string(i) + ": result column '" + *c +
                        "' appears twice in a row (a parameter and a measurement of one name; results of an older mxlab): "
                        "run without --resume to compute them again");
  Outputs out;
  Provenance prov = run_provenance(e, results.size());
  if (!computed_by.empty()) prov.inputs.emplace_back("results_computed_by", "mxlab " + computed_by);
  const AllResults all = gather(results);
  out.files.emplace_back("experiment.toml", e.text);
  out.files.emplace_back("provenance.json", provenance_json(prov));
  for (const auto& [set, rows] : all) {
    Table t = result_table(rows);
    if (set == "metrics" && !e.metrics.empty()) {
      // Keep the point's parameters and the metrics asked for.
      Table k;
      std::vector<std::size_t> keep;
      for (std::size_t c = 0; c < t.columns.size(); ++c) {
        const bool param = !rows.empty() && c < rows.front().cells.size() &&
                           std::any_of(e.axes.begin(), e.axes.end(), [&](const auto& a) { return a.first == t.columns[c]; });
        const bool wanted = std::find(e.metrics.begin(), e.metrics.end(), t.columns[c]) != e.metrics.end();
        if (param || wanted || t.columns[c] == "layer" || t.columns[c] == "input") {
          keep.push_back(c);
          k.add_column(t.columns[c], t.numeric[c]);
        }
      }
      for (const auto& r : t.rows) {
        std::vector<std::string> row;
        for (std::size_t c : keep) row.push_back(r[c]);
        k.rows.push_back(std::move(row));
      }
      t = std::move(k);
    }
    out.files.emplace_back("results/" + set + ".csv", to_csv(t));
    out.files.emplace_back("results/" + set + ".json", to_json(t, &prov));
  }
  std::map<std::string, Table> tables;
  for (const TableDef& d : e.tables) {
    auto t = build_table(e, d, all);
    if (!t) return t.error();
    tables[d.name] = std::move(*t);
  }
  for (const TableDef& d : e.tables) {
    const Table& t = tables[d.name];
    out.files.emplace_back("tables/" + d.name + ".csv", to_csv(t));
    const std::vector<std::string> caption = d.caption.empty() ? std::vector<std::string>{} : std::vector<std::string>{d.caption};
    out.files.emplace_back("tables/" + d.name + ".md", to_markdown(t, caption));
    out.files.emplace_back("tables/" + d.name + ".tex", table_latex(t, d));
  }
  for (const PlotDef& d : e.plots) {
    auto f = build_figure(e, d, all);
    if (!f) return f.error();
    out.figures.emplace_back(d.name, std::move(*f));
  }
  out.expectations = check_expectations(e, all, tables);
  if (!e.expects.empty()) {
    std::string md = "# Expectations of " + e.name + "\n\n| expectation | line | rows | result |\n|---|---:|---:|---|\n";
    for (const auto& o : out.expectations) {
      std::string detail;
      for (const auto& f : o.failures) detail += (detail.empty() ? "" : "; ") + f;
      md += "| " + o.name + " | " + std::to_string(o.line) + " | " + std::to_string(o.rows_checked) + " | " +
            (o.passed ? "passed" : "FAILED: " + detail) + " |\n";
    }
    out.checks = std::move(md);
  }
  return out;
}

/// Writes built outputs into `dir` (each file atomically); returns the summary with the files written.
Result<RunSummary> write_outputs(const fs::path& dir, const Outputs& out, const Renderer& render, RunSummary s) {
  auto put = [&](const std::string& rel, const std::string& content) -> std::optional<Error> {
    std::error_code ec;
    fs::create_directories((dir / rel).parent_path(), ec);
    if (auto err = write_file_atomic((dir / rel).string(), content)) return err;
    s.files.push_back(rel);
    return std::nullopt;
  };
  for (const auto& [name, content] : out.files)
    if (auto err = put(name, content)) return *err;
  for (const auto& [name, figure] : out.figures) {
    if (auto err = put("plots/" + name + ".json", figure_json(figure))) return *err;
    if (render) {
      std::error_code ec;
      fs::create_directories(dir / "plots", ec);
      if (auto err = render(figure, (dir / "plots" / name).string())) return *err;
      s.files.push_back("plots/" + name + ".png");
      s.files.push_back("plots/" + name + ".pdf");
    }
  }
  if (!out.checks.empty())
    if (auto err = put("checks.md", out.checks)) return *err;
  s.expectations = out.expectations;
  s.complete = true;
  return s;
}

/// The results of points 0 to n-1 (every one stored); an unreadable result names the database and the point.
/// `database` names the database of a point.
Result<std::vector<PointResult>> parse_all(const std::map<std::size_t, StoredPoint>& stored, std::size_t n,
                                           const std::function<std::string(std::size_t)>& database) {
  std::vector<PointResult> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto it = stored.find(i);
    if (it == stored.end()) return make_error("results database " + quote_input(database(i)) + ": point " + std::to_string(i) + " is missing");
    auto r = parse_result_json(it->second.result);
    if (!r) return make_error("results database " + quote_input(database(i)) + ": point " + std::to_string(i) + ": " + printable(r.error().message));
    out[i] = std::move(*r);
  }
  return out;
}

/// The meta data of a database of this experiment.
std::vector<std::pair<std::string, std::string>> run_meta(const Experiment& e, const std::string& experiment_path,
                                                         std::size_t points, const std::string& shard) {
  return {{"experiment_sha256", sha256_hex(e.text)},
          {"experiment_text", e.text},
          {"experiment_path", experiment_path},
          {"points", std::to_string(points)},
          {"shard", shard},
          {"version", build_provenance().version}};
}

/// Creates the folder (and its parents) and takes its lock for as long as the lock lives.
Result<FolderLock> lock_folder(const std::string& option, const std::string& folder, std::string_view command) {
  const fs::path dir(folder);
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return make_error(option + " " + quote_input(folder) + ": " + ec.message());
  if (fs::exists(st) && !fs::is_directory(st)) return make_error(option + " " + quote_input(folder) + ": is " + file_kind(st) + ", not a folder");
  fs::create_directories(dir, ec);
  if (ec) return make_error(option + " " + quote_input(folder) + ": " + ec.message());
  return FolderLock::acquire(folder, command);
}

}  // namespace

std::string result_checksum(const std::string& experiment_sha256, std::size_t index, const std::string& key,
                            const std::string& result) {
  Sha256 h;
  h.update(experiment_sha256);
  h.update("\n" + std::to_string(index) + "\n");
  h.update(key);
  h.update("\n");
  h.update(result);
  return h.hex_digest();
}

Result<ResultsDatabase> read_results_database(const std::string& path) {
  auto store = Store::open(path, false, false);
  if (!store) return store.error();
  return (*store)->load();
}

std::optional<Error> check_distinct_folders(const std::vector<Experiment>& experiments, const std::vector<std::string>& out_dirs) {
  std::map<std::string, std::size_t> seen;  // folder -> experiment
  for (std::size_t k = 0; k < experiments.size() && k < out_dirs.size(); ++k) {
    std::string dir = fs::absolute(out_dirs[k]).lexically_normal().string();
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    auto [it, fresh] = seen.emplace(dir, k);
    if (fresh) continue;
    const Experiment& first = experiments[it->second];
    const Experiment& again = experiments[k];
    if (fs::absolute(first.path).lexically_normal() == fs::absolute(again.path).lexically_normal())
      return make_error("experiment file " + quote_input(again.path) + " is given twice (its results go to " + quote_input(out_dirs[k]) + ")");
    return make_error("experiment files " + quote_input(first.path) + " and " + quote_input(again.path) + " are both named '" +
                      again.name + "': their results would replace each other in " + quote_input(out_dirs[k]) +
                      "; give each its own name");
  }
  return std::nullopt;
}

Result<std::vector<Point>> checked_points(const Experiment& e) {
  auto points = expand_points(e);
  if (!points) return points.error();
  for (const Point& p : *points)
    if (auto err = check_point(e, p)) return *err;
  return points;
}

bool is_storage_failure(const Error& e) { return e.message.find(kStorageFailure) != std::string::npos; }

Result<RunSummary> run_experiment(const Experiment& e, const RunOptions& o) {
  if (o.shards == 0 || o.shard >= o.shards) return make_error("shard " + std::to_string(o.shard) + "/" + std::to_string(o.shards) + ": expected I/N with 0 <= I < N");
  auto points = checked_points(e);
  if (!points) return points.error();
  RunSummary s;
  s.out_dir = o.out_dir.empty() ? "results/" + e.name : o.out_dir;
  s.points = points->size();
  const fs::path dir(s.out_dir);
  // One process at a time writes a results folder, for the whole run.
  auto folder_lock = lock_folder("--out", s.out_dir, "mxlab run");
  if (!folder_lock) return folder_lock.error();
  const std::string db_path = (dir / kDatabase).string();
  const std::string sha = sha256_hex(e.text);
  const std::string shard_text = std::to_string(o.shard) + "/" + std::to_string(o.shards);
  const std::string experiment_path = fs::absolute(e.path).lexically_normal().string();
  if (!o.resume) remove_database(dir);
  auto store = Store::open(db_path, true, true);
  if (!store) return store.error();
  std::map<std::size_t, StoredPoint> stored;
  if ((*store)->empty()) {
    if (auto err = (*store)->init(run_meta(e, experiment_path, points->size(), shard_text))) return *err;
  } else {
    // --resume: the database must be this experiment's, this shard's and this version's, every row intact.
    auto db = (*store)->load();
    if (!db) return db.error();
    if (db->experiment_sha256 != sha) {
      // Only the presentation changed: the stored results are redrawn, not recomputed.
      auto stored_e = parse_experiment(db->experiment_text, db->experiment_path);
      if (stored_e && !computation_difference(*stored_e, e))
        return make_error("--resume: the results in '" + s.out_dir + "' come from an experiment file that differs from " +
                          quote_input(e.path) + " only in its tables, plots or expectations; redraw them with: mxlab render " +
                          s.out_dir + " " + e.path);
      return make_error("--resume: the results in '" + s.out_dir +
                        "' come from a different experiment file; run without --resume to replace them");
    }
    if (db->shard != o.shard || db->shards != o.shards)
      return make_error("--resume: '" + s.out_dir + "' holds shard " + std::to_string(db->shard) + "/" +
                        std::to_string(db->shards) + ", not " + shard_text);
    if (db->version != build_provenance().version)
      return make_error("--resume: the results in '" + s.out_dir + "' were computed by mxlab " + shown(db->version) +
                        ", this is " + build_provenance().version + "; run without --resume to recompute them");
    if (db->points != points->size())
      return make_error("--resume: '" + s.out_dir + "' holds results of " + std::to_string(db->points) +
                        " points; the experiment has " + std::to_string(points->size()) +
                        " now (its inputs changed); run without --resume to replace them");
    if (auto err = (*store)->set_meta({{"experiment_path", experiment_path}})) return *err;
    stored = std::move(db->stored);
  }
  std::vector<std::size_t> todo;
  for (const Point& p : *points) {
    if (p.index % o.shards != o.shard) continue;
    auto it = stored.find(p.index);
    if (it != stored.end() && it->second.key == p.key()) {
      ++s.kept;
      continue;
    }
    todo.push_back(p.index);
  }

  // Points in parallel; each recorded in its own transaction as it finishes.
  const unsigned hw = hardware_threads();
  const unsigned jobs = std::max(1U, std::min<unsigned>(o.jobs, static_cast<unsigned>(std::max<std::size_t>(todo.size(), 1))));
  const unsigned threads = o.threads ? o.threads : std::max(1U, hw / jobs);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::optional<Error> failure;
  std::size_t done = 0;
  o.reporter.report(0, static_cast<std::int64_t>(todo.size()), "points");
  auto worker = [&] {
    while (!stop.load() && !o.reporter.cancelled()) {
      const std::size_t i = next.fetch_add(1);
      if (i >= todo.size()) return;
      const Point& p = (*points)[todo[i]];
      PointRun run;
      run.threads = threads;
      run.reporter.cancel = o.reporter.cancel;
      // A long point (training) reports its own steps: shown within the run's count of points.
      if (o.reporter.on_progress)
        run.reporter.on_progress = [&, index = p.index](const Progress& inner) {
          std::lock_guard<std::mutex> lock(mu);
          Progress outer;
          outer.done = static_cast<std::int64_t>(done);
          outer.total = static_cast<std::int64_t>(todo.size());
          outer.stage = "points";
          outer.part_done = inner.done;
          outer.part_total = inner.total;
          outer.part = "point " + std::to_string(index) + " " + inner.stage;
          o.reporter.on_progress(outer);
        };
      const auto t0 = std::chrono::steady_clock::now();
      auto r = run_point(e, p, run);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(mu);
      if (!r) {
        if (o.reporter.cancelled() && r.error().message == ops::kCancelled) return;
        if (!failure) failure = make_error("point " + std::to_string(p.index) + " " + p.key() + ": " + r.error().message);
        stop = true;
        return;
      }
      if (auto c = repeated_column(*r)) {
        if (!failure) failure = make_error("point " + std::to_string(p.index) + " " + p.key() + ": result column '" + *c + "' appears twice in a row");
        stop = true;
        return;
      }
      StoredPoint row{p.key(), result_json(*r), seconds, ""};
      row.sha256 = result_checksum(sha, p.index, row.key, row.result);
      if (auto err = (*store)->put(p.index, row)) {
        if (!failure) failure = err;
        stop = true;
        return;
      }
      stored[p.index] = std::move(row);
      ++done;
      ++s.run;
      o.reporter.report(static_cast<std::int64_t>(done), static_cast<std::int64_t>(todo.size()), "points");
    }
  };
  std::vector<std::thread> pool;
  for (unsigned j = 1; j < jobs; ++j) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (failure) return *failure;
  s.cancelled = o.reporter.cancelled() && s.run + s.kept < (o.shards == 1 ? points->size() : todo.size() + s.kept);

  // Complete when every point of the experiment is stored with its own parameters.
  const bool all = std::all_of(points->begin(), points->end(), [&](const Point& p) {
    auto it = stored.find(p.index);
    return it != stored.end() && it->second.key == p.key();
  });
  if (!all || s.cancelled) {
    // A shard or a stopped run keeps its database (and the experiment beside it); outputs come with the last point.
    if (auto err = write_file_atomic((dir / "experiment.toml").string(), e.text)) return *err;
    return s;
  }
  auto results = parse_all(stored, points->size(), [&](std::size_t) { return db_path; });
  if (!results) return results.error();
  auto built = build_outputs(e, *results);
  if (!built) return built.error();
  return write_outputs(dir, *built, o.render, std::move(s));
}

Result<Evaluation> evaluate(const Experiment& e, unsigned threads, const Reporter& reporter) {
  auto points = checked_points(e);
  if (!points) return points.error();
  Evaluation ev;
  ev.points = *points;
  std::vector<PointResult> results;
  PointRun run;
  run.threads = threads;
  run.reporter.cancel = reporter.cancel;
  for (std::size_t i = 0; i < points->size(); ++i) {
    if (reporter.cancelled()) return make_error(ops::kCancelled);
    auto r = run_point(e, (*points)[i], run);
    if (!r) return r.error();
    if (auto c = repeated_column(*r)) return make_error("point " + std::to_string(i) + ": result column '" + *c + "' appears twice in a row");
    results.push_back(std::move(*r));
    reporter.report(static_cast<std::int64_t>(i + 1), static_cast<std::int64_t>(points->size()), "points");
  }
  ev.results = gather(results);
  std::map<std::string, Table> by_name;
  for (const TableDef& d : e.tables) {
    auto t = build_table(e, d, ev.results);
    if (!t) return t.error();
    by_name[d.name] = *t;
    ev.tables.emplace_back(d.name, std::move(*t));
  }
  for (const PlotDef& d : e.plots) {
    auto f = build_figure(e, d, ev.results);
    if (!f) return f.error();
    ev.figures.emplace_back(d.name, std::move(*f));
  }
  ev.expectations = check_expectations(e, ev.results, by_name);
  return ev;
}

std::optional<std::string> computation_difference(const Experiment& a, const Experiment& b) {
  if (a.job != b.job) return "job";
  if (a.inputs.size() != b.inputs.size()) return "inputs";
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    const InputDef &x = a.inputs[i], &y = b.inputs[i];
    const std::string at = "inputs." + x.name;
    if (x.name != y.name) return "inputs." + y.name;
    if (x.source != y.source) return at + ".source";
    if (x.shape != y.shape) return at + ".shape";
    if (x.seed != y.seed) return at + ".seed";
    if (x.bf16 != y.bf16) return at + ".bf16";
    if (x.weights != y.weights) return at + ".weights";
    if (x.select != y.select) return at + ".select";
    if (x.layout != y.layout) return at + ".layout";
    if (x.min_elements != y.min_elements) return at + ".min_elements";
    if (x.kernels != y.kernels) return at + ".kernels";
    if (x.data_dir != y.data_dir) return at + ".data_dir";
  }
  if (a.axes != b.axes) return "sweep";
  if (a.points != b.points) return "points";
  if (a.gaps != b.gaps) return "gaps";
  if (a.histogram_bins != b.histogram_bins) return "histogram_bins";
  if (a.baseline_profile != b.baseline_profile) return "baseline_profile";
  if (a.max_gap != b.max_gap) return "max_gap";
  // The job's own keys, by value (both hold every key of the job, in its table's order; a file without a key has
  // its default).
  for (const auto& [key, value] : a.job_keys) {
    auto other = std::find_if(b.job_keys.begin(), b.job_keys.end(), [&](const auto& kv) { return kv.first == key; });
    if (other == b.job_keys.end() || other->second != value) return key;
  }
  for (const auto& [key, value] : b.job_keys)
    if (std::none_of(a.job_keys.begin(), a.job_keys.end(), [&](const auto& kv) { return kv.first == key; })) return key;
  if (a.batch != b.batch) return "batch";
  return std::nullopt;
}

Result<RunSummary> render_results(const std::string& dir_text, const std::optional<Experiment>& presentation, const Renderer& render) {
  const fs::path dir(dir_text);
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return make_error("results folder " + quote_input(dir_text) + ": " + ec.message());
  if (!fs::exists(st)) return make_error("results folder " + quote_input(dir_text) + " does not exist");
  if (!fs::is_directory(st)) return make_error("results folder " + quote_input(dir_text) + ": is " + file_kind(st) + ", not a folder");
  if (!fs::exists(dir / kDatabase, ec)) return make_error("results folder " + quote_input(dir_text) + " holds no " + kDatabase + " (run the experiment first)");
  // Read under the folder's lock, so a run cannot change the database while it is read.
  auto folder_lock = lock_folder("results folder", dir_text, "mxlab render");
  if (!folder_lock) return folder_lock.error();
  auto db = read_results_database((dir / kDatabase).string());
  if (!db) return db.error();
  if (db->shards != 1)
    return make_error("results folder " + quote_input(dir_text) + " holds shard " + std::to_string(db->shard) + "/" +
                      std::to_string(db->shards) + "; join the shards with mxlab merge, then render the merged folder");
  if (db->stored.size() != db->points)
    return make_error("results folder " + quote_input(dir_text) + " holds " + std::to_string(db->stored.size()) + " of " +
                      std::to_string(db->points) + " points; finish the run with mxlab run FILE --out " + dir_text + " --resume");
  auto stored = parse_experiment(db->experiment_text, db->experiment_path);
  if (!stored) return make_error("results folder " + quote_input(dir_text) + ": the stored experiment: " + stored.error().message);
  if (presentation)
    if (auto diff = computation_difference(*stored, *presentation))
      return make_error(presentation->path + ": computes other results than those in " + quote_input(dir_text) + " (its '" + *diff +
                        "' differs); run it with mxlab run");
  const Experiment& e = presentation ? *presentation : *stored;
  auto results = parse_all(db->stored, db->points, [&](std::size_t) { return db->path; });
  if (!results) return results.error();
  auto built = build_outputs(e, *results, db->version);
  if (!built) return built.error();
  RunSummary s;
  s.out_dir = dir_text;
  s.points = db->points;
  s.kept = db->points;
  return write_outputs(dir, *built, render, std::move(s));
}

Result<RunSummary> merge_results(const std::vector<std::string>& dirs, const std::string& out_dir, const Renderer& render) {
  if (dirs.empty()) return make_error("no results folders given");
  // Read and check every folder before anything is written.
  std::vector<ResultsDatabase> dbs;
  for (const auto& d : dirs) {
    const fs::path db = fs::path(d) / kDatabase;
    std::error_code ec;
    const auto st = fs::status(d, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) return make_error("results folder " + quote_input(d) + ": " + ec.message());
    if (!fs::exists(st)) return make_error("results folder " + quote_input(d) + " does not exist");
    if (!fs::is_directory(st)) return make_error("results folder " + quote_input(d) + ": is " + file_kind(st) + ", not a folder");
    if (!fs::exists(db, ec)) {
      if (ec && ec != std::errc::no_such_file_or_directory) return make_error("results folder " + quote_input(d) + ": " + ec.message());
      return make_error("results folder " + quote_input(d) + " holds no " + kDatabase);
    }
    auto r = read_results_database(db.string());
    if (!r) return r.error();
    const ResultsDatabase& first = dbs.empty() ? *r : dbs.front();
    if (r->experiment_sha256 != first.experiment_sha256)
      return make_error("results folder " + quote_input(d) + " holds results of a different experiment file than " + quote_input(dirs.front()));
    if (r->version != first.version)
      return make_error("results folder " + quote_input(d) + " was run by mxlab " + shown(r->version) + ", " +
                        quote_input(dirs.front()) + " by mxlab " + shown(first.version) + "; run every shard with one version");
    if (r->points != first.points)
      return make_error("results folder " + quote_input(d) + " holds results of " + std::to_string(r->points) + " points, " +
                        quote_input(dirs.front()) + " of " + std::to_string(first.points) + " (the experiment's inputs changed between shards)");
    dbs.push_back(std::move(*r));
  }
  const ResultsDatabase& first = dbs.front();
  const std::size_t npoints = first.points;
  // Every point of the experiment exactly once across the folders.
  std::map<std::size_t, StoredPoint> all;
  std::map<std::size_t, std::size_t> from;  // point -> folder
  for (std::size_t k = 0; k < dbs.size(); ++k) {
    for (auto& [idx, p] : dbs[k].stored) {
      if (auto it = from.find(idx); it != from.end())
        return make_error("point " + std::to_string(idx) + " is in both " + quote_input(dirs[it->second]) + " and " +
                          quote_input(dirs[k]) + " (a folder given twice, or shards of different runs)");
      from[idx] = k;
      all.emplace(idx, std::move(p));
    }
  }
  if (all.size() != npoints) {
    std::size_t missing = 0;
    while (all.count(missing)) ++missing;
    const std::string shard = std::to_string(missing % first.shards) + "/" + std::to_string(first.shards);
    return make_error(std::to_string(npoints - all.size()) + " of " + std::to_string(npoints) + " points are missing from " +
                      quote_input(dirs.front()) + (dirs.size() > 1 ? " and the other folders" : "") + ", point " +
                      std::to_string(missing) + " first (shard " + shard + " not run or not finished)");
  }
  {
    // The merged folder must not be one of those merged (its database is replaced).
    for (const auto& d : dirs) {
      std::error_code ec;
      if (fs::equivalent(d, out_dir, ec))
        return make_error("--out " + quote_input(out_dir) + " is one of the folders merged; choose another folder");
    }
  }
  auto e = parse_experiment(first.experiment_text, first.experiment_path);
  if (!e) return make_error("results folder " + quote_input(dirs.front()) + ": the stored experiment: " + e.error().message);
  auto results = parse_all(all, npoints, [&](std::size_t i) { return dbs[from[i]].path; });
  if (!results) return results.error();
  auto built = build_outputs(*e, *results);
  if (!built) return built.error();
  RunSummary s;
  s.out_dir = out_dir;
  s.points = npoints;
  s.kept = all.size();
  // Only now is anything written: the folder, under its lock, gets the merged database (built beside it and
  // renamed into place) and the outputs.
  auto folder_lock = lock_folder("--out", out_dir, "mxlab merge");
  if (!folder_lock) return folder_lock.error();
  const fs::path dir(out_dir);
  const std::string tmp = (dir / (std::string(kDatabase) + ".merging")).string();
  auto remove_tmp = [&] {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(tmp + suffix, ec);
  };
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{remove_tmp};
  {
    remove_tmp();
    auto store = Store::open(tmp, true, true);
    if (!store) return store.error();
    if (auto err = (*store)->init({{"experiment_sha256", first.experiment_sha256},
                                   {"experiment_text", first.experiment_text},
                                   {"experiment_path", first.experiment_path},
                                   {"points", std::to_string(npoints)},
                                   {"shard", "0/1"},
                                   {"version", first.version}}))
      return *err;
    if (auto err = (*store)->exec("BEGIN")) return *err;
    for (const auto& [idx, p] : all)
      if (auto err = (*store)->put(idx, p)) return *err;
    if (auto err = (*store)->exec("COMMIT")) return *err;
  }  // closed: the WAL is checkpointed into the file
  remove_database(dir);
  std::error_code ec;
  fs::rename(tmp, dir / kDatabase, ec);
  if (ec) return make_error("--out " + quote_input(out_dir) + ": " + ec.message());
  return write_outputs(dir, *built, render, std::move(s));
}

}  // namespace mxlab::experiment
