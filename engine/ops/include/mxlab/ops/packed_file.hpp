// Packed-tensor files as `mxlab quantize --packed` writes them: BASE.json (format, shape, block grid),
// BASE.elements.npy, BASE.scales.npy, BASE.tensor_scale.npy and BASE.subtiles.npy (uint8 arrays). Reading
// checks the metadata against the block format and every array's length against what the grid needs
// before it builds the packed tensor, so a hostile file is an error naming the file, never a crash.
#pragma once

#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/pack.hpp"

namespace mxlab::ops {

/// The bytes of the files of one packed tensor (an array absent from the set is empty).
struct PackedFileBytes {
  std::string json;
  std::string elements;
  std::string scales;
  std::string tensor_scale;
  std::string subtiles;
};

/// Parses the packed files of `f` held in memory; `base` stands for the base name in messages.
Result<PackedTensor> parse_packed(const BlockFormat& f, const PackedFileBytes& files, std::string_view base);

/// Reads BASE.json and the arrays it needs, checked as parse_packed checks them.
Result<PackedTensor> read_packed(const BlockFormat& f, const std::string& base);

}  // namespace mxlab::ops
