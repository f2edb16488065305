// The reference's per-block plan under a power-of-two scale rule (block_plan.cpp; pow2_block_plan and
// pow2_element_cast are declared in mxlab/quantize/quantize.hpp). Internal to engine/quantize.
#pragma once

#include "mxlab/quantize/block_format.hpp"

namespace mxlab::quantize_detail {

/// Whether a block with NaN (nan) or Inf (inf) is all NaN under the block NaN policies.
bool block_is_nan(const BlockFormat& f, bool nan, bool inf);

}  // namespace mxlab::quantize_detail
