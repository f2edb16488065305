// Figure descriptions: names of kinds and scales, and the JSON kept beside each plot.
#include "mxlab/experiment/figure.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "mxlab/core/table.hpp"

namespace mxlab::experiment {

namespace {

constexpr const char* kKindNames[] = {"line", "scatter", "histogram", "heatmap", "bar"};
constexpr const char* kScaleNames[] = {"linear", "log2", "log10"};

/// Shortest decimal that reads back to the same double; non-finite values become null.
std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);  // whole numbers as integers (10, not 1e+01)
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string numbers(const std::vector<double>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += std::string(i ? "," : "") + number(v[i]);
  return out + "]";
}

std::string strings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += std::string(i ? "," : "") + json_quote(v[i]);
  return out + "]";
}

std::string axis_json(const Axis& a) {
  return "{\"label\":" + json_quote(a.label) + ",\"scale\":\"" + axis_scale_name(a.scale) +
         "\",\"min\":" + (a.min ? number(*a.min) : "null") + ",\"max\":" + (a.max ? number(*a.max) : "null") +
         ",\"tick_labels\":" + strings(a.tick_labels) + "}";
}

}  // namespace

std::optional<PlotKind> parse_plot_kind(const std::string& text) {
  for (int i = 0; i < 5; ++i)
    if (text == kKindNames[i]) return static_cast<PlotKind>(i);
  return std::nullopt;
}

const char* plot_kind_name(PlotKind k) { return kKindNames[static_cast<int>(k)]; }

std::optional<AxisScale> parse_axis_scale(const std::string& text) {
  if (text == "log") return AxisScale::Log10;
  for (int i = 0; i < 3; ++i)
    if (text == kScaleNames[i]) return static_cast<AxisScale>(i);
  return std::nullopt;
}

const char* axis_scale_name(AxisScale s) { return kScaleNames[static_cast<int>(s)]; }

std::string figure_json(const Figure& f) {
  std::ostringstream o;
  o << "{\"title\":" << json_quote(f.title) << ",\"kind\":\"" << plot_kind_name(f.kind) << "\",\"x\":" << axis_json(f.x)
    << ",\"y\":" << axis_json(f.y) << ",\"legend_title\":" << json_quote(f.legend_title)
    << ",\"legend\":" << (f.legend ? "true" : "false") << ",\"categories\":" << strings(f.categories) << ",\"series\":[";
  for (std::size_t i = 0; i < f.series.size(); ++i) {
    const Series& s = f.series[i];
    o << (i ? "," : "") << "{\"name\":" << json_quote(s.name) << ",\"x\":" << numbers(s.x) << ",\"y\":" << numbers(s.y);
    if (f.kind == PlotKind::Histogram) o << ",\"bin_width\":" << number(s.bin_width);
    if (!s.lo.empty()) o << ",\"lo\":" << numbers(s.lo) << ",\"hi\":" << numbers(s.hi);
    if (!s.raw.empty()) o << ",\"raw\":" << numbers(s.raw);
    if (!f.facets.empty()) o << ",\"facet\":" << s.facet;
    o << "}";
  }
  o << "],\"markers\":[";
  for (std::size_t i = 0; i < f.markers.size(); ++i) {
    const Marker& m = f.markers[i];
    o << (i ? "," : "") << "{\"x\":" << number(m.x) << ",\"label\":" << json_quote(m.label);
    if (!m.series.empty()) o << ",\"series\":" << json_quote(m.series) << ",\"y\":" << number(m.y);
    o << "}";
  }
  o << "]";
  if (!f.facets.empty()) o << ",\"facets\":" << strings(f.facets);
  if (f.smooth > 1) o << ",\"smooth\":" << f.smooth;
  if (!f.spread.empty()) o << ",\"spread\":" << json_quote(f.spread);
  if (f.width_in > 0 || f.height_in > 0 || f.font_pt > 0)
    o << ",\"size\":{\"width_in\":" << number(f.width_in) << ",\"height_in\":" << number(f.height_in)
      << ",\"font_pt\":" << number(f.font_pt) << "}";
  if (f.kind == PlotKind::Heatmap) {
    const Heatmap& h = f.heatmap;
    o << ",\"heatmap\":{\"x_labels\":" << strings(h.x_labels) << ",\"y_labels\":" << strings(h.y_labels)
      << ",\"values\":" << numbers(h.values) << ",\"value_label\":" << json_quote(h.value_label)
      << ",\"log_values\":" << (h.log_values ? "true" : "false") << "}";
  }
  o << "}\n";
  return o.str();
}

void smooth_series(Series& s, int window) {
  if (window < 2 || s.y.size() <= 2) return;
  std::vector<std::size_t> order(s.x.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s.x[a] < s.x[b]; });
  std::vector<double> xs, ys, smooth;
  for (std::size_t i : order) xs.push_back(s.x[i]), ys.push_back(s.y[i]);
  const auto half = static_cast<std::ptrdiff_t>(window / 2);
  const auto n = static_cast<std::ptrdiff_t>(ys.size());
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    double sum = 0;
    int count = 0;
    for (std::ptrdiff_t j = std::max<std::ptrdiff_t>(0, i - half); j <= std::min(n - 1, i + half); ++j)
      if (std::isfinite(ys[static_cast<std::size_t>(j)])) sum += ys[static_cast<std::size_t>(j)], ++count;
    smooth.push_back(count ? sum / count : std::nan(""));
  }
  s.x = std::move(xs);
  s.raw = std::move(ys);
  s.y = std::move(smooth);
}

Series difference(const Series& s, const Series& reference) {
  std::map<double, double> ref;
  for (std::size_t i = 0; i < reference.x.size() && i < reference.y.size(); ++i) ref.emplace(reference.x[i], reference.y[i]);
  Series d;
  d.name = s.name;
  for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
    if (const auto it = ref.find(s.x[i]); it != ref.end()) d.x.push_back(s.x[i]), d.y.push_back(s.y[i] - it->second);
  return d;
}

}  // namespace mxlab::experiment
