// Every figure of every shipped experiment keeps the layout rules (app/plot/layout.cpp): no text over text or
// outside the figure, no legend over data, every series its own colour and marker, colour scales of values that
// cannot be negative from 0. Experiments that compute from generated inputs are evaluated (small sweeps, in
// seconds); those that need installed weights or training data are drawn from sample results of the same shape
// (every swept value, layer names as long as real ones). [exhaustive] evaluates every experiment whose data are
// here (the dev build's exhaustive preset; the sanitized run draws the same figures from sample results).
// MXLAB_LAYOUT_OUT=DIR also writes each figure's PNG there, for looking at.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "mxlab/experiment/experiment.hpp"
#include "mxlab/experiment/outputs.hpp"
#include "mxlab/experiment/runner.hpp"
#include "mxlab/plot/layout.hpp"
#include "mxlab/plot/plot.hpp"

namespace fs = std::filesystem;
using namespace mxlab;
using namespace mxlab::experiment;

namespace {

/// Whether every point computes from what the experiment itself generates, quickly (GEMM experiments take
/// seconds each: drawn from sample results here, evaluated by the [exhaustive] case).
bool generated_only(const Experiment& e) {
  if (e.job == "train" || e.job == "gemm" || e.job == "direct_cast") return false;
  for (const auto& in : e.inputs)
    if (in.source.rfind("gen:", 0) != 0) return false;
  return true;
}

/// The values a column takes in the sweep (axis or explicit points), if it is swept.
std::vector<std::string> swept(const Experiment& e, const std::string& column) {
  std::vector<std::string> out;
  auto add = [&](const std::string& v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  for (const auto& [axis, values] : e.axes)
    if (axis == column)
      for (const auto& v : values) add(v);
  for (const auto& p : e.points)
    for (const auto& [axis, v] : p)
      if (axis == column) add(v);
  return out;
}

/// Sample values of a column that is not swept, of the size real results have.
std::vector<std::string> sample_values(const std::string& column) {
  std::vector<std::string> out;
  if (column == "layer") {
    // 26 layers of a real model, with names as long as theirs.
    for (int i = 0; i < 26; ++i)
      out.push_back("MobilenetV1/Conv2d_" + std::to_string(i / 2) + (i % 2 ? "_pointwise" : "_depthwise") + "/weights");
  } else if (column == "gap") {
    for (int g = 0; g <= 24; ++g) out.push_back(std::to_string(g));
  } else if (column == "step") {
    for (int s = 1; s <= 1500; s += 5) out.push_back(std::to_string(s));
  } else if (column == "role") {
    out = {"a", "w", "g"};
  } else if (column == "profile") {
    out = {"ocp", "microxcaling", "microxcaling-cuda", "torchao-floor", "torchao-rceil", "transformer-engine",
           "transformer-engine-nvfp4", "modelopt", "brevitas", "qtorch", "nvidia-cuda", "amd-quark", "tensorcast", "mx-scaling"};
  } else {
    for (int i = 1; i <= 6; ++i) out.push_back(std::to_string(i * 8));
  }
  return out;
}

/// Sample results for one plot: every combination of its x, series and facet values, y values of a plausible
/// shape (a ratio within [0, 1], anything on a log axis positive).
void add_sample(const Experiment& e, const PlotDef& d, AllResults& all) {
  auto values = [&](const std::string& column) {
    auto v = swept(e, column);
    return v.empty() ? sample_values(column) : v;
  };
  const std::vector<std::string> xs = values(d.x);
  const std::vector<std::string> ss = d.series.empty() ? std::vector<std::string>{""} : values(d.series);
  const std::vector<std::string> fs_ = d.facet.empty() ? std::vector<std::string>{""} : values(d.facet);
  const std::vector<std::string> ys = d.kind == "heatmap" ? values(d.y) : std::vector<std::string>{""};
  const std::string measured = d.kind == "heatmap" ? d.value : d.y;
  const bool ratio = measured.find("ratio") != std::string::npos || measured.find("accuracy") != std::string::npos;
  auto& rows = all[d.from];
  std::size_t k = 0;
  for (std::size_t fi = 0; fi < fs_.size(); ++fi)
    for (std::size_t si = 0; si < ss.size(); ++si)
      for (std::size_t xi = 0; xi < xs.size(); ++xi)
        for (std::size_t yi = 0; yi < ys.size(); ++yi, ++k) {
          Row r;
          for (const auto& [col, v] : d.where)
            if (!r.find(col)) r.add(col, v);  // a list: its first value
          auto cell = [](const std::string& v) -> Cell {
            char* end = nullptr;
            const double n = std::strtod(v.c_str(), &end);
            return !v.empty() && *end == 0 ? Cell(n) : Cell(v);
          };
          auto put = [&](const std::string& col, const std::string& v) {
            if (!col.empty() && !r.find(col)) r.add(col, cell(v));
          };
          put(d.facet, fs_[fi]);
          put(d.series, ss[si]);
          put(d.x, xs[xi]);
          if (d.kind == "heatmap") put(d.y, ys[yi]);
          const double t = static_cast<double>(xi) / static_cast<double>(std::max<std::size_t>(xs.size() - 1, 1));
          double v = ratio ? 0.05 + 0.9 * std::fmod(0.37 * static_cast<double>(k) + 0.1 * static_cast<double>(si), 1.0)
                           : (20.0 + 6.0 * static_cast<double>(si)) * (1.0 - 0.5 * t) + 3.0 * std::sin(static_cast<double>(k));
          if (d.y_scale != "linear" || d.log_values) v = std::exp2(-static_cast<double>(si) - 8.0 * t) + 1e-4;
          r.add(measured, v);
          rows.push_back(std::move(r));
        }
  if (!d.markers.empty()) {
    const auto dot = d.markers.find('.');
    const std::string set = dot == std::string::npos ? d.from : d.markers.substr(0, dot);
    Row m;
    for (const auto& [col, v] : d.where)
      if (!m.find(col)) m.add(col, v);
    m.add(dot == std::string::npos ? d.markers : d.markers.substr(dot + 1), std::string("4 9"));
    all[set].push_back(std::move(m));
  }
}

struct Totals {
  std::size_t figures = 0, checks = 0, texts = 0;
  std::set<std::string> experiments;
};

void check_figures(const Experiment& e, const std::vector<std::pair<std::string, Figure>>& figures, Totals& totals) {
  const char* out = std::getenv("MXLAB_LAYOUT_OUT");
  for (const auto& [name, figure] : figures) {
    const plot::LayoutReport r = plot::check_layout(figure);
    ++totals.figures;
    totals.checks += r.checks;
    totals.texts += r.texts;
    totals.experiments.insert(e.name);
    std::string faults;
    for (const auto& f : r.faults) faults += "\n  " + f;
    INFO(e.name + "/" + name + ": " + std::to_string(r.faults.size()) + " faults" + faults);
    CHECK(r.faults.empty());
    CHECK(r.texts > 0);
    if (out) {
      fs::create_directories(out);
      REQUIRE(!plot::save_figure(figure, (fs::path(out) / (e.name + "-" + name)).string(), {3.5, 2.6, 150, true, false}));
    }
  }
}

std::vector<Experiment> shipped() {
  std::vector<Experiment> out;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(MXLAB_SOURCE_DIR) / "experiments"))
    if (entry.path().extension() == ".toml") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    auto e = read_experiment(f.string());
    INFO(f.string() + ": " + (e ? "" : e.error().message));
    REQUIRE(e);
    if (e->batch.empty()) out.push_back(std::move(*e));
  }
  return out;
}

}  // namespace

