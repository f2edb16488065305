// How blocks lie over a tensor (block_layout.cpp; BlockIndexer and apply_nm_sparsity are declared in
// mxlab/quantize/quantize.hpp). Internal to engine/quantize.
#pragma once

#include "mxlab/quantize/block_format.hpp"

namespace mxlab::quantize_detail {

/// Whether a tile of the layout has subtiles (shared microexponents).
bool has_subtiles(const ScaleLayout& l);

}  // namespace mxlab::quantize_detail
