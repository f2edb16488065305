// The plotting module's headless entry point (no Qt in this header): draws a figure description to PNG and
// PDF files with the same code that draws it in the GUI's widgets (draw.hpp).
#pragma once

#include <optional>
#include <string>

#include "mxlab/core/error.hpp"
#include "mxlab/experiment/figure.hpp"

namespace mxlab::plot {

struct SaveOptions {
  double width_in = 3.5;   ///< a paper's column width
  double height_in = 2.6;
  int dpi = 300;           ///< PNG resolution (the PDF is vector)
  bool png = true, pdf = true;
};

/// Writes BASE.png and BASE.pdf (each to a temporary file, then renamed). Creates the Qt application on the
/// offscreen platform when the process has none, so it works without a display.
std::optional<Error> save_figure(const experiment::Figure& f, const std::string& base, const SaveOptions& options = {});

}  // namespace mxlab::plot
