// The layout rules, checked on the geometry of a figure as drawn: a paint engine records where every text lands
// (the same painting the PNG and PDF get), the plot's objects give the legends, data and colour scales.
#include "mxlab/plot/layout.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include <QPaintDevice>
#include <QPaintEngine>
#include <QPainterPath>
#include <QTextItem>
#include <qcustomplot.h>

#include "geometry.hpp"
#include "mxlab/plot/draw.hpp"
#include "prepare.hpp"

namespace mxlab::plot {

namespace {

struct TextBox {
  QString text;
  QPolygonF shape;  ///< the text's box as drawn (rotated with it)
  QRectF bounds;
};

/// A straight line drawn (a piece of a polyline) in device pixels, with its pen's colour.
struct Segment {
  QLineF line;
  QColor colour;
};

/// Records every text drawn with its box, and every line, in device pixels; draws nothing.
class Recorder : public QPaintEngine {
 public:
  Recorder() : QPaintEngine(QPaintEngine::AllFeatures) {}
  bool begin(QPaintDevice*) override { return true; }
  bool end() override { return true; }
  void updateState(const QPaintEngineState& s) override {
    if (s.state() & QPaintEngine::DirtyTransform) transform_ = s.transform();
    if (s.state() & QPaintEngine::DirtyPen) pen_ = s.pen().color();
  }
  void drawPixmap(const QRectF&, const QPixmap&, const QRectF&) override {}
  void drawPath(const QPainterPath&) override {}
  void drawPolygon(const QPointF* p, int n, PolygonDrawMode mode) override {
    if (mode != PolylineMode) return;
    for (int i = 1; i < n; ++i) line(QLineF(p[i - 1], p[i]));
  }
  void drawPolygon(const QPoint* p, int n, PolygonDrawMode mode) override {
    if (mode != PolylineMode) return;
    for (int i = 1; i < n; ++i) line(QLineF(p[i - 1], p[i]));
  }
  void drawLines(const QLineF* l, int n) override {
    for (int i = 0; i < n; ++i) line(l[i]);
  }
  void drawLines(const QLine* l, int n) override {
    for (int i = 0; i < n; ++i) line(QLineF(l[i]));
  }
  void drawRects(const QRectF*, int) override {}
  void drawRects(const QRect*, int) override {}
  void drawEllipse(const QRectF&) override {}
  void drawEllipse(const QRect&) override {}
  void drawPoints(const QPointF*, int) override {}
  void drawPoints(const QPoint*, int) override {}
  void drawImage(const QRectF&, const QImage&, const QRectF&, Qt::ImageConversionFlags) override {}
  void drawTiledPixmap(const QRectF&, const QPixmap&, const QPointF&) override {}
  void drawTextItem(const QPointF& p, const QTextItem& ti) override {
    if (ti.text().trimmed().isEmpty()) return;
    const QRectF r(p.x(), p.y() - ti.ascent(), ti.width(), ti.ascent() + ti.descent());
    texts.push_back({ti.text(), transform_.map(QPolygonF(r)), transform_.mapRect(r)});
  }
  Type type() const override { return QPaintEngine::User; }

  std::vector<TextBox> texts;
  std::vector<Segment> lines;

 private:
  void line(const QLineF& l) {
    if (std::isfinite(l.x1()) && std::isfinite(l.y1()) && std::isfinite(l.x2()) && std::isfinite(l.y2()))
      lines.push_back({transform_.map(l), pen_});
  }
  QTransform transform_;
  QColor pen_;
};

class RecordingDevice : public QPaintDevice {
 public:
  RecordingDevice(int w, int h) : w_(w), h_(h) {}
  QPaintEngine* paintEngine() const override { return &engine; }
  mutable Recorder engine;

