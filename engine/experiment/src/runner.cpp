// The experiment runner: parallel points, the SQLite results database, resume, shards, merge and outputs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>

#include <sqlite3.h>

#include "mxlab/core/provenance.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/core/threads.hpp"
#include "mxlab/experiment/runner.hpp"
#include "mxlab/io/sha256.hpp"
#include "mxlab/ops/ops.hpp"

namespace mxlab::experiment {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDatabase = "results.sqlite";

/// The results database of one folder.
class Store {
 public:
  ~Store() {
    if (db_) sqlite3_close(db_);
  }
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  static Result<std::unique_ptr<Store>> open(const std::string& path, bool create) {
    auto s = std::make_unique<Store>();
    s->path_ = path;
    const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path.c_str(), &s->db_, flags, nullptr) != SQLITE_OK)
      return make_error("results database '" + path + "': " + (s->db_ ? sqlite3_errmsg(s->db_) : "cannot be opened"));
    sqlite3_busy_timeout(s->db_, 10000);
    // WAL: a commit survives the process being killed right after it; one transaction per point.
    if (auto e = s->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                         "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                         "CREATE TABLE IF NOT EXISTS points(idx INTEGER PRIMARY KEY, key TEXT NOT NULL, result TEXT NOT NULL,"
                         " seconds REAL NOT NULL);"))
      return *e;
    return s;
  }

  std::optional<Error> exec(const std::string& sql) {
    char* msg = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg) != SQLITE_OK) {
      Error e = make_error("results database '" + path_ + "': " + (msg ? msg : "error"));
      sqlite3_free(msg);
      return e;
    }
    return std::nullopt;
  }

  std::optional<std::string> meta(const std::string& key) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE key = ?", -1, &st, nullptr);
    sqlite3_bind_text(st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
    std::optional<std::string> v;
    if (sqlite3_step(st) == SQLITE_ROW) v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return v;
  }

  std::optional<Error> set_meta(const std::vector<std::pair<std::string, std::string>>& kv) {
    if (auto e = exec("BEGIN")) return e;
    for (const auto& [k, v] : kv) {
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", -1, &st, nullptr);
      sqlite3_bind_text(st, 1, k.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(st, 2, v.c_str(), -1, SQLITE_TRANSIENT);
      const int rc = sqlite3_step(st);
      sqlite3_finalize(st);
      if (rc != SQLITE_DONE) {
        exec("ROLLBACK");
        return make_error("results database '" + path_ + "': " + sqlite3_errmsg(db_));
      }
    }
    return exec("COMMIT");
  }

  /// Records one finished point in its own transaction.
  std::optional<Error> put(std::size_t idx, const std::string& key, const std::string& result, double seconds) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO points(idx, key, result, seconds) VALUES(?, ?, ?, ?)", -1, &st, nullptr);
    sqlite3_bind_int64(st, 1, static_cast<sqlite3_int64>(idx));
    sqlite3_bind_text(st, 2, key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, result.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, seconds);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return make_error("results database '" + path_ + "': " + sqlite3_errmsg(db_));
    return std::nullopt;
  }

  struct Stored {
    std::string key, result;
    double seconds = 0;
  };
  std::map<std::size_t, Stored> points() {
    std::map<std::size_t, Stored> out;
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "SELECT idx, key, result, seconds FROM points ORDER BY idx", -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW)
      out[static_cast<std::size_t>(sqlite3_column_int64(st, 0))] = {reinterpret_cast<const char*>(sqlite3_column_text(st, 1)),
                                                                     reinterpret_cast<const char*>(sqlite3_column_text(st, 2)),
                                                                     sqlite3_column_double(st, 3)};
    sqlite3_finalize(st);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
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
    auto h = sha256_file(file);
    p.inputs.emplace_back("sha256:" + file, h ? *h : "unreadable");
  }
  return p;
}

