// Results of experiment points: named sets of rows (metrics, gaps, bounds, ...), each row a list of cells.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/progress.hpp"
#include "mxlab/experiment/experiment.hpp"

namespace mxlab::experiment {

/// A number (counts, metrics; non-finite allowed) or text (names, exact rationals, engines).
using Cell = std::variant<double, std::string>;

struct Row {
  std::vector<std::pair<std::string, Cell>> cells;
  const Cell* find(const std::string& column) const;
  void add(std::string column, Cell value) { cells.emplace_back(std::move(column), std::move(value)); }
};

/// What one point produced: result set name -> rows, the point's parameters first in every row.
using PointResult = std::map<std::string, std::vector<Row>>;

/// A cell as text: numbers as the shortest decimal that reads back to the same double ("inf", "-inf", "nan").
std::string cell_text(const Cell& c);
/// The result as JSON (exact: numbers read back to the same doubles) and back.
std::string result_json(const PointResult& r);
Result<PointResult> parse_result_json(const std::string& text);

/// A column name that appears twice in one row of the result (a parameter and a measurement of one name would
/// hide each other), as "SET.COLUMN"; nullopt when every row's names are distinct.
std::optional<std::string> repeated_column(const PointResult& r);

/// How a point runs.
struct PointRun {
  unsigned threads = 1;
  Reporter reporter;
};

/// Runs one point of the experiment's job (docs/experiments.md lists each job's result sets and columns).
Result<PointResult> run_point(const Experiment& e, const Point& p, const PointRun& run);

/// Checks a point before anything runs: its formats parse and its input exists. Errors name both.
std::optional<Error> check_point(const Experiment& e, const Point& p);

/// The files a point reads (tensor files, weight files with their shards) for provenance; empty for generated inputs.
std::vector<std::string> input_files(const Experiment& e);

}  // namespace mxlab::experiment
