// Seeded, counter-based random bits: the same (seed, index) gives the same bits on every thread,
// SIMD lane and machine, so stochastic rounding is reproducible and independent of work split.
#pragma once

#include <cstdint>

namespace mxlab {

/// SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// 32-bit integer hash ("lowbias32", C. Wellons): cheap in 32-bit SIMD lanes.
constexpr std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352DU;
  x ^= x >> 15;
  x *= 0x846CA68BU;
  x ^= x >> 16;
  return x;
}

/// The 32 random bits for element `index` of a stream with this seed.
/// Definition: k = splitmix64(seed); r = mix32(mix32(lo32(index) ^ lo32(k)) ^ hi32(k) ^ hi32(index) * 0x9E3779B9).
constexpr std::uint32_t stochastic_bits(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t k = splitmix64(seed);
  const auto lo = static_cast<std::uint32_t>(index);
  const auto hi = static_cast<std::uint32_t>(index >> 32);
  return mix32(mix32(lo ^ static_cast<std::uint32_t>(k)) ^ static_cast<std::uint32_t>(k >> 32) ^
               (hi * 0x9E3779B9U));
}

/// A small seeded generator (SplitMix64 stream) for test inputs and generated tensors.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next_u64() {
    state_ += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint32_t next_u32() { return static_cast<std::uint32_t>(next_u64() >> 32); }
  /// Uniform double in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

}  // namespace mxlab
