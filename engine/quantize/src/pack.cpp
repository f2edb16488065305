// Bit packing, packed tensors, and the swizzled NVFP4 scale layout.
#include "mxlab/quantize/pack.hpp"

#include "mxlab/core/ceil_div.hpp"

namespace mxlab {

std::vector<std::uint8_t> pack_codes(std::span<const std::uint32_t> codes, int bits, NibbleOrder order) {
  const std::size_t total_bits = codes.size() * static_cast<std::size_t>(bits);
  std::vector<std::uint8_t> out(ceil_div(total_bits, 8), 0);
  std::size_t k = 0;
  for (std::uint32_t c : codes) {
    for (int j = 0; j < bits; ++j, ++k) {
      // LowFirst writes bit j of the code at stream position k; HighFirst writes the MSB first.
      const int bit_of_code = order == NibbleOrder::LowFirst ? j : bits - 1 - j;
      if (((c >> bit_of_code) & 1U) == 0) continue;
      const auto pos = static_cast<int>(k % 8);
      out[k / 8] |= static_cast<std::uint8_t>(1U << (order == NibbleOrder::LowFirst ? pos : 7 - pos));
    }
  }
  return out;
}

std::vector<std::uint32_t> unpack_codes(std::span<const std::uint8_t> bytes, std::size_t count, int bits,
                                        NibbleOrder order) {
  std::vector<std::uint32_t> out(count, 0);
  std::size_t k = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t c = 0;
    for (int j = 0; j < bits; ++j, ++k) {
      const auto pos = static_cast<int>(k % 8);
      const unsigned bit = (bytes[k / 8] >> (order == NibbleOrder::LowFirst ? pos : 7 - pos)) & 1U;
      const int bit_of_code = order == NibbleOrder::LowFirst ? j : bits - 1 - j;
      c |= static_cast<std::uint32_t>(bit) << bit_of_code;
    }
    out[i] = c;
  }
  return out;
}

std::uint32_t to_sign_magnitude(std::uint32_t code, int bits) {
  const std::uint32_t sign = std::uint32_t{1} << (bits - 1);
  if ((code & sign) == 0) return code;
  const std::uint32_t mask = bits >= 32 ? 0xFFFFFFFFU : (std::uint32_t{1} << bits) - 1;
  const std::uint32_t magnitude = (~code + 1) & mask;  // |k|; the unused code -2^(bits-1) never occurs
  return sign | (magnitude & (sign - 1));
}

std::uint32_t from_sign_magnitude(std::uint32_t code, int bits) {
  const std::uint32_t sign = std::uint32_t{1} << (bits - 1);
  if ((code & sign) == 0) return code;
  const std::uint32_t mask = bits >= 32 ? 0xFFFFFFFFU : (std::uint32_t{1} << bits) - 1;
  const std::uint32_t magnitude = code & (sign - 1);
  return (~magnitude + 1) & mask;
}

