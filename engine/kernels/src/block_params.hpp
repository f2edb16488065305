// The numbers a block format reduces to for the SIMD block kernels (block_kernels-inl.h), the bit writer of
// the packed form, and the exact accumulator of the fused metrics. Plain data, no Highway types.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "mxlab/core/exact_sum.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::kernel_detail {

/// The element cast of x / 2^X in integer arithmetic on the float32 bits of x (the grid cast of
/// cast_kernels-inl.h, with X subtracted from the exponent so no quotient is ever rounded). For a finite
/// nonzero x with significand sig in [2^23, 2^24) and exponent e - X:
///   ec = min(e - X, exponent_clamp); qe = max(ec - quantum_drop, quantum_min)   (grid quantum 2^qe)
///   truncated code magnitude tz = ((qe - quantum_min + field_offset) << mantissa_shift) + (sig >> (23 + qe - ec))
/// and the neighbour away from zero is tz + 1.
struct ElementParams {
  Rounding rounding = Rounding::NearestEven;
  std::int32_t random_bits = 32;
  std::int32_t exponent_clamp = 0;
  std::int32_t quantum_drop = 0;
  std::int32_t quantum_min = 0;
  std::int32_t field_offset = 0;
  std::int32_t mantissa_shift = 0;
  bool has_tiny = false;
  std::int32_t tiny_below_exponent = 0;
  std::uint32_t tiny_code = 0;
  std::uint32_t limit[2] = {0, 0};
  std::uint32_t flush_below = 1;
  std::uint32_t neg_xor = 0;
  std::uint32_t neg_add = 0;
  std::uint32_t neg_mask = 0xFFFFFFFFU;
  std::uint32_t neg_or = 0;
  std::uint32_t zero_code[2] = {0, 0};
  std::uint32_t overflow_code[2] = {0, 0};
  std::uint32_t inf_code[2] = {0, 0};
  std::uint32_t nan_code[2] = {0, 0};
  /// Whether an infinite input counts as an overflow (the reference's flag; not when Inf is kept).
  bool inf_overflows = false;
};

struct BlockParams {
  ElementParams cast;
  int bits = 8;                   ///< element code width
  std::int64_t block = 32;        ///< elements per block along the last axis (0: the whole axis)
  int x_min = -127, x_max = 127;  ///< scale exponent range
  std::array<std::uint8_t, 256> scale_code{};  ///< scale code of 2^X at index X - x_min
  std::array<float, 256> scale_value{};        ///< decoded scale of each scale code (NaN for NaN)
  std::array<double, 256> scale_value_d{};
  bool scale_has_nan = true;
  std::uint8_t scale_nan_code = 0xFF;
  std::uint8_t nan_block_code = 0;  ///< element code under a NaN scale
  SpecialsPolicy specials = SpecialsPolicy::BlockNan;
  bool element_has_inf = false;
  int zero_block_exponent = -127;  ///< X of an all-zero block, clamped
  ScaleRule rule = ScaleRule::Floor;
  ClampSite clamp = ClampSite::Exponent;
  int emax = 0;
  std::shared_ptr<const BlockFormat> owner;  ///< keeps element and options alive
  const Format* element = nullptr;           ///< for the rules computed by mxlab::scale_exponent
  const QuantOptions* options = nullptr;
  std::array<float, 256> decode_f32{};   ///< value of each element code (NaN codes NaN)
  std::array<double, 256> decode_f64{};
  bool stochastic = false;
  std::uint64_t seed_key = 0;  ///< splitmix64(seed)
  bool low_first = true;
  bool remap = false;                     ///< sign-magnitude integers: codes pass through code_map
  std::array<std::uint8_t, 256> code_map{};
  std::array<std::uint8_t, 256> code_unmap{};  ///< inverse of code_map
};

/// Packs a contiguous run of element codes as pack_codes does, starting at any bit of the output. Bytes
/// shared with a neighbouring run (a partial first or last byte) are not written but kept in `edge`, to be
/// OR-ed in after all runs finish; every other byte is written whole.
class PackWriter {
 public:
  PackWriter(std::uint8_t* out, std::size_t start_bit, int bits, bool low_first)
      : out_(out), pos_(start_bit / 8), nbits_(static_cast<int>(start_bit % 8)), bits_(bits), low_first_(low_first),
        head_pending_(start_bit % 8 != 0) {}

  void write(const std::uint8_t* codes, std::size_t n) {
    std::size_t i = 0;
    if (nbits_ == 0 && bits_ == 8) {
      std::memcpy(out_ + pos_, codes, n);
      pos_ += n;
      return;
    }
    if (nbits_ == 0 && bits_ == 4) {
      std::uint8_t* o = out_ + pos_;
      const std::size_t pairs = n / 2;
      if (low_first_) {
        for (std::size_t k = 0; k < pairs; ++k)
          o[k] = static_cast<std::uint8_t>((codes[2 * k] & 0xFU) | ((codes[2 * k + 1] & 0xFU) << 4));
      } else {
        for (std::size_t k = 0; k < pairs; ++k)
          o[k] = static_cast<std::uint8_t>(((codes[2 * k] & 0xFU) << 4) | (codes[2 * k + 1] & 0xFU));
      }
      pos_ += pairs;
      i = 2 * pairs;
    }
    const std::uint64_t mask = (std::uint64_t{1} << bits_) - 1;
    for (; i < n; ++i) {
      const std::uint64_t c = codes[i] & mask;
      if (low_first_) {
        acc_ |= c << nbits_;
        nbits_ += bits_;
        while (nbits_ >= 8) {
          emit(static_cast<std::uint8_t>(acc_));
          acc_ >>= 8;
          nbits_ -= 8;
        }
      } else {
        acc_ = (acc_ << bits_) | c;
        nbits_ += bits_;
        while (nbits_ >= 8) {
          emit(static_cast<std::uint8_t>(acc_ >> (nbits_ - 8)));
          nbits_ -= 8;
        }
        acc_ &= (std::uint64_t{1} << nbits_) - 1;
      }
    }
  }

