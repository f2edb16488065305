// Packed storage: element codes bit-packed at their width, scale codes in whole bytes, the tensor scale,
// and the swizzled NVFP4 scale layout cuBLAS / torch._scaled_mm expect. Layout in docs/quantization.md.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

/// Packs codes of `bits` bits (1..32) into bytes. LowFirst: a little-endian bit stream (element i's
/// bit j is stream bit i*bits+j; stream bit k is bit k%8 of byte k/8), so two FP4 codes share a byte
/// with element 2i in the low nibble. HighFirst: the big-endian stream (each code MSB first; stream
/// bit k is bit 7-k%8), so element 2i is the high nibble.
std::vector<std::uint8_t> pack_codes(std::span<const std::uint32_t> codes, int bits, NibbleOrder order);
/// Inverse of pack_codes.
std::vector<std::uint32_t> unpack_codes(std::span<const std::uint8_t> bytes, std::size_t count, int bits,
                                        NibbleOrder order);

/// Two's-complement code of an `bits`-bit integer to sign-magnitude and back (MX integers).
std::uint32_t to_sign_magnitude(std::uint32_t code, int bits);
std::uint32_t from_sign_magnitude(std::uint32_t code, int bits);

/// The packed form of a quantized tensor.
struct PackedTensor {
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> elements;      ///< pack_codes(element codes)
  std::vector<std::int64_t> scale_grid;    ///< blocks per axis
  std::vector<std::uint8_t> scales;        ///< each scale code little-endian in ceil(bits/8) bytes
  std::vector<std::uint8_t> tensor_scale;  ///< the tensor scale code, little-endian (empty if none)
  std::vector<std::int64_t> subtile_grid;  ///< subtiles per axis (empty without subtiles)
  std::vector<std::uint8_t> subtile_offsets;  ///< one microexponent offset per subtile, one byte each
};

PackedTensor pack(const BlockFormat& f, const QuantizedTensor& q);
/// Rebuilds codes and scales from the packed form; values are dequantized exactly.
Result<QuantizedTensor> unpack(const BlockFormat& f, const PackedTensor& p);

/// NVFP4 block-scale layout for cuBLAS and torch._scaled_mm (seed 004): a rows x cols matrix of
/// scale bytes is emitted in 128-row x 4-column tiles, inside each tile row s + 32 r (s = 0..31,
/// r = 0..3) for columns c = 0..3. With pad, the matrix is padded with zeros to whole tiles (the
/// layout cuBLAS reads); without, out-of-range positions are skipped (seed 004's loop).
std::vector<std::uint8_t> swizzle_scales_128x4(std::span<const std::uint8_t> scales, std::int64_t rows,
                                               std::int64_t cols, bool pad);
/// The inverse of swizzle_scales_128x4 with pad: the rows x cols matrix, row-major, from its padded swizzle
/// (which must hold ceil(rows/128)*128 * ceil(cols/4)*4 bytes).
std::vector<std::uint8_t> unswizzle_scales_128x4(std::span<const std::uint8_t> swizzled, std::int64_t rows, std::int64_t cols);

}  // namespace mxlab
