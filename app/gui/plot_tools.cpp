// Readouts, zoom and data export of the GUI's plots.
#include "plot_tools.hpp"

#include <QMenu>
#include <QTableWidget>
#include <QToolTip>
#include <cmath>
#include <limits>
#include <qcustomplot.h>

#include "mxlab/core/bits.hpp"
#include "mxlab/plot/draw.hpp"

namespace mxlab::gui {

using experiment::Figure;
using experiment::PlotKind;

namespace {

QString num(double v) { return QString::number(v, 'g', 6); }

QString label(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

QString readoutAt(const QCustomPlot& plot, const Figure& f, const QPointF& pixel) {
  if (plot.axisRectCount() == 0) return {};
  QCPAxisRect* rect = plot.axisRect(0);
  if (!rect->rect().contains(pixel.toPoint())) return {};
  QCPAxis* x = rect->axis(QCPAxis::atBottom);
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
  if (f.kind == PlotKind::Heatmap) {
    const auto& h = f.heatmap;
    const long i = std::lround(x->pixelToCoord(pixel.x())), j = std::lround(y->pixelToCoord(pixel.y()));
    if (i < 0 || j < 0 || i >= static_cast<long>(h.x_labels.size()) || j >= static_cast<long>(h.y_labels.size())) return {};
    const double v = h.values[static_cast<std::size_t>(j) * h.x_labels.size() + static_cast<std::size_t>(i)];
    return QString("%1, %2\n%3 = %4")
        .arg(label(h.x_labels[static_cast<std::size_t>(i)]), label(h.y_labels[static_cast<std::size_t>(j)]),
             label(h.value_label.empty() ? "value" : h.value_label), std::isfinite(v) ? num(v) : QObject::tr("no data"));
  }
  const QString xl = label(f.x.label.empty() ? "x" : f.x.label), yl = label(f.y.label.empty() ? "y" : f.y.label);
  auto xname = [&](double v) {
    const auto& cats = !f.x.tick_labels.empty() ? f.x.tick_labels : f.categories;
    const long k = std::lround(v);
    return !cats.empty() && k >= 0 && k < static_cast<long>(cats.size()) ? label(cats[static_cast<std::size_t>(k)]) : num(v);
  };
  if (f.kind == PlotKind::Histogram) {
    // Every series' bin under the mouse.
    const double at = x->pixelToCoord(pixel.x());
    QStringList lines;
    for (const auto& s : f.series)
      for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k)
        if (at >= s.x[k] && at < s.x[k] + s.bin_width) {
          lines << QString("%1: [%2, %3): %4").arg(label(s.name), num(s.x[k]), num(s.x[k] + s.bin_width), num(s.y[k]));
          break;
        }
    return lines.isEmpty() ? QString() : xl + "\n" + lines.join('\n');
  }
  // The nearest point in pixels.
  double best = 24 * 24;
  QString out;
  for (const auto& s : f.series)
    for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
      if (!std::isfinite(s.x[k]) || !std::isfinite(s.y[k])) continue;
      const double dx = x->coordToPixel(s.x[k]) - pixel.x(), dy = y->coordToPixel(s.y[k]) - pixel.y();
      if (dx * dx + dy * dy < best) {
        best = dx * dx + dy * dy;
        out = QString("%1\n%2 = %3\n%4 = %5").arg(label(s.name), xl, xname(s.x[k]), yl, num(s.y[k]));
      }
    }
  return out;
}

void addPlotTools(QCustomPlot* plot, FigureSource figure) {
  plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot->setMouseTracking(true);
  plot->setToolTip(QObject::tr("Drag to move, wheel to zoom, double-click to reset the zoom; the mouse reads out values"));
  QObject::connect(plot, &QCustomPlot::mouseMove, plot, [plot, figure](QMouseEvent* e) {
    const Figure* f = figure();
    const QString text = f ? readoutAt(*plot, *f, e->position()) : QString();
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(e->globalPosition().toPoint(), text, plot);
  });
  auto reset = [plot, figure] {
    if (const Figure* f = figure()) plot::draw(*plot, *f, 12);
  };
  QObject::connect(plot, &QCustomPlot::mouseDoubleClick, plot, [reset](QMouseEvent*) { reset(); });
  plot->setContextMenuPolicy(Qt::CustomContextMenu);
  QObject::connect(plot, &QWidget::customContextMenuRequested, plot, [plot, reset](const QPoint& at) {
    QMenu menu(plot);
    menu.addAction(QObject::tr("Reset zoom"), reset);
    menu.exec(plot->mapToGlobal(at));
  });
}

Table figureData(const Figure& f) {
  Table t;
  if (f.kind == PlotKind::Heatmap) {
    const auto& h = f.heatmap;
    t.add_column(f.x.label.empty() ? "x" : f.x.label);
    t.add_column(f.y.label.empty() ? "y" : f.y.label);
    t.add_column(h.value_label.empty() ? "value" : h.value_label, true);
    for (std::size_t j = 0; j < h.y_labels.size(); ++j)
      for (std::size_t i = 0; i < h.x_labels.size(); ++i) {
        const double v = h.values[j * h.x_labels.size() + i];
        t.rows.push_back({h.x_labels[i], h.y_labels[j], std::isfinite(v) ? g17(v) : std::string()});
      }
    return t;
  }
  t.add_column(f.legend_title.empty() ? "series" : f.legend_title);
  t.add_column(f.x.label.empty() ? "x" : f.x.label, true);
  t.add_column(f.y.label.empty() ? "y" : f.y.label, true);
  // Categories (bars, a number line of formats) by name.
  const auto& cats = !f.x.tick_labels.empty() ? f.x.tick_labels : f.categories;
  t.numeric[1] = cats.empty();
  for (const auto& s : f.series)
    for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
      const long c = std::lround(s.x[k]);
      t.rows.push_back({s.name, cats.empty() || c < 0 || c >= static_cast<long>(cats.size()) ? g17(s.x[k]) : cats[static_cast<std::size_t>(c)],
                        g17(s.y[k])});
    }
  return t;
}

QString writeTable(const Table& t, const QString& base) {
  const std::string b = base.toStdString();
  for (const auto& [ext, text] : {std::pair{".csv", to_csv(t)}, std::pair{".md", to_markdown(t)}, std::pair{".tex", to_latex(t)}})
    if (auto err = write_file_atomic(b + ext, text)) return QString::fromStdString(err->message);
  return {};
}

Table tableOf(const QTableWidget& w, const QList<int>& textColumns) {
  Table t;
  for (int c = 0; c < w.columnCount(); ++c) {
    const QTableWidgetItem* h = w.horizontalHeaderItem(c);
    t.add_column(h ? h->text().toStdString() : std::to_string(c), !textColumns.contains(c));
  }
  for (int r = 0; r < w.rowCount(); ++r) {
    std::vector<std::string> row;
    for (int c = 0; c < w.columnCount(); ++c) row.push_back(w.item(r, c) ? w.item(r, c)->text().toStdString() : "");
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace mxlab::gui