 protected:
  int metric(PaintDeviceMetric m) const override {
    switch (m) {
      case PdmWidth: return w_;
      case PdmHeight: return h_;
      case PdmWidthMM: return w_ * 254 / 960;
      case PdmHeightMM: return h_ * 254 / 960;
      case PdmNumColors: return 0x7fffffff;
      case PdmDepth: return 32;
      case PdmDpiX: case PdmDpiY: case PdmPhysicalDpiX: case PdmPhysicalDpiY: return 96;
      case PdmDevicePixelRatio: return 1;
      case PdmDevicePixelRatioScaled: return static_cast<int>(devicePixelRatioFScale());
      default: return 0;
    }
  }

 private:
  int w_, h_;
};

/// Whether two drawn texts cover a common area (touching edges and a pixel of antialiasing aside).
bool overlap(const TextBox& a, const TextBox& b) {
  if (!a.bounds.adjusted(0.75, 0.75, -0.75, -0.75).intersects(b.bounds.adjusted(0.75, 0.75, -0.75, -0.75))) return false;
  QPainterPath pa, pb;
  pa.addPolygon(a.shape);
  pb.addPolygon(b.shape);
  const QPainterPath common = pa.intersected(pb);
  const QRectF c = common.boundingRect();
  return c.width() > 1.0 && c.height() > 1.0;
}

QString shown(const QString& s) { return "'" + (s.size() > 40 ? s.left(37) + "..." : s) + "'"; }

void legends_in(QCPLayout* layout, std::vector<QCPLegend*>& out) {
  if (!layout) return;
  for (int i = 0; i < layout->elementCount(); ++i) {
    QCPLayoutElement* el = layout->elementAt(i);
    if (!el) continue;
    if (auto* legend = qobject_cast<QCPLegend*>(el)) {
      if (legend->visible()) out.push_back(legend);
      continue;
    }
    if (auto* rect = qobject_cast<QCPAxisRect*>(el)) legends_in(rect->insetLayout(), out);
    if (auto* sub = qobject_cast<QCPLayout*>(el)) legends_in(sub, out);
  }
}


/// Where a histogram's outline, drawn as `lines`, leaves its bins: samples at a quarter, half and three quarters
/// of every bin from the one before the first to the one after the last, each where the horizontal lines of the
/// graph's colour cross it; a non-empty bin must show its count alone there, an empty bin between non-empty ones
/// the bottom of the plot (zero) alone, the bins outside the bottom or nothing.
std::vector<QString> outline_faults(QCPGraph& g, const experiment::Series& s, experiment::AxisScale scale,
                                    const std::vector<Segment>& lines, const std::vector<QCPLegend*>& legends) {
  std::vector<QString> out;
  QCPAxis* kx = g.keyAxis();
  QCPAxis* vy = g.valueAxis();
  const QRectF area = QRectF(kx->axisRect()->rect()).adjusted(-1, -1, 1, 1);
  std::vector<QLineF> flat, upright;  // the graph's horizontal lines inside its plot, legends (their icons) aside; its vertical lines
  for (const Segment& seg : lines) {
    if (seg.colour.rgb() != g.pen().color().rgb()) continue;
    if (std::fabs(seg.line.dx()) <= 0.5 && std::fabs(seg.line.dy()) > 0.5) upright.push_back(seg.line);
    if (std::fabs(seg.line.dy()) > 0.5 || std::fabs(seg.line.dx()) < 0.5) continue;
    if (!area.contains(seg.line.p1()) || !area.contains(seg.line.p2())) continue;
    const bool icon = std::any_of(legends.begin(), legends.end(), [&](QCPLegend* l) {
      return QRectF(l->outerRect()).contains(seg.line.center());
    });
    if (!icon) flat.push_back(seg.line);
  }
  const double w = s.bin_width > 0 ? s.bin_width : 1;
  std::map<long long, double> counts;  // bin index from the first bin's left edge -> count
  double first = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k)
    if (std::isfinite(s.x[k])) first = std::min(first, s.x[k]);
  for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
    const bool usable = std::isfinite(s.x[k]) && std::isfinite(s.y[k]) && (scale == experiment::AxisScale::Linear ? s.y[k] != 0 : s.y[k] > 0);
    if (usable) counts[std::llround((s.x[k] - first) / w)] = s.y[k];
  }
  if (counts.empty()) return out;
  const double bottom = std::min(QRectF(kx->axisRect()->rect()).bottom(),
                                 scale == experiment::AxisScale::Linear ? vy->coordToPixel(0) : std::numeric_limits<double>::infinity());
  const long long lo = counts.begin()->first, hi = counts.rbegin()->first;
  for (long long b = lo - 1; b <= hi + 1; ++b) {
    const auto c = counts.find(b);
    const bool inside = b >= lo && b <= hi;
    for (double at : {0.25, 0.5, 0.75}) {
      const double px = kx->coordToPixel(first + (static_cast<double>(b) + at) * w);
      std::vector<double> ys;
      for (const QLineF& l : flat)
        if (std::min(l.x1(), l.x2()) < px && px < std::max(l.x1(), l.x2())) ys.push_back(l.y1());
      const QString where = "bin " + QString::number(first + static_cast<double>(b) * w, 'g', 6);
      if (c != counts.end()) {
        const double want = vy->coordToPixel(c->second);
        const bool ok = !ys.empty() && std::all_of(ys.begin(), ys.end(), [&](double y) { return std::fabs(y - want) <= 1.5; });
        if (!ok) {
          out.push_back(where + " (" + QString::number(c->second, 'g', 6) + ") is not drawn at its count");
          break;
        }
      } else {
        // Zero: the bottom of the plot, or below it on a log axis (drawn outside the plot, so not seen here).
        const bool ok = (!inside || !ys.empty() || scale != experiment::AxisScale::Linear) &&
                        std::all_of(ys.begin(), ys.end(), [&](double y) { return y >= bottom - 1.5; });
        if (!ok) {
          out.push_back(where + " is empty but its outline " + (ys.empty() ? QString("is missing") : QString("is not at zero")));
          break;
        }
      }
    }
    // A non-empty bin beside an empty one (or at an end): a vertical line at their edge from its count to zero.
    if (c == counts.end()) continue;
    for (const int side : {-1, 1}) {
      if (counts.count(b + side)) continue;
      const double edge = kx->coordToPixel(first + static_cast<double>(side < 0 ? b : b + 1) * w);
      const double top = vy->coordToPixel(c->second);
      if (top >= bottom - 1.5) continue;  // a count as low as zero in pixels: no edge to see
      const bool down = std::any_of(upright.begin(), upright.end(), [&](const QLineF& l) {
        return std::fabs(l.x1() - edge) <= 1.5 && std::min(l.y1(), l.y2()) <= top + 1.5 && std::max(l.y1(), l.y2()) >= bottom - 1.5;
      });
      if (!down) out.push_back("bin " + QString::number(first + static_cast<double>(b) * w, 'g', 6) + " has no edge down to zero on its " +
                               (side < 0 ? "left" : "right"));
    }
  }
  return out;
}

}  // namespace

