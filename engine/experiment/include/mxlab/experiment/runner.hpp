// Running an experiment: points in parallel on the engine's fast path, each recorded as it finishes in the
// results database (SQLite, one transaction per point), so a run killed at any moment loses nothing that
// finished and --resume continues; shards for job arrays and their merge; tables, plots and checks at the end.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/progress.hpp"
#include "mxlab/experiment/experiment.hpp"
#include "mxlab/experiment/figure.hpp"
#include "mxlab/experiment/outputs.hpp"

namespace mxlab::experiment {

/// Draws a figure to BASE.png and BASE.pdf (app/plot); empty = no plot files.
using Renderer = std::function<std::optional<Error>(const Figure& f, const std::string& base)>;

struct RunOptions {
  std::string out_dir;        ///< the results folder ("" = results/NAME)
  unsigned jobs = 1;          ///< points run at once
  unsigned threads = 0;       ///< threads per point (0: the hardware threads divided among the jobs)
  bool resume = false;        ///< keep the points the folder's database holds and run the rest
  std::size_t shard = 0;      ///< run points with index % shards == shard
  std::size_t shards = 1;
  Reporter reporter;          ///< points done of the points to run; cancel stops after the running points
  Renderer render;
};

struct RunSummary {
  std::string out_dir;
  std::size_t points = 0;      ///< in the experiment (all shards)
  std::size_t run = 0;         ///< run now
  std::size_t kept = 0;        ///< found in the database (resume)
  bool complete = false;       ///< every point of the experiment is in the database: outputs were written
  bool cancelled = false;
  std::vector<std::string> files;        ///< written, relative to out_dir
  std::vector<ExpectOutcome> expectations;
};

/// An experiment evaluated in memory (the GUI's views): every point's rows, then its tables and figures.
struct Evaluation {
  std::vector<Point> points;
  AllResults results;
  std::vector<std::pair<std::string, Table>> tables;    ///< by [[table]] name, in file order
  std::vector<std::pair<std::string, Figure>> figures;  ///< by [[plot]] name, in file order
  std::vector<ExpectOutcome> expectations;
};

/// Runs every point in memory (no files) with progress (points done) and cancellation (the error "cancelled").
Result<Evaluation> evaluate(const Experiment& e, unsigned threads = 0, const Reporter& reporter = {});

/// Runs the experiment into its results folder.
Result<RunSummary> run_experiment(const Experiment& e, const RunOptions& options);

/// Joins the databases of shard folders (runs of the same experiment with --shard I/N) into `out_dir` and writes
/// the outputs when every point is present.
Result<RunSummary> merge_results(const std::vector<std::string>& dirs, const std::string& out_dir, const Renderer& render);

}  // namespace mxlab::experiment
