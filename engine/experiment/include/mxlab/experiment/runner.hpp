// Running an experiment: points in parallel on the engine's fast path, each recorded as it finishes in the
// results database (SQLite, one transaction per point), so a run killed at any moment loses nothing that
// finished and --resume continues; shards for job arrays and their merge; tables, plots and checks at the end.
#pragma once

#include <functional>
#include <map>
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

/// Every point of the experiment, each checked (check_point): what run_experiment runs, or the first problem.
Result<std::vector<Point>> checked_points(const Experiment& e);

/// Refuses experiments of one batch (or one command line) that would write the same results folder (two of one
/// name, or one file given twice), naming both files. `out_dirs[k]` is the folder of `experiments[k]`.
std::optional<Error> check_distinct_folders(const std::vector<Experiment>& experiments, const std::vector<std::string>& out_dirs);

/// Runs the experiment into its results folder, holding the folder's lock (FolderLock) throughout: a second
/// process on the same folder is refused, naming the first.
Result<RunSummary> run_experiment(const Experiment& e, const RunOptions& options);

/// A point as stored in a results database.
struct StoredPoint {
  std::string key;     ///< the point's parameters (Point::key)
  std::string result;  ///< its result sets as exact JSON (result_json)
  double seconds = 0;
  std::string sha256;  ///< result_checksum of the row, written with it
};

/// A results database (FOLDER/results.sqlite) as read and checked.
struct ResultsDatabase {
  std::string path;
  std::string experiment_sha256;  ///< of experiment_text
  std::string experiment_text;
  std::string experiment_path;
  std::string version;            ///< of the mxlab that ran it
  std::size_t points = 0;         ///< of the experiment (every shard)
  std::size_t shard = 0, shards = 1;
  std::map<std::size_t, StoredPoint> stored;  ///< by point index
};

/// The checksum stored with each point: SHA-256 of the experiment's SHA-256, the index, the key and the result
/// (one per line), so an edited, damaged or transplanted row is found.
std::string result_checksum(const std::string& experiment_sha256, std::size_t index, const std::string& key,
                            const std::string& result);

/// Reads a results database and checks it: every column read has its type (no NULL, no text for a number),
/// the experiment text matches its checksum, and every point's index is in range and in the database's shard
/// and its row matches its checksum. Errors name the database and the point. Nothing is written.
Result<ResultsDatabase> read_results_database(const std::string& path);

/// Whether an error of run_experiment or merge_results is the storage failing (a full disk, an I/O error)
/// rather than bad input or damaged state.
bool is_storage_failure(const Error& e);

/// Where two experiments would compute different results (job, inputs, sweep, points, job options), as the
/// key that differs; nullopt when only their presentation (name, description, metrics kept, tables, plots,
/// expectations) differs.
std::optional<std::string> computation_difference(const Experiment& a, const Experiment& b);

/// Rebuilds the tables, plots and checks of a complete results folder from its stored results, without running
/// a point: with the stored experiment file, or with `presentation`, a file that computes the same results
/// (computation_difference). The folder is locked while it is written; bad input writes nothing.
Result<RunSummary> render_results(const std::string& dir, const std::optional<Experiment>& presentation, const Renderer& render);

/// Joins the databases of shard folders (runs of the same experiment with --shard I/N) into `out_dir` and writes
/// its outputs. Every point index of the experiment must be in exactly one folder, every folder must hold the same
/// experiment file run by the same version, and every row must match its checksum; otherwise nothing is written.
/// `out_dir` is locked while it is written.
Result<RunSummary> merge_results(const std::vector<std::string>& dirs, const std::string& out_dir, const Renderer& render);

}  // namespace mxlab::experiment
