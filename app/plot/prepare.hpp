// What save_figure and check_layout share: the Qt application and a figure drawn at its file's size and fonts.
#pragma once

#include "mxlab/experiment/figure.hpp"
#include "mxlab/plot/plot.hpp"

class QCustomPlot;

namespace mxlab::plot {

/// The process's Qt application: the existing one (the GUI), or one made on the offscreen platform.
void ensure_application();

/// The figure's layout size in logical pixels (150 per inch).
struct Canvas {
  int width = 0, height = 0;
  double font_px = 0;  ///< the tick labels' size in logical pixels, as drawn
};
inline constexpr double kLogicalPerInch = 150;

/// Sizes the plot as the figure's file (its own size and font, else the options') and draws the figure into it.
Canvas prepare(QCustomPlot& plot, const experiment::Figure& f, const SaveOptions& options);

}  // namespace mxlab::plot
