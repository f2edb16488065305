// Drawing figure descriptions with QCustomPlot.
#include "mxlab/plot/draw.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include <qcustomplot.h>

#include "geometry.hpp"

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
QString short_label(const QString& q) {
  if (q.size() <= 28) return q;
  const QStringList parts = q.split('/');
  QString tail = parts.last();
  for (int i = static_cast<int>(parts.size()) - 2; i >= 0 && tail.size() + parts[i].size() < 27; --i) tail = parts[i] + "/" + tail;
  return tail.size() > 28 ? "…" + tail.right(27) : "…/" + tail;
}

bool separator(QChar c) { return c == '/' || c == '_' || c == '-' || c == '.' || c == ' ' || c == ':'; }

/// The leading and trailing parts every label shares, cut at separators ("MobilenetV1/Conv2d_" and "/weights"
/// of layer paths); empty unless there are at least three labels, the parts are worth it and each label keeps
/// two characters.
std::pair<QString, QString> common_affix(const QStringList& l) {
  if (l.size() < 3) return {};
  qsizetype p = l[0].size(), q = l[0].size();
  for (const QString& s : l) {
    qsizetype i = 0;
    while (i < p && i < s.size() && s[i] == l[0][i]) ++i;
    p = i;
    qsizetype j = 0;
    while (j < q && j < s.size() && s[s.size() - 1 - j] == l[0][l[0].size() - 1 - j]) ++j;
    q = j;
  }
  while (p > 0 && !separator(l[0][p - 1])) --p;
  while (q > 0 && !separator(l[0][l[0].size() - q])) --q;
  if (p + q < 4) return {};
  for (const QString& s : l)
    if (s.size() - p - q < 2) return {};
  return {l[0].left(p), l[0].right(q)};
}

/// A text broken into lines of at most `width` pixels after separators (words at spaces); empty when it needs
/// more than `max_lines` lines or one piece is wider.
QString wrap(const QString& s, const QFontMetricsF& m, double width, int max_lines) {
  QStringList pieces;
  QString piece;
  for (QChar c : s) {
    piece += c;
    if (separator(c)) pieces.push_back(piece), piece.clear();
  }
  if (!piece.isEmpty()) pieces.push_back(piece);
  QStringList lines;
  QString line;
  for (const QString& w : pieces) {
    const QString longer = line + w;
    if (!line.isEmpty() && m.horizontalAdvance(longer.trimmed()) > width) {
      lines.push_back(line.trimmed());
      line = w;
    } else {
      line = longer;
    }
  }
  if (!line.trimmed().isEmpty()) lines.push_back(line.trimmed());
  if (lines.size() > max_lines) return {};
  for (const QString& x : lines)
    if (m.horizontalAdvance(x) > width) return {};
  return lines.join('\n');
}

double widest(const QStringList& labels, const QFontMetricsF& m) {
  double w = 0;
  for (const QString& s : labels)
    for (const QString& line : s.split('\n')) w = std::max(w, m.horizontalAdvance(line));
  return w;
}

/// How category labels are shown along an axis of `room` pixels: side by side, wrapped, slanted (-45 degrees,
/// each ending at its tick), upright, upright and wrapped, or, when none of those fits without overlapping or
/// taking more than `budget` pixels across the axis, as an index (1, 2, ... thinned to fit).
struct CategoryFit {
  QStringList shown;  ///< per category; an empty one is not labelled
  double rotation = 0;
  QString note;  ///< for the axis label: the parts the labels share, or "index"
};

CategoryFit fit_categories(const std::vector<std::string>& names, const QFont& font, double room, double budget) {
  CategoryFit fit;
  QStringList full;
  for (const auto& s : names) full.push_back(label(s));
  const auto [prefix, suffix] = common_affix(full);
  if (!prefix.isEmpty() || !suffix.isEmpty()) {
    for (QString& s : full) s = s.mid(prefix.size(), s.size() - prefix.size() - suffix.size());
    fit.note = prefix + "…" + suffix;
  }
  for (const QString& s : full) fit.shown.push_back(short_label(s));
  if (names.empty() || room <= 0) return fit;
  const QFontMetricsF m(font);
  const double n = static_cast<double>(names.size()), spacing = room / n, h = m.height();
  if (widest(fit.shown, m) + 6 <= spacing) return fit;
  auto wrapped = [&](double width, int lines) {
    QStringList out;
    for (const QString& s : fit.shown) {
      const QString w = wrap(s, m, width, lines);
      if (w.isEmpty()) return QStringList();
      out.push_back(w);
    }
    return out;
  };
  for (int lines = 2; lines <= 3 && lines * h <= budget; ++lines)
    if (QStringList w = wrapped(spacing - 6, lines); !w.isEmpty()) {
      fit.shown = w;
      return fit;
    }
  const double w = widest(fit.shown, m);
  if (spacing * 0.7071 >= h + 2 && (w + h) * 0.7071 <= budget) {
    fit.rotation = -45;
    return fit;
  }
  if (spacing >= h + 2 && w <= budget) {
    fit.rotation = -90;
    return fit;
  }
  for (int lines = 2; lines <= 3 && spacing >= lines * h + 2; ++lines)
    if (QStringList wl = wrapped(budget, lines); !wl.isEmpty()) {
      fit.shown = wl;
      fit.rotation = -90;
      return fit;
    }
  // An index: every k-th category numbered (k = 1, 2, 5, 10, 20, ...), so the numbers stand side by side.
  const double digit = m.horizontalAdvance(QString::number(names.size())) + 8;
  std::size_t k = 1;
  for (std::size_t step : {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}) {
    k = step;
    if (digit <= spacing * static_cast<double>(step)) break;
  }
  fit.shown.clear();
  for (std::size_t i = 0; i < names.size(); ++i)
    fit.shown.push_back((i + 1) % k == 0 || (i == 0 && k > 2) ? QString::number(i + 1) : QString());
  fit.note = "index";
  return fit;
}