/// Writes every output of a complete run; returns the files written (relative to dir) and the expectations.
Result<RunSummary> write_outputs(const Experiment& e, const fs::path& dir, const std::vector<PointResult>& results,
                                 const Renderer& render, RunSummary s) {
  auto put = [&](const std::string& rel, const std::string& content) -> std::optional<Error> {
    std::error_code ec;
    fs::create_directories((dir / rel).parent_path(), ec);
    if (auto err = write_file_atomic((dir / rel).string(), content)) return err;
    s.files.push_back(rel);
    return std::nullopt;
  };
  const Provenance prov = run_provenance(e, results.size());
  const AllResults all = gather(results);
  std::vector<std::pair<std::string, std::string>> result_files;
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
    result_files.emplace_back("results/" + set + ".csv", to_csv(t));
    result_files.emplace_back("results/" + set + ".json", to_json(t, &prov));
  }
  std::map<std::string, Table> tables;
  for (const TableDef& d : e.tables) {
    auto t = build_table(e, d, all);
    if (!t) return t.error();
    tables[d.name] = std::move(*t);
  }
  std::vector<Figure> figures;
  for (const PlotDef& d : e.plots) {
    auto f = build_figure(e, d, all);
    if (!f) return f.error();
    figures.push_back(std::move(*f));
  }
  // Everything is built: only now are files written (a mistake in a table or plot leaves no outputs).
  if (auto err = put("experiment.toml", e.text)) return *err;
  if (auto err = put("provenance.json", provenance_json(prov))) return *err;
  for (const auto& [name, content] : result_files)
    if (auto err = put(name, content)) return *err;
  for (const TableDef& d : e.tables) {
    const Table& t = tables[d.name];
    if (auto err = put("tables/" + d.name + ".csv", to_csv(t))) return *err;
    const std::vector<std::string> caption = d.caption.empty() ? std::vector<std::string>{} : std::vector<std::string>{d.caption};
    if (auto err = put("tables/" + d.name + ".md", to_markdown(t, caption))) return *err;
    if (auto err = put("tables/" + d.name + ".tex", to_latex(t, d.caption))) return *err;
  }
  for (std::size_t i = 0; i < e.plots.size(); ++i) {
    const PlotDef& d = e.plots[i];
    if (auto err = put("plots/" + d.name + ".json", figure_json(figures[i]))) return *err;
    if (render) {
      std::error_code ec;
      fs::create_directories(dir / "plots", ec);
      if (auto err = render(figures[i], (dir / "plots" / d.name).string())) return *err;
      s.files.push_back("plots/" + d.name + ".png");
      s.files.push_back("plots/" + d.name + ".pdf");
    }
  }
  s.expectations = check_expectations(e, all, tables);
  if (!e.expects.empty()) {
    std::string md = "# Expectations of " + e.name + "\n\n| expectation | line | rows | result |\n|---|---:|---:|---|\n";
    for (const auto& o : s.expectations) {
      std::string detail;
      for (const auto& f : o.failures) detail += (detail.empty() ? "" : "; ") + f;
      md += "| " + o.name + " | " + std::to_string(o.line) + " | " + std::to_string(o.rows_checked) + " | " +
            (o.passed ? "passed" : "FAILED: " + detail) + " |\n";
    }
    if (auto err = put("checks.md", md)) return *err;
  }
  s.complete = true;
  return s;
}

std::vector<PointResult> parse_all(const std::map<std::size_t, Store::Stored>& stored, std::size_t n, std::string* err) {
  std::vector<PointResult> out(n);
  for (const auto& [idx, st] : stored) {
    if (idx >= n) continue;
    auto r = parse_result_json(st.result);
    if (!r) {
      *err = r.error().message;
      return {};
    }
    out[idx] = std::move(*r);
  }
  return out;
}

}  // namespace

Result<RunSummary> run_experiment(const Experiment& e, const RunOptions& o) {
  if (o.shards == 0 || o.shard >= o.shards) return make_error("shard " + std::to_string(o.shard) + "/" + std::to_string(o.shards) + ": expected I/N with 0 <= I < N");
  auto points = expand_points(e);
  if (!points) return points.error();
  for (const Point& p : *points)
    if (auto err = check_point(e, p)) return *err;
  RunSummary s;
  s.out_dir = o.out_dir.empty() ? "results/" + e.name : o.out_dir;
  s.points = points->size();
  const fs::path dir(s.out_dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) return make_error("--out '" + s.out_dir + "': not a folder");
  fs::create_directories(dir, ec);
  if (ec) return make_error("--out '" + s.out_dir + "': " + ec.message());
  if (!o.resume) remove_database(dir);
  auto store = Store::open((dir / kDatabase).string(), true);
  if (!store) return store.error();
  const std::string sha = sha256_hex(e.text);
  const std::string shard_text = std::to_string(o.shard) + "/" + std::to_string(o.shards);
  if (o.resume) {
    if (auto old = (*store)->meta("experiment_sha256"); old && *old != sha)
      return make_error("--resume: the results in '" + s.out_dir +
                        "' come from a different experiment file; run without --resume to replace them");
    if (auto old = (*store)->meta("shard"); old && *old != shard_text)
      return make_error("--resume: '" + s.out_dir + "' holds shard " + *old + ", not " + shard_text);
  }
  if (auto err = (*store)->set_meta({{"experiment_sha256", sha},
                                     {"experiment_text", e.text},
                                     {"experiment_path", fs::absolute(e.path).lexically_normal().string()},
                                     {"points", std::to_string(points->size())},
                                     {"shard", shard_text}}))
    return *err;
  auto stored = (*store)->points();
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
      if (auto err = (*store)->put(p.index, p.key(), result_json(*r), seconds)) {
        if (!failure) failure = err;
        stop = true;
        return;
      }
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

  stored = (*store)->points();
  const bool all = stored.size() == points->size();
  if (!all || s.cancelled) {
    // A shard or a stopped run keeps its database (and the experiment beside it); outputs come with the last point.
    if (auto err = write_file_atomic((dir / "experiment.toml").string(), e.text)) return *err;
    return s;
  }
  std::string err;
  auto results = parse_all(stored, points->size(), &err);
  if (!err.empty()) return make_error(s.out_dir + ": " + err);
  return write_outputs(e, dir, results, o.render, std::move(s));
}

