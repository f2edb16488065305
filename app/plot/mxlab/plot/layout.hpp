// The layout rules every drawn figure keeps, checked from the geometry of the figure as it is drawn into its file:
// no text over text, no text outside the figure, no legend over data, every series its own colour and marker,
// linear colour scales of values that cannot be negative starting at 0. No Qt in this header.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mxlab/experiment/figure.hpp"
#include "mxlab/plot/plot.hpp"

namespace mxlab::plot {

struct LayoutReport {
  std::size_t checks = 0;           ///< rule checks made (each pair of texts, each legend and data point set, ...)
  std::size_t texts = 0;            ///< texts drawn
  std::size_t panels = 0;           ///< plot areas (one per facet)
  std::size_t spreads = 0;          ///< series drawn with their spread (error bars or a band)
  std::vector<std::string> faults;  ///< one line per broken rule: which rule, which texts or series
};

/// Draws the figure as save_figure does (same size and fonts) without writing a file, records where every text
/// lands, and checks the layout rules.
LayoutReport check_layout(const experiment::Figure& f, const SaveOptions& options = {});

}  // namespace mxlab::plot
