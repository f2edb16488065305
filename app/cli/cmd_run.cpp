// `mxlab run`, `mxlab merge` and `mxlab check`: experiment batches (docs/experiments.md).
#include <atomic>
#include <charconv>
#include <csignal>
#include <filesystem>
#include <iostream>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/progress_bar.hpp"
#include "mxlab/experiment/runner.hpp"
#ifdef MXLAB_HAVE_PLOT
#include "mxlab/plot/plot.hpp"
#endif

namespace mxlab::cli {

namespace {

std::atomic<bool> g_interrupted{false};
void on_run_interrupt(int) { g_interrupted.store(true); }

/// Ctrl-C stops after the running points while this lives (a second Ctrl-C ends the process).
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = false;
    previous_ = std::signal(SIGINT, on_run_interrupt);
    previous_term_ = std::signal(SIGTERM, on_run_interrupt);
  }
  ~InterruptGuard() {
    std::signal(SIGINT, previous_);
    std::signal(SIGTERM, previous_term_);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  void (*previous_)(int) = nullptr;
  void (*previous_term_)(int) = nullptr;
};

experiment::Renderer renderer() {
#ifdef MXLAB_HAVE_PLOT
  return [](const experiment::Figure& f, const std::string& base) { return plot::save_figure(f, base); };
#else
  return {};
#endif
}

Result<std::pair<std::size_t, std::size_t>> parse_shard(const std::string& v) {
  const auto slash = v.find('/');
  std::size_t i = 0, n = 0;
  if (slash != std::string::npos) {
    auto [p1, e1] = std::from_chars(v.data(), v.data() + slash, i);
    auto [p2, e2] = std::from_chars(v.data() + slash + 1, v.data() + v.size(), n);
    if (e1 == std::errc() && e2 == std::errc() && p1 == v.data() + slash && p2 == v.data() + v.size() && n >= 1 && i < n &&
        n <= 100000)
      return std::pair{i, n};
  }
  return make_error("option '--shard " + v + "': expected I/N with 0 <= I < N (e.g. 0/4)");
}

Result<unsigned> parse_jobs(const Args& args) {
  const auto v = args.value("jobs");
  if (!v) return 1U;
  unsigned j = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), j);
  if (ec != std::errc() || p != v->data() + v->size() || j < 1 || j > 256)
    return make_error("option '--jobs " + *v + "': expected a whole number from 1 to 256");
  return j;
}

void print_summary(Io io, const experiment::RunSummary& s) {
  if (!s.complete) return;
  io.out << "results in " << s.out_dir << "/ (" << s.points << " points: " << s.run << " run, " << s.kept << " kept)\n";
  std::string tables, plots;
  for (const auto& f : s.files) {
    if (f.rfind("tables/", 0) == 0 && f.ends_with(".md")) tables += "  " + s.out_dir + "/" + f + "\n";
    if (f.rfind("plots/", 0) == 0 && (f.ends_with(".png") || f.ends_with(".json"))) plots += "  " + s.out_dir + "/" + f + "\n";
  }
  if (!tables.empty()) io.out << "tables (also .csv and .tex):\n" << tables;
  if (!plots.empty()) io.out << "plots:\n" << plots;
}

/// Reports expectations; returns how many failed.
std::size_t report_expectations(Io io, const std::string& file, const experiment::RunSummary& s) {
  std::size_t failed = 0;
  for (const auto& o : s.expectations) {
    io.out << file << ":" << o.line << ": expectation '" << o.name << "' " << (o.passed ? "passed" : "FAILED") << " ("
           << o.rows_checked << " values checked)\n";
    for (const auto& f : o.failures) io.out << "    " << f << "\n";
    failed += !o.passed;
  }
  return failed;
}

std::vector<OptionSpec> run_options() {
  return {{"out", true, "DIR", "results folder (default results/NAME; with several files, DIR/NAME)"},
          {"jobs", true, "N", "points run at once (default 1)"},
          threads_option(),
          {"resume", false, "", "keep the points the folder's database holds and run the rest"},
          {"shard", true, "I/N", "run every N-th point starting at I (job arrays); join the folders with mxlab merge"},
          {"quiet", false, "", "no progress"}};
}

