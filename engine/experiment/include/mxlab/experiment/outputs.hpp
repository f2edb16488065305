// What an experiment makes of its results: tables, figures and expectations, built from the rows of every
// point in point order (so a resumed or merged run gives the same bytes as one run).
#pragma once

#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/experiment/experiment.hpp"
#include "mxlab/experiment/figure.hpp"
#include "mxlab/experiment/results.hpp"

namespace mxlab::experiment {

/// Every point's rows of each result set, in point order.
using AllResults = std::map<std::string, std::vector<Row>>;
AllResults gather(const std::vector<PointResult>& points);

/// A result set as one table: every column seen (in first-seen order), numbers exact (shortest round trip).
Table result_table(const std::vector<Row>& rows);

/// The table an experiment asks for. Errors name the table, its line and the column at fault.
Result<Table> build_table(const Experiment& e, const TableDef& def, const AllResults& results);

/// A table as LaTeX for a paper: a table environment holding its caption, its label (`label`, default tab:NAME)
/// and the booktabs tabular.
std::string table_latex(const Table& t, const TableDef& def);

/// The figure of a plot. Errors name the plot, its line and the column at fault.
Result<Figure> build_figure(const Experiment& e, const PlotDef& def, const AllResults& results);

/// The outcome of one expectation.
struct ExpectOutcome {
  std::string name;
  int line = 0;
  bool passed = false;
  std::int64_t rows_checked = 0;
  std::vector<std::string> failures;  ///< one line per failing row (at most a few) or the reason
};

/// Checks every expectation of the experiment; `tables` are the built tables by name (golden files).
std::vector<ExpectOutcome> check_expectations(const Experiment& e, const AllResults& results,
                                              const std::map<std::string, Table>& tables);

}  // namespace mxlab::experiment