TEST_CASE("every figure of every shipped experiment keeps the layout rules", "[plot]") {
  Totals totals;
  for (const Experiment& e : shipped()) {
    std::vector<std::pair<std::string, Figure>> figures;
    if (generated_only(e)) {
      auto ev = evaluate(e);
      INFO(e.name + ": " + (ev ? "" : ev.error().message));
      REQUIRE(ev);
      figures = ev->figures;
    } else {
      for (const PlotDef& d : e.plots) {
        AllResults sample;
        add_sample(e, d, sample);
        auto f = build_figure(e, d, sample);
        INFO(e.name + "/" + d.name + ": " + (f ? "" : f.error().message));
        REQUIRE(f);
        figures.emplace_back(d.name, std::move(*f));
      }
    }
    check_figures(e, figures, totals);
  }
  std::cout << "layout: " << totals.figures << " figures of " << totals.experiments.size() << " experiments, " << totals.texts
            << " texts, " << totals.checks << " rule checks\n";
  CHECK(totals.figures >= 18);
}

TEST_CASE("the layout rules find what they are about", "[plot]") {
  // Nine series (one more than the old palette had colours), a legend that has nowhere free inside the plot,
  // 31 long category labels on one axis: each is a fault the drawing must avoid, so the report stays empty.
  Figure f;
  f.kind = PlotKind::Line;
  f.title = "nine series";
  f.x.label = "x";
  f.y.label = "y";
  f.legend_title = "format";
  for (int s = 0; s < 9; ++s) {
    Series sr;
    sr.name = "series_" + std::to_string(s);
    for (int i = 0; i <= 20; ++i) {
      sr.x.push_back(i);
      sr.y.push_back(s + 0.2 * i + (i % 2));
    }
    f.series.push_back(sr);
  }
  const auto r = plot::check_layout(f);
  std::string faults;
  for (const auto& x : r.faults) faults += "\n" + x;
  INFO(faults);
  CHECK(r.faults.empty());
  CHECK(r.checks > 100);

  Figure bars;
  bars.kind = PlotKind::Bar;
  bars.title = "31 layers";
  bars.x.label = "layer";
  bars.y.label = "SQNR (dB)";
  bars.legend = false;
  Series b;
  b.name = "sqnr";
  for (int i = 0; i < 31; ++i) {
    bars.categories.push_back("backbone/stage_" + std::to_string(i / 4) + "/block_" + std::to_string(i) + "/conv/weights");
    b.x.push_back(i);
    b.y.push_back(18 + i % 5);
  }
  bars.series.push_back(b);
  const auto rb = plot::check_layout(bars);
  faults.clear();
  for (const auto& x : rb.faults) faults += "\n" + x;
  INFO(faults);
  CHECK(rb.faults.empty());
}

