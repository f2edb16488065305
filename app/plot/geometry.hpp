// What drawing and the layout check share about a figure's geometry (internal to app/plot).
#pragma once

#include <QRectF>

class QCustomPlot;

namespace mxlab::plot {

/// How much of the plotted data a rectangle covers: data points, samples of the lines between them and bars,
/// each counted where it lies inside its own axis rect (the plot must be laid out).
int data_under(QCustomPlot& plot, const QRectF& box);

}  // namespace mxlab::plot