/// An axis label with a note: "layer (file order, index)", "layer: MobilenetV1/…/weights".
QString noted(const QString& axis_label, const QString& note) {
  if (note.isEmpty()) return axis_label;
  if (axis_label.isEmpty()) return note;
  if (note == "index") return axis_label.endsWith(')') ? axis_label.chopped(1) + ", index)" : axis_label + " (index)";
  return axis_label + ": " + note;
}

/// Shows an axis's categories as `fit` says.
void show_categories(QCPAxis* axis, const CategoryFit& fit, const QString& axis_label) {
  auto t = QSharedPointer<QCPAxisTickerText>::create();
  for (qsizetype i = 0; i < fit.shown.size(); ++i)
    if (!fit.shown[i].isEmpty()) t->addTick(static_cast<double>(i), fit.shown[i]);
  axis->setTicker(t);
  axis->setTickLabelRotation(fit.rotation);
  axis->setLabel(noted(axis_label, fit.note));
}

/// A title broken into lines at spaces so that each fits `width` pixels (QCPTextElement sizes itself by its
/// explicit lines only).
QString wrap_words(const QString& text, const QFont& font, double width) {
  const QFontMetricsF m(font);
  if (width <= 0 || m.horizontalAdvance(text) <= width) return text;
  QStringList lines;
  QString line;
  for (const QString& w : text.split(' ', Qt::SkipEmptyParts)) {
    if (!line.isEmpty() && m.horizontalAdvance(line + " " + w) > width) lines.push_back(line), line = w;
    else line = line.isEmpty() ? w : line + " " + w;
  }
  if (!line.isEmpty()) lines.push_back(line);
  return lines.join('\n');
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
    for (std::size_t i = 0; i < a.tick_labels.size(); ++i) t->addTick(static_cast<double>(i), short_label(label(a.tick_labels[i])));
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

/// Widens an axis rect's left and right margins where the category labels of its bottom axis would reach past
/// the figure's edge (QCustomPlot leaves out a tick label the edge would cut: a category without a name).
void keep_labels_inside(QCustomPlot& plot, QCPAxisRect* rect) {
  QCPAxis* x = rect->axis(QCPAxis::atBottom);
  auto ticker = x->ticker().dynamicCast<QCPAxisTickerText>();
  if (!ticker) return;
  lay_out(plot);
  const QFontMetricsF m(x->tickLabelFont());
  const double rotation = x->tickLabelRotation(), pad = x->tickLabelPadding() + 2;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (auto it = ticker->ticks().constBegin(); it != ticker->ticks().constEnd(); ++it) {
    if (!x->range().contains(it.key()) || it.value().isEmpty()) continue;
    const QStringList lines = it.value().split('\n');
    const double w = widest(lines, m), h = m.height() * static_cast<double>(lines.size());
    const double at = x->coordToPixel(it.key());
    // A slanted label ends at its tick and runs down to the left; the others are centred on it.
    const double left = rotation == -45 ? (w + h) * 0.7071 + pad : rotation == -90 ? h / 2 : w / 2;
    const double right = rotation == -45 ? h * 0.7071 : rotation == -90 ? h / 2 : w / 2;
    lo = std::min(lo, at - left);
    hi = std::max(hi, at + right);
  }
  const QRect view = plot.viewport();
  const int more_left = lo < view.left() + 2 ? static_cast<int>(std::ceil(view.left() + 2 - lo)) : 0;
  const int more_right = hi > view.right() - 2 ? static_cast<int>(std::ceil(hi - view.right() + 2)) : 0;
  if (more_left == 0 && more_right == 0) return;
  const QMargins now = rect->margins();
  rect->setMinimumMargins(QMargins(now.left() + more_left, 0, now.right() + more_right, 0));
}

/// A vertical axis label longer than its axis goes on two lines, then shrinks until it fits (a label taller
/// than the plot would run over the title or out of the figure).
void fit_axis_label(QCustomPlot& plot, QCPAxis* axis) {
  if (axis->label().isEmpty()) return;
  lay_out(plot);
  const double room = axis->axisRect()->rect().height() - 4;
  QFont font = axis->labelFont();
  QString text = axis->label();
  if (QFontMetricsF(font).horizontalAdvance(text) <= room) return;
  const qsizetype mid = text.size() / 2;
  qsizetype cut = -1;
  for (qsizetype d = 0; d <= mid && cut < 0; ++d)
    for (qsizetype at : {mid - d, mid + d})
      if (at > 0 && at < text.size() && text[at] == ' ') {
        cut = at;
        break;
      }
  if (cut > 0) text = text.left(cut) + "\n" + text.mid(cut + 1);
  while (font.pixelSize() > 6 && widest(text.split('\n'), QFontMetricsF(font)) > room) font.setPixelSize(font.pixelSize() - 1);
  axis->setLabel(text);
  axis->setLabelFont(font);
}

/// A title on one line in the figure's width, shrunk for that down to the tick labels' size, else on several
/// lines (QCPTextElement sizes itself by its explicit lines only).
void fit_title(QCustomPlot& plot, QCPTextElement* title, const QString& text, double font_px) {
  QFont font = title->font();
  font.setPixelSize(static_cast<int>(std::lround(font_px * 1.2)));
  const int width = plot.viewport().width() > 0 ? plot.viewport().width() - 8 : 0;
  while (width > 0 && font.pixelSize() > static_cast<int>(font_px) && QFontMetrics(font).horizontalAdvance(text) > width)
    font.setPixelSize(font.pixelSize() - 1);
  title->setFont(font);
  title->setText(wrap_words(text, font, width));
}

/// The legend's entries: one per name (a series drawn in several panels is listed once).
void fill_legend(QCustomPlot& plot, QCPLegend* legend) {
  QSet<QString> listed;
  for (int i = 0; i < plot.plottableCount(); ++i) {
    QCPAbstractPlottable* p = plot.plottable(i);
    if (p->name().isEmpty() || listed.contains(p->name())) continue;
    listed.insert(p->name());
    legend->addItem(new QCPPlottableLegendItem(legend, p));
  }
}

QCPLegend* make_legend(double font_px) {
  auto* legend = new QCPLegend;
  QFont lf;
  lf.setPixelSize(static_cast<int>(std::lround(font_px * 0.9)));
  legend->setFont(lf);
  legend->setBrush(QColor(255, 255, 255, 215));
  legend->setBorderPen(QPen(QColor(190, 190, 190)));
  legend->setRowSpacing(0);
  legend->setVisible(true);
  return legend;
}

/// The legend inside the plot, where it covers no data: the corners, the middles of the top and bottom edges,
/// then the top corners once the value axis has grown by the legend's height (at most 40% of the plot).
/// Returns false, with the legend removed, when every place covers data.
bool legend_inside(QCustomPlot& plot, QCPAxisRect* rect, QCPLegend* legend) {
  QCPLayoutInset* inset = rect->insetLayout();
  const int at = inset->elementCount() - 1;
  auto covered = [&](Qt::Alignment where) {
    inset->setInsetAlignment(at, where);
    lay_out(plot);  // the legend at its place (nothing drawn: a replot of many points is slow)
    return data_under(plot, QRectF(legend->outerRect()).adjusted(-6, -6, 6, 6));
  };
  const Qt::Alignment places[] = {Qt::AlignTop | Qt::AlignRight,    Qt::AlignTop | Qt::AlignLeft,
                                  Qt::AlignBottom | Qt::AlignRight, Qt::AlignBottom | Qt::AlignLeft,
                                  Qt::AlignTop | Qt::AlignHCenter,  Qt::AlignBottom | Qt::AlignHCenter};
  for (Qt::Alignment where : places)
    if (covered(where) == 0) return true;
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
  const QCPRange before = y->range();
  const double room = legend->outerRect().height() + 12, height = rect->rect().height();
  if (room < 0.4 * height) {
    const double keep = height / (height - room);
    if (y->scaleType() == QCPAxis::stLogarithmic) y->setRange(before.lower, before.lower * std::pow(before.upper / before.lower, keep));
    else y->setRange(before.lower, before.lower + (before.upper - before.lower) * keep);
    for (Qt::Alignment where : {places[0], places[1]})
      if (covered(where) == 0) return true;
    y->setRange(before);
  }
  inset->take(legend);
  inset->simplify();
  delete legend;
  return false;
}

/// The legend below the plot: its title, then the entries, in as many columns as the figure's width holds.
void legend_below(QCustomPlot& plot, const Figure& f, double font_px, int row) {
  QCPLegend* legend = make_legend(font_px);
  legend->setBorderPen(Qt::NoPen);
  legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  plot.plotLayout()->addElement(row, 0, legend);
  if (!f.legend_title.empty()) {
    QFont tf = legend->font();
    tf.setBold(true);
    // Aligned as the entries' texts are: at the top left of its cell, with their margins.
    auto* title = new QCPTextElement(&plot, label(f.legend_title), tf);
    title->setTextFlags(Qt::AlignLeft | Qt::AlignTop);
    title->setMargins(QMargins(8, 2, 8, 2));
    legend->addElement(title);
  }
  fill_legend(plot, legend);
  const double width = plot.viewport().width() - 12;
  for (int columns = std::max(legend->elementCount(), 1); columns >= 1; --columns) {
    legend->setWrap(columns);
    legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
    if (legend->minimumOuterSizeHint().width() <= width) break;
  }
  plot.plotLayout()->setRowStretchFactor(row, 0.001);
}

}  // namespace

