// The reference's float block scales (block_float_scale.cpp; choose_tensor_scale and float_block_scale_code are
// declared in mxlab/quantize/quantize.hpp). Internal to engine/quantize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quantize_steps.hpp"

namespace mxlab::quantize_detail {

/// Step 3 for a float scale (rules amax and 4over6): the scale code of block b, whose elements are `members`
/// (needed by rules that compare candidates; empty otherwise).
std::uint32_t float_block_scale(const Run& r, std::size_t b, const std::vector<std::size_t>& members);

/// Step 5 for a float scale s: the code of element i, its dequantized value in *value.
CastResult float_scale_element(const Run& r, std::size_t i, double s, double* value);

}  // namespace mxlab::quantize_detail
