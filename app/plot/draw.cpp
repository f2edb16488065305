// Drawing figure descriptions with QCustomPlot.
#include "mxlab/plot/draw.hpp"

#include <cmath>
#include <limits>

#include <qcustomplot.h>

namespace mxlab::plot {

using experiment::AxisScale;
using experiment::Figure;
using experiment::PlotKind;

namespace {

/// Okabe-Ito (its pale yellow replaced by grey, which prints): distinct for the common colour-vision deficiencies;
/// then eight darker and lighter tones of Paul Tol's muted scheme, so 16 series keep distinct colours.
const QColor kPalette[] = {QColor(0, 114, 178),  QColor(213, 94, 0),   QColor(0, 158, 115),  QColor(204, 121, 167),
                           QColor(230, 159, 0),  QColor(86, 180, 233), QColor(0, 0, 0),      QColor(140, 140, 140),
                           QColor(51, 34, 136),  QColor(136, 34, 85),  QColor(17, 119, 51),  QColor(153, 153, 51),
                           QColor(170, 68, 153), QColor(68, 170, 153), QColor(136, 204, 238), QColor(102, 17, 0)};
const QCPScatterStyle::ScatterShape kShapes[] = {
    QCPScatterStyle::ssDisc,       QCPScatterStyle::ssSquare,      QCPScatterStyle::ssTriangle,
    QCPScatterStyle::ssDiamond,    QCPScatterStyle::ssCross,       QCPScatterStyle::ssPlus,
    QCPScatterStyle::ssTriangleInverted, QCPScatterStyle::ssStar,  QCPScatterStyle::ssCircle,
    QCPScatterStyle::ssCrossSquare, QCPScatterStyle::ssPlusSquare, QCPScatterStyle::ssCrossCircle,
    QCPScatterStyle::ssPlusCircle, QCPScatterStyle::ssPeace};

/// Series i gets colour i % 16 and shape i % 14: the first 14 differ in both, none share both before 112.
QColor colour(std::size_t i) { return kPalette[i % std::size(kPalette)]; }
QCPScatterStyle::ScatterShape shape(std::size_t i) { return kShapes[i % std::size(kShapes)]; }

QString superscript(int k) {
  static const char16_t kDigits[] = u"⁰¹²³⁴⁵⁶⁷⁸⁹";
  QString s = k < 0 ? QString(QChar(0x207B)) : QString();
  for (QChar c : QString::number(std::abs(k))) s += QChar(kDigits[c.digitValue()]);
  return s;
}

/// Logarithmic ticks at powers of `base`, labelled 2^k / 10^k with superscripts, or as plain numbers where every
/// tick of the range is a small whole number (block sizes 8 ... 256).
class PowerTicker : public QCPAxisTickerLog {
 public:
  explicit PowerTicker(double base) : base_(base) {
    setLogBase(base);
    setSubTickCount(base == 10 ? 8 : 0);
  }
  bool plain = false;

 protected:
  QString getTickLabel(double tick, const QLocale& locale, QChar format, int precision) override {
    const double k = std::round(std::log(tick) / std::log(base_));
    if (plain || std::fabs(std::pow(base_, k) - tick) > 1e-9 * tick) return QCPAxisTickerLog::getTickLabel(tick, locale, format, precision);
    return QString::number(base_, 'g', 3) + superscript(static_cast<int>(k));
  }