TEST_CASE("every figure of every shipped experiment whose data are installed keeps the layout rules", "[plot][exhaustive]") {
  Totals totals;
  for (const Experiment& e : shipped()) {
    if (e.job == "train" || e.job == "direct_cast" || e.job == "gradients" || !checked_points(e))
      continue;  // weights not installed here; training runs for minutes
    auto ev = evaluate(e);
    if (!ev) continue;
    check_figures(e, ev->figures, totals);
  }
  std::cout << "layout [exhaustive]: " << totals.figures << " figures, " << totals.checks << " rule checks\n";
}

namespace {

std::string faults_of(const plot::LayoutReport& r) {
  std::string out;
  for (const auto& x : r.faults) out += "\n" + x;
  return out;
}

}  // namespace

TEST_CASE("a legend with no free place inside the plot goes below it", "[plot]") {
  // Twelve series that fill the whole plot area: every corner and edge of it holds points, and the legend is
  // too tall to sit above them.
  Figure f;
  f.kind = PlotKind::Scatter;
  f.title = "dense";
  f.legend_title = "format";
  for (int s = 0; s < 12; ++s) {
    Series sr;
    sr.name = "format_" + std::to_string(s);
    for (int i = 0; i <= 40; ++i)
      for (int j = 0; j <= 10; ++j) {
        sr.x.push_back(i + 0.1 * s);
        sr.y.push_back(j + 0.1 * s);
      }
    f.series.push_back(sr);
  }
  const auto r = plot::check_layout(f);
  INFO(faults_of(r));
  CHECK(r.faults.empty());
}

TEST_CASE("facets are drawn as panels, bars show their spread", "[plot]") {
  Figure f;
  f.kind = PlotKind::Bar;
  f.title = "three panels";
  f.categories = {"floor", "ceil", "even"};
  f.facets = {"normal", "student t", "weights"};
  f.spread = "std";
  f.legend_title = "format";
  for (std::size_t p = 0; p < 3; ++p)
    for (int s = 0; s < 2; ++s) {
      Series sr;
      sr.name = s ? "mxfp4" : "mxfp8_e4m3";
      sr.facet = p;
      for (int i = 0; i < 3; ++i) {
        sr.x.push_back(i);
        sr.y.push_back(20 - 5 * s + i);
        sr.lo.push_back(19 - 5 * s + i);
        sr.hi.push_back(21 - 5 * s + i);
      }
      f.series.push_back(sr);
    }
  const auto r = plot::check_layout(f);
  INFO(faults_of(r));
  CHECK(r.faults.empty());
  CHECK(r.panels == 3);
  CHECK(r.spreads == 6);  // error bars on every series of every panel
}

TEST_CASE("crossover rings and category indexes keep the layout rules", "[plot]") {
  // 60 layers with long names: too many to name, so the axis numbers them.
  Figure f;
  f.kind = PlotKind::Scatter;
  f.x.label = "layer (file order)";
  f.legend_title = "format";
  for (int i = 0; i < 60; ++i) f.x.tick_labels.push_back("encoder/block_" + std::to_string(i) + "/attention/query/kernel");
  for (int s = 0; s < 2; ++s) {
    Series sr;
    sr.name = s ? "b" : "a";
    for (int i = 0; i < 60; ++i) sr.x.push_back(i), sr.y.push_back(s ? 60 - i : i);
    f.series.push_back(sr);
  }
  f.markers.push_back(Marker{30, "crossover", "b", 30});
  const auto r = plot::check_layout(f);
  INFO(faults_of(r));
  CHECK(r.faults.empty());
}