int data_under(QCustomPlot& plot, const QRectF& box) {
  int n = 0;
  for (int i = 0; i < plot.plottableCount(); ++i) {
    QCPAbstractPlottable* p = plot.plottable(i);
    QCPAxis* kx = p->keyAxis();
    QCPAxis* vy = p->valueAxis();
    const QRectF area = kx->axisRect()->rect();
    if (auto* g = qobject_cast<QCPGraph*>(p)) {
      if (g->name().isEmpty() && g->brush().style() != Qt::NoBrush) continue;  // a band's edge: its fill is translucent
      QPointF prev;
      bool have = false;
      for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
        if (!std::isfinite(it->key) || !std::isfinite(it->value)) {
          have = false;
          continue;
        }
        const QPointF pt(kx->coordToPixel(it->key), vy->coordToPixel(it->value));
        if (area.contains(pt) && box.contains(pt)) ++n;
        if (have && g->lineStyle() != QCPGraph::lsNone)
          for (int j = 1; j < 16; ++j) {
            const QPointF s = prev + (pt - prev) * (j / 16.0);
            if (area.contains(s) && box.contains(s)) ++n;
          }
        prev = pt;
        have = true;
      }
    } else if (auto* b = qobject_cast<QCPBars*>(p)) {
      for (auto it = b->data()->constBegin(); it != b->data()->constEnd(); ++it) {
        const double half = b->width() / 2;
        double left = it->key - half, right = it->key + half;
        if (b->barsGroup()) {
          // Bars of a group sit side by side around the key: the group's whole width is covered.
          const double total = b->width() * b->barsGroup()->size();
          left = it->key - total / 2;
          right = it->key + total / 2;
        }
        const QRectF bar = QRectF(QPointF(kx->coordToPixel(left), vy->coordToPixel(it->value)),
                                  QPointF(kx->coordToPixel(right), vy->coordToPixel(b->baseValue())))
                               .normalized()
                               .intersected(area);
        if (bar.isValid() && bar.intersects(box.adjusted(1, 1, -1, -1))) ++n;
      }
    } else if (auto* e = qobject_cast<QCPErrorBars*>(p)) {
      // Error bars: samples along each bar, at its data point's pixel position (bars of a group sit aside).
      QCPPlottableInterface1D* data = e->dataPlottable() ? e->dataPlottable()->interface1D() : nullptr;
      if (!data) continue;
      for (int k = 0; k < data->dataCount() && k < e->dataCount(); ++k) {
        const QPointF at = data->dataPixelPosition(k);
        const double v = data->dataMainValue(k);
        const double lo = vy->coordToPixel(v - e->data()->at(k).errorMinus), hi = vy->coordToPixel(v + e->data()->at(k).errorPlus);
        for (int j = 0; j <= 8; ++j) {
          const QPointF s(at.x(), lo + (hi - lo) * (j / 8.0));
          if (area.contains(s) && box.contains(s)) ++n;
        }
      }
    }
  }
  return n;
}