namespace {

/// The heatmap: a colour map with its colour scale, the labels of its rows and columns, the value of each cell
/// when there are few.
void draw_heatmap(QCustomPlot& plot, const Figure& f, double font_px, QCPLayoutGrid* body, QCPAxisRect* rect) {
  QCPAxis* x = rect->axis(QCPAxis::atBottom);
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
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
  // Many rows take smaller row labels; the axis label keeps the size of every axis label.
  QFont axis_label;
  axis_label.setPixelSize(static_cast<int>(std::lround(font_px * 1.1)));
  y->setLabelFont(axis_label);
  // Row labels: the parts every row shares go to the axis label; rows stay upright (one label per row).
  CategoryFit rows = fit_categories(h.y_labels, y->tickLabelFont(), 1e9, 0);
  show_categories(y, rows, label(f.y.label));
  auto* scale = new QCPColorScale(&plot);
  body->addElement(0, 1, scale);
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
  auto* group = new QCPMarginGroup(&plot);
  rect->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  scale->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  x->setRange(-0.5, nx - 0.5);
  y->setRange(-0.5, ny - 0.5);
  // Column labels: the room is the width the colour map gets once the row labels and the colour scale have theirs.
  lay_out(plot);
  const CategoryFit columns = fit_categories(h.x_labels, x->tickLabelFont(), rect->rect().width(), 0.3 * plot.viewport().height());
  show_categories(x, columns, label(f.x.label));
  keep_labels_inside(plot, rect);
  fit_axis_label(plot, y);
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
}

/// The outline as QCustomPlot's centred steps through the bins' centres, with a zero between bins that have empty
/// bins between them and a bin's width before the first and after the last, so that each bin is drawn across its
/// whole width at its count and the outline goes down to zero at the ends and over empty bins (on a log axis,
/// below the plot). The graph's values are the counts and zeros.
void trace_outline(QCPGraph& g, const std::vector<std::pair<double, double>>& bins, double width) {
  QVector<double> keys, values;
  auto to = [&](double k, double v) { keys.push_back(k), values.push_back(v); };
  const double tolerance = 1e-6 * width;
  for (std::size_t i = 0; i < bins.size(); ++i) {
    const auto [centre, count] = bins[i];
    const double before = i > 0 ? bins[i - 1].first + width : centre - width;  // the next bin of the previous one
    if (i == 0 || centre - before > tolerance) {
      to(before, 0);
      if (centre - width - before > tolerance) to(centre - width, 0);
    }
    to(centre, count);
  }
  if (!bins.empty()) to(bins.back().first + width, 0);
  g.setData(keys, values, true);
}

/// What draw fits to the plot's size (the title's lines, axis labels, category labels, margins, the legend's place)
/// is fitted again when the plot is resized: a widget drawn before it has its size (a tab not shown yet) is drawn
/// again at its own size when it is shown (QCustomPlot replots on a resize), keeping the ranges the user has zoomed
/// to.
class Redraw : public QObject {
 public:
  static Redraw& of(QCustomPlot& plot) {
    static const char* kName = "mxlab-plot-redraw";
    // Found by name (the class has no meta-object of its own).
    if (auto* r = plot.findChild<QObject*>(kName, Qt::FindDirectChildrenOnly)) return *static_cast<Redraw*>(r);
    auto* r = new Redraw(plot);
    r->setObjectName(kName);
    return *r;
  }
  /// Called as draw starts: the figure drawn and the size it is drawn at.
  void drawn(const Figure& f, double font_px) {
    if (&f != &figure_) figure_ = f;
    font_px_ = font_px;
    size_ = plot_.rect().size();
    ranges_.clear();
  }
  /// Called as draw ends: the ranges it gave the axes.
  void ranged() { ranges_ = ranges(); }

