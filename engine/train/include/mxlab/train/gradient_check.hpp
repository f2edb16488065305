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

/// Names the checks know: the layers (linear, conv2d, conv2d_stride2, pointwise, depthwise, depthwise_stride2,
/// maxpool, avgpool, global_avgpool, relu, relu6, gelu, layernorm, batchnorm (batch statistics), batchnorm_eval
/// (running statistics), embedding, attention (causal), attention_bidirectional, basic_block, inverted_residual,
/// softmax_ce) and the models (mlp, cnn, transformer, resnet, mobilenet, vit).
std::vector<std::string> gradient_check_names();

/// Builds the layer (or a small model) in double precision with seeded random inputs and parameters, takes
/// L = sum(R o f(x)) for a random R (the model checks take their cross-entropy loss), and compares backward's
/// gradients of the inputs and parameters with central differences (step 1e-5) on up to 60 elements per tensor
/// (the resnet and mobilenet checks: 4 elements per tensor with the fourth-order five-point stencil; their
/// shifts of the projections' batch norms, which have no gradient under batch statistics, are left out).
Result<std::vector<GradientCheck>> check_gradients(const std::string& name, std::uint64_t seed);

}  // namespace mxlab::train
