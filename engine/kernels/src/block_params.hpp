// The numbers a block format reduces to for the SIMD block kernels (block_*-inl.h, docs/kernels.md), the bit writer of
// the packed form, and the exact accumulator of the fused metrics. Plain data, no Highway types.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "mxlab/core/ceil_div.hpp"
#include "mxlab/core/exact_sum.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"
#include "kernel_params.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab::kernel_detail {

struct BlockParams {
  CastParams cast;  ///< the element cast (kernel_params.hpp), of x / 2^X for a scale 2^X
  int bits = 8;                   ///< element code width
  std::int64_t block = 32;        ///< elements per block along the last axis (0: the whole axis)
  int x_min = -127, x_max = 127;  ///< scale exponent range
  /// Power-of-two scales 2^X, at index X - x_min (a float32 scale format spans 277 of them): the scale code,
  /// the value as float32 and as double, and 2^-X as float32.
  static constexpr std::size_t kPow2Span = 512;
  std::array<std::uint32_t, kPow2Span> scale_code{};
  std::array<float, kPow2Span> pow2_value{};
  std::array<double, kPow2Span> pow2_value_d{};
  std::array<float, kPow2Span> scale_inverse{};
  /// Scale codes of at most 8 bits: the decoded value of every code (NaN past the format's codes). Wider ones
  /// (float32, bfloat16, float16 scales) are decoded by the format itself (scale_of).
  std::array<float, 256> scale_value{};
  std::array<double, 256> scale_value_d{};
  bool wide_scale = false;
  int scale_bytes = 1;  ///< bytes of one packed scale code, little-endian (mxlab::pack)
  const Format* scale_format = nullptr;
  bool scale_has_nan = true;
  std::uint32_t scale_nan_code = 0xFF;
  /// Float scales whose quotients' doubles may fall within the reference's adjustment window of a rounding
  /// boundary without being on it: the lanes near a boundary are cast by the reference's cast_quotient
  /// (block_quotient-inl.h quotient_codes64). A boundary b times d = s * g is an integer of at most
  /// bits(b) + bits(s) + bits(g) significant bits; up to 48 of them, a float32 x that is not b * d lies more
  /// than 2^-48 of b away, outside twice the window (4 ulp). Elements: bits(b) <= element bits + 1; scales
  /// (amax / (max * g)): bits(b) = scale significand + 1, bits(max) <= 8.
  bool check_quotients = false;
  bool check_scale_quotients = false;
  /// The float32 input rounding of float-scale quotients (float_peer): rounding the double x / (s * g) to
  /// float32 is the exact quotient's rounding unless the double lands on a float32 midpoint M that the exact
  /// quotient is not: |x / d - M| >= 2^mu / (S G) for integer significands S, G of s, g, which is at least half
  /// a double ulp of M (2^(mu - 29)) when S G <= 2^29, i.e. bits(s) + bits(g) <= 29.
  bool check_f32_quotients = false;
  /// Float scales under deterministic rounding with element values in [2^-24, 2^24]: element quotients first
  /// in float32 lanes (block_float_scale-inl.h float_scale_elements), for element and scale significands of at
  /// most 24 bits together (fast32_short_scales) or blocks under g = 1.
  bool fast32 = false;
  bool fast32_short_scales = false;

