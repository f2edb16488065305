// Internal helpers for binary files: byte order, binary16/bfloat16 decoding and representability.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

namespace mxlab::io_detail {

/// Whether this machine stores multi-byte numbers least significant byte first.
inline constexpr bool kHostLittle = std::endian::native == std::endian::little;

/// Unsigned integer of `n` bytes (1, 2, 4 or 8) at p in the given byte order.
inline std::uint64_t load_uint(const unsigned char* p, std::size_t n, bool little) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t shift = 8 * (little ? i : n - 1 - i);
    v |= static_cast<std::uint64_t>(p[i]) << shift;
  }
  return v;
}

/// Stores the low `n` bytes of v at p, least significant first.
inline void store_le(unsigned char* p, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

/// binary16 bits to float32; exact (IEEE 754-2019 3.6: 1 sign, 5 exponent bits with bias 15, 10
/// mantissa bits). NaN payloads move to the top of the float32 mantissa.
inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1FU;
  const std::uint32_t man = h & 0x3FFU;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000U | (man << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24, exact in float32.
  const float mag = std::ldexp(static_cast<float>(man), -24);
  return sign ? -mag : mag;
}

/// bfloat16 bits to float32: the bits are the upper half of the float32.
inline float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

/// Whether f is a binary16 value (NaN and infinities count).
inline bool is_f16_value(float f) {
  if (!std::isfinite(f) || f == 0.0f) return true;
  const float a = std::fabs(f);
  if (a > 65504.0f) return false;
  int e = 0;
  (void)std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): unit exponent e - 1
  // Mantissa quantum: 2^(e-1-10) for normals (e-1 >= -14), 2^-24 for subnormals.
  const int quantum = (e - 1 >= -14) ? e - 1 - 10 : -24;
  const float scaled = std::ldexp(a, -quantum);
  return scaled == std::trunc(scaled);
}

/// Whether f is a bfloat16 value (the low 16 bits are zero; NaN counts).
inline bool is_bf16_value(float f) { return std::isnan(f) || (std::bit_cast<std::uint32_t>(f) & 0xFFFFU) == 0; }

/// Deflate expands at most 1032:1 (a 258-byte match costs at least 2 bits), so a gzip file of S bytes
/// decompresses to at most 1032 * S bytes.
inline constexpr std::uint64_t kDeflateMaxRatio = 1032;

/// A zero-element shape may name large dimensions beside its zero. Code that allocates per row or per
/// block of such a shape must stay bounded, so the product of those dimensions may exceed the elements
/// the file could hold by at most this many.
inline constexpr std::uint64_t kEmptyShapeSlack = std::uint64_t{1} << 20;

/// For a shape with a zero dimension: the product of its other dimensions (saturated at 2^64 - 1) if it
/// exceeds file_bytes / itemsize + kEmptyShapeSlack; 0 when the shape is acceptable.
inline std::uint64_t empty_shape_excess(std::span<const std::int64_t> shape, std::uint64_t itemsize,
                                        std::uint64_t file_bytes) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t others = 1;
  bool empty = false;
  for (std::int64_t d : shape) {
    const auto u = static_cast<std::uint64_t>(d);
    if (d <= 0) {
      empty = true;
      continue;
    }
    others = others > kMax / u ? kMax : others * u;
  }
  if (!empty) return 0;
  return others > file_bytes / itemsize + kEmptyShapeSlack ? others : 0;
}

}  // namespace mxlab::io_detail