TEST_CASE("overlaid histograms are outlined bin by bin, down to zero at empty bins", "[plot]") {
  // Exponent gaps as the direct_cast experiment counts them: MobileFaceNet's gaps stop at 19, then one bin at
  // 22 and one at 27 (empty bins between them), listed out of order; PoseNet's run on to 53.
  for (const AxisScale scale : {AxisScale::Log10, AxisScale::Linear}) {
    Figure f;
    f.kind = PlotKind::Histogram;
    f.title = "Exponent gaps of pretrained weights";
    f.x.label = "exponent gap";
    f.y.label = "elements";
    f.y.scale = scale;
    f.legend_title = "input";
    Series m;
    m.name = "mobilefacenet";
    m.bin_width = 1;
    for (int g : {27, 22}) m.x.push_back(g), m.y.push_back(2);
    for (int g = 0; g <= 19; ++g) m.x.push_back(g), m.y.push_back(std::round(2e5 * std::exp2(-0.9 * g)) + 3);
    Series p;
    p.name = "posenet";
    p.bin_width = 1;
    for (int g = 0; g <= 53; ++g) {
      if (g == 34) continue;  // an empty bin inside
      p.x.push_back(g), p.y.push_back(g < 20 ? std::round(2e5 * std::exp2(-0.8 * g)) + 20 : 30 + 20 * std::sin(g / 3.0));
    }
    f.series = {m, p};
    const auto r = plot::check_layout(f);
    INFO((scale == AxisScale::Linear ? "linear" : "log10") + faults_of(r));
    CHECK(r.faults.empty());
    if (const char* out = std::getenv("MXLAB_LAYOUT_OUT"))
      REQUIRE(!plot::save_figure(f, (fs::path(out) / (std::string("outline-") + (scale == AxisScale::Linear ? "linear" : "log10"))).string(),
                                 {3.5, 2.6, 300, true, false}));
  }
}

TEST_CASE("a heatmap drawn before its widget has its size is laid out again at that size", "[plot]") {
  // The Training Simulator draws its underflow heatmap into a tab not shown yet (a widget of its first, small
  // size) and shows it later: the title must then use the figure's width, the row axis' label the size of
  // every axis label. Many rows (smaller row labels) and a long title as well.
  Figure f;
  f.kind = PlotKind::Heatmap;
  f.title = "Underflow of g by layer";
  for (int i = 0; i < 15; ++i) f.heatmap.x_labels.push_back(std::to_string(10 * i + 1) + "-" + std::to_string(10 * i + 10));
  for (const char* recipe : {"mxfp8", "mxint8"})
    for (const char* layer : {"fc1", "fc2", "fc3"}) f.heatmap.y_labels.push_back(std::string(recipe) + ": " + layer);
  f.x.label = "steps";
  f.y.label = "recipe: layer";
  f.heatmap.value_label = "underflow ratio";
  for (std::size_t k = 0; k < f.heatmap.x_labels.size() * f.heatmap.y_labels.size(); ++k) f.heatmap.values.push_back(0.01 * static_cast<double>(k % 50));
  Figure many = f;
  many.title = "Output-gradient underflow by layer and recipe, ResNet-18 on Fashion-MNIST over 1500 steps";
  many.heatmap.y_labels.clear();
  many.heatmap.values.clear();
  for (int j = 0; j < 30; ++j) many.heatmap.y_labels.push_back("resnet/block_" + std::to_string(j / 2) + (j % 2 ? "/conv_b" : "/conv_a"));
  for (std::size_t k = 0; k < many.heatmap.x_labels.size() * many.heatmap.y_labels.size(); ++k) many.heatmap.values.push_back(0.01 * static_cast<double>(k % 97));
  for (const Figure* x : {&f, &many}) {
    const auto r = plot::check_layout_after_resize(*x, 100, 30, {7, 4, 150, true, false});
    INFO(x->title + faults_of(r));
    CHECK(r.faults.empty());
    const auto direct = plot::check_layout(*x, {7, 4, 150, true, false});
    INFO(faults_of(direct));
    CHECK(direct.faults.empty());
  }
}
