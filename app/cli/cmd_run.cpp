// `mxlab run`, `mxlab merge`, `mxlab check` and `mxlab render`: experiment batches (docs/experiments.md).
#include <atomic>
#include <charconv>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/interrupt.hpp"
#include "cli/progress_bar.hpp"
#include "mxlab/core/atomic_file.hpp"
#include "mxlab/core/small_file.hpp"
#include "mxlab/experiment/results.hpp"
#include "mxlab/experiment/runner.hpp"
#include "mxlab/experiment/slurm.hpp"
#ifdef MXLAB_HAVE_PLOT
#include "mxlab/plot/plot.hpp"
#endif

namespace mxlab::cli {

namespace {

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
  auto j = args.integer("jobs", 1, 256, 1);
  if (!j) return j.error();
  return static_cast<unsigned>(*j);
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

/// The experiments of the files given to run or check, and the results folder of each.
struct RunFiles {
  std::vector<experiment::Experiment> experiments;
  std::vector<std::string> out_dirs;
  std::string name;  ///< the first file's name
  std::string base;  ///< the folder holding every results folder ("" for several files without --out)
  std::size_t points = 0;  ///< points of every experiment, each checked
};

/// Reads every file first: a mistake in any of them stops the batch before anything runs.
/// A batch file's experiments go to DIR/NAME of the batch's folder (results/BATCH/NAME by default).
Result<RunFiles> read_files(const std::vector<std::string>& paths, const std::optional<std::string>& out) {
  RunFiles r;
  for (const auto& file : paths) {
    auto e = experiment::read_experiment(file);
    if (!e) return e.error();
    const std::string dir = out ? (paths.size() == 1 ? *out : *out + "/" + e->name) : "results/" + e->name;
    if (r.name.empty()) {
      r.name = e->name;
      r.base = out ? *out : paths.size() == 1 ? dir : "";
    }
    if (e->batch.empty()) {
      r.out_dirs.push_back(dir);
      r.experiments.push_back(std::move(*e));
      continue;
    }
    for (const auto& member : e->batch) {
      const std::string path = (std::filesystem::path(file).parent_path() / member).lexically_normal().string();
      auto m = experiment::read_experiment(path);
      if (!m) return make_error(file + ": batch entry '" + member + "': " + m.error().message);
      if (!m->batch.empty()) return make_error(path + ": a batch cannot list another batch");
      r.out_dirs.push_back(dir + "/" + m->name);
      r.experiments.push_back(std::move(*m));
    }
  }
  // Two experiments writing one folder would replace each other's results.
  if (auto err = experiment::check_distinct_folders(r.experiments, r.out_dirs)) return *err;
  // Every point of every file is checked before anything runs.
  for (const auto& e : r.experiments) {
    auto points = experiment::checked_points(e);
    if (!points) return points.error();
    r.points += points->size();
  }
  return r;
}

/// --slurm N: writes the scripts of a job array of N shards and of their merge instead of running.
int write_slurm(Io io, const Args& args) {
  const auto tasks_or = args.size("slurm", 1, 100000, 1);
  if (!tasks_or) return bad_input(io, "run", tasks_or.error().message);
  const std::size_t tasks = *tasks_or;
  if (args.value("shard")) return bad_input(io, "run", "option '--slurm' runs every shard: it cannot be given with --shard");
  auto jobs = parse_jobs(args);
  if (!jobs) return bad_input(io, "run", jobs.error().message);
  if (auto threads = threads_from_args(args); !threads) return bad_input(io, "run", threads.error().message);
  auto files = read_files(args.positional, args.value("out"));
  if (!files) return bad_input(io, "run", files.error().message);
  if (files->base.empty()) return bad_input(io, "run", "option '--slurm' with several files needs --out DIR");
  const std::size_t points = files->points;
  namespace fs = std::filesystem;
  std::error_code fec;
  const auto absolute = [&fec](const std::string& path) {
    std::string a = fs::absolute(path, fec).lexically_normal().string();
    while (a.size() > 1 && a.back() == '/') a.pop_back();
    return a;
  };
  experiment::SlurmPlan plan;
  plan.mxlab = fs::read_symlink("/proc/self/exe", fec).string();
  if (fec) return bad_input(io, "run", "option '--slurm': the mxlab binary's path is unknown: " + fec.message());
  for (const auto& f : args.positional) plan.files.push_back(absolute(f));
  plan.out_dir = absolute(files->base);
  for (const auto& d : files->out_dirs) plan.members.push_back(d.substr(files->base.size()));
  plan.work_dir = fs::current_path(fec).string();
  if (fec) return bad_input(io, "run", "option '--slurm': the current folder is unknown: " + fec.message());
  plan.name = files->name;
  plan.tasks = tasks;
  plan.jobs = *jobs;
  plan.threads = args.value("threads").value_or("");
  plan.resume = args.flag("resume");
  plan.quiet = args.flag("quiet");
  auto written = experiment::write_slurm_scripts(plan);
  if (!written) return bad_input(io, "run", written.error().message);
  io.out << "wrote a Slurm job array of " << tasks << " tasks over " << points << " points, and its merge, to " << plan.out_dir
         << "/\n  submit.sh, slurm/array.sbatch, slurm/merge.sbatch (shards in shard-K/, job output in slurm/logs/)\n";
  if (tasks > points) io.out << "note: " << tasks - points << " of the tasks have no point to run\n";
  io.out << "submit with: sh " << experiment::shell_quote(plan.out_dir + "/submit.sh") << "\n";
  return kExitOk;
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
  auto files = read_files(args.positional, args.value("out"));
  if (!files) return bad_input(io, command, files.error().message);
  const auto& experiments = files->experiments;
  const auto& out_dirs = files->out_dirs;
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
      // The experiment's line comes with its first report, after the run's checks: bad input stays one line.
      o.reporter = bar.reporter(&g_interrupted);
      o.reporter.on_progress = [&io, &e, named = false, show = o.reporter.on_progress](const Progress& p) mutable {
        if (!named) io.err << e.name << ": " << (e.description.empty() ? e.path : e.description) << "\n";
        named = true;
        show(p);
      };
    } else {
      o.reporter.cancel = &g_interrupted;
    }
    auto s = experiment::run_experiment(e, o);
    bar.finish();
    if (!s) {
      if (experiment::is_storage_failure(s.error())) {  // a full disk or an I/O error: not the input's fault
        io.err << "mxlab " << command << ": " << s.error().message << "\n";
        return kExitFailure;
      }
      return bad_input(io, command, s.error().message);
    }
    if (s->cancelled) {
      io.err << "mxlab " << command << ": stopped; " << s->run + s->kept << " of " << s->points
             << " points are saved. Continue with: mxlab " << command << " " << e.path << " --out " << s->out_dir
             << " --resume\n";
      return kExitInterrupted;
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
  auto run_specs = run_options();
  run_specs.insert(run_specs.end() - 1, {"slurm", true, "N",
                                          "write DIR/submit.sh for a Slurm job array of N shards and their merge; run nothing"});
  auto args = parse_args(argv, 1, run_specs);
  if (!args) return bad_input(io, "run", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab run FILE... [--out DIR] [--jobs N] [--threads N] [--resume] [--shard I/N | --slurm N]\n\n"
              "Runs experiment files (TOML, docs/experiments.md): expands each sweep into points, runs them on the\n"
              "engine, records each finished point in DIR/results.sqlite, then writes the results (CSV, JSON),\n"
              "tables (CSV, Markdown, LaTeX), plots (PNG, PDF) and the expectations' outcome (checks.md).\n"
              "Ctrl-C stops after the running points; --resume continues. Without --resume an existing database is\n"
              "replaced.\n\n"
              "--slurm N runs nothing: it writes DIR/submit.sh, which submits a Slurm job array of N tasks (task K:\n"
              "mxlab run FILE... --shard K/N --out DIR/shard-K with the other options given) and a job that merges\n"
              "the shards into DIR once every task has succeeded (mxlab merge). sh DIR/submit.sh [SBATCH OPTION...]\n"
              "submits both; its arguments go to both sbatch calls (--partition=P, --time=T, --cpus-per-task=C).\n\n"
           << options_help(run_specs);
    return kExitOk;
  }
  if (args->positional.empty()) return bad_input(io, "run", "expected one or more experiment files");
  if (args->value("slurm")) return write_slurm(io, *args);
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

/// --update-golden: every golden expectation's file written from its table as this run built it (a temporary
/// file, then renamed; folders made as needed), then the checks made again from the stored results.
std::optional<Error> update_golden(Io io, const std::string& file, experiment::RunSummary& s) {
  auto e = experiment::read_experiment(file);
  if (!e) return e.error();
  bool changed = false;
  for (const auto& x : e->expects) {
    if (x.golden.empty()) continue;
    const std::filesystem::path table = std::filesystem::path(s.out_dir) / "tables" / (x.table + ".csv");
    auto text = read_small_file(table.string(), std::uint64_t{64} << 20, "table");
    if (!text) return make_error(file + ":" + std::to_string(x.line) + ": expectation '" + x.name + "': no table '" + x.table +
                                 "' was built");
    const std::filesystem::path golden = std::filesystem::path(e->path).parent_path() / x.golden;
    auto old = read_small_file(golden.string(), std::uint64_t{64} << 20, "golden file");
    const auto lines = std::count(text->begin(), text->end(), '\n');
    if (old && *old == *text) {
      io.out << file << ":" << x.line << ": golden file " << golden.string() << " unchanged (" << lines << " lines)\n";
      continue;
    }
    std::error_code ec;
    std::filesystem::create_directories(golden.parent_path(), ec);
    if (auto w = write_file_atomic(golden.string(), *text, "golden file"); !w) return w.error();
    io.out << file << ":" << x.line << ": golden file " << golden.string() << (old ? " updated" : " written") << " from table '"
           << x.table << "' (" << lines << " lines)\n";
    changed = true;
  }
  if (changed) {
    auto again = experiment::render_results(s.out_dir, *e, renderer());
    if (!again) return again.error();
    s = std::move(*again);
  }
  return std::nullopt;
}

int cmd_check(const std::vector<std::string>& argv, Io io) {
  auto specs = run_options();
  specs.insert(specs.end() - 1, {"update-golden", false, "",
                                 "write each golden file ([[expect]] golden = ...) from its table as this run built it"});
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "check", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab check FILE... [--out DIR] [--jobs N] [--threads N] [--resume] [--update-golden]\n\n"
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
  if (args->flag("update-golden"))
    for (auto& [file, s] : done)
      if (auto err = update_golden(io, file, s)) return bad_input(io, "check", err->message);
  std::size_t failed = 0, total = 0;
  for (const auto& [file, s] : done) {
    if (s.expectations.empty()) io.out << file << ": no expectations ([[expect]])\n";
    failed += report_expectations(io, file, s);
    total += s.expectations.size();
  }
  io.out << (failed ? "FAILED: " : "passed: ") << total - failed << " of " << total << " expectations hold\n";
  return failed ? kExitFailure : kExitOk;
}

int cmd_render(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = {};
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "render", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab render DIR [FILE]\n\n"
              "Rebuilds the tables, plots and checks of a results folder from the results stored in DIR/results.sqlite,\n"
              "without running a point: with the experiment file stored there, or with FILE, an edit of it that changes\n"
              "only its presentation (tables, plots, expectations, name, description). A FILE whose job, inputs, sweep\n"
              "or points differ is refused: run it with mxlab run.\n";
    return kExitOk;
  }
  if (args->positional.empty() || args->positional.size() > 2)
    return bad_input(io, "render", "expected a results folder and at most one experiment file: mxlab render DIR [FILE]");
  std::optional<experiment::Experiment> presentation;
  if (args->positional.size() == 2) {
    auto e = experiment::read_experiment(args->positional[1]);
    if (!e) return bad_input(io, "render", e.error().message);
    if (!e->batch.empty()) return bad_input(io, "render", args->positional[1] + ": a batch file; render each member's folder with its file");
    presentation = std::move(*e);
  }
  auto s = experiment::render_results(args->positional[0], presentation, renderer());
  if (!s && experiment::is_storage_failure(s.error())) {
    io.err << "mxlab render: " << s.error().message << "\n";
    return kExitFailure;
  }
  if (!s) return bad_input(io, "render", s.error().message);
  print_summary(io, *s);
  std::size_t failed = 0;
  for (const auto& x : s->expectations) failed += !x.passed;
  if (failed) io.out << s->out_dir << ": " << failed << " expectation(s) failed (see " << s->out_dir << "/checks.md)\n";
  return kExitOk;
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
  if (!s && experiment::is_storage_failure(s.error())) {
    io.err << "mxlab merge: " << s.error().message << "\n";
    return kExitFailure;
  }
  if (!s) return bad_input(io, "merge", s.error().message);
  print_summary(io, *s);
  return kExitOk;
}

}  // namespace mxlab::cli