 private:
  double base_;
};

QString label(const std::string& s) { return QString::fromStdString(s); }

/// Long category names (layer paths) shortened to their last parts.
QString short_label(const std::string& s) {
  QString q = label(s);
  if (q.size() <= 28) return q;
  const QStringList parts = q.split('/');
  QString tail = parts.last();
  for (int i = static_cast<int>(parts.size()) - 2; i >= 0 && tail.size() + parts[i].size() < 27; --i) tail = parts[i] + "/" + tail;
  return tail.size() > 28 ? "…" + tail.right(27) : "…/" + tail;
}

/// Turns an axis's category labels when they do not fit side by side in `width` pixels: -45 degrees (each ends
/// at its tick), or -90 where slanted labels would touch each other.
void slant(QCPAxis* axis, const std::vector<std::string>& labels, int width) {
  if (labels.empty() || width <= 0) return;
  const QFontMetrics m(axis->tickLabelFont());
  int widest = 0;
  for (const auto& s : labels) widest = std::max(widest, m.horizontalAdvance(short_label(s)));
  const double spacing = static_cast<double>(width) / static_cast<double>(labels.size());
  if (widest + 6 <= spacing) return;
  axis->setTickLabelRotation(spacing * 0.7071 >= m.height() + 2 ? -45 : -90);
}

bool usable(double v, AxisScale s) { return std::isfinite(v) && (s == AxisScale::Linear || v > 0); }

void set_scale(QCPAxis* axis, const experiment::Axis& a, double font_px) {
  QFont tick;
  tick.setPixelSize(static_cast<int>(std::lround(font_px)));
  axis->setTickLabelFont(tick);
  QFont lab;
  lab.setPixelSize(static_cast<int>(std::lround(font_px * 1.1)));
  axis->setLabelFont(lab);
  axis->setLabel(label(a.label));
  if (!a.tick_labels.empty()) {
    auto t = QSharedPointer<QCPAxisTickerText>::create();
    for (std::size_t i = 0; i < a.tick_labels.size(); ++i) t->addTick(static_cast<double>(i), short_label(a.tick_labels[i]));
    axis->setTicker(t);
    axis->setScaleType(QCPAxis::stLinear);
    return;
  }
  if (a.scale == AxisScale::Linear) {
    axis->setScaleType(QCPAxis::stLinear);
    axis->setTicker(QSharedPointer<QCPAxisTicker>::create());
    return;
  }
  axis->setScaleType(QCPAxis::stLogarithmic);
  axis->setTicker(QSharedPointer<PowerTicker>::create(a.scale == AxisScale::Log2 ? 2.0 : 10.0));
}

/// Fits the axis to [lo, hi] with a margin, then applies the figure's fixed limits.
void fit(QCPAxis* axis, const experiment::Axis& a, double lo, double hi, bool from_zero) {
  if (!(lo <= hi)) {
    lo = a.scale == AxisScale::Linear ? 0 : 1;
    hi = a.scale == AxisScale::Linear ? 1 : 2;
  }
  if (a.scale == AxisScale::Linear) {
    if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
    const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(std::fabs(hi) * 0.1, 0.5);
    lo -= from_zero && lo == 0 ? 0 : pad;
    hi += pad;
  } else {
    const double f = hi > lo ? std::pow(hi / lo, 0.05) : 2.0;
    lo /= f;
    hi *= f;
  }
  axis->setRange(a.min.value_or(lo), a.max.value_or(hi));
  if (auto t = axis->ticker().dynamicCast<PowerTicker>()) {
    const QCPRange r = axis->range();
    t->plain = a.scale == AxisScale::Log2 && r.lower >= 0.9 && r.upper <= 70000;
  }
}

/// Lays the plot's elements out in its viewport as a replot does, without drawing anything.
void lay_out(QCustomPlot& plot) {
  QCPLayoutGrid* layout = plot.plotLayout();
  layout->setOuterRect(plot.viewport());
  layout->update(QCPLayoutElement::upPreparation);
  layout->update(QCPLayoutElement::upMargins);
  layout->update(QCPLayoutElement::upLayout);
}

}  // namespace

void draw(QCustomPlot& plot, const Figure& f, double font_px) {
  plot.clearPlottables();
  plot.clearItems();
  plot.plotLayout()->clear();
  plot.setBackground(Qt::white);

  auto* rect = new QCPAxisRect(&plot);
  QFont title_font;
  title_font.setPixelSize(static_cast<int>(std::lround(font_px * 1.2)));
  title_font.setBold(true);
  int row = 0;
  if (!f.title.empty()) {
    // A long title shrinks to fit the width (down to the tick labels' size), never clipped.
    const QString t = label(f.title);
    const int width = plot.width() > 0 ? plot.width() - 8 : 0;
    while (width > 0 && title_font.pixelSize() > static_cast<int>(font_px) && QFontMetrics(title_font).horizontalAdvance(t) > width)
      title_font.setPixelSize(title_font.pixelSize() - 1);
    auto* title = new QCPTextElement(&plot, t, title_font);
    title->setTextFlags(Qt::TextWordWrap | Qt::AlignCenter);
    plot.plotLayout()->addElement(row++, 0, title);
  }
  plot.plotLayout()->addElement(row, 0, rect);
  QCPAxis* x = rect->axis(QCPAxis::atBottom);
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
  experiment::Axis xa = f.x;
  if (f.kind == PlotKind::Bar && xa.tick_labels.empty()) xa.tick_labels = f.categories;
  set_scale(x, xa, font_px);
  set_scale(y, f.y, font_px);
  for (QCPAxis* a : {x, y}) {
    a->grid()->setPen(QPen(QColor(225, 225, 225), 0, Qt::SolidLine));
    a->grid()->setSubGridVisible(false);
  }
  // Category labels that do not fit side by side: slanted, or upright where slanted ones would touch.
  if (!xa.tick_labels.empty()) slant(x, xa.tick_labels, plot.width() - 90);

  if (f.kind == PlotKind::Heatmap) {
    const auto& h = f.heatmap;
    const int nx = static_cast<int>(h.x_labels.size()), ny = static_cast<int>(h.y_labels.size());
    auto* map = new QCPColorMap(x, y);
    map->data()->setSize(nx, ny);
    map->data()->setRange(QCPRange(0, std::max(nx - 1, 1)), QCPRange(0, std::max(ny - 1, 1)));
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (int j = 0; j < ny; ++j)
      for (int i = 0; i < nx; ++i) {
        const double v = h.values[static_cast<std::size_t>(j) * static_cast<std::size_t>(nx) + static_cast<std::size_t>(i)];
        const bool ok = std::isfinite(v) && (!h.log_values || v > 0);
        map->data()->setCell(i, j, ok ? v : std::nan(""));
        if (ok) lo = std::min(lo, v), hi = std::max(hi, v);
      }
    experiment::Axis hx = f.x, hy = f.y;
    hx.tick_labels = h.x_labels;
    hy.tick_labels = h.y_labels;
    set_scale(x, hx, font_px);
    set_scale(y, hy, font_px * (ny > 24 ? 0.75 : 1.0));
    // The labels' room is the width the colour map gets once the row labels and the colour scale have theirs.
    auto* scale_room = new QCPColorScale(&plot);
    plot.plotLayout()->addElement(row, 1, scale_room);
    plot.setViewport(plot.rect());
    plot.replot(QCustomPlot::rpImmediateRefresh);
    const int room = rect->rect().width();
    plot.plotLayout()->remove(scale_room);
    slant(x, h.x_labels, room);
    auto* scale = new QCPColorScale(&plot);
    plot.plotLayout()->addElement(row, 1, scale);
    scale->setType(QCPAxis::atRight);
    scale->axis()->setLabel(label(h.value_label));
    QFont tick;
    tick.setPixelSize(static_cast<int>(std::lround(font_px)));
    scale->axis()->setTickLabelFont(tick);
    scale->axis()->setLabelFont(tick);
    if (h.log_values) {
      scale->setDataScaleType(QCPAxis::stLogarithmic);
      scale->axis()->setTicker(QSharedPointer<PowerTicker>::create(10.0));
    }
    map->setColorScale(scale);
    QCPColorGradient g;  // viridis, perceptually uniform
    g.setColorStops({{0.0, QColor(68, 1, 84)}, {0.25, QColor(59, 82, 139)}, {0.5, QColor(33, 145, 140)},
                     {0.75, QColor(94, 201, 98)}, {1.0, QColor(253, 231, 37)}});
    g.setNanHandling(QCPColorGradient::nhTransparent);
    map->setGradient(g);
    map->setInterpolate(false);
    // A linear scale of values that cannot be negative (ratios, counts) starts at 0, so a small value looks small.
    if (!h.log_values && lo >= 0) lo = 0;
    if (lo <= hi) map->setDataRange(QCPRange(lo, hi > lo ? hi : lo + 1));
    // Few cells: each says its value, in a colour that reads on the cell's.
    if (nx * ny <= 400 && lo <= hi) {
      QFont cf;
      cf.setPixelSize(static_cast<int>(std::lround(font_px * (nx * ny > 100 ? 0.7 : 0.85))));
      for (int j = 0; j < ny; ++j)
        for (int i = 0; i < nx; ++i) {
          const double v = map->data()->cell(i, j);
          if (!std::isfinite(v)) continue;
          auto* text = new QCPItemText(&plot);
          text->setClipAxisRect(rect);
          text->position->setAxes(x, y);
          text->position->setCoords(i, j);
          text->setFont(cf);
          const double at = h.log_values ? std::log(v / lo) / std::log(hi / lo) : (v - lo) / (hi > lo ? hi - lo : 1);
          text->setColor(at < 0.6 ? Qt::white : Qt::black);
          text->setText(QString::number(v, 'g', 2));
        }
    }
    auto* group = new QCPMarginGroup(&plot);
    rect->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    scale->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    x->setRange(-0.5, nx - 0.5);
    y->setRange(-0.5, ny - 0.5);
    plot.replot();
    return;
  }

  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  QCPBarsGroup* bars_group = f.kind == PlotKind::Bar && f.series.size() > 1 ? new QCPBarsGroup(&plot) : nullptr;
  for (std::size_t i = 0; i < f.series.size(); ++i) {
    const auto& s = f.series[i];
    QVector<double> xs, ys;
    for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
      double xv = s.x[k];
      const double yv = s.y[k];
      if (f.kind == PlotKind::Histogram) xv += s.bin_width / 2;
      if (!usable(xv, f.x.tick_labels.empty() ? f.x.scale : AxisScale::Linear) || !usable(yv, f.y.scale)) continue;
      xs.push_back(xv);
      ys.push_back(yv);
      const double half = f.kind == PlotKind::Histogram ? s.bin_width / 2 : f.kind == PlotKind::Bar ? 0.5 : 0;
      xlo = std::min(xlo, xv - half), xhi = std::max(xhi, xv + half);
      ylo = std::min(ylo, yv), yhi = std::max(yhi, yv);
    }
    const QColor c = colour(i);
    if (f.kind == PlotKind::Histogram && f.series.size() > 1) {
      // Overlaid histograms as step outlines (translucent bars over each other hide which is which).
      auto* g = new QCPGraph(x, y);
      g->setName(label(s.name));
      g->setPen(QPen(c, 1.6));
      g->setLineStyle(QCPGraph::lsStepCenter);
      g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssNone));
      g->setData(xs, ys, true);
      continue;
    }
    if (f.kind == PlotKind::Histogram || f.kind == PlotKind::Bar) {
      auto* b = new QCPBars(x, y);
      b->setName(label(s.name));
      b->setPen(QPen(c.darker(130), 0.8));
      QColor fill = c;
      fill.setAlpha(f.kind == PlotKind::Histogram && f.series.size() > 1 ? 110 : 210);
      b->setBrush(fill);
      if (f.kind == PlotKind::Histogram) b->setWidth(s.bin_width);
      else b->setWidth(bars_group ? 0.8 / static_cast<double>(f.series.size()) : 0.6);
      if (bars_group) b->setBarsGroup(bars_group);
      if (f.y.scale != AxisScale::Linear) b->setBaseValue(ylo > 0 ? ylo / 2 : 1e-300);
      b->setData(xs, ys);
      continue;
    }
    // The spread over seeds or layers (a band under a line, error bars on markers) and the raw values of a
    // smoothed line (faint), under the series itself; they have no name, so no legend entry.
    QVector<double> bx, raw, lo, hi;
    for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
      if (!usable(s.x[k], f.x.tick_labels.empty() ? f.x.scale : AxisScale::Linear) || !usable(s.y[k], f.y.scale)) continue;
      bx.push_back(s.x[k]);
      if (k < s.raw.size()) raw.push_back(s.raw[k]);
      if (k < s.lo.size() && k < s.hi.size()) {
        lo.push_back(s.lo[k]);
        hi.push_back(s.hi[k]);
        // The axis holds the whole spread.
        if (usable(s.lo[k], f.y.scale)) ylo = std::min(ylo, s.lo[k]);
        if (usable(s.hi[k], f.y.scale)) yhi = std::max(yhi, s.hi[k]);
      }
    }
    if (raw.size() == bx.size() && !raw.empty()) {
      auto* r = new QCPGraph(x, y);
      QColor faint = c;
      faint.setAlpha(70);
      r->setPen(QPen(faint, 0.8));
      r->setData(bx, raw, true);
    }
    QCPGraph* band_low = nullptr;
    if (f.kind == PlotKind::Line && lo.size() == bx.size() && !lo.empty()) {
      band_low = new QCPGraph(x, y);
      band_low->setPen(Qt::NoPen);
      band_low->setData(bx, lo, true);
      auto* band_high = new QCPGraph(x, y);
      band_high->setPen(Qt::NoPen);
      QColor fill = c;
      fill.setAlpha(50);
      band_high->setBrush(fill);
      band_high->setChannelFillGraph(band_low);
      band_high->setData(bx, hi, true);
    }
    auto* g = new QCPGraph(x, y);
    g->setName(label(s.name));
    g->setPen(QPen(c, 1.4));
    g->setLineStyle(f.kind == PlotKind::Line ? QCPGraph::lsLine : QCPGraph::lsNone);
    if (f.kind == PlotKind::Scatter && lo.size() == xs.size() && !lo.empty()) {
      auto* bars_of = new QCPErrorBars(x, y);
      bars_of->setDataPlottable(g);
      bars_of->setPen(QPen(c, 0.8));
      QVector<double> below, above;
      for (qsizetype k = 0; k < lo.size(); ++k) below.push_back(ys[k] - lo[k]), above.push_back(hi[k] - ys[k]);
      bars_of->setData(below, above);
    }
    const double size = f.kind == PlotKind::Scatter && xs.size() > 200 ? font_px * 0.3 : font_px * 0.55;
    // Long curves (loss over thousands of steps) are lines only: markers would hide them.
    if (f.kind == PlotKind::Line && xs.size() > 60) g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssNone));
    else g->setScatterStyle(QCPScatterStyle(shape(i), c, f.kind == PlotKind::Scatter && xs.size() > 200 ? c : QColor(Qt::white), size));
    g->setData(xs, ys, f.kind == PlotKind::Line);
    // Sampling keeps a pixel column's extremes only, which hides scattered points between them.
    g->setAdaptiveSampling(f.kind == PlotKind::Line);
  }
  const bool bars = f.kind == PlotKind::Bar || f.kind == PlotKind::Histogram;
  // Whole-number data on a linear axis (gaps, counts of bits) gets whole-number ticks.
  auto whole = [&](bool along_x) {
    for (const auto& s : f.series)
      for (double v : along_x ? s.x : s.y)
        if (std::isfinite(v) && v != std::round(v)) return false;
    return !f.series.empty();
  };
  if (xa.tick_labels.empty() && xa.scale == AxisScale::Linear && whole(true) && f.kind != PlotKind::Histogram) {
    auto t = QSharedPointer<QCPAxisTickerFixed>::create();
    t->setTickStep(1);
    t->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    x->setTicker(t);
  }
  fit(x, xa, xlo, xhi, false);
  fit(y, f.y, ylo, yhi, bars && f.y.scale == AxisScale::Linear);
  // Bars fill the area below their tops: room above them for the legend.
  if (bars && f.legend && f.series.size() > 1 && !f.y.max) {
    const QCPRange r = y->range();
    y->setRange(r.lower, f.y.scale == AxisScale::Linear ? r.upper + (r.upper - r.lower) * 0.35 : r.upper * std::pow(r.upper / r.lower, 0.25));
  }
  if (!xa.tick_labels.empty()) x->setRange(-0.5, static_cast<double>(xa.tick_labels.size()) - 0.5);
  if (!f.y.tick_labels.empty()) y->setRange(-0.5, static_cast<double>(f.y.tick_labels.size()) - 0.5);

  // Marker labels stack downwards where they would print over the previous one.
  std::vector<std::pair<double, double>> taken;  // pixel ranges of the labels placed, by level
  QFont marker_font;
  marker_font.setPixelSize(static_cast<int>(std::lround(font_px * 0.9)));
  if (!f.markers.empty()) {
    // The pixel positions below need the layout (a widget never shown has not taken its size yet).
    plot.setViewport(plot.rect());
    lay_out(plot);
  }
  for (const auto& m : f.markers) {
    auto* line = new QCPItemStraightLine(&plot);
    line->setClipAxisRect(rect);
    line->point1->setAxes(x, y);
    line->point2->setAxes(x, y);
    line->point1->setCoords(m.x, y->range().lower);
    line->point2->setCoords(m.x, y->range().upper);
    line->setPen(QPen(QColor(90, 90, 90), 1, Qt::DashLine));
    if (!m.label.empty()) {
      auto* text = new QCPItemText(&plot);
      text->setClipAxisRect(rect);
      text->position->setAxes(x, y);
      text->position->setCoords(m.x, y->range().upper);
      text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
      text->setFont(marker_font);
      text->setText(" " + label(m.label));
      const double left = x->coordToPixel(m.x), width = QFontMetrics(marker_font).horizontalAdvance(text->text()) + 4;
      std::size_t level = 0;
      while (level < taken.size() && left < taken[level].second) ++level;
      if (level == taken.size()) taken.push_back({left, left + width});
      else taken[level] = {left, left + width};
      text->setPadding(QMargins(0, static_cast<int>(level) * (QFontMetrics(marker_font).height() + 1), 0, 0));
    }
  }

  if (f.legend && !f.series.empty()) {
    auto* legend = new QCPLegend;
    rect->insetLayout()->addElement(legend, Qt::AlignTop | Qt::AlignRight);
    legend->setLayer("legend");
    QFont lf;
    lf.setPixelSize(static_cast<int>(std::lround(font_px * 0.9)));
    legend->setFont(lf);
    legend->setBrush(QColor(255, 255, 255, 215));
    legend->setBorderPen(QPen(QColor(190, 190, 190)));
    legend->setRowSpacing(-2);
    for (int i = 0; i < plot.plottableCount(); ++i)
      if (!plot.plottable(i)->name().isEmpty()) legend->addItem(new QCPPlottableLegendItem(legend, plot.plottable(i)));
    if (!f.legend_title.empty()) {
      QFont tf = lf;
      tf.setBold(true);
      legend->insertRow(0);
      auto* title = new QCPTextElement(&plot, label(f.legend_title), tf);
      title->setTextColor(Qt::black);
      title->setLayer("legend");  // above the legend's translucent box, not under it on the main layer
      legend->addElement(0, 0, title);
    }
    legend->setVisible(true);
    if (!bars) {
      // Inside the plot where the legend hides the fewest data points and samples of the lines between them:
      // the corners, then the middles of the top and bottom edges (the value axis grows when each hides some).
      const Qt::Alignment places[] = {Qt::AlignTop | Qt::AlignRight,    Qt::AlignTop | Qt::AlignLeft,
                                      Qt::AlignBottom | Qt::AlignRight, Qt::AlignBottom | Qt::AlignLeft,
                                      Qt::AlignTop | Qt::AlignHCenter,  Qt::AlignBottom | Qt::AlignHCenter};
      auto hidden = [&]() {
        lay_out(plot);  // the legend at its place (nothing drawn: a replot of many points is slow)
        const QRectF box = QRectF(legend->outerRect()).adjusted(-6, -6, 6, 6);
        int n = 0;
        for (const auto& sr : f.series) {
          QPointF prev;
          bool have_prev = false;
          for (std::size_t k = 0; k < sr.x.size() && k < sr.y.size(); ++k) {
            if (!std::isfinite(sr.x[k]) || !std::isfinite(sr.y[k])) {
              have_prev = false;
              continue;
            }
            const QPointF pt(x->coordToPixel(sr.x[k]), y->coordToPixel(sr.y[k]));
            n += box.contains(pt) ? 4 : 0;  // a marker counts more than a piece of line
            if (have_prev && f.kind != PlotKind::Scatter)
              for (int j = 1; j < 16; ++j) n += box.contains(prev + (pt - prev) * (j / 16.0)) ? 1 : 0;
            prev = pt;
            have_prev = true;
          }
        }
        return n;
      };
      // A widget that was never shown has not taken its size into its viewport (savePng sets it when it
      // renders): the layout here must be the one the file gets.
      plot.setViewport(plot.rect());
      QCPLayoutInset* inset = rect->insetLayout();
      const int at = inset->elementCount() - 1;  // the legend, added last
      int best = 0, fewest = std::numeric_limits<int>::max();
      for (int i = 0; i < 6 && fewest > 0; ++i) {
        inset->setInsetAlignment(at, places[i]);
        const int n = hidden();
        if (n < fewest) fewest = n, best = i;
      }
      inset->setInsetAlignment(at, places[best]);
      if (fewest > 0) {
        // Each place hides some: the value axis grows upward by the legend's height, which then sits above
        // every point, at the top right or left, whichever hides less.
        const double room = legend->outerRect().height() + 12;
        const double height = rect->rect().height();
        if (room < 0.6 * height) {
          const double keep = height / (height - room);
          const QCPRange r = y->range();
          if (y->scaleType() == QCPAxis::stLogarithmic)
            y->setRange(r.lower, r.lower * std::pow(r.upper / r.lower, keep));
          else
            y->setRange(r.lower, r.lower + (r.upper - r.lower) * keep);
          best = 0;
          fewest = std::numeric_limits<int>::max();
          for (int i = 0; i < 2; ++i) {
            inset->setInsetAlignment(at, places[i]);
            const int n = hidden();
            if (n < fewest) fewest = n, best = i;
          }
          inset->setInsetAlignment(at, places[best]);
        }
      }
    }
  }
  plot.replot();
}

}  // namespace mxlab::plot