  double scale_of(std::uint32_t code) const {
    return wide_scale ? scale_format->decode(code) : scale_value_d[code & 0xFFU];
  }
  std::uint32_t nan_block_code = 0;  ///< element code under a NaN scale
  SpecialsPolicy specials = SpecialsPolicy::BlockNan;
  bool element_has_inf = false;
  int zero_block_exponent = -127;  ///< X of an all-zero block, clamped
  ScaleRule rule = ScaleRule::Floor;
  ClampSite clamp = ClampSite::Exponent;
  int emax = 0;
  /// Nearest-even fast path for blocks without NaN or Inf (block_pow2-inl.h fast_rne_lanes): the quotient
  /// x * 2^-X is formed in float32 (exact unless below 2^-126, where it rounds to zero anyway) and rounded
  /// to the element grid by adding and subtracting 2^(quantum + 23). For signed elements with a zero and
  /// sign-symmetric limits and overflow codes, under the default floating-point environment (checked on each
  /// call): float elements with subnormals, a sign bit and a negative zero (FastKind::Float); those whose
  /// exponent field 0 is read again as a finer float, as MX-SAFE (FastKind::Split: below 2^split_exponent the
  /// second reading's grid); two's complement integers without a second zero, as MXINT8 (FastKind::Integer:
  /// one quantum 2^-frac_bits, the float grid of one binade with mantissa_bits = exponent_clamp + frac_bits).
  enum class FastKind : std::uint8_t { Float, Split, Integer };
  struct FastRne {
    bool on = false;
    FastKind kind = FastKind::Float;
    std::int32_t mantissa_bits = 0;
    std::int32_t biased_clamp = 0;     ///< exponent_clamp + 127
    std::int32_t biased_qmin = 0;      ///< quantum_min + 127 (Split: of the first reading's binades)
    std::uint32_t limit = 0;           ///< largest finite code magnitude
    float limit_value = 0;             ///< its value (decode_f32)
    std::uint32_t overflow_code = 0;   ///< magnitude code of an overflow
    std::uint32_t sign_bit = 0;        ///< the element's sign bit (Integer: the code bits, negatives as -k)
    std::int32_t sign_shift = 0;       ///< float32 sign bit >> sign_shift lands on sign_bit
    float overflow_pos = 0;            ///< the value of the overflow code (decode_f32), positive
    float overflow_neg = 0;            ///< and with the sign bit
    std::int32_t split_biased = 0;     ///< Split: split_exponent + 127, the first reading's lowest binade
    std::int32_t low_mantissa_bits = 0;  ///< Split: the second reading's mantissa bits
    std::int32_t low_biased_qmin = 0;    ///< Split: its smallest quantum + 127
  } fast;
  /// Rule amax: every block scale is amax / (scale_target * g) rounded in the scale format (float scales,
  /// as NVFP4's E4M3), elements are casts of the exact quotients x / (s * g) in double lanes.
  bool float_scales = false;
  bool two_level = false;  ///< a tensor scale g over the block scales
  double scale_target = 0;
  bool nvfp4_peer = false;         ///< Nvfp4Arith Te or ModelOpt: every step in float32 (peer_float_elements)
  /// InputPrecision::Float32 without the NVFP4 arithmetic: elements cast (by the peer's element step) from
  /// fl32(x / (s * g)), the exact quotient rounded to float32 (f32 with f32_opts: nearest-even, overflow inf).
  bool float_peer = false;
  const Format* f32 = nullptr;
  CastOptions f32_opts;
  CastParams f32_cast;
  bool four_over_six = false;      ///< rule 4over6: also try amax mapped to scale_target_alt, keep the lower SSE
  double scale_target_alt = 0;     ///< 2/3 of the element's largest value, as the reference computes it
  CastOptions scale_opts;    ///< resolved options of the scale cast
  CastParams scale_cast;     ///< the scale cast (of amax / (scale_target * g))
  std::uint32_t scale_one_code = 0;        ///< scale code of 1 (zero-block rule one)
  double min_block_scale = 0;              ///< QuantOptions::min_block_scale
  std::uint32_t min_block_scale_code = 0;  ///< its scale code
  /// The general power-of-two path (block_plan-inl.h plan_loop), for what the plain path above does not
  /// model: the peers' float32 arithmetic, the NaN/Inf policies that feed Inf into the scale or multiply
  /// blocks by special factors, and subtiles. Each block's decision is mxlab::pow2_block_plan's.
  bool planned = false;
  /// Integer elements under ZeroSign::MinusZeroPlus on the planned path without subtiles: plan_loop gives
  /// the fake-quantized zeros of negative inputs their sign (mxlab::negative_zero_value) itself.
  bool plan_negative_zeros = false;
  bool peer = false;      ///< InputPrecision::Float32: elements are cast from fl32(x / 2^X)
  bool add_half = false;  ///< NearestArith::Float32AddHalf under a nearest rounding mode
  bool half_float = false;        ///< add-half: a float element (else an integer one, exponent 0)
  std::int32_t half_mbits = 0;    ///< add-half: mantissa (float) or fraction (integer) bits
  std::int32_t half_min_exp = 0;  ///< add-half: exponent of the element's smallest normal
  ZeroSign zero_sign = ZeroSign::Keep;
  bool has_negative_zero = false;
  std::uint32_t zero_code_pos = 0, zero_code_neg = 0;
  std::int64_t subtile = 0;  ///< elements per subtile (0: none)
  int subtile_dmax = 0;      ///< largest microexponent offset, 2^subtile_bits - 1
  /// Codebook elements (NF4, e2m1_codebook): the reference's table cast (cast_table) in double lanes. The
  /// sorted values and their codes (the order of Format::sorted_values), the midpoint below each entry
  /// (index i: between entries i - 1 and i; unused at 0 and n), the zero codes.
  bool codebook = false;
  std::vector<double> cb_values;
  std::vector<std::int64_t> cb_codes;
  std::vector<double> cb_mids;
  std::int64_t cb_zero_pos = 0, cb_zero_neg = 0;
  CastOptions element_opts;  ///< resolved options of the element cast
  std::shared_ptr<const BlockFormat> owner;  ///< keeps element and options alive
  const Format* element = nullptr;           ///< for the rules computed by mxlab::scale_exponent
  const QuantOptions* options = nullptr;
  /// Value of each element code (NaN codes NaN): max(256, 2^bits) entries, so that any byte indexes them.
  std::vector<float> decode_f32;
  std::vector<double> decode_f64;
  bool wide_codes = false;  ///< elements of 9 to 16 bits: codes are buffered as uint16 (CodeSink, dequantization)
  bool stochastic = false;
  std::uint64_t seed_key = 0;  ///< splitmix64(seed)
  bool low_first = true;
  bool remap = false;                     ///< sign-magnitude integers: codes pass through code_map
  std::vector<std::uint16_t> code_map;
  std::vector<std::uint16_t> code_unmap;  ///< inverse of code_map
};