namespace {

void fault(LayoutReport& r, const QString& s) { r.faults.push_back(s.toStdString()); }

/// No text over text; every text inside the figure.
void check_texts(LayoutReport& r, const std::vector<TextBox>& texts, const Canvas& c) {
  const QRectF page(-0.5, -0.5, c.width + 1.0, c.height + 1.0);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    ++r.checks;
    if (!page.contains(texts[i].bounds)) fault(r, "text outside the figure: " + shown(texts[i].text));
    for (std::size_t j = i + 1; j < texts.size(); ++j) {
      ++r.checks;
      if (overlap(texts[i], texts[j])) fault(r, "texts overlap: " + shown(texts[i].text) + " and " + shown(texts[j].text));
    }
  }
}

/// Every category label drawn (QCustomPlot leaves out a tick label the figure's edge would cut).
void check_category_labels(LayoutReport& r, QCustomPlot& plot, const std::vector<TextBox>& texts) {
  std::map<QString, int> drawn;
  for (const auto& t : texts) ++drawn[t.text.trimmed()];
  for (int i = 0; i < plot.axisRectCount(); ++i)
    for (QCPAxis* axis : plot.axisRect(i)->axes()) {
      auto ticker = axis->ticker().dynamicCast<QCPAxisTickerText>();
      if (!ticker || !axis->visible() || !axis->tickLabels()) continue;
      for (auto it = ticker->ticks().constBegin(); it != ticker->ticks().constEnd(); ++it) {
        if (!axis->range().contains(it.key()) || it.value().isEmpty()) continue;
        ++r.checks;
        for (const QString& line : it.value().split('\n'))
          if (drawn[line.trimmed()] == 0) fault(r, "category label not drawn (cut by the figure's edge): " + shown(line));
      }
    }
}