  /// Ends the run: a partial last byte goes to `edge`.
  void finish() {
    if (nbits_ > 0) {
      const auto b = low_first_ ? static_cast<std::uint8_t>(acc_) : static_cast<std::uint8_t>(acc_ << (8 - nbits_));
      edge.push_back({pos_, b});
      nbits_ = 0;
    }
  }

  struct Edge {
    std::size_t index;
    std::uint8_t bits;
  };
  std::vector<Edge> edge;

 private:
  void emit(std::uint8_t b) {
    if (head_pending_) {
      edge.push_back({pos_, b});
      head_pending_ = false;
    } else {
      out_[pos_] = b;
    }
    ++pos_;
  }

  std::uint8_t* out_;
  std::size_t pos_;
  int nbits_;
  int bits_;
  bool low_first_;
  bool head_pending_;
  std::uint64_t acc_ = 0;
};

/// Exact sum of doubles in a fixed-point accumulator over the whole double range (32-bit digits in signed
/// 64-bit limbs, carries deferred), read from the bit pattern without frexp. Converted exactly into an
/// ExactSum at the end.
class FastExactSum {
 public:
  void add(double x) {
    const auto u = std::bit_cast<std::uint64_t>(x);
    const auto biased = static_cast<int>((u >> 52) & 0x7FF);
    std::uint64_t m = u & ((std::uint64_t{1} << 52) - 1);
    if (biased != 0) m |= std::uint64_t{1} << 52;
    if (m == 0) return;
    const int pos = (biased == 0 ? 1 : biased) - 1;  // bit 0 of m weighs 2^(pos - 1074)
    const int limb = pos >> 5;
    const int shift = pos & 31;
    const std::uint64_t low = m << shift;
    const std::uint64_t high = shift == 0 ? 0 : m >> (64 - shift);
    const bool neg = (u >> 63) != 0;
    auto* l = limbs_.data() + limb;
    if (neg) {
      l[0] -= static_cast<std::int64_t>(low & 0xFFFFFFFFU);
      l[1] -= static_cast<std::int64_t>(low >> 32);
      l[2] -= static_cast<std::int64_t>(high);
    } else {
      l[0] += static_cast<std::int64_t>(low & 0xFFFFFFFFU);
      l[1] += static_cast<std::int64_t>(low >> 32);
      l[2] += static_cast<std::int64_t>(high);
    }
    if (++pending_ >= (1 << 24)) normalize();
  }

  /// Adds the exact value into s.
  void add_to(ExactSum& s) const {
    for (std::size_t i = 0; i < limbs_.size(); ++i) {
      const std::int64_t v = limbs_[i];
      if (v == 0) continue;
      // A limb is below 2^63 in magnitude: its two 32-bit halves are exact doubles.
      const std::int64_t hi = v >> 32;
      const std::int64_t lo = v - hi * (std::int64_t{1} << 32);
      const int e = static_cast<int>(32 * i) - 1074;
      s.add_scaled(static_cast<double>(lo), e);
      s.add_scaled(static_cast<double>(hi), e + 32);
    }
  }

 private:
  void normalize() {
    std::int64_t carry = 0;
    for (auto& l : limbs_) {
      const std::int64_t v = l + carry;
      carry = v >> 32;
      l = v - carry * (std::int64_t{1} << 32);
    }
    limbs_.back() += carry * (std::int64_t{1} << 32);
    pending_ = 0;
  }
  // Positions 0 .. 2047 + 53 bits: 68 limbs (the top limbs keep the carries).
  std::array<std::int64_t, 70> limbs_{};
  int pending_ = 0;
};

/// Per-thread metric totals (BlockMetrics with fast accumulators).
struct MetricsAcc {
  std::int64_t count = 0, nonzero_inputs = 0, underflows = 0, saturations = 0, nan_outputs = 0;
  FastExactSum sse, signal;
  ExactSum rare;  ///< the cross terms of errors that are not exact doubles (rounding far from x)
  double max_abs_error = 0;
};

/// What one kernel call computes.
enum class BlockOutput : std::uint8_t { Fake = 1, Packed = 2, Amax = 4, Metrics = 8 };

/// Per-call arguments: blocks [b0, b1) of a row-major tensor whose rows have `row` elements.
struct BlockCall {
  const float* x = nullptr;
  std::int64_t row = 0;
  std::int64_t block = 0;  ///< elements per block
  std::int64_t blocks_per_row = 0;
  std::int64_t b0 = 0, b1 = 0;
  unsigned outputs = 0;
  float* fake = nullptr;
  PackWriter* writer = nullptr;
  std::uint8_t* scales = nullptr;
  float* amax = nullptr;
  MetricsAcc* metrics = nullptr;
};

struct DequantCall {
  const std::uint8_t* elements = nullptr;
  std::size_t element_bytes = 0;
  const std::uint8_t* scales = nullptr;
  float* out = nullptr;
  std::int64_t row = 0, block = 0, blocks_per_row = 0;
  std::int64_t b0 = 0, b1 = 0;
};

/// Dispatch entry points (block_kernel.cpp).
void block_dispatch(const BlockParams& p, const BlockCall& call);
void dequant_dispatch(const BlockParams& p, const DequantCall& call);

}  // namespace mxlab::kernel_detail