/// Scale code of block b in a packed scale array (BlockParams::scale_bytes bytes each, little-endian).
inline std::uint32_t read_scale(const BlockParams& p, const std::uint8_t* scales, std::int64_t b) {
  if (p.scale_bytes == 1) return scales[b];
  const std::uint8_t* s = scales + b * p.scale_bytes;
  std::uint32_t code = 0;
  for (int i = 0; i < p.scale_bytes; ++i) code |= static_cast<std::uint32_t>(s[i]) << (8 * i);
  return code;
}

inline void write_scale(const BlockParams& p, std::uint8_t* scales, std::int64_t b, std::uint32_t code) {
  if (p.scale_bytes == 1) {
    scales[b] = static_cast<std::uint8_t>(code);
    return;
  }
  std::uint8_t* s = scales + b * p.scale_bytes;
  for (int i = 0; i < p.scale_bytes; ++i) s[i] = static_cast<std::uint8_t>(code >> (8 * i));
}

/// Packs a contiguous run of element codes as pack_codes does, starting at any bit of the output. Bytes
/// shared with a neighbouring run (a partial first or last byte) are not written but kept in `edge`, to be
/// OR-ed in after all runs finish; every other byte is written whole.
class PackWriter {
 public:
  PackWriter(std::uint8_t* out, std::size_t start_bit, int bits, bool low_first)
      : out_(out), pos_(start_bit / 8), nbits_(static_cast<int>(start_bit % 8)), bits_(bits), low_first_(low_first),
        head_pending_(start_bit % 8 != 0) {}