 private:
  explicit Redraw(QCustomPlot& plot) : QObject(&plot), plot_(plot) {
    connect(&plot, &QCustomPlot::beforeReplot, this, [this] {
      if (plot_.viewport().size() == size_ || plot_.viewport().isEmpty() || drawing_) return;
      const std::vector<QCPRange> before = ranges();
      const bool zoomed = before != ranges_;
      drawing_ = true;
      const Figure f = figure_;
      draw(plot_, f, font_px_);
      drawing_ = false;
      const std::vector<QCPAxis*> axes = plot_.axisRectCount() > 0 ? all_axes() : std::vector<QCPAxis*>{};
      if (zoomed && axes.size() == before.size())
        for (std::size_t i = 0; i < axes.size(); ++i) axes[i]->setRange(before[i]);
    });
  }
  std::vector<QCPAxis*> all_axes() const {
    std::vector<QCPAxis*> out;
    for (int i = 0; i < plot_.axisRectCount(); ++i)
      for (QCPAxis* a : plot_.axisRect(i)->axes()) out.push_back(a);
    return out;
  }
  std::vector<QCPRange> ranges() const {
    std::vector<QCPRange> out;
    for (QCPAxis* a : all_axes()) out.push_back(a->range());
    return out;
  }
  QCustomPlot& plot_;
  Figure figure_;
  double font_px_ = 11;
  QSize size_;
  std::vector<QCPRange> ranges_;
  bool drawing_ = false;
};

/// A ring around a marked point (a crossover): a shape no series uses.
QCPScatterStyle ring(double size) {
  // A custom shape is drawn scaled by size / 6: a circle of radius 3, its pen scaled back to 1.6 pixels.
  QPainterPath path;
  path.addEllipse(QPointF(0, 0), 3, 3);
  return QCPScatterStyle(path, QPen(QColor(60, 60, 60), 1.6 * 6 / size), Qt::NoBrush, size);
}

/// The title's row of the layout, if the figure has a title; returns the next free row.
int add_title(QCustomPlot& plot, const Figure& f, double font_px) {
  QFont title_font;
  title_font.setPixelSize(static_cast<int>(std::lround(font_px * 1.2)));
  title_font.setBold(true);
  int row = 0;
  if (!f.title.empty()) {
    auto* title = new QCPTextElement(&plot, label(f.title), title_font);
    title->setTextFlags(Qt::AlignCenter);
    plot.plotLayout()->addElement(row++, 0, title);
    fit_title(plot, title, label(f.title), font_px);
  }
  return row;
}

/// The panels of a figure: one axis rect per facet, in a grid of at most three columns with shared axes.
struct Panels {
  std::vector<QCPAxisRect*> rects;
  std::size_t count = 1, columns = 1, rows = 1;
  experiment::Axis x;  // every panel's x axis: a bar chart's categories are its tick labels
};

/// The panels' axis rects from layout row `row` on; the x label under the bottom panel of each column, the y label
/// beside the left column, each panel titled with its facet.
Panels add_panels(QCustomPlot& plot, const Figure& f, double font_px, int row) {
  Panels out;
  out.count = std::max<std::size_t>(1, f.facets.size());
  out.columns = std::min<std::size_t>(3, out.count);
  out.rows = (out.count + out.columns - 1) / out.columns;
  QCPLayoutGrid* grid = plot.plotLayout();
  int grid_row = row;
  if (!f.facets.empty()) {
    grid = new QCPLayoutGrid;
    plot.plotLayout()->addElement(row, 0, grid);
    grid_row = 0;
  }
  auto* align = f.facets.empty() ? nullptr : new QCPMarginGroup(&plot);
  QFont panel_font;
  panel_font.setPixelSize(static_cast<int>(std::lround(font_px)));
  panel_font.setBold(true);
  for (std::size_t p = 0; p < out.count; ++p) {
    const int r = grid_row + static_cast<int>(p / out.columns) * (f.facets.empty() ? 1 : 2);
    const int c = static_cast<int>(p % out.columns);
    if (!f.facets.empty()) grid->addElement(r, c, new QCPTextElement(&plot, label(f.facets[p]), panel_font));
    auto* rect = new QCPAxisRect(&plot);
    grid->addElement(f.facets.empty() ? r : r + 1, c, rect);
    if (align) rect->setMarginGroup(QCP::msLeft | QCP::msRight | QCP::msTop | QCP::msBottom, align);
    out.rects.push_back(rect);
  }
  out.x = f.x;
  if (f.kind == PlotKind::Bar && out.x.tick_labels.empty()) out.x.tick_labels = f.categories;
  for (std::size_t p = 0; p < out.count; ++p) {
    QCPAxis* x = out.rects[p]->axis(QCPAxis::atBottom);
    QCPAxis* y = out.rects[p]->axis(QCPAxis::atLeft);
    set_scale(x, out.x, font_px);
    set_scale(y, f.y, font_px);
    // Axis labels once per row and column of panels.
    if (p + out.columns < out.count) x->setLabel("");
    if (p % out.columns != 0) y->setLabel("");
    for (QCPAxis* a : {x, y}) {
      a->grid()->setPen(QPen(QColor(225, 225, 225), 0, Qt::SolidLine));
      a->grid()->setSubGridVisible(false);
    }
  }
  return out;
}

/// The extent of the data drawn, over every panel.
struct Extent {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
};

/// A series' points that its axes' scales can show, with their spread (seeds, layers) and their values before
/// smoothing.
struct Points {
  QVector<double> xs, ys, lo, hi, raw;
};

/// The points of `s` the axes can show; widens `e` to hold them (a bar's or bin's width, the whole spread).
Points usable_points(const Figure& f, const experiment::Series& s, Extent& e) {
  Points pts;
  const bool spread = s.lo.size() == s.y.size() && s.hi.size() == s.y.size() && !s.lo.empty();
  for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
    double xv = s.x[k];
    const double yv = s.y[k];
    if (f.kind == PlotKind::Histogram) xv += s.bin_width / 2;
    if (!usable(xv, f.x.tick_labels.empty() ? f.x.scale : AxisScale::Linear) || !usable(yv, f.y.scale)) continue;
    pts.xs.push_back(xv);
    pts.ys.push_back(yv);
    if (k < s.raw.size()) pts.raw.push_back(s.raw[k]);
    const double half = f.kind == PlotKind::Histogram ? s.bin_width / 2 : f.kind == PlotKind::Bar ? 0.5 : 0;
    e.xlo = std::min(e.xlo, xv - half), e.xhi = std::max(e.xhi, xv + half);
    e.ylo = std::min(e.ylo, yv), e.yhi = std::max(e.yhi, yv);
    if (spread) {
      pts.lo.push_back(s.lo[k]);
      pts.hi.push_back(s.hi[k]);
      // The axis holds the whole spread.
      if (usable(s.lo[k], f.y.scale)) e.ylo = std::min(e.ylo, s.lo[k]);
      if (usable(s.hi[k], f.y.scale)) e.yhi = std::max(e.yhi, s.hi[k]);
    }
  }
  return pts;
}