/// The title in the figure's width: no line of it could take the next line's first word and still fit.
void check_title(LayoutReport& r, QCustomPlot& plot, const Canvas& c) {
  for (int i = 0; i < plot.plotLayout()->elementCount(); ++i) {
    auto* title = qobject_cast<QCPTextElement*>(plot.plotLayout()->elementAt(i));
    if (!title) continue;
    const QStringList lines = title->text().split('\n');
    const QFontMetricsF m(title->font());
    for (qsizetype k = 0; k + 1 < lines.size(); ++k) {
      ++r.checks;
      const QString longer = lines[k] + " " + lines[k + 1].section(' ', 0, 0);
      if (m.horizontalAdvance(longer) <= c.width - 8)
        fault(r, "the title is wrapped narrower than the figure: " + shown(lines[k]) + " then " + shown(lines[k + 1]));
    }
  }
}

/// Axis labels at their size (a tenth larger than the tick labels), but for a vertical one too long for its axis
/// on two lines.
void check_axis_labels(LayoutReport& r, QCustomPlot& plot, const Canvas& c) {
  const int label_px = static_cast<int>(std::lround(c.font_px * 1.1));
  for (int i = 0; i < plot.axisRectCount(); ++i) {
    QCPAxisRect* rect = plot.axisRect(i);
    if (qobject_cast<QCPColorScaleAxisRectPrivate*>(rect)) continue;  // a colour scale's title: tick-label size
    for (QCPAxis* axis : {rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft)}) {
      if (!axis || !axis->visible() || axis->label().isEmpty()) continue;
      ++r.checks;
      if (axis->labelFont().pixelSize() == label_px) continue;
      QFont normal = axis->labelFont();
      normal.setPixelSize(label_px);
      const QFontMetricsF m(normal);
      double widest = 0;
      for (const QString& line : axis->label().split('\n')) widest = std::max(widest, m.horizontalAdvance(line));
      const bool too_long = axis->orientation() == Qt::Vertical && widest > rect->rect().height() - 4;
      if (!too_long)
        fault(r, "axis label " + shown(axis->label()) + " is " + QString::number(axis->labelFont().pixelSize()) +
                     " px, not " + QString::number(label_px));
    }
  }
}

/// Overlaid histograms: each outline runs across every non-empty bin at its count and along the bottom of the
/// plot (zero) over the empty bins between them; read from the lines drawn in the series' colour.
void check_outlines(LayoutReport& r, QCustomPlot& plot, const experiment::Figure& f, const std::vector<Segment>& lines,
                    const std::vector<QCPLegend*>& legends) {
  if (f.kind != experiment::PlotKind::Histogram || f.series.size() <= 1) return;
  std::map<QString, int> taken;  // a series drawn in several panels: its k-th graph is its k-th series
  for (const auto& s : f.series) {
    const QString name = QString::fromStdString(s.name);
    QCPGraph* g = nullptr;
    for (int i = 0, k = 0; i < plot.plottableCount() && !g; ++i)
      if (auto* gi = qobject_cast<QCPGraph*>(plot.plottable(i)); gi && gi->name() == name && k++ == taken[name]) g = gi;
    ++taken[name];
    ++r.checks;
    if (!g) {
      fault(r, "histogram " + shown(name) + " has no outline");
      continue;
    }
    for (const QString& why : outline_faults(*g, s, f.y.scale, lines, legends)) fault(r, "histogram " + shown(name) + ": " + why);
  }
}

