// Experiment files (TOML, docs/experiments.md): what a study computes (a job over a sweep of points), on
// which inputs, and which tables, plots and expectations it makes of the results.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab::experiment {

/// (key, value) pairs in the order written.
using Pairs = std::vector<std::pair<std::string, std::string>>;

/// A named input tensor, or a weight file whose selected tensors are the layers of this input.
struct InputDef {
  std::string name;
  std::string source;           ///< "gen:DIST" or a tensor file (relative paths: from the experiment file's folder)
  std::string shape;            ///< generated and raw inputs
  std::uint64_t seed = 0;       ///< generated inputs
  bool bf16 = false;
  std::string weights;          ///< a registered model ("mobilefacenet") or a weight file (model.json, .safetensors)
  std::string select = "*";     ///< weights: name pattern (glob, or "re:" regular expression)
  std::string layout = "auto";  ///< weights: auto (blocks along each kernel's reduction axes) or last (the last axis)
  std::int64_t min_elements = 1;  ///< weights: smaller tensors are left out
  bool kernels = true;          ///< weights: only tensors with a known layout (dense and convolution kernels)
  std::string data_dir;         ///< where registered models are installed ("" = the default data folder)
};

/// A table of results: row keys, optional pivot column, values.
struct TableDef {
  std::string name;
  std::string from = "metrics";   ///< result set
  std::vector<std::string> rows;  ///< columns whose values make a row's key
  std::string pivot;              ///< a column whose values become columns ("" = none)
  std::vector<std::string> values;
  std::string aggregate;          ///< median, mean, min, max, sum, count ("" = keys must be unique)
  Pairs where;                    ///< only result rows whose columns have these values
  int digits = 4;                 ///< significant digits of numbers
  /// Fixed decimals of value columns: by value column ("" = every one); a column not named gets decimals from
  /// `digits` and its largest value, the same for every cell.
  std::vector<std::pair<std::string, int>> decimals;
  std::string caption;
  std::string label;              ///< LaTeX \label (default tab:NAME)
  Pairs header;                   ///< shown names of columns: { "sqnr_db mxfp4" = "MXFP4" }
  int line = 0;
};

struct PlotDef {
  std::string name;
  std::string from = "metrics";
  std::string kind = "line";  ///< line, scatter, histogram, heatmap, bar
  std::string x, y;           ///< columns
  std::string series;         ///< a column: one series per value ("" = one series)
  std::string value;          ///< heatmap: the column coloured
  Pairs where;
  std::string x_scale = "linear", y_scale = "linear";
  bool log_values = false;    ///< heatmap: logarithmic colour scale
  /// Several results at one x of a series (layers, seeds): median, mean, min, max, sum, count ("" = sum for
  /// histograms, else an error naming the point).
  std::string aggregate;
  /// Vertical markers at the numbers of a column ("SET.COLUMN", or COLUMN of `from`), e.g. "pairs.crossover_gaps".
  std::string markers;
  std::string marker_label;  ///< their label (default: the column's name)
  std::optional<double> x_min, x_max, y_min, y_max;
  std::string title, x_label, y_label, legend_title;
  std::string value_label;   ///< heatmap: the colour bar's label (default: the value column)
  Pairs labels;              ///< shown names of values (series, categories, facets): { mxfp8_e4m3 = "MXFP8 E4M3" }
  int smooth = 0;            ///< line: centred moving average over this many points (0 = none)
  std::string spread;        ///< several results at a point: "std" or "minmax" as error bars or a band
  std::string facet;         ///< a column: one panel per value, with shared axes ("" = one panel)
  double width = 0, height = 0;  ///< inches (0 = a paper's column, 3.5 x 2.6)
  double font_size = 0;      ///< tick labels in points (0 = 8); other texts scale with it
  int line = 0;
};