/// Error bars of the points' spread on the plottable `of`, if the points have one.
void add_error_bars(QCPAbstractPlottable* of, const QPen& pen, const Points& pts) {
  if (pts.lo.size() != pts.xs.size() || pts.lo.isEmpty()) return;
  auto* bars_of = new QCPErrorBars(of->keyAxis(), of->valueAxis());
  bars_of->setDataPlottable(of);
  bars_of->setPen(pen);
  QVector<double> below, above;
  for (qsizetype k = 0; k < pts.lo.size(); ++k) below.push_back(pts.ys[k] - pts.lo[k]), above.push_back(pts.hi[k] - pts.ys[k]);
  bars_of->setData(below, above);
}

/// One of overlaid histograms as a step outline (translucent bars over each other hide which is which).
void draw_outline(QCPAxis* x, QCPAxis* y, const experiment::Series& s, const Points& pts, const QColor& c) {
  auto* g = new QCPGraph(x, y);
  g->setName(label(s.name));
  g->setPen(QPen(c, 1.6));
  g->setLineStyle(QCPGraph::lsStepCenter);
  g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssNone));
  g->setAdaptiveSampling(false);
  std::vector<std::pair<double, double>> bins;
  for (qsizetype k = 0; k < pts.xs.size(); ++k) bins.emplace_back(pts.xs[k], pts.ys[k]);
  std::sort(bins.begin(), bins.end());
  trace_outline(*g, bins, s.bin_width > 0 ? s.bin_width : 1);
}

