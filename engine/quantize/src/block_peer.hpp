// The reference's emulation of the peers' float32 arithmetic (block_peer.cpp; peer_element_cast and the nvfp4_peer_*
// steps are declared in mxlab/quantize/quantize.hpp). Internal to engine/quantize.
#pragma once

#include "mxlab/core/error.hpp"
#include "quantize_steps.hpp"

namespace mxlab::quantize_detail {

/// NVFP4 under a peer's float32 arithmetic (Nvfp4Arith::Te or ModelOpt): tensor scale, block scales and
/// elements exactly as the float32 expressions in docs/profiles.md, in this order of roundings. Steps 3 to 5
/// for a run whose block statistics are known.
Result<QuantizedTensor> quantize_nvfp4_peer(const Run& c, QuantizedTensor q);

}  // namespace mxlab::quantize_detail