/// Runs every file; returns the exit code and the summaries.
int run_files(Io io, const std::string& command, const Args& args, std::vector<std::pair<std::string, experiment::RunSummary>>* summaries) {
  auto jobs = parse_jobs(args);
  if (!jobs) return bad_input(io, command, jobs.error().message);
  auto threads = threads_from_args(args);
  if (!threads) return bad_input(io, command, threads.error().message);
  std::pair<std::size_t, std::size_t> shard{0, 1};
  if (auto v = args.value("shard")) {
    auto s = parse_shard(*v);
    if (!s) return bad_input(io, command, s.error().message);
    shard = *s;
  }
  // Read every file first: a mistake in any of them stops the batch before anything runs.
  // A batch file's experiments go to DIR/NAME of the batch's folder (results/BATCH/NAME by default).
  std::vector<experiment::Experiment> experiments;
  std::vector<std::string> out_dirs;
  const auto out = args.value("out");
  for (const auto& file : args.positional) {
    auto e = experiment::read_experiment(file);
    if (!e) return bad_input(io, command, e.error().message);
    if (e->batch.empty()) {
      out_dirs.push_back(out ? (args.positional.size() == 1 ? *out : *out + "/" + e->name) : "results/" + e->name);
      experiments.push_back(std::move(*e));
      continue;
    }
    const std::string base = out ? (args.positional.size() == 1 ? *out : *out + "/" + e->name) : "results/" + e->name;
    for (const auto& member : e->batch) {
      const std::string path = (std::filesystem::path(file).parent_path() / member).lexically_normal().string();
      auto m = experiment::read_experiment(path);
      if (!m) return bad_input(io, command, file + ": batch entry '" + member + "': " + m.error().message);
      if (!m->batch.empty()) return bad_input(io, command, path + ": a batch cannot list another batch");
      out_dirs.push_back(base + "/" + m->name);
      experiments.push_back(std::move(*m));
    }
  }
  InterruptGuard guard;
  for (std::size_t k = 0; k < experiments.size(); ++k) {
    const auto& e = experiments[k];
    experiment::RunOptions o;
    o.out_dir = out_dirs[k];
    o.jobs = *jobs;
    o.threads = *threads;
    o.resume = args.flag("resume");
    o.shard = shard.first;
    o.shards = shard.second;
    o.render = renderer();
    ProgressBar bar(io.err, "points", ProgressBar::stderr_is_tty());
    if (!args.flag("quiet")) {
      io.err << e.name << ": " << (e.description.empty() ? e.path : e.description) << "\n";
      o.reporter = bar.reporter(&g_interrupted);
    } else {
      o.reporter.cancel = &g_interrupted;
    }
    auto s = experiment::run_experiment(e, o);
    bar.finish();
    if (!s) {
      if (s.error().message.find("results database") != std::string::npos) {
        io.err << "mxlab " << command << ": " << s.error().message << "\n";
        return kExitFailure;
      }
      return bad_input(io, command, s.error().message);
    }
    if (s->cancelled) {
      io.err << "mxlab " << command << ": stopped; " << s->run + s->kept << " of " << s->points
             << " points are saved. Continue with: mxlab " << command << " " << e.path << " --out " << s->out_dir
             << " --resume\n";
      return 130;
    }
    if (!s->complete)
      io.out << e.name << ": shard " << shard.first << "/" << shard.second << " done (" << s->run << " run, " << s->kept
             << " kept) in " << s->out_dir << "/; join the shards with mxlab merge\n";
    summaries->emplace_back(e.path, std::move(*s));
  }
  return kExitOk;
}

}  // namespace

int cmd_run(const std::vector<std::string>& argv, Io io) {
  const auto specs = run_options();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "run", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab run FILE... [--out DIR] [--jobs N] [--threads N] [--resume] [--shard I/N]\n\n"
              "Runs experiment files (TOML, docs/experiments.md): expands each sweep into points, runs them on the\n"
              "engine, records each finished point in DIR/results.sqlite, then writes the results (CSV, JSON),\n"
              "tables (CSV, Markdown, LaTeX), plots (PNG, PDF) and the expectations' outcome (checks.md).\n"
              "Ctrl-C stops after the running points; --resume continues. Without --resume an existing database is\n"
              "replaced.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (args->positional.empty()) return bad_input(io, "run", "expected one or more experiment files");
  std::vector<std::pair<std::string, experiment::RunSummary>> done;
  const int rc = run_files(io, "run", *args, &done);
  for (const auto& [file, s] : done) {
    print_summary(io, s);
    std::size_t failed = 0;
    for (const auto& x : s.expectations) failed += !x.passed;
    if (failed) io.out << file << ": " << failed << " expectation(s) failed (mxlab check " << file << " for the report)\n";
  }
  return rc;
}

int cmd_check(const std::vector<std::string>& argv, Io io) {
  const auto specs = run_options();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "check", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab check FILE... [--out DIR] [--jobs N] [--threads N] [--resume]\n\n"
              "Runs experiment files as mxlab run does and checks their expectations ([[expect]]: a metric at most\n"
              "its analytic bound or a number, at least a number, equal to a number or to a golden table within a\n"
              "stated tolerance). Prints one line per expectation and every failing value; exits 1 if any failed.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (args->positional.empty()) return bad_input(io, "check", "expected one or more experiment files");
  std::vector<std::pair<std::string, experiment::RunSummary>> done;
  const int rc = run_files(io, "check", *args, &done);
  if (rc != kExitOk) return rc;
  std::size_t failed = 0, total = 0;
  for (const auto& [file, s] : done) {
    if (s.expectations.empty()) io.out << file << ": no expectations ([[expect]])\n";
    failed += report_expectations(io, file, s);
    total += s.expectations.size();
  }
  io.out << (failed ? "FAILED: " : "passed: ") << total - failed << " of " << total << " expectations hold\n";
  return failed ? kExitFailure : kExitOk;
}

int cmd_merge(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = {{"out", true, "DIR", "the merged results folder (required)"}};
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "merge", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab merge DIR... --out DIR\n\n"
              "Joins the results folders of one experiment run in shards (mxlab run --shard I/N) into one folder and\n"
              "writes its results, tables and plots, byte for byte those of a single run.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  const auto out = args->value("out");
  if (!out) return bad_input(io, "merge", "missing --out DIR");
  if (args->positional.empty()) return bad_input(io, "merge", "expected the shard folders");
  auto s = experiment::merge_results(args->positional, *out, renderer());
  if (!s) return bad_input(io, "merge", s.error().message);
  print_summary(io, *s);
  return kExitOk;
}

}  // namespace mxlab::cli