namespace {
int storage_bytes(const Format& f) { return ceil_div(f.bits(), 8); }

void put_le(std::vector<std::uint8_t>& out, std::uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
std::uint32_t get_le(std::span<const std::uint8_t> in, std::size_t at, int bytes) {
  std::uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint32_t>(in[at + static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}
bool sign_magnitude(const BlockFormat& f) {
  return f.options.int_encoding == IntEncoding::SignMagnitude && f.element.kind() == FormatKind::Integer &&
         f.element.is_signed();
}
}  // namespace

PackedTensor pack(const BlockFormat& f, const QuantizedTensor& q) {
  PackedTensor p;
  p.shape = q.shape;
  std::vector<std::uint32_t> codes = q.codes;
  if (sign_magnitude(f))
    for (auto& c : codes) c = to_sign_magnitude(c, f.element.bits());
  p.elements = pack_codes(codes, f.element.bits(), f.options.nibble_order);
  p.scale_grid = q.block_grid;
  if (f.layout.scale) {
    const int sb = storage_bytes(*f.layout.scale);
    for (std::uint32_t c : q.scale_codes) put_le(p.scales, c, sb);
  }
  if (q.has_tensor_scale) put_le(p.tensor_scale, q.tensor_scale_code, storage_bytes(*f.layout.tensor_scale));
  p.subtile_grid = q.subtile_grid;
  for (std::uint32_t d : q.subtile_offsets) p.subtile_offsets.push_back(static_cast<std::uint8_t>(d));
  return p;
}

Result<QuantizedTensor> unpack(const BlockFormat& f, const PackedTensor& p) {
  QuantizedTensor q;
  q.shape = p.shape;
  std::int64_t n = 1;
  for (auto d : p.shape) n *= d;
  const int bits = f.element.bits();
  const auto count = static_cast<std::size_t>(n);
  if (p.elements.size() * 8 < count * static_cast<std::size_t>(bits))
    return make_error("packed elements: " + std::to_string(p.elements.size()) + " bytes cannot hold " +
                      std::to_string(count) + " codes of " + std::to_string(bits) + " bits");
  q.codes = unpack_codes(p.elements, count, bits, f.options.nibble_order);
  if (sign_magnitude(f))
    for (auto& c : q.codes) c = from_sign_magnitude(c, bits);
  q.block_grid = p.scale_grid;
  if (f.layout.scale) {
    const Format& sf = *f.layout.scale;
    const int sb = storage_bytes(sf);
    std::int64_t blocks = 1;
    for (auto g : p.scale_grid) blocks *= g;
    if (p.scales.size() != static_cast<std::size_t>(blocks * sb))
      return make_error("packed scales: expected " + std::to_string(blocks * sb) + " bytes, got " +
                        std::to_string(p.scales.size()));
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::uint32_t c = get_le(p.scales, static_cast<std::size_t>(b * sb), sb);
      q.scale_codes.push_back(c);
      q.scale_values.push_back(sf.decode(c));
    }
    q.shared_exponents.assign(static_cast<std::size_t>(blocks), QuantizedTensor::kNoExponent);
  }
  if (f.layout.tensor_scale) {
    if (p.tensor_scale.size() != static_cast<std::size_t>(storage_bytes(*f.layout.tensor_scale)))
      return make_error("packed tensor scale: wrong size");
    q.has_tensor_scale = true;
    q.tensor_scale_code = get_le(p.tensor_scale, 0, storage_bytes(*f.layout.tensor_scale));
    q.tensor_scale = f.layout.tensor_scale->decode(q.tensor_scale_code);
  }
  q.subtile_grid = p.subtile_grid;
  for (std::uint8_t d : p.subtile_offsets) q.subtile_offsets.push_back(d);
  q.values = dequantize(f, q);
  return q;
}

namespace {
/// Calls visit(row, col) for each position of the 128x4 swizzle in its order (seed 004), including the
/// padding positions outside the rows x cols matrix.
template <class Visit>
void for_each_swizzled(std::int64_t rows, std::int64_t cols, Visit visit) {
  for (std::int64_t row_start = 0; row_start < rows; row_start += 128)
    for (std::int64_t col_start = 0; col_start < cols; col_start += 4)
      for (std::int64_t s = 0; s < 32; ++s)
        for (std::int64_t r = 0; r < 128; r += 32)
          for (std::int64_t c = 0; c < 4; ++c) visit(row_start + s + r, col_start + c);
}
}  // namespace

std::vector<std::uint8_t> swizzle_scales_128x4(std::span<const std::uint8_t> scales, std::int64_t rows,
                                               std::int64_t cols, bool pad) {
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(rows * cols));
  for_each_swizzled(rows, cols, [&](std::int64_t row, std::int64_t col) {
    if (row < rows && col < cols) {
      out.push_back(scales[static_cast<std::size_t>(row * cols + col)]);
    } else if (pad) {
      out.push_back(0);
    }
  });
  return out;
}

std::vector<std::uint8_t> unswizzle_scales_128x4(std::span<const std::uint8_t> swizzled, std::int64_t rows, std::int64_t cols) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * cols));
  std::size_t k = 0;
  for_each_swizzled(rows, cols, [&](std::int64_t row, std::int64_t col) {
    if (row < rows && col < cols) out[static_cast<std::size_t>(row * cols + col)] = swizzled[k];
    ++k;
  });
  return out;
}

}  // namespace mxlab
