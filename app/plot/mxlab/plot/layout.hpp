// The layout rules every drawn figure keeps, checked from the geometry of the figure as it is drawn into its file:
// no text over text, no text outside the figure, no legend over data, every series its own colour and marker,
// linear colour scales of values that cannot be negative starting at 0, the title in the figure's width, axis
// labels at their size unless too long for their axis, overlaid histograms outlined at every bin's count and at
// zero over empty bins. No Qt in this header.
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

/// As check_layout, with the figure first drawn into a plot of drawn_width x drawn_height logical pixels, then
/// resized to the file's size as a widget is when it is shown (a plot drawn in a tab of the GUI not shown yet).
LayoutReport check_layout_after_resize(const experiment::Figure& f, int drawn_width, int drawn_height,
                                       const SaveOptions& options = {});

}  // namespace mxlab::plot