/// A series as bars (a bar chart, or a histogram's bins); the bars of one panel's series side by side in `group`.
void draw_bars(QCustomPlot& plot, const Figure& f, const experiment::Series& s, const Points& pts, const QColor& c,
               QCPAxis* x, QCPAxis* y, QCPBarsGroup*& group) {
  auto* b = new QCPBars(x, y);
  b->setName(label(s.name));
  b->setPen(QPen(c.darker(130), 0.8));
  QColor fill = c;
  fill.setAlpha(f.kind == PlotKind::Histogram && f.series.size() > 1 ? 110 : 210);
  b->setBrush(fill);
  const std::size_t in_panel = static_cast<std::size_t>(
      std::count_if(f.series.begin(), f.series.end(), [&](const experiment::Series& o) { return o.facet == s.facet; }));
  if (f.kind == PlotKind::Bar && in_panel > 1 && !group) group = new QCPBarsGroup(&plot);
  if (f.kind == PlotKind::Histogram) b->setWidth(s.bin_width);
  else b->setWidth(group ? 0.8 / static_cast<double>(in_panel) : 0.6);
  if (group && f.kind == PlotKind::Bar) b->setBarsGroup(group);
  b->setData(pts.xs, pts.ys);
  // Spread over seeds or layers: error bars in a darker tone of the bar's colour.
  add_error_bars(b, QPen(c.darker(200), 1.0), pts);
}

/// A series as a line or as markers, over its raw values (faint) and its spread (a band under a line, error bars
/// on markers); these have no name, so no legend entry.
void draw_curve(const Figure& f, const experiment::Series& s, const Points& pts, std::size_t style, double font_px,
                QCPAxis* x, QCPAxis* y) {
  const QColor c = colour(style);
  if (pts.raw.size() == pts.xs.size() && !pts.raw.empty()) {
    auto* r = new QCPGraph(x, y);
    QColor faint = c;
    faint.setAlpha(70);
    r->setPen(QPen(faint, 0.8));
    r->setData(pts.xs, pts.raw, true);
  }
  if (f.kind == PlotKind::Line && pts.lo.size() == pts.xs.size() && !pts.lo.empty()) {
    auto* band_low = new QCPGraph(x, y);
    band_low->setPen(Qt::NoPen);
    band_low->setData(pts.xs, pts.lo, true);
    auto* band_high = new QCPGraph(x, y);
    band_high->setPen(Qt::NoPen);
    QColor fill = c;
    fill.setAlpha(50);
    band_high->setBrush(fill);
    band_high->setChannelFillGraph(band_low);
    band_high->setData(pts.xs, pts.hi, true);
  }
  auto* g = new QCPGraph(x, y);
  g->setName(label(s.name));
  g->setPen(QPen(c, 1.4));
  g->setLineStyle(f.kind == PlotKind::Line ? QCPGraph::lsLine : QCPGraph::lsNone);
  if (f.kind == PlotKind::Scatter) add_error_bars(g, QPen(c, 0.8), pts);
  const bool dense = f.kind == PlotKind::Scatter && pts.xs.size() > 200;
  const double size = dense ? font_px * 0.3 : font_px * 0.55;
  // Long curves (loss over thousands of steps) are lines only: markers would hide them.
  if (f.kind == PlotKind::Line && pts.xs.size() > 60) g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssNone));
  else g->setScatterStyle(QCPScatterStyle(shape(style), c, dense ? c : QColor(Qt::white), size));
  g->setData(pts.xs, pts.ys, f.kind == PlotKind::Line);
  // Sampling keeps a pixel column's extremes only, which hides scattered points between them.
  g->setAdaptiveSampling(f.kind == PlotKind::Line);
}

