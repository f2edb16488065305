// What a figure shows, as plain data: the engine and the experiment runner fill it, app/plot draws it
// (headless to PNG/PDF for the command line, in a widget for the GUI) with the same code.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mxlab::experiment {

enum class PlotKind {
  Line,       ///< one polyline per series, with markers
  Scatter,    ///< markers only
  Histogram,  ///< series are pre-binned: x = left bin edges, y = counts; Series::bin_width gives the width
  Heatmap,    ///< Figure::heatmap holds the grid; series are ignored
  Bar,        ///< grouped bars: x = category index (0, 1, ...) named by Figure::categories, one group per series
};

enum class AxisScale {
  Linear,
  Log2,   ///< logarithmic, ticks at powers of two (values that are powers of two: block sizes, scales, gaps)
  Log10,  ///< logarithmic, ticks at powers of ten
};

struct Axis {
  std::string label;
  AxisScale scale = AxisScale::Linear;
  std::optional<double> min, max;  ///< fixed range; unset = fit the data
  /// Categories: ticks at 0, 1, 2, ... labelled with these (a number line of formats); empty = numeric ticks.
  std::vector<std::string> tick_labels;
};

/// One named series; points whose x or y is not finite (or not positive on a log axis) are left out.
struct Series {
  std::string name;
  std::vector<double> x, y;
  /// The spread of the results at each point (seeds, layers): error bars (scatter, bar) or a band (line) from
  /// lo to hi; empty = none.
  std::vector<double> lo, hi;
  /// The values before smoothing (drawn faintly under the smoothed y); empty = not smoothed.
  std::vector<double> raw;
  double bin_width = 0;  ///< PlotKind::Histogram only
  std::size_t facet = 0;  ///< the panel it is drawn in (Figure::facets)
};

/// A vertical line at x with a label (crossover gaps, bounds), or, when it names a series, a ring on that
/// series' point at x (where the series crosses another); the rings share one legend entry, the label.
struct Marker {
  double x = 0;
  std::string label;
  std::string series;  ///< the series' shown name; empty = a vertical line
  double y = 0;        ///< the series' value at x (with `series`)
};

/// A grid of values: values[row * x_labels.size() + column]; row labels run along y (first at the bottom).
struct Heatmap {
  std::vector<std::string> x_labels, y_labels;
  std::vector<double> values;  ///< non-finite cells are drawn empty
  std::string value_label;     ///< the colour scale's title
  bool log_values = false;     ///< logarithmic colour scale
};

struct Figure {
  std::string title;
  PlotKind kind = PlotKind::Line;
  Axis x, y;
  std::vector<Series> series;
  std::vector<std::string> categories;  ///< PlotKind::Bar: the names of x = 0, 1, ...
  std::vector<Marker> markers;
  Heatmap heatmap;                      ///< PlotKind::Heatmap
  std::string legend_title;             ///< the axis the series run over ("format", "block size")
  bool legend = true;
  /// Panels of one grid with shared axes, titled with these (facets); empty = one panel.
  std::vector<std::string> facets;
  double width_in = 0, height_in = 0;  ///< the figure's size in inches; 0 = a paper's column (3.5 x 2.6)
  double font_pt = 0;                  ///< the tick labels' size in points; 0 = 8 pt
  int smooth = 0;                      ///< the moving-average window the series were smoothed with (0 = none)
  std::string spread;                  ///< what Series::lo/hi show: "std" (mean +- standard deviation) or "minmax"
};

/// Parses "line", "scatter", "histogram", "heatmap", "bar".
std::optional<PlotKind> parse_plot_kind(const std::string& text);
const char* plot_kind_name(PlotKind k);
/// Parses "linear", "log2", "log10" ("log" means log10).
std::optional<AxisScale> parse_axis_scale(const std::string& text);
const char* axis_scale_name(AxisScale s);

/// The figure as JSON (every field, the data included), kept beside each plot so its numbers can be read back.
std::string figure_json(const Figure& f);

/// Smooths a series by a centred moving average over `window` points in x order (fewer at the ends; points whose
/// y is not finite are skipped), keeping the values before smoothing in Series::raw; a window below 2, or a series
/// of at most 2 points, is left as it is (the plot key `smooth`, and the Training Simulator's smoothing).
void smooth_series(Series& s, int window);

/// The series minus a reference series: y - y_ref at each x both have (the points of the series without a point of
/// the reference at the same x are left out), named as the series.
Series difference(const Series& s, const Series& reference);

}  // namespace mxlab::experiment
