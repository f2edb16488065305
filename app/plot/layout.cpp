// The layout rules, checked on the geometry of a figure as drawn: a paint engine records where every text lands
// (the same painting the PNG and PDF get), the plot's objects give the legends, data and colour scales.
#include "mxlab/plot/layout.hpp"

#include <cmath>
#include <map>
#include <set>

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

/// Records every text drawn with its box in device pixels; draws nothing.
class Recorder : public QPaintEngine {
 public:
  Recorder() : QPaintEngine(QPaintEngine::AllFeatures) {}
  bool begin(QPaintDevice*) override { return true; }
  bool end() override { return true; }
  void updateState(const QPaintEngineState& s) override {
    if (s.state() & QPaintEngine::DirtyTransform) transform_ = s.transform();
  }
  void drawPixmap(const QRectF&, const QPixmap&, const QRectF&) override {}
  void drawPath(const QPainterPath&) override {}
  void drawPolygon(const QPointF*, int, PolygonDrawMode) override {}
  void drawPolygon(const QPoint*, int, PolygonDrawMode) override {}
  void drawLines(const QLineF*, int) override {}
  void drawLines(const QLine*, int) override {}
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

 private:
  QTransform transform_;
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

LayoutReport check_layout(const experiment::Figure& f, const SaveOptions& o) {
  LayoutReport r;
  ensure_application();
  QCustomPlot plot;
  plot.setPlottingHint(QCP::phCacheLabels, false);
  const Canvas c = prepare(plot, f, o);
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
  auto fault = [&](const QString& s) { r.faults.push_back(s.toStdString()); };
  // No text over text; every text inside the figure.
  const QRectF page(-0.5, -0.5, c.width + 1.0, c.height + 1.0);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    ++r.checks;
    if (!page.contains(texts[i].bounds)) fault("text outside the figure: " + shown(texts[i].text));
    for (std::size_t j = i + 1; j < texts.size(); ++j) {
      ++r.checks;
      if (overlap(texts[i], texts[j])) fault("texts overlap: " + shown(texts[i].text) + " and " + shown(texts[j].text));
    }
  }
  // Every category label drawn (QCustomPlot leaves out a tick label the figure's edge would cut).
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
          if (drawn[line.trimmed()] == 0) fault("category label not drawn (cut by the figure's edge): " + shown(line));
      }
    }
  // No legend over data.
  std::vector<QCPLegend*> legends;
  legends_in(plot.plotLayout(), legends);
  for (QCPLegend* legend : legends) {
    ++r.checks;
    if (const int n = data_under(plot, QRectF(legend->outerRect()))) fault("the legend covers data (" + QString::number(n) + " points or samples)");
  }
  // Every series its own colour and marker (series of one name in several panels are one series).
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
        fault("series " + shown(p->name()) + " and " + shown(name) + " share a colour");
      if (shape >= 0 && other.second == shape) fault("series " + shown(p->name()) + " and " + shown(name) + " share a marker");
    }
    seen[p->name()] = {colour, shape};
  }
  // Linear colour scales of values that cannot be negative start at 0.
  if (f.kind == experiment::PlotKind::Heatmap && !f.heatmap.log_values) {
    bool negative = false, any = false;
    for (double v : f.heatmap.values)
      if (std::isfinite(v)) any = true, negative |= v < 0;
    for (int i = 0; i < plot.plotLayout()->elementCount(); ++i)
      if (auto* scale = qobject_cast<QCPColorScale*>(plot.plotLayout()->elementAt(i))) {
        ++r.checks;
        if (any && !negative && scale->dataRange().lower != 0)
          fault("the colour scale of values that cannot be negative starts at " + QString::number(scale->dataRange().lower) + ", not 0");
      }
  }
  return r;
}

}  // namespace mxlab::plot
