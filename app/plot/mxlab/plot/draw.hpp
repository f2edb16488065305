// Drawing a figure description into a QCustomPlot: the one function the GUI's widgets and the headless
// export share.
#pragma once

#include "mxlab/experiment/figure.hpp"

class QCustomPlot;

namespace mxlab::plot {

/// Clears the plot and draws the figure: series with distinct colours and markers, log axes (powers of two
/// or ten), categories, markers, heatmap with its colour scale, title and legend. `font_px` is the tick
/// label size in pixels of the plot's logical size (the other texts scale with it).
void draw(QCustomPlot& plot, const experiment::Figure& f, double font_px = 11);

}  // namespace mxlab::plot