/// An expectation on results (mxlab check): every selected row satisfies it.
struct ExpectDef {
  std::string name;
  std::string from = "metrics";
  Pairs where;
  std::string metric;
  std::optional<double> at_most, at_least, equals;
  std::string at_most_column;  ///< at most another column of the same row (an analytic bound)
  double tolerance = 0;        ///< for equals (and golden): |value - expected| <= tolerance
  std::string reason;          ///< why the tolerance is not zero
  std::string golden;          ///< a CSV file (relative to the experiment file) the table `table` must match
  std::string table;
  int line = 0;
};

/// The value of a job's own top-level key: text, an integer, a number, true or false, or a list of texts.
using JobValue = std::variant<std::string, std::int64_t, double, bool, std::vector<std::string>>;

struct Experiment {
  std::string path;         ///< the file it was read from
  std::string text;         ///< the file's text (copied into every results folder)
  std::string name;
  std::string description;
  std::string job = "analyze";  ///< analyze, catalogue, bounds, profiles, train, gemm, direct_cast
  std::vector<InputDef> inputs;
  /// Sweep axes in the order written: scalar values are fixed for every point, lists are crossed.
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  /// Explicit points ([[points]]); each is crossed with the axes. Empty = the axes alone.
  std::vector<Pairs> points;
  std::vector<std::string> metrics;  ///< columns of the metrics set to keep ("" = all)
  bool gaps = false;                 ///< analyze: exponent-gap histogram and errors by gap
  int histogram_bins = 0;            ///< analyze: histograms of inputs and values, errors by binade (0 = none)
  std::string baseline_profile = "ocp";  ///< profiles: the profile every other is compared with
  int max_gap = -1;                  ///< bounds: last gap (-1: where both formats have fully underflowed)
  /// The job's own top-level keys (each job's table of them, with their types and checks, is in parse.cpp):
  /// every key of the job with its value as written, else its default, in the table's order. direct_cast:
  /// `formats` (the formats each point's model is cast to) and `cast` (weights, weights+activations).
  std::vector<std::pair<std::string, JobValue>> job_keys;
  std::vector<TableDef> tables;
  std::vector<PlotDef> plots;
  std::vector<ExpectDef> expects;
  /// A batch file lists other experiment files (relative to it) instead of a job: batch = ["a.toml", ...].
  std::vector<std::string> batch;

  /// Typed reads of job_keys, for the job's code: the key must be one of the job's, of that type. Anything else
  /// is a mistake in the code, not in the file: it throws std::logic_error naming the job and the key.
  const std::string& job_text(std::string_view key) const;
  std::int64_t job_integer(std::string_view key) const;
  double job_number(std::string_view key) const;
  bool job_flag(std::string_view key) const;
  const std::vector<std::string>& job_texts(std::string_view key) const;
};

/// Reads an experiment file. Errors give the file, the line and the key at fault.
Result<Experiment> read_experiment(const std::string& path);
/// Parses experiment text; `path` names it in errors and anchors relative paths.
Result<Experiment> parse_experiment(const std::string& text, const std::string& path);

/// One point of the sweep: its parameters (axis, value) in axis order; "input" and "layer" name the tensor.
struct Point {
  std::size_t index = 0;
  Pairs params;
  /// Canonical text of the parameters (the point's identity in the results database).
  std::string key() const;
  std::optional<std::string> param(const std::string& name) const;
};

/// Most points an experiment may have, and most bytes of parameter text all its points may have together.
inline constexpr std::size_t kMaxPoints = std::size_t{1} << 20;
inline constexpr std::uint64_t kMaxPointBytes = std::uint64_t{64} << 20;

/// How many points the sweep and the explicit points give, counted without expanding them (a weights input
/// counts as one layer). Errors name the file and the count when it passes kMaxPoints (or their parameters
/// kMaxPointBytes), with the products checked for overflow.
Result<std::size_t> count_points(const Experiment& e);

/// Every point of the experiment in a fixed order (weight inputs are opened to list their layers); refused,
/// before anything is expanded, when count_points refuses it.
Result<std::vector<Point>> expand_points(const Experiment& e);

/// Text with its control characters written as \xNN, for one-line messages that show stored or written text.
std::string printable(std::string_view text);

}  // namespace mxlab::experiment