  template <class Code>
  void write(const Code* codes, std::size_t n) {
    std::size_t i = 0;
    if (sizeof(Code) == 1 && nbits_ == 0 && bits_ == 8) {
      std::memcpy(out_ + pos_, codes, n);
      pos_ += n;
      return;
    }
    if (sizeof(Code) == 1 && nbits_ == 0 && bits_ == 4) {
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

  /// Whether the next code starts on a byte boundary (write_bytes may be used).
  bool aligned() const { return nbits_ == 0; }
  /// Appends whole bytes of already packed codes at a byte boundary.
  void write_bytes(const std::uint8_t* bytes, std::size_t n) {
    std::memcpy(out_ + pos_, bytes, n);
    pos_ += n;
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
    // Without a branch on the sign (signed errors have random signs): v -> (v ^ s) - s negates v when s = -1.
    const auto s = -static_cast<std::int64_t>(u >> 63);
    auto* l = limbs_.data() + limb;
    l[0] += (static_cast<std::int64_t>(low & 0xFFFFFFFFU) ^ s) - s;
    l[1] += (static_cast<std::int64_t>(low >> 32) ^ s) - s;
    l[2] += (static_cast<std::int64_t>(high) ^ s) - s;
    if (++pending_ >= (1 << 24)) normalize();
  }

  /// The sign of the exact value: -1, 0 or 1.
  int sign() {
    normalize();
    // Every limb but the top one now lies in [0, 2^32): the most significant nonzero limb decides.
    for (std::size_t i = limbs_.size(); i-- > 0;) {
      if (limbs_[i] != 0) return limbs_[i] < 0 ? -1 : 1;
    }
    return 0;
  }

  void reset() {
    limbs_.fill(0);
    pending_ = 0;
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

/// Per-thread metric totals (BlockMetrics with fast accumulators), on cache lines of their own: the
/// counters change with every element, and sharing a line with another thread's totals stalls both.
struct alignas(64) MetricsAcc {
  std::int64_t count = 0, nonzero_inputs = 0, underflows = 0, saturations = 0, nan_outputs = 0;
  FastExactSum sse, signal;
  FastExactSum error;  ///< the signed errors (bias)
  ExactSum rare;  ///< the cross terms of errors that are not exact doubles (rounding far from x)
  double max_abs_error = 0;
  double max_rel_error = 0;

  /// The vector path's running sums (block_metrics-inl.h), one slot per 32-bit lane of the widest target.
  static constexpr std::size_t kSlots = 16;
  /// Per slot a double sum and the double sum of its rounding errors, both kept by error-free additions;
  /// the rounding errors of the second sum go to the scalar accumulator. Their exact total, hi + lo over
  /// every slot, is the lanes' share of the sum.
  struct LaneSums {
    alignas(64) double hi[kSlots] = {};
    alignas(64) double lo[kSlots] = {};
  };
  LaneSums lane_sse, lane_signal, lane_error;
  alignas(64) double lane_max_abs[kSlots] = {};
  alignas(64) double lane_max_rel[kSlots] = {};
};

/// The element output of one kernel call (amax and metrics are optional on top of any).
enum class BlockOut : std::uint8_t { None, Fake, Packed };

/// Per-call arguments: blocks [b0, b1) of a row-major tensor whose rows have `row` elements.
struct BlockCall {
  InputKind input = InputKind::F32;
  const void* x = nullptr;  ///< float32, bfloat16 or float16 elements
  std::int64_t row = 0;
  std::int64_t block = 0;  ///< elements per block
  std::int64_t blocks_per_row = 0;
  std::int64_t b0 = 0, b1 = 0;
  BlockOut out = BlockOut::None;
  float* fake = nullptr;
  PackWriter* writer = nullptr;
  std::uint8_t* elements = nullptr;  ///< the packed output (8-bit codes are stored directly)
  std::uint8_t* scales = nullptr;
  float* amax = nullptr;               ///< per-block amax output, or null
  MetricsAcc* metrics = nullptr;       ///< fused metrics, or null
  /// Outputs far beyond the caches: full vectors bypass them (non-temporal stores), which saves reading
  /// every output line before it is written. Speed only; the bytes are the same.
  bool stream = false;
  /// How far ahead of a block its input is prefetched, in bytes (measured on 256 MiB with 2 threads: 2 KiB
  /// beat 0.5, 1, 4, 8, 16 and 32 KiB; without software prefetch the loops ran at 60%).
  std::size_t prefetch = 2048;
  double g = 1.0;                ///< the tensor scale of two-level formats
  float* tensor_amax = nullptr;  ///< if set, raised to the largest finite magnitude of the blocks read
  bool* tensor_nan = nullptr;    ///< if set, set when a block read holds NaN
  bool* tensor_inf = nullptr;    ///< if set, set when a block read holds Inf
  const Nvfp4PeerTensor* nvfp4 = nullptr;  ///< the NVFP4 peer arithmetic's tensor quantities
  bool any_nan = false;          ///< whether the tensor holds NaN (NaN/Inf policy tensor-nan)
  std::uint8_t* subtile_offsets = nullptr;  ///< packed output: one microexponent offset per subtile
  const void* metrics_x = nullptr;  ///< N:M sparsity: the unpruned input the metrics compare with (x is pruned)
  std::int64_t subtiles_per_row = 0;
};

/// Blocks down the columns of a row-major rows x cols float32 matrix (BlockKernel::fake_quantize_columns):
/// panels [p0, p1) of `block` rows each (the last one possibly shorter), fake values written in x's layout.
struct ColumnsCall {
  const float* x = nullptr;
  float* out = nullptr;
  std::int64_t rows = 0, cols = 0, block = 0;
  std::int64_t p0 = 0, p1 = 0;
  double g = 1.0;  ///< the tensor scale of two-level formats (float block scales)
  /// 2-D tiles: a block is `block` rows of tile_width neighbouring columns (the last tile of a row narrower).
  std::int64_t tile_width = 1;
  /// Panel i's rows (the last panel possibly shorter), its first input and its first output.
  std::size_t panel_rows(std::int64_t i) const { return static_cast<std::size_t>(std::min(block, rows - i * block)); }
  const float* panel_in(std::int64_t i) const { return x + static_cast<std::size_t>(i * block * cols); }
  float* panel_out(std::int64_t i) const { return out + static_cast<std::size_t>(i * block * cols); }
};

struct DequantCall {
  const std::uint8_t* elements = nullptr;
  std::size_t element_bytes = 0;
  const std::uint8_t* scales = nullptr;
  float* out = nullptr;
  std::int64_t row = 0, block = 0, blocks_per_row = 0;
  std::int64_t b0 = 0, b1 = 0;
  double g = 1.0;  ///< the tensor scale of two-level formats
  const std::uint8_t* subtile_offsets = nullptr;  ///< subtile formats: one offset per subtile
  std::int64_t subtiles_per_row = 0;
};

/// Walks the blocks b0, b0 + 1, ... of a row-major tensor whose rows of `row` elements hold blocks_per_row
/// blocks of `block` elements (the last one of a row possibly shorter), without a division per block.
class BlockCursor {
 public:
  BlockCursor(std::int64_t row, std::int64_t block, std::int64_t blocks_per_row, std::int64_t b0)
      : row_(row), block_(block), per_row_(blocks_per_row), r_(b0 / blocks_per_row), j_(b0 - r_ * blocks_per_row) {}
  /// The next block's first element and length.
  void next(std::size_t* start, std::size_t* len) {
    if (j_ == per_row_) {
      j_ = 0;
      ++r_;
    }
    *start = static_cast<std::size_t>(r_ * row_ + j_ * block_);
    *len = static_cast<std::size_t>(std::min(block_, row_ - j_ * block_));
    ++j_;
  }

 private:
  std::int64_t row_, block_, per_row_, r_, j_;
};

/// Dispatch entry points, one translation unit each (docs/kernels.md): power-of-two scales under the exact
/// rules, the general power-of-two path (BlockParams::planned), float and two-level scales, dequantization.
void pow2_dispatch(const BlockParams& p, const BlockCall& call);
void plan_dispatch(const BlockParams& p, const BlockCall& call);
void float_scale_dispatch(const BlockParams& p, const BlockCall& call);
void dequant_dispatch(const BlockParams& p, const DequantCall& call);
/// Blocks down columns (power-of-two scales, rule floor, nearest-even fast path: BlockKernel::columns_native).
void columns_dispatch(const BlockParams& p, const ColumnsCall& call);
/// Blocks down columns under float block scales (rule amax, the nearest-even fast path of fast_float_loop).
void float_columns_dispatch(const BlockParams& p, const ColumnsCall& call);

/// The kernel of p's path.
inline void block_dispatch(const BlockParams& p, const BlockCall& call) {
  if (p.float_scales) return float_scale_dispatch(p, call);
  if (p.planned) return plan_dispatch(p, call);
  pow2_dispatch(p, call);
}

}  // namespace mxlab::kernel_detail