/// Every series in its panel; returns the extent of the points drawn.
Extent draw_series(QCustomPlot& plot, const Figure& f, double font_px, const Panels& panels) {
  Extent e;
  std::vector<QCPBarsGroup*> bar_groups(panels.count, nullptr);
  std::map<std::string, std::size_t> series_style;
  for (const auto& s : f.series) {
    QCPAxisRect* rect = panels.rects[std::min(s.facet, panels.count - 1)];
    QCPAxis* x = rect->axis(QCPAxis::atBottom);
    QCPAxis* y = rect->axis(QCPAxis::atLeft);
    const Points pts = usable_points(f, s, e);
    // A series drawn in several panels keeps its colour and marker in each.
    const std::size_t style = series_style.emplace(s.name, series_style.size()).first->second;
    if (f.kind == PlotKind::Histogram && f.series.size() > 1) draw_outline(x, y, s, pts, colour(style));
    else if (f.kind == PlotKind::Histogram || f.kind == PlotKind::Bar)
      draw_bars(plot, f, s, pts, colour(style), x, y, bar_groups[std::min(s.facet, panels.count - 1)]);
    else draw_curve(f, s, pts, style, font_px, x, y);
  }
  return e;
}

/// Whether every finite x (or y) of the figure's series is a whole number, and there is a series.
bool whole_numbers(const Figure& f, bool along_x) {
  for (const auto& s : f.series)
    for (double v : along_x ? s.x : s.y)
      if (std::isfinite(v) && v != std::round(v)) return false;
  return !f.series.empty();
}

/// Each panel's axes fitted to the extent of the data (categories: one unit each).
void fit_panels(QCustomPlot& plot, const Figure& f, const Panels& panels, const Extent& e) {
  const experiment::Axis& xa = panels.x;
  const bool bars = f.kind == PlotKind::Bar || f.kind == PlotKind::Histogram;
  for (QCPAxisRect* rect : panels.rects) {
    QCPAxis* x = rect->axis(QCPAxis::atBottom);
    QCPAxis* y = rect->axis(QCPAxis::atLeft);
    // Whole-number data on a linear axis (gaps, counts of bits) gets whole-number ticks.
    if (xa.tick_labels.empty() && xa.scale == AxisScale::Linear && whole_numbers(f, true) && f.kind != PlotKind::Histogram) {
      auto t = QSharedPointer<QCPAxisTickerFixed>::create();
      t->setTickStep(1);
      t->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
      x->setTicker(t);
    }
    fit(x, xa, e.xlo, e.xhi, false);
    fit(y, f.y, e.ylo, e.yhi, bars && f.y.scale == AxisScale::Linear);
    if (!xa.tick_labels.empty()) x->setRange(-0.5, static_cast<double>(xa.tick_labels.size()) - 0.5);
    if (!f.y.tick_labels.empty()) y->setRange(-0.5, static_cast<double>(f.y.tick_labels.size()) - 0.5);
    // Bars on a log axis start below the smallest.
    if (f.y.scale != AxisScale::Linear)
      for (int i = 0; i < plot.plottableCount(); ++i)
        if (auto* b = qobject_cast<QCPBars*>(plot.plottable(i)); b && b->valueAxis() == y) b->setBaseValue(y->range().lower);
  }
}

/// Category labels: side by side, wrapped, slanted, upright or an index, as the panel's width allows; then the
/// y labels fitted to the panels' height.
void label_panels(QCustomPlot& plot, const Figure& f, const Panels& panels) {
  const experiment::Axis& xa = panels.x;
  if (!xa.tick_labels.empty()) {
    lay_out(plot);
    const double budget = 0.3 * plot.viewport().height() / static_cast<double>(panels.rows);
    const CategoryFit fitted = fit_categories(xa.tick_labels, panels.rects[0]->axis(QCPAxis::atBottom)->tickLabelFont(),
                                              panels.rects[0]->rect().width(), budget);
    for (std::size_t p = 0; p < panels.count; ++p)
      show_categories(panels.rects[p]->axis(QCPAxis::atBottom), fitted,
                      p + panels.columns < panels.count ? QString() : label(f.x.label));
    for (QCPAxisRect* rect : panels.rects) keep_labels_inside(plot, rect);
  }
  if (!f.y.tick_labels.empty())
    for (QCPAxisRect* rect : panels.rects) {
      QCPAxis* y = rect->axis(QCPAxis::atLeft);
      show_categories(y, fit_categories(f.y.tick_labels, y->tickLabelFont(), 1e9, 0), y->label());
    }
  for (QCPAxisRect* rect : panels.rects) fit_axis_label(plot, rect->axis(QCPAxis::atLeft));
}

