// The nearest-even fast path of a plain element cast, as fake values under a factor (CastKernel::fake_scaled):
// the block kernels' one float32 addition per element (BlockParams::FastRne, block_rne-inl.h).
#pragma once

#include <cstddef>

#include "block_params.hpp"

namespace mxlab::kernel_detail {

struct ElementFake {
  BlockParams::FastRne fast;
};

/// The fast path's constants of an element cast (block_params.cpp), off where the format or options do not
/// allow it.
BlockParams::FastRne element_fast_rne(const Format& f, const CastOptions& o, const CastParams& c);

/// out[i] = fl32(value(cast(in[i])) * factor) for i < n, on the best target the CPU supports: true, or false
/// (out unspecified) when an input is NaN or Inf or the floating-point environment is not the default one.
bool element_fake_dispatch(const ElementFake& p, const float* in, std::size_t n, float factor, float* out);

}  // namespace mxlab::kernel_detail
