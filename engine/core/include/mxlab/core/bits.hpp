// Bit helpers: exact powers of two and bit casts between floating-point types and integers.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <string>

namespace mxlab {

/// 2^e as a double, exact for -1074 <= e <= 1023; constexpr (std::ldexp is not, before C++23).
constexpr double pow2(int e) {
  if (e > 1023) return std::numeric_limits<double>::infinity();
  if (e < -1074) return 0.0;
  if (e >= -1022) {
    return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
  }
  return std::bit_cast<double>(std::uint64_t{1} << (e + 1074));
}

/// floor(log2(|x|)) for finite nonzero x, exact also for subnormal x.
constexpr int floor_log2(double x) {
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(x) & ~(std::uint64_t{1} << 63);
  const int biased = static_cast<int>(bits >> 52);
  if (biased != 0) return biased - 1023;
  const std::uint64_t mantissa = bits & ((std::uint64_t{1} << 52) - 1);
  return -1074 + (63 - std::countl_zero(mantissa));
}

/// The bits of a float.
inline std::uint32_t float_bits(float f) { return std::bit_cast<std::uint32_t>(f); }
/// The float with these bits.
inline float bits_float(std::uint32_t u) { return std::bit_cast<float>(u); }
/// The bits of a double.
inline std::uint64_t double_bits(double d) { return std::bit_cast<std::uint64_t>(d); }

/// Exact hexadecimal floating-point text of a double ("0x1.8p+3", "-0x0p+0", "inf", "nan").
std::string hex_double(double x);

/// Shortest text that round-trips: "%.17g" with "nan", "inf", "-inf".
std::string g17(double x);

}  // namespace mxlab
