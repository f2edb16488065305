// What the steps of the reference quantizer share (quantize.cpp runs them; docs/quantization.md, "The reference,
// step by step"). Internal to engine/quantize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "block_scale.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab::quantize_detail {

/// What the steps of one quantization share.
struct Run {
  Run(const BlockFormat& format, const std::vector<double>& input, const CastOptions& element_options)
      : f(format), x(input), elem_opts(element_options) {}
  const BlockFormat& f;
  const std::vector<double>& x;
  CastOptions elem_opts;
  CastOptions scale_opts;
  bool stochastic = false;
  bool pow2_rule = false;  ///< power-of-two block scales (every rule but amax and 4over6)
  std::vector<std::int64_t> block_of;  ///< the block of each element
  std::vector<BlockStats> stats;       ///< per block
  bool tensor_nan = false;
  double tensor_amax = 0;              ///< largest finite magnitude of the tensor
  double g = 1.0;                      ///< the tensor scale (1 without one)
  std::vector<Pow2BlockPlan> plans;    ///< per block (float rules use Divide and NanCodes)
  std::vector<std::int64_t> sub_of;    ///< the subtile of each element (subtile layouts)
  std::uint32_t random(std::size_t i) const { return stochastic ? stochastic_bits(f.options.seed, i) : 0U; }
};

/// The flags of an element cast (QuantizedTensor::kInexact and the others).
std::uint8_t flags_of(const CastResult& r);

}  // namespace mxlab::quantize_detail
