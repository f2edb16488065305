// What every plot of the GUI offers besides its figure: a readout of the data under the mouse (nearest point,
// bar or heatmap cell, with its series), zoom and drag, and reset-zoom (double-click, or the context menu);
// and the figure's data as a table (what Export table writes from a plot's tab).
#pragma once

#include <QList>
#include <QString>
#include <functional>

#include "mxlab/core/table.hpp"
#include "mxlab/experiment/figure.hpp"

class QCustomPlot;
class QPointF;
class QTableWidget;

namespace mxlab::gui {

/// The figure a plot shows now (null while it shows none).
using FigureSource = std::function<const experiment::Figure*()>;

/// Adds the readout, zoom, drag and reset-zoom to a plot drawn from `figure` by plot::draw.
void addPlotTools(QCustomPlot* plot, FigureSource figure);

/// The readout at a position in the plot's pixels: "series: x = ..., y = ..." of the nearest point within
/// 24 pixels, the bar under the mouse, or the heatmap cell "column, row: value"; "" elsewhere.
QString readoutAt(const QCustomPlot& plot, const experiment::Figure& f, const QPointF& pixel);

/// The figure's data: columns series, x, y (a heatmap: x, y, value by label), every point.
Table figureData(const experiment::Figure& f);

/// A table widget's cells as a table: its header's names; the columns listed text, the others numbers.
Table tableOf(const QTableWidget& w, const QList<int>& textColumns);

/// Writes BASE.csv, BASE.md and BASE.tex; an error or "".
QString writeTable(const Table& t, const QString& base);

}  // namespace mxlab::gui