Result<Evaluation> evaluate(const Experiment& e, unsigned threads, const Reporter& reporter) {
  auto points = expand_points(e);
  if (!points) return points.error();
  for (const Point& p : *points)
    if (auto err = check_point(e, p)) return *err;
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

Result<RunSummary> merge_results(const std::vector<std::string>& dirs, const std::string& out_dir, const Renderer& render) {
  if (dirs.empty()) return make_error("no results folders given");
  std::string sha, text, path;
  std::size_t npoints = 0;
  std::map<std::size_t, Store::Stored> all;
  for (const auto& d : dirs) {
    const fs::path db = fs::path(d) / kDatabase;
    std::error_code ec;
    if (!fs::exists(db, ec)) {
      if (ec && ec != std::errc::no_such_file_or_directory) return make_error("results folder " + quote_input(d) + ": " + ec.message());
      return make_error("results folder " + quote_input(d) + " holds no " + kDatabase);
    }
    auto st = Store::open(db.string(), false);
    if (!st) return st.error();
    const auto s = (*st)->meta("experiment_sha256");
    if (!s) return make_error("results folder " + quote_input(d) + ": the database names no experiment");
    if (sha.empty()) {
      sha = *s;
      text = (*st)->meta("experiment_text").value_or("");
      path = (*st)->meta("experiment_path").value_or("experiment.toml");
      npoints = std::stoul((*st)->meta("points").value_or("0"));
    } else if (*s != sha) {
      return make_error("results folder " + quote_input(d) + " holds results of a different experiment file than " + quote_input(dirs.front()));
    }
    for (auto& [idx, p] : (*st)->points()) {
      auto it = all.find(idx);
      if (it != all.end() && it->second.key != p.key)
        return make_error("point " + std::to_string(idx) + " differs between folders");
      all[idx] = std::move(p);
    }
  }
  auto e = parse_experiment(text, path);
  if (!e) return e.error();
  RunSummary s;
  s.out_dir = out_dir;
  s.points = npoints;
  s.kept = all.size();
  const fs::path dir(out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error("--out '" + out_dir + "': " + ec.message());
  remove_database(dir);
  auto store = Store::open((dir / kDatabase).string(), true);
  if (!store) return store.error();
  if (auto err = (*store)->set_meta({{"experiment_sha256", sha}, {"experiment_text", text}, {"experiment_path", path},
                                     {"points", std::to_string(npoints)}, {"shard", "0/1"}}))
    return *err;
  if (auto err = (*store)->exec("BEGIN")) return *err;
  for (const auto& [idx, p] : all)
    if (auto err = (*store)->put(idx, p.key, p.result, p.seconds)) return *err;
  if (auto err = (*store)->exec("COMMIT")) return *err;
  if (all.size() != npoints) {
    if (auto err = write_file_atomic((dir / "experiment.toml").string(), text)) return *err;
    return make_error(std::to_string(npoints - all.size()) + " of " + std::to_string(npoints) +
                      " points are missing (a shard not run or not finished); the merged database is in '" + out_dir + "'");
  }
  std::string err;
  auto results = parse_all(all, npoints, &err);
  if (!err.empty()) return make_error(err);
  return write_outputs(*e, dir, results, render, std::move(s));
}

}  // namespace mxlab::experiment