/// A vertical line across `rect` at the marker's x, its label at the top, stacked downwards below the labels in
/// `taken` (pixel ranges by level) that it would print over.
void mark_line(QCustomPlot& plot, QCPAxisRect* rect, const experiment::Marker& m, const QFont& font,
               std::vector<std::pair<double, double>>& taken) {
  QCPAxis* x = rect->axis(QCPAxis::atBottom);
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
  auto* line = new QCPItemStraightLine(&plot);
  line->setClipAxisRect(rect);
  line->point1->setAxes(x, y);
  line->point2->setAxes(x, y);
  line->point1->setCoords(m.x, y->range().lower);
  line->point2->setCoords(m.x, y->range().upper);
  line->setPen(QPen(QColor(90, 90, 90), 1, Qt::DashLine));
  if (m.label.empty()) return;
  auto* text = new QCPItemText(&plot);
  text->setClipAxisRect(rect);
  text->position->setAxes(x, y);
  text->position->setCoords(m.x, y->range().upper);
  text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  text->setFont(font);
  text->setText(" " + label(m.label));
  const double left = x->coordToPixel(m.x), width = QFontMetrics(font).horizontalAdvance(text->text()) + 4;
  std::size_t level = 0;
  while (level < taken.size() && left < taken[level].second) ++level;
  if (level == taken.size()) taken.push_back({left, left + width});
  else taken[level] = {left, left + width};
  text->setPadding(QMargins(0, static_cast<int>(level) * (QFontMetrics(font).height() + 1), 0, 0));
}

/// Markers: a ring on a series' point (one legend entry, the label), or a vertical line whose labels stack
/// downwards where they would print over the previous one.
void draw_markers(QCustomPlot& plot, const Figure& f, double font_px, const Panels& panels) {
  lay_out(plot);
  QFont marker_font;
  marker_font.setPixelSize(static_cast<int>(std::lround(font_px * 0.9)));
  for (std::size_t p = 0; p < panels.count; ++p) {
    QCPAxisRect* rect = panels.rects[p];
    std::vector<std::pair<double, double>> taken;  // pixel ranges of the labels placed, by level
    QVector<double> ring_x, ring_y;
    QString ring_label;
    for (const auto& m : f.markers) {
      if (m.series.empty()) {
        mark_line(plot, rect, m, marker_font, taken);
        continue;
      }
      const bool here = std::any_of(f.series.begin(), f.series.end(), [&](const experiment::Series& s) {
        return s.name == m.series && std::min(s.facet, panels.count - 1) == p;
      });
      if (here && usable(m.y, f.y.scale)) ring_x.push_back(m.x), ring_y.push_back(m.y), ring_label = label(m.label);
    }
    if (!ring_x.isEmpty()) {
      auto* rings = new QCPGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
      rings->setName(ring_label);
      rings->setPen(QPen(QColor(60, 60, 60), 1.6));
      rings->setLineStyle(QCPGraph::lsNone);
      rings->setScatterStyle(ring(font_px * 0.9));
      rings->setData(ring_x, ring_y);
    }
  }
}

/// The legend, if a plottable is named: inside a single panel where it fits, else below the panels in layout row
/// `legend_row` (facets: always; one legend for every panel).
void add_legend(QCustomPlot& plot, const Figure& f, double font_px, const Panels& panels, int legend_row) {
  bool named = false;
  for (int i = 0; i < plot.plottableCount(); ++i) named |= !plot.plottable(i)->name().isEmpty();
  if (!f.legend || !named) return;
  bool inside = false;
  if (panels.rects.size() == 1) {
    QCPLegend* legend = make_legend(font_px);
    panels.rects[0]->insetLayout()->addElement(legend, Qt::AlignTop | Qt::AlignRight);
    legend->setLayer("legend");
    fill_legend(plot, legend);
    if (!f.legend_title.empty()) {
      QFont tf = legend->font();
      tf.setBold(true);
      legend->insertRow(0);
      auto* title = new QCPTextElement(&plot, label(f.legend_title), tf);
      title->setTextColor(Qt::black);
      title->setLayer("legend");  // above the legend's translucent box, not under it on the main layer
      legend->addElement(0, 0, title);
    }
    inside = legend_inside(plot, panels.rects[0], legend);
  }
  if (!inside) legend_below(plot, f, font_px, legend_row);
}

}  // namespace

void draw(QCustomPlot& plot, const Figure& f, double font_px) {
  plot.clearPlottables();
  plot.clearItems();
  plot.plotLayout()->clear();
  plot.setBackground(Qt::white);
  // A widget that was never shown has not taken its size into its viewport (savePng sets it when it renders):
  // the layout here must be the one the file gets.
  plot.setViewport(plot.rect());

  Redraw::of(plot).drawn(f, font_px);
  const int row = add_title(plot, f, font_px);
  if (f.kind == PlotKind::Heatmap) {
    // The map and its colour scale side by side in one cell, so the title spans both.
    auto* body = new QCPLayoutGrid;
    plot.plotLayout()->addElement(row, 0, body);
    auto* rect = new QCPAxisRect(&plot);
    body->addElement(0, 0, rect);
    draw_heatmap(plot, f, font_px, body, rect);
  } else {
    const Panels panels = add_panels(plot, f, font_px, row);
    const Extent extent = draw_series(plot, f, font_px, panels);
    fit_panels(plot, f, panels, extent);
    label_panels(plot, f, panels);
    draw_markers(plot, f, font_px, panels);
    add_legend(plot, f, font_px, panels, row + 1);
  }
  Redraw::of(plot).ranged();
  plot.replot();
}

}  // namespace mxlab::plot
