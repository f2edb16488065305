// Packed-tensor files as `mxlab quantize --packed` writes them: BASE.json (format, shape, block grid, and
// how the codes are laid out), BASE.elements.npy, BASE.scales.npy, BASE.tensor_scale.npy and
// BASE.subtiles.npy (uint8 arrays). Writing and reading live here together so that every layout the
// writer can produce reads back bit for bit. Reading checks the metadata against the block format (every
// key known, every value one the writer produces) and every array's length against what the grid needs
// before it builds the packed tensor, so a hostile file is an error naming the file, never a crash.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

/// Where BASE.scales.npy keeps the block scales.
enum class PackedScaleLayout {
  Blocks,  ///< the block grid, row-major, each scale code little-endian in ceil(bits / 8) bytes
  Cublas,  ///< NVFP4's cuBLAS 128x4 swizzle of a 2-D grid of one-byte scales, zero-padded to whole tiles
};

/// The files of `p` (packed with `f`): the metadata records the element and scale formats, the grids, the
/// scale layout and the packing options (nibble order, integer encoding, block axis, subtile bits);
/// `provenance` is a one-line provenance record. The cuBLAS layout needs one-byte scales over a 2-D grid.
Result<PackedFileBytes> packed_file_bytes(const BlockFormat& f, const PackedTensor& p, PackedScaleLayout layout,
                                          std::string_view provenance);

/// A packed tensor read back, and the block format its codes decode in: the caller's format with the packing
/// options the metadata records (nibble order, integer encoding, block axis, subtile bits).
struct PackedFile {
  BlockFormat format;
  PackedTensor tensor;  ///< scales in the block layout, whatever layout the file holds
};

/// The packing options of `f` as (option name, value) pairs: nibble-order, int-encoding, block-axis (counted
/// from 0 on a tensor of `rank` axes when rank > 0) and subtile-bits.
std::vector<std::pair<std::string, std::string>> describe_packing(const BlockFormat& f, std::size_t rank = 0);

/// Parses the packed files of `f` held in memory; `base` stands for the base name in messages.
Result<PackedFile> parse_packed(const BlockFormat& f, const PackedFileBytes& files, std::string_view base);

/// Reads BASE.json and the arrays it needs, checked as parse_packed checks them.
Result<PackedFile> read_packed(const BlockFormat& f, const std::string& base);

}  // namespace mxlab::ops
