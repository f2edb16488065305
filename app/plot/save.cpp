// Headless export of figures to PNG and PDF on Qt's offscreen platform.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include <unistd.h>

#include <QApplication>
#include <qcustomplot.h>

#include "mxlab/plot/draw.hpp"
#include "mxlab/plot/plot.hpp"
#include "prepare.hpp"

namespace mxlab::plot {

void ensure_application() {
  if (QCoreApplication::instance()) return;
  if (!std::getenv("QT_QPA_PLATFORM")) ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
  if (!std::getenv("XDG_RUNTIME_DIR")) {
    // Qt wants a private runtime folder; a headless run has none.
    static const std::string dir = [] {
      std::error_code ec;
      auto base = std::filesystem::temp_directory_path(ec);
      if (ec) base = "/tmp";  // TMPDIR names no folder
      return (base / ("mxlab-runtime-" + std::to_string(::getuid()))).string();
    }();
    std::error_code ec;  // without a runtime folder Qt warns and goes on
    std::filesystem::create_directories(dir, ec);
    if (!ec) std::filesystem::permissions(dir, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace, ec);
    if (!ec) ::setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
  }
  static int argc = 1;
  static char name[] = "mxlab";
  static char* argv[] = {name, nullptr};
  static std::unique_ptr<QApplication> app = std::make_unique<QApplication>(argc, argv);
}

Canvas prepare(QCustomPlot& plot, const experiment::Figure& f, const SaveOptions& o) {
  // Laid out at 150 logical pixels per inch; the PNG is rendered at o.dpi from that layout.
  const double width_in = f.width_in > 0 ? f.width_in : o.width_in;
  double height_in = f.height_in > 0 ? f.height_in : o.height_in;
  // A heatmap with many rows (layers) grows so its row labels stay readable.
  if (f.kind == experiment::PlotKind::Heatmap && f.height_in <= 0)
    height_in = std::max(height_in, 1.4 + 0.11 * static_cast<double>(f.heatmap.y_labels.size()));
  // Panels: a grid of at most three columns, each row of panels as high as a figure's plot area.
  if (!f.facets.empty() && f.height_in <= 0) {
    const std::size_t columns = std::min<std::size_t>(3, f.facets.size());
    const std::size_t rows = (f.facets.size() + columns - 1) / columns;
    height_in = std::max(height_in, 0.8 + 1.9 * static_cast<double>(rows));
  }
  Canvas c;
  c.width = static_cast<int>(std::lround(width_in * kLogicalPerInch));
  c.height = static_cast<int>(std::lround(height_in * kLogicalPerInch));
  plot.resize(c.width, c.height);
  // 8 pt tick labels (or the figure's size): 8/72 inch.
  c.font_px = (f.font_pt > 0 ? f.font_pt : 8.0) / 72.0 * kLogicalPerInch;
  draw(plot, f, c.font_px);
  return c;
}

std::optional<Error> save_figure(const experiment::Figure& f, const std::string& base, const SaveOptions& o) {
  ensure_application();
  QCustomPlot plot;
  const Canvas canvas = prepare(plot, f, o);
  const int w = canvas.width, h = canvas.height;
  auto save = [&](const std::string& ext, auto&& write) -> std::optional<Error> {
    const std::string path = base + ext;
    const std::string tmp = path + ".tmp";
    if (!write(QString::fromStdString(tmp))) {
      std::remove(tmp.c_str());
      return make_error("plot '" + path + "': cannot be written");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      std::remove(tmp.c_str());
      return make_error("plot '" + path + "': " + ec.message());
    }
    return std::nullopt;
  };
  const double scale = o.dpi / kLogicalPerInch;
  if (o.png)
    if (auto e = save(".png", [&](const QString& p) { return plot.savePng(p, w, h, scale, -1, o.dpi, QCP::ruDotsPerInch); })) return e;
  if (o.pdf)
    if (auto e = save(".pdf", [&](const QString& p) { return plot.savePdf(p, w, h, QCP::epNoCosmetic); })) return e;
  return std::nullopt;
}

}  // namespace mxlab::plot
