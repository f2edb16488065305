// Finite-difference checks of every layer's backward pass, in double precision.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab::train {

/// Analytic against central-difference gradients of one tensor (an input or a parameter).
struct GradientCheck {
  std::string layer;
  std::string tensor;
  std::int64_t checked = 0;       ///< elements compared
  double max_abs_error = 0;       ///< max |analytic - numeric|
  double max_rel_error = 0;       ///< max |analytic - numeric| / max(|analytic|, |numeric|, 1e-3)
  double max_abs_gradient = 0;    ///< max |analytic| over the checked elements (to see the check is not vacuous)
};

/// Names the checks know: linear, conv2d, maxpool, avgpool, relu, gelu, layernorm, embedding, attention,
/// softmax_ce, mlp, cnn, transformer.
std::vector<std::string> gradient_check_names();

/// Builds the layer (or a small model) in double precision with seeded random inputs and parameters, takes
/// L = sum(R o f(x)) for a random R (the model checks take their cross-entropy loss), and compares backward's
/// gradients of the inputs and parameters with central differences (step 1e-5) on up to 60 elements per tensor.
Result<std::vector<GradientCheck>> check_gradients(const std::string& name, std::uint64_t seed);

}  // namespace mxlab::train