/// Every series its own colour and marker (series of one name in several panels are one series).
void check_series_styles(LayoutReport& r, QCustomPlot& plot, const experiment::Figure& f) {
  std::map<QString, std::pair<QColor, int>> seen;
  for (int i = 0; i < plot.plottableCount(); ++i) {
    QCPAbstractPlottable* p = plot.plottable(i);
    if (p->name().isEmpty() || seen.count(p->name())) continue;
    const QColor colour = p->pen().color();
    int shape = -1;
    if (auto* g = qobject_cast<QCPGraph*>(p)) shape = g->scatterStyle().shape() == QCPScatterStyle::ssNone ? -1 : g->scatterStyle().shape();
    for (const auto& [name, other] : seen) {
      ++r.checks;
      if (other.first.rgb() == colour.rgb() && f.kind != experiment::PlotKind::Heatmap)
        fault(r, "series " + shown(p->name()) + " and " + shown(name) + " share a colour");
      if (shape >= 0 && other.second == shape) fault(r, "series " + shown(p->name()) + " and " + shown(name) + " share a marker");
    }
    seen[p->name()] = {colour, shape};
  }
}

/// Linear colour scales of values that cannot be negative start at 0.
void check_colour_scale(LayoutReport& r, QCustomPlot& plot, const experiment::Figure& f) {
  if (f.kind != experiment::PlotKind::Heatmap || f.heatmap.log_values) return;
  bool negative = false, any = false;
  for (double v : f.heatmap.values)
    if (std::isfinite(v)) any = true, negative |= v < 0;
  for (int i = 0; i < plot.plotLayout()->elementCount(); ++i)
    if (auto* scale = qobject_cast<QCPColorScale*>(plot.plotLayout()->elementAt(i))) {
      ++r.checks;
      if (any && !negative && scale->dataRange().lower != 0)
        fault(r, "the colour scale of values that cannot be negative starts at " + QString::number(scale->dataRange().lower) +
                     ", not 0");
    }
}

}  // namespace

LayoutReport check_layout(const experiment::Figure& f, const SaveOptions& o) { return check_layout_after_resize(f, 0, 0, o); }

LayoutReport check_layout_after_resize(const experiment::Figure& f, int drawn_width, int drawn_height, const SaveOptions& o) {
  LayoutReport r;
  ensure_application();
  QCustomPlot plot;
  plot.setPlottingHint(QCP::phCacheLabels, false);
  const Canvas c = prepare(plot, f, o);
  if (drawn_width > 0 && drawn_height > 0) {
    // Drawn at another size, then resized as a widget is when it is shown (QCustomPlot replots on the event).
    plot.resize(drawn_width, drawn_height);
    draw(plot, f, c.font_px);
    plot.resize(c.width, c.height);
    QResizeEvent resized(QSize(c.width, c.height), QSize(drawn_width, drawn_height));
    QCoreApplication::sendEvent(&plot, &resized);
  }
  RecordingDevice device(c.width, c.height);
  {
    QCPPainter painter(&device);
    plot.toPainter(&painter, c.width, c.height);
  }
  const auto& texts = device.engine.texts;
  r.texts = texts.size();
  r.panels = static_cast<std::size_t>(plot.axisRectCount());
  for (int i = 0; i < plot.plottableCount(); ++i) {
    auto* g = qobject_cast<QCPGraph*>(plot.plottable(i));
    if (qobject_cast<QCPErrorBars*>(plot.plottable(i)) || (g && g->channelFillGraph())) ++r.spreads;
  }
  check_texts(r, texts, c);
  check_category_labels(r, plot, texts);
  // No legend over data.
  std::vector<QCPLegend*> legends;
  legends_in(plot.plotLayout(), legends);
  for (QCPLegend* legend : legends) {
    ++r.checks;
    if (const int n = data_under(plot, QRectF(legend->outerRect())))
      fault(r, "the legend covers data (" + QString::number(n) + " points or samples)");
  }
  check_title(r, plot, c);
  check_axis_labels(r, plot, c);
  check_outlines(r, plot, f, device.engine.lines, legends);
  check_series_styles(r, plot, f);
  check_colour_scale(r, plot, f);
  return r;
}

}  // namespace mxlab::plot
