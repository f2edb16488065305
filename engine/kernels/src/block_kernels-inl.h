// Per-target SIMD code of the block kernels; block_kernel.cpp re-includes this file once per Highway target
// (foreach_target.h). The rules are those of the scalar reference mxlab::quantize (docs/quantization.md);
// block_params.hpp explains the reduction of a block format to BlockParams.

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_KERNELS_INL_H_
#undef MXLAB_KERNELS_BLOCK_KERNELS_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_KERNELS_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "block_params.hpp"
#include "grid_cast-inl.h"
#include "mxlab/core/random.hpp"
#include "mxlab/quantize/quantize.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace block {

/// Codes buffered before they are bit-packed.
constexpr std::size_t kChunk = 4096;

/// load_input for an input kind known at run time (one predictable branch per vector).
template <class D = DU>
HWY_INLINE hn::Vec<D> load_any(InputKind kind, const void* in, std::size_t i, D d = D()) {
  switch (kind) {
    case InputKind::F32: return load_input<InputKind::F32>(in, i, d);
    case InputKind::BF16: return load_input<InputKind::BF16>(in, i, d);
    case InputKind::F16: break;
  }
  return load_input<InputKind::F16>(in, i, d);
}

/// Elements [k, k + count) of xb as float32 bits in the lanes of d (count <= Lanes(d)); a partial vector is
/// read through the zero-padded buffer buf of kMaxLanes * 4 bytes.
template <class D = DU>
HWY_INLINE hn::Vec<D> load_part(InputKind kind, const std::uint8_t* xb, std::size_t k, std::size_t count,
                                std::uint8_t* buf, D d = D()) {
  if (count == hn::Lanes(d)) return load_any(kind, xb, k, d);
  const std::size_t bytes = kind == InputKind::F32 ? 4 : 2;
  std::memset(buf, 0, kMaxLanes * 4);
  std::memcpy(buf, xb + k * bytes, count * bytes);
  return load_any(kind, buf, 0, d);
}

/// Doubles rounded to float32 as static_cast<float> rounds them (nearest even, +-inf past the float32 range),
/// stored to out. Highway's DemoteTo does that on the SIMD targets but saturates on the scalar one.
HWY_INLINE void store_as_float(VF64 v, float* out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = static_cast<float>(hn::GetLane(v));
#else
  hn::StoreU(hn::DemoteTo(DFh(), v), DFh(), out);
#endif
}

/// floor(log2 a) of a positive float32 given by its bits, subnormals included.
HWY_INLINE int floor_log2_bits(std::uint32_t a) {
  const auto biased = static_cast<int>(a >> 23);
  if (biased != 0) return biased - 127;
  return (31 - std::countl_zero(a)) - 149;
}

/// The clamped scale exponent of a block with finite amax bits a (docs/quantization.md, scale selection).
HWY_INLINE int block_exponent(const BlockParams& p, std::uint32_t a) {
  if (a == 0) return p.zero_block_exponent;
  int x = 0;
  if (p.rule == ScaleRule::Floor) {
    int e = floor_log2_bits(a);
    if (p.clamp == ClampSite::Amax) e = std::clamp(e, -126, 127);
    x = e - p.emax;
  } else {
    // One call per block: the reference's own rule (ceil, rceil, even, midmax) on the exact amax.
    x = scale_exponent(*p.element, static_cast<double>(std::bit_cast<float>(a)), *p.options);
  }
  return std::clamp(x, p.x_min, p.x_max);
}

/// analysis.cpp ErrorStats::add for one element, with the sums in fast exact accumulators.
HWY_INLINE void add_metric(MetricsAcc& m, double x, double deq, bool over) {
  if (std::isnan(deq)) {
    ++m.nan_outputs;
    return;
  }
  if (!std::isfinite(x) || !std::isfinite(deq)) return;
  ++m.count;
  if (x != 0) {
    ++m.nonzero_inputs;
    if (deq == 0) ++m.underflows;
  }
  if (over) ++m.saturations;
  // deq - x = s + t exactly (two-sum); s^2 = p + lo exactly (an FP32 input keeps both normal doubles).
  const double s = deq - x;
  const double bb = s - deq;
  const double t = (deq - (s - bb)) + (-x - bb);
  const double sq = s * s;
  m.sse.add(sq);
  m.sse.add(std::fma(s, s, -sq));
  if (t != 0) {
    m.rare.add_product(s, t);
    m.rare.add_product(s, t);
    m.rare.add_product(t, t);
  }
  m.signal.add(x * x);  // exact: a float32 squared has at most 48 significant bits
  const double ae = std::fabs(s);
  if (ae > m.max_abs_error) m.max_abs_error = ae;
}

/// add_metric for element i of the tensor, whose quantized input value is x: the metrics compare with the
/// tensor's own element (BlockCall::metrics_x, the input before N:M pruning) when it differs.
HWY_INLINE void add_metric_at(const BlockCall& call, std::size_t i, double x, double deq, bool over) {
  if (call.metrics_x != nullptr) {
    switch (call.input) {
      case InputKind::F32: x = static_cast<const float*>(call.metrics_x)[i]; break;
      case InputKind::BF16: x = bf16_value(static_cast<const std::uint16_t*>(call.metrics_x)[i]); break;
      case InputKind::F16: x = half_value(static_cast<const std::uint16_t*>(call.metrics_x)[i]); break;
    }
  }
  add_metric(*call.metrics, x, deq, over);
}

/// The fused metrics of elements [index, index + count) from their float32 input bits u, codes and overflow
/// lanes (all ones where the cast overflowed), each dequantized as decode(code) * scale.
template <class D>
HWY_INLINE void add_lane_metrics(const BlockParams& p, const BlockCall& call, std::size_t index, std::size_t count,
                                 D d, hn::Vec<D> u, hn::Vec<D> code, hn::Vec<D> over, double scale) {
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_code[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  hn::Store(u, d, lane_x);
  hn::Store(code, d, lane_code);
  hn::Store(over, d, lane_over);
  for (std::size_t l = 0; l < count; ++l) {
    add_metric_at(call, index + l, static_cast<double>(std::bit_cast<float>(lane_x[l])),
                  p.decode_f64[lane_code[l]] * scale, lane_over[l] != 0);
  }
}

/// Packs n 4-bit codes (n even) as byte pairs in the writer's nibble order, at a byte boundary.
HWY_INLINE void pack_nibbles(const std::uint8_t* codes, std::size_t n, bool low_first, std::uint8_t* out) {
  const hn::ScalableTag<std::uint16_t> d16;
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Rebind<std::uint8_t, decltype(d16)> d8h;
  const std::size_t l16 = hn::Lanes(d16);
  const auto low = hn::Set(d16, 0x000F);
  std::size_t i = 0;
  // A little-endian uint16 holds the pair (first code in its low byte).
  for (; i + 2 * l16 <= n; i += 2 * l16) {
    const auto w = hn::LoadU(d16, reinterpret_cast<const std::uint16_t*>(codes + i));
    const auto first = hn::And(w, low);
    const auto second = hn::And(hn::ShiftRight<8>(w), low);
    const auto byte = low_first ? hn::Or(first, hn::ShiftLeft<4>(second)) : hn::Or(hn::ShiftLeft<4>(first), second);
    hn::StoreU(hn::DemoteTo(d8h, hn::BitCast(di16, byte)), d8h, out + i / 2);
  }
  for (; i < n; i += 2) {
    const auto a = static_cast<unsigned>(codes[i] & 0xFU);
    const auto b = static_cast<unsigned>(codes[i + 1] & 0xFU);
    out[i / 2] = static_cast<std::uint8_t>(low_first ? (a | (b << 4)) : ((a << 4) | b));
  }
}

/// FastRne (block_params.hpp) as vectors.
struct FastVectors {
  explicit FastVectors(const BlockParams::FastRne& f)
      : biased_clamp(hn::Set(DI(), f.biased_clamp)),
        magic_min(hn::Set(DI(), f.biased_qmin + 23)),
        limit(hn::Set(DU(), f.limit)),
        overflow_code(hn::Set(DU(), f.overflow_code)),
        sign_bit(hn::Set(DU(), f.sign_bit)),
        magic_drop(23 - f.mantissa_bits),
        mantissa_bits(f.mantissa_bits),
        sign_shift(f.sign_shift) {}
  VI biased_clamp, magic_min;
  VU limit, overflow_code, sign_bit;
  int magic_drop, mantissa_bits, sign_shift;
};

/// Nearest-even codes of the finite float32 bit patterns u divided by 2^X (inverse = 2^-X); *r_out gets the
/// rounded magnitude |x| / 2^X on the element grid, *over the lanes that overflowed (BlockParams::FastRne).
///
/// With the grid quantum 2^qe of a = |x| / 2^X (qe = max(min(e, emax + 1) - m, qmin)), the float32 sum
/// a + 2^(qe + 23) rounds a to a multiple k * 2^qe, ties to even k, and its bits minus those of 2^(qe + 23)
/// are k. The code magnitude is k + ((qe - qmin) << m): subnormals have qe = qmin and code k; a normal
/// binade e starts at code (e - emin + 1) << m = ((qe - qmin) << m) + 2^m with k in [2^m, 2^(m+1)].
template <bool kValue>
HWY_INLINE VU fast_rne_lanes(const FastVectors& f, VU u, VF inverse, VF* r_out, MU* over) {
  const DU du;
  const DI di;
  const DF df;
  // a = |x| * 2^-X: exact, or below 2^-126 where the nearest grid point is zero.
  const VF a = hn::Mul(hn::BitCast(df, hn::And(u, hn::Set(du, 0x7FFFFFFFU))), inverse);
  const VI biased = hn::BitCast(di, hn::ShiftRight<23>(hn::BitCast(du, a)));
  const VI magic_biased = hn::Max(hn::Add(hn::Min(biased, f.biased_clamp), hn::Set(di, f.magic_drop)), f.magic_min);
  const VU magic = hn::BitCast(du, hn::ShiftLeft<23>(magic_biased));
  const VF sum = hn::Add(a, hn::BitCast(df, magic));
  if constexpr (kValue) *r_out = hn::Sub(sum, hn::BitCast(df, magic));
  const VU k = hn::Sub(hn::BitCast(du, sum), magic);
  const VU field = hn::ShiftLeftSame(hn::BitCast(du, hn::Sub(magic_biased, f.magic_min)), f.mantissa_bits);
  VU code = hn::Add(k, field);
  *over = hn::Gt(code, f.limit);
  code = hn::IfThenElse(*over, f.overflow_code, code);
  return hn::Or(code, hn::And(hn::ShiftRightSame(u, f.sign_shift), f.sign_bit));
}

/// The zero-sign rule (QuantOptions::zero_sign): the code of a lane whose zero value (a peer's scaled value,
/// or the input under exact arithmetic) has the float32 bits z.
template <class D = DU>
HWY_INLINE hn::Vec<D> apply_zero_sign(const BlockParams& p, hn::Vec<D> code, hn::Vec<D> z, D d = D()) {
  if (p.zero_sign == ZeroSign::Keep || !p.has_negative_zero) return code;
  const auto zero = hn::Eq(hn::And(z, hn::Set(d, 0x7FFFFFFFU)), hn::Zero(d));
  if (p.zero_sign == ZeroSign::ZeroMinus) return hn::IfThenElse(zero, hn::Set(d, p.zero_code_neg), code);
  const auto negative = hn::Ne(hn::And(z, hn::Set(d, 0x80000000U)), hn::Zero(d));
  return hn::IfThenElse(hn::And(zero, negative), hn::Set(d, p.zero_code_pos), code);
}

/// Where a block loop's element codes go: straight into the packed output (8-bit codes) or through a
/// buffer that is bit-packed when full.
struct CodeSink {
  const BlockParams& p;
  const BlockCall& call;
  bool direct8;
  std::size_t buffered = 0;
  HWY_ALIGN std::uint8_t codes[kChunk + kMaxLanes];
  HWY_ALIGN std::uint8_t packed[kChunk / 2 + kMaxLanes];
  HWY_ALIGN std::uint16_t codes16[kChunk + kMaxLanes];  ///< elements of more than 8 bits

  /// 4-bit codes stored straight into the packed output, two per byte (set by a loop whose every put is a
  /// whole vector at an even element index: fast_floor_loop).
  bool direct4 = false;

  CodeSink(const BlockParams& params, const BlockCall& c)
      : p(params), call(c), direct8(params.bits == 8 && !params.remap) {}

  void flush() {
    if (p.wide_codes) {
      if (p.remap)
        for (std::size_t i = 0; i < buffered; ++i) codes16[i] = p.code_map[codes16[i]];
      call.writer->write(codes16, buffered);
      buffered = 0;
      return;
    }
    if (p.remap)
      for (std::size_t i = 0; i < buffered; ++i) codes[i] = p.code_map[codes[i]];
    if (p.bits == 4 && call.writer->aligned() && buffered % 2 == 0) {
      pack_nibbles(codes, buffered, p.low_first, packed);
      call.writer->write_bytes(packed, buffered / 2);
    } else {
      call.writer->write(codes, buffered);
    }
    buffered = 0;
  }

  /// The codes of elements [index, index + count) of the tensor, in the uint32_t lanes of tag D (count <=
  /// Lanes(D); the other lanes are padding).
  template <class D>
  HWY_INLINE void put(D d, hn::Vec<D> code, std::size_t index, std::size_t count) {
    const hn::Rebind<std::uint8_t, D> d8;
    const std::size_t lanes = hn::Lanes(d);
    if (p.wide_codes) {
      const hn::Rebind<std::uint16_t, D> d16;
      if (buffered + lanes > kChunk) flush();
      hn::StoreU(hn::TruncateTo(d16, code), d16, codes16 + buffered);
      buffered += count;
      return;
    }
    const auto code8 = hn::TruncateTo(d8, code);
#if HWY_TARGET != HWY_SCALAR
    if (direct4) {
      // Pairs of codes as 16-bit lanes (first code in the low byte), each folded into one byte.
      const hn::Repartition<std::uint16_t, decltype(d8)> d16;
      const hn::Rebind<std::uint8_t, decltype(d16)> d8h;
      const auto w = hn::BitCast(d16, code8);
      const auto lo = hn::And(w, hn::Set(d16, 0x000F));
      const auto hi = hn::And(hn::ShiftRight<8>(w), hn::Set(d16, 0x000F));
      const auto byte = p.low_first ? hn::Or(lo, hn::ShiftLeft<4>(hi)) : hn::Or(hn::ShiftLeft<4>(lo), hi);
      hn::StoreU(hn::TruncateTo(d8h, byte), d8h, call.elements + index / 2);
      return;
    }
#endif
    if (direct8) {
      std::uint8_t* dst = call.elements + index;
      if (count == lanes) {
        if (call.stream && lanes >= 16 && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) {
          hn::Stream(code8, d8, dst);
        } else {
          hn::StoreU(code8, d8, dst);
        }
      } else {
        HWY_ALIGN std::uint8_t tail[kMaxLanes];
        hn::Store(code8, d8, tail);
        std::memcpy(dst, tail, count);
      }
      return;
    }
    if (buffered + lanes > kChunk) flush();
    hn::StoreU(code8, d8, codes + buffered);
    buffered += count;
  }

  void put_repeated(std::uint32_t code, std::size_t index, std::size_t count) {
    if (p.wide_codes) {
      for (std::size_t k = 0; k < count; ++k) {
        if (buffered == kChunk) flush();
        codes16[buffered++] = static_cast<std::uint16_t>(code);
      }
      return;
    }
    if (direct4) {
      std::memset(call.elements + index / 2, static_cast<int>((code & 0xFU) | ((code & 0xFU) << 4)), count / 2);
      return;
    }
    if (direct8) {
      std::memset(call.elements + index, static_cast<int>(code & 0xFFU), count);
      return;
    }
    for (std::size_t k = 0; k < count; ++k) {
      if (buffered == kChunk) flush();
      codes[buffered++] = static_cast<std::uint8_t>(code);
    }
  }

  void finish() {
    if (buffered != 0) flush();
  }
};

/// The smallest scale exponent X of the nearest-even fast path, whose multiplier 2^-X is a float32 (scale
/// formats with smaller powers of two, as float32 ones, take the general element pass there).
constexpr int kFastMinExponent = -127;

/// Per-block constants of the element pass.
struct BlockScale {
  int xe;                 ///< the block's scale 2^xe
  std::uint32_t scode;    ///< its code
  double scale_d;         ///< its value
};

/// The element pass over one block of len elements at xb (rest > 0: the last partial vector is in in_buf).
template <class Round, BlockOut kOut, bool kFast>
HWY_INLINE void block_elements(const BlockParams& p, const BlockCall& call, const CastVectors& c,
                               const FastVectors& fv, CodeSink& sink, const std::uint8_t* xb,
                               const std::uint8_t* in_buf, std::size_t len, std::size_t full, std::size_t start,
                               const BlockScale& bs) {
  const DU du;
  const DF df;
  const DI di;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const bool want_metrics = call.metrics != nullptr;
  const VI minus_x = hn::Set(di, -bs.xe);
  const VF scale_v = hn::Set(df, p.pow2_value[static_cast<std::size_t>(bs.xe - p.x_min)]);
  const VF inverse = hn::Set(df, p.scale_inverse[static_cast<std::size_t>(bs.xe - p.x_min)]);
  HWY_ALIGN float out_buf[kMaxLanes];
  for (std::size_t k = 0; k < len; k += lanes) {
    const bool tail = k == full;  // only when len is not a multiple of lanes
    const std::size_t count = tail ? len - full : lanes;
    const VU u = tail ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
    MU over = hn::FirstN(du, 0);
    VU code;
    VF value;
    if constexpr (kFast) {
      VF r;
      code = fast_rne_lanes<kOut == BlockOut::Fake>(fv, u, inverse, &r, &over);
      if constexpr (kOut == BlockOut::Fake) {
        // The rounded magnitude with the input's sign, times the scale (rounded once to float32, as the
        // reference's value); overflowed lanes take the decoded overflow code.
        value = hn::Mul(hn::BitCast(df, hn::Or(hn::BitCast(du, r), hn::And(u, hn::Set(du, 0x80000000U)))), scale_v);
        if (!hn::AllFalse(du, over)) {
          const VF special = hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code)), scale_v);
          value = hn::IfThenElse(hn::RebindMask(df, over), special, value);
        }
      }
    } else {
      VU random = hn::Zero(du);
      if (p.stochastic) random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start) + k);
      code = cast_lanes<Round>(c, u, random, minus_x, want_metrics ? &over : nullptr);
      if constexpr (kOut == BlockOut::Fake) {
        value = hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code)), scale_v);
      }
    }
    if constexpr (kOut == BlockOut::Packed) sink.put(du, code, start + k, count);
    if constexpr (kOut == BlockOut::Fake) {
      float* dst = call.fake + start + k;
      if (!tail) {
        if (call.stream && reinterpret_cast<std::uintptr_t>(dst) % (hn::Lanes(df) * sizeof(float)) == 0) {
          hn::Stream(value, df, dst);
        } else {
          hn::StoreU(value, df, dst);
        }
      } else {
        hn::Store(value, df, out_buf);
        std::memcpy(dst, out_buf, count * sizeof(float));
      }
    }
    if (want_metrics) add_lane_metrics(p, call, start + k, count, du, u, code, hn::VecFromMask(du, over), bs.scale_d);
  }
}

/// The reference's random words of elements [index, index + Lanes(D64)) in 64-bit lanes (zero unless
/// stochastic rounding).
HWY_INLINE V64 random_lanes64(const BlockParams& p, std::size_t index) {
  if (!p.stochastic) return hn::Zero(D64());
  return hn::PromoteTo(D64(), stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(index), DUh()));
}

/// The values of element codes held in 32-bit lanes, as doubles.
HWY_INLINE VF64 decode_lanes64(const BlockParams& p, hn::Vec<DUh> code) {
  return hn::PromoteTo(DF64(), hn::GatherIndex(DFh(), p.decode_f32.data(), hn::BitCast(hn::RebindToSigned<DUh>(), code)));
}

/// Whether the positive normal double d is a power of two (its quotients are exact).
HWY_INLINE bool power_of_two(double d) {
  return std::isfinite(d) && (std::bit_cast<std::uint64_t>(d) & ((std::uint64_t{1} << 52) - 1)) == 0;
}

/// Lanes whose double q lies within twice the reference's adjustment window (cast_quotient: 4 ulp of q plus
/// 4 times the smallest double) of a multiple of half the grid quantum at q. Every rounding boundary of the
/// grid c (its values, the midpoints between them, and the first point past the largest value and the
/// midpoint to it) is such a multiple: the quantum of q's binade (the smaller one of a format whose field 0
/// is read again) divides every grid point from there down and the binade's own power of two. Zero, NaN and
/// infinite q are not flagged.
HWY_INLINE M64 near_boundary64(const CastVectors64& c, VF64 q) {
  const D64 du;
  const DI64 di;
  const DF64 df;
  const V64 abs = hn::And(hn::BitCast(du, q), hn::Set(du, 0x7FFFFFFFFFFFFFFFULL));
  const VI64 e = hn::Sub(hn::BitCast(di, hn::ShiftRight<52>(abs)), hn::Set(di, 1023));
  const VI64 drop = c.split ? hn::Max(c.quantum_drop, c.low_quantum_drop) : c.quantum_drop;
  const VI64 qe = hn::Max(hn::Sub(hn::Min(e, c.exponent_clamp), drop), c.quantum_min);
  // m = |q| / 2^(qe - 1), exact: 2^(1 - qe) built from its exponent field.
  const VF64 scale = hn::BitCast(df, hn::ShiftLeft<52>(hn::Sub(hn::Set(di, 1024), qe)));
  const VF64 m = hn::Mul(hn::BitCast(df, abs), scale);
  // The window in units of 2^(qe - 1): 2 * 4 * 2^-52 * m, plus far more than 2 * 4 * 2^-1074 * 2^(1 - qe).
  const VF64 tol = hn::MulAdd(m, hn::Set(df, 0x1p-49), hn::Set(df, 0x1p-900));
  const auto near = hn::Le(hn::Abs(hn::Sub(m, hn::Round(m))), tol);
  return hn::RebindMask(du, hn::AndNot(hn::Eq(q, hn::Zero(df)), near));
}

/// Codes of the quotients x / d as the reference's cast_quotient gives them, d = s * g positive or +Inf.
///
/// cast_quotient casts the double q = x / d, except that a q within 4 ulp of a rounding boundary b (a grid
/// point or a midpoint of the element grid) is moved to b or next to it, on the side of the exact quotient.
/// With scales of at most 8 bits, b has at most 9 significant bits (8-bit elements), the scale s at most 8
/// and the tensor scale g at most 24 (BlockKernel::unsupported_reason), so b * d has at most 41 and x (a
/// float32) 24: a nonzero x - b * d is at least 2^-42 of b * d, and q, within 2^-53 of x / d, lies more than
/// 2^-43 of b away from b, far outside the window of 2^-50. Inside it q = b exactly and stays. The quotient
/// the reference casts is therefore the correctly rounded x / d, which the vector cast takes.
///
/// Longer scale significands (float16, float32 scales) break that count when b * d may exceed 48 bits
/// (BlockParams::check_quotients): lanes near a boundary (near_boundary64) are cast by cast_quotient itself;
/// elsewhere q is again what the reference casts. An infinite d (a scale that overflowed to Inf) sends every
/// lane there.
template <class Round>
HWY_INLINE V64 quotient_codes64(const BlockParams& p, const CastVectors64& c64, VF64 x, double d, V64 random,
                                M64* over) {
  const DF64 df;
  const D64 du;
  const VF64 q = hn::Div(x, hn::Set(df, d));
  V64 code = cast_lanes64<Round>(c64, q, random, over);
  const bool finite_d = std::isfinite(d);
  if (!p.check_quotients && finite_d) return code;
  const M64 fix = finite_d ? near_boundary64(c64, q) : hn::FirstN(du, hn::Lanes(du));
  if (hn::AllFalse(du, fix)) return code;
  const std::size_t lanes = hn::Lanes(du);
  HWY_ALIGN double lane_x[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_random[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_code[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_over[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_fix[kMaxLanes];
  hn::Store(x, df, lane_x);
  hn::Store(random, du, lane_random);
  hn::Store(code, du, lane_code);
  hn::Store(over != nullptr ? hn::VecFromMask(du, *over) : hn::Zero(du), du, lane_over);
  hn::Store(hn::VecFromMask(du, fix), du, lane_fix);
  for (std::size_t l = 0; l < lanes; ++l) {
    if (lane_fix[l] == 0) continue;
    const double v = lane_x[l];
    if (std::isinf(v) && p.specials == SpecialsPolicy::BlockNan && p.element_has_inf) {
      lane_code[l] = p.cast.inf_code[v < 0 ? 1 : 0];  // kept as Inf, without an overflow (the reference's rule)
      lane_over[l] = 0;
      continue;
    }
    const CastResult r = cast_quotient(*p.element, v, d, p.element_opts, static_cast<std::uint32_t>(lane_random[l]));
    lane_code[l] = r.code;
    lane_over[l] = r.overflow ? ~std::uint64_t{0} : 0;
  }
  if (over != nullptr) *over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
  return hn::Load(du, lane_code);
}

/// Lanes of float32 quotients q = fl32(x * fl32(1 / d)) that may round differently from the exact x / d: those
/// within 2^-21 relative of a multiple of half the grid quantum at q (every rounding boundary is one, as in
/// near_boundary64), beyond the grid's exponent clamp (Inf and NaN included), and zeros of nonzero inputs. q is
/// within 2^-22.9 relative of x / d (two float32 roundings, and the double 1 / d), so elsewhere no boundary lies
/// between the two and every deterministic rounding mode gives the same code.
HWY_INLINE MU near_boundary32(const CastVectors& c, VF q, VU x_bits) {
  const DU du;
  const DI di;
  const DF df;
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU abs = hn::And(hn::BitCast(du, q), abs_mask);
  const VI e = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(abs)), hn::Set(di, 127));
  const VI drop = c.split ? hn::Max(c.quantum_drop, c.low_quantum_drop) : c.quantum_drop;
  const VI qe = hn::Max(hn::Sub(hn::Min(e, c.exponent_clamp), drop), c.quantum_min);
  // m = |q| / 2^(qe - 1), exact (BlockParams::fast32 keeps 2^(1 - qe) a normal float32).
  const VF scale = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(hn::Set(di, 128), qe)));
  const VF m = hn::Mul(hn::BitCast(df, abs), scale);
  const auto near = hn::Le(hn::Abs(hn::Sub(m, hn::Round(m))), hn::Mul(m, hn::Set(df, 0x1p-21F)));
  const MU zero_q = hn::Eq(abs, hn::Zero(du));
  const MU lost = hn::AndNot(hn::Eq(hn::And(x_bits, abs_mask), hn::Zero(du)), zero_q);  // x != 0, q == 0
  return hn::Or(hn::Or(hn::AndNot(zero_q, hn::RebindMask(du, near)), lost),
                hn::RebindMask(du, hn::Gt(e, c.exponent_clamp)));
}

/// The element pass of a block with a float scale s (rule amax) under tensor scale g: the reference's
/// cast_quotient of every element by d = s * g (quotient_codes64), in double lanes.
///
/// Under deterministic rounding (BlockParams::fast32), whole float32 vectors go first: q = x * fl32(1 / d) in
/// float32 lanes, cast on the float32 grid, unless near_boundary32 flags a lane, which sends that vector through
/// the double lanes. The values decode(code) * s * g are formed as (decode * s) * g in float32: decode * s is
/// exact (element and scale significands of at most 24 bits together, within float32's normal range by the
/// block's bounds), and the product with g is rounded once, as the reference's double product rounded to
/// float32. Longer significands (float32 scales) take this path when g = 1, where decode * s is the one
/// rounding.
template <class Round>
HWY_INLINE void float_scale_elements(const BlockParams& p, const BlockCall& call, const CastVectors64& c64,
                                     const CastVectors& c32, CodeSink& sink, const std::uint8_t* xb,
                                     std::size_t len, std::size_t start, double s) {
  const DF64 df;
  const D64 du;
  const DUh duh;
  const DFh dfh;
  const std::size_t lanes = hn::Lanes(df);
  const InputKind in_kind = call.input;
  const bool want_metrics = call.metrics != nullptr;
  const double d = s * call.g;  // exact: scale and tensor scale have at most 24 significant bits each
  const VF64 dv = hn::Set(df, d);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN float out_buf[kMaxLanes];
  // Elements [k0, k1) in double lanes.
  const auto double_lanes = [&](std::size_t k0, std::size_t k1) {
    for (std::size_t k = k0; k < k1; k += lanes) {
      const std::size_t count = std::min(lanes, k1 - k);
      const hn::Vec<DUh> u = load_part(in_kind, xb, k, count, in_buf, duh);
      const VF64 x = hn::PromoteTo(df, hn::BitCast(dfh, u));
      M64 over = hn::FirstN(du, 0);
      const auto code = apply_zero_sign(
          p,
          hn::TruncateTo(duh, quotient_codes64<Round>(p, c64, x, d, random_lanes64(p, start + k),
                                                      want_metrics ? &over : nullptr)),
          u, duh);  // the zero-sign rule on the input (exact arithmetic: the quotient is zero when x is)
      if (call.out == BlockOut::Packed) sink.put(duh, code, start + k, count);
      if (call.out == BlockOut::Fake) {
        // decode(code) * s * g: exact in double, rounded once to float32.
        store_as_float(hn::Mul(decode_lanes64(p, code), dv), out_buf);
        std::memcpy(call.fake + start + k, out_buf, count * sizeof(float));
      }
      if (want_metrics)
        add_lane_metrics(p, call, start + k, count, duh, u, code, hn::TruncateTo(duh, hn::VecFromMask(du, over)), d);
    }
  };
  // decode * s is exact in float32 for scale significands of at most 16 bits; otherwise only g = 1 leaves a
  // single rounding (of decode * s itself).
  const bool one_rounding = p.fast32_short_scales || call.g == 1.0;
  const bool fast = p.fast32 && one_rounding && s > 0x1p-100 && s < 0x1p100 && d > 0x1p-120 && d < 0x1p120 &&
                    static_cast<double>(static_cast<float>(call.g)) == call.g;
  if (!fast) {
    double_lanes(0, len);
    return;
  }
  const DU du32;
  const DI di32;
  const DF df32;
  const std::size_t lanes32 = hn::Lanes(du32);
  const VF inverse = hn::Set(df32, static_cast<float>(1.0 / d));
  const VF s_v = hn::Set(df32, static_cast<float>(s));
  const VF g_v = hn::Set(df32, static_cast<float>(call.g));
  const bool small_codes = p.bits <= 4 && lanes32 >= 16;
  const VF table = hn::LoadU(df32, p.decode_f32.data());
  for (std::size_t k = 0; k < len; k += lanes32) {
    const std::size_t count = std::min(lanes32, len - k);
    const VU u = load_part(in_kind, xb, k, count, in_buf);
    const VF q = hn::Mul(hn::BitCast(df32, u), inverse);
    if (!hn::AllFalse(du32, near_boundary32(c32, q, u))) {
      double_lanes(k, k + count);
      continue;
    }
    MU over = hn::FirstN(du32, 0);
    const VU code = apply_zero_sign(p,
                                    cast_lanes<Round>(c32, hn::BitCast(du32, q), hn::Zero(du32), hn::Zero(di32),
                                                      want_metrics ? &over : nullptr),
                                    u);
    if (call.out == BlockOut::Packed) sink.put(du32, code, start + k, count);
    if (call.out == BlockOut::Fake) {
      // Codes of at most 4 bits index a table that fits one vector: a permutation instead of a gather.
      const VF e = small_codes ? hn::TableLookupLanes(table, hn::IndicesFromVec(df32, hn::BitCast(di32, code)))
                               : hn::GatherIndex(df32, p.decode_f32.data(), hn::BitCast(di32, code));
      const VF value = call.g == 1.0 ? hn::Mul(e, s_v) : hn::Mul(hn::Mul(e, s_v), g_v);
      if (count == lanes32) {
        hn::StoreU(value, df32, call.fake + start + k);
      } else {
        hn::Store(value, df32, out_buf);
        std::memcpy(call.fake + start + k, out_buf, count * sizeof(float));
      }
    }
    if (want_metrics) add_lane_metrics(p, call, start + k, count, du32, u, code, hn::VecFromMask(du32, over), d);
  }
}

/// Codes of the finite doubles q in a codebook element format: the reference's table cast (formats/src/cast.cpp
/// cast_table) lane by lane. The entries at or below q are counted by a binary search (gathers from the
/// sorted values; -0 and +0 compare equal, as in the reference's upper_bound); an exact value takes its entry
/// (a zero the zero of q's sign); beyond the ends the end entry, with the overflow flag; between two entries
/// the rounding mode decides with the exact midpoint (sums of two neighbours, exact doubles), the parities of
/// the two codes, and for stochastic rounding the fraction |q - tz| / |az - tz| computed in double as the
/// reference does.
HWY_INLINE V64 codebook_lanes64(const BlockParams& p, VF64 q, V64 random, M64* over, M64* near = nullptr) {
  const DF64 df;
  const D64 du;
  const DI64 di;
  using VI64 = hn::Vec<DI64>;
  const auto n = static_cast<std::int64_t>(p.cb_values.size());
  const double* vals = p.cb_values.data();
  VI64 pos = hn::Zero(di);
  if (n <= 16) {
    // Few entries: count them directly (each comparison adds 1 where the entry is at or below q).
    for (std::int64_t i = 0; i < n; ++i)
      pos = hn::Sub(pos, hn::BitCast(di, hn::VecFromMask(df, hn::Le(hn::Set(df, vals[i]), q))));
  } else {
    for (std::int64_t step = n / 2; step >= 1; step /= 2) {
      const VI64 cand = hn::Add(pos, hn::Set(di, step));
      const VF64 v = hn::GatherIndex(df, vals, hn::Sub(cand, hn::Set(di, 1)));
      pos = hn::IfThenElse(hn::RebindMask(di, hn::Le(v, q)), cand, pos);
    }
    pos = hn::IfThenElse(hn::RebindMask(di, hn::Le(hn::GatherIndex(df, vals, pos), q)), hn::Add(pos, hn::Set(di, 1)),
                         pos);
  }
  const VI64 lo_i = hn::Max(hn::Sub(pos, hn::Set(di, 1)), hn::Zero(di));
  const VI64 hi_i = hn::Min(pos, hn::Set(di, n - 1));
  const VF64 lo = hn::GatherIndex(df, vals, lo_i);
  const VF64 hi = hn::GatherIndex(df, vals, hi_i);
  const VI64 lo_code = hn::GatherIndex(di, p.cb_codes.data(), lo_i);
  const VI64 hi_code = hn::GatherIndex(di, p.cb_codes.data(), hi_i);
  const VF64 mid = hn::GatherIndex(df, p.cb_mids.data(), pos);
  if (near != nullptr) {
    // Lanes within twice the reference's window (cast_quotient: 4 ulp of q) of a value or midpoint: there the
    // reference may move q, so the caller casts them as the reference does.
    const VF64 tol = hn::Add(hn::Mul(hn::Abs(q), hn::Set(df, 8 * std::numeric_limits<double>::epsilon())),
                             hn::Set(df, 8 * std::numeric_limits<double>::denorm_min()));
    const auto close = [&](VF64 b) { return hn::Le(hn::Abs(hn::Sub(q, b)), tol); };
    *near = hn::RebindMask(du, hn::Or(hn::Or(close(lo), close(hi)), close(mid)));
  }
  const auto below = hn::RebindMask(df, hn::Eq(pos, hn::Zero(di)));
  const auto above = hn::RebindMask(df, hn::Eq(pos, hn::Set(di, n)));
  const auto neg = hn::RebindMask(df, hn::Lt(hn::BitCast(di, q), hn::Zero(di)));  // the sign bit: -0 too
  const auto exact = hn::AndNot(below, hn::Eq(lo, q));

  // Between lo and hi: which side of the midpoint, on magnitudes (tz toward zero, az away from it).
  const auto at_mid = hn::Eq(q, mid);
  const auto closer_tz = hn::AndNot(at_mid, hn::Xor(hn::Lt(q, mid), neg));
  const auto farther = hn::AndNot(at_mid, hn::Not(hn::Xor(hn::Lt(q, mid), neg)));
  const auto one = hn::Set(di, 1);
  const auto lo_odd = hn::RebindMask(df, hn::Eq(hn::And(lo_code, one), one));
  const auto hi_odd = hn::RebindMask(df, hn::Eq(hn::And(hi_code, one), one));
  const auto tz_odd = hn::Or(hn::And(neg, hi_odd), hn::AndNot(neg, lo_odd));
  const auto az_odd = hn::Or(hn::And(neg, lo_odd), hn::AndNot(neg, hi_odd));
  const auto none = hn::Lt(q, hn::Set(df, -std::numeric_limits<double>::infinity()));  // all false
  auto away = none;
  switch (p.cast.rounding) {
    case Rounding::NearestEven: away = hn::Or(farther, hn::And(at_mid, hn::AndNot(az_odd, tz_odd))); break;
    case Rounding::NearestAway: away = hn::Not(closer_tz); break;
    case Rounding::NearestZero: away = farther; break;
    case Rounding::TowardZero: break;
    case Rounding::Up: away = hn::Not(neg); break;
    case Rounding::Down: away = neg; break;
    case Rounding::Odd: away = hn::AndNot(tz_odd, az_odd); break;
    case Rounding::Stochastic: {
      const VF64 tz = hn::IfThenElse(neg, hi, lo);
      const VF64 az = hn::IfThenElse(neg, lo, hi);
      const int bits = p.cast.random_bits;
      // Exact lanes and the ends have no gap (tz = az); their fraction is unused, and kept finite.
      const VF64 gap = hn::Abs(hn::Sub(az, tz));
      const VF64 fraction = hn::IfThenElseZero(hn::Gt(gap, hn::Zero(df)), hn::Div(hn::Abs(hn::Sub(q, tz)), gap));
      const VI64 t = hn::ConvertTo(di, hn::Mul(fraction, hn::Set(df, std::ldexp(1.0, bits))));
      const VI64 r = hn::BitCast(di, hn::ShiftRightSame(random, 32 - bits));
      away = hn::RebindMask(df, hn::Not(hn::Lt(hn::Add(t, r), hn::Set(di, std::int64_t{1} << bits))));
      break;
    }
  }
  const auto pick_hi = hn::Xor(away, neg);
  const VF64 chosen = hn::IfThenElse(pick_hi, hi, lo);
  VI64 code = hn::IfThenElse(hn::RebindMask(di, pick_hi), hi_code, lo_code);
  const VI64 zero_code =
      hn::IfThenElse(hn::RebindMask(di, neg), hn::Set(di, p.cb_zero_neg), hn::Set(di, p.cb_zero_pos));
  code = hn::IfThenElse(hn::RebindMask(di, hn::Eq(chosen, hn::Zero(df))), zero_code, code);
  const VI64 exact_code = hn::IfThenElse(hn::RebindMask(di, hn::Eq(lo, hn::Zero(df))), zero_code, lo_code);
  // Beyond the ends (the top entry itself is exact): clamped to the end entry, with the overflow flag.
  code = hn::IfThenElse(hn::RebindMask(di, above), hn::Set(di, p.cb_codes.back()), code);
  code = hn::IfThenElse(hn::RebindMask(di, below), hn::Set(di, p.cb_codes.front()), code);
  code = hn::IfThenElse(hn::RebindMask(di, exact), exact_code, code);
  if (over != nullptr) *over = hn::RebindMask(du, hn::AndNot(exact, hn::Or(below, above)));
  return hn::BitCast(du, code);
}

/// The element pass of a block with a codebook element format, scale s and tensor scale g (g = 1 and s = 2^X
/// for power-of-two scales): the codebook cast of the quotients x / (s * g) in double lanes. A power of two
/// gives the exact quotient. Otherwise the correctly rounded quotient is the value the reference's
/// cast_quotient casts unless it lies within the reference's window of a value or midpoint; vectors with
/// such a lane (or with NaN or Inf) take cast_quotient itself. Values are (decode * s) * g in double, as the
/// reference forms them.
/// Codes of the quotients x / d (d = s * g, positive or +Inf) in a codebook element format, as the reference's
/// cast_quotient gives them: codebook_lanes64 of the double quotient, or cast_quotient itself for a vector with
/// a lane near a value or midpoint (unless d is a power of two: exact quotients), or with NaN or Inf.
HWY_INLINE V64 codebook_quotient_codes64(const BlockParams& p, VF64 x, double d, V64 random, M64* over) {
  const DF64 df;
  const D64 du;
  const bool exact_quotient = power_of_two(d);
  M64 over_v = hn::FirstN(du, 0);
  M64 near = hn::FirstN(du, 0);
  V64 code = hn::Zero(du);
  const bool finite = hn::AllTrue(df, hn::Lt(hn::Abs(x), hn::Set(df, std::numeric_limits<double>::infinity())));
  if (finite) code = codebook_lanes64(p, hn::Div(x, hn::Set(df, d)), random, &over_v, exact_quotient ? nullptr : &near);
  if (!finite || !hn::AllFalse(du, near)) {
    HWY_ALIGN double lane_x[kMaxLanes];
    HWY_ALIGN std::uint64_t lane_random[kMaxLanes];
    HWY_ALIGN std::uint64_t lane_codes[kMaxLanes];
    HWY_ALIGN std::uint64_t lane_over[kMaxLanes];
    hn::Store(x, df, lane_x);
    hn::Store(random, du, lane_random);
    for (std::size_t l = 0; l < hn::Lanes(du); ++l) {
      const CastResult r =
          cast_quotient(*p.element, lane_x[l], d, p.element_opts, static_cast<std::uint32_t>(lane_random[l]));
      lane_codes[l] = r.code;
      lane_over[l] = r.overflow ? ~std::uint64_t{0} : 0;
    }
    code = hn::Load(du, lane_codes);
    over_v = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
  }
  if (over != nullptr) *over = over_v;
  return code;
}

HWY_NOINLINE void codebook_elements(const BlockParams& p, const BlockCall& call, CodeSink& sink,
                                    const std::uint8_t* xb, std::size_t len, std::size_t start, double s, double g) {
  const DF64 df;
  const D64 du;
  const DUh duh;
  const DFh dfh;
  const std::size_t lanes = hn::Lanes(df);
  const InputKind in_kind = call.input;
  const double d = s * g;
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN double lane_x[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint64_t lane_over[kMaxLanes];
  HWY_ALIGN float out_buf[kMaxLanes];
  for (std::size_t k = 0; k < len; k += lanes) {
    const std::size_t count = std::min(lanes, len - k);
    const hn::Vec<DUh> u = load_part(in_kind, xb, k, count, in_buf, duh);
    const VF64 x = hn::PromoteTo(df, hn::BitCast(dfh, u));
    M64 over = hn::FirstN(du, 0);
    // The zero-sign rule on the input (exact arithmetic: the quotient is zero when x is).
    const hn::Vec<DUh> code32 = apply_zero_sign(
        p, hn::TruncateTo(duh, codebook_quotient_codes64(p, x, d, random_lanes64(p, start + k), &over)), u, duh);
    const V64 code = hn::PromoteTo(du, code32);
    if (call.out == BlockOut::Packed) sink.put(duh, code32, start + k, count);
    if (call.out == BlockOut::Fake) {
      // (decode * s) * g in double, rounded once to float32.
      const VF64 e = hn::GatherIndex(df, p.decode_f64.data(), hn::BitCast(DI64(), code));
      store_as_float(hn::Mul(hn::Mul(e, hn::Set(df, s)), hn::Set(df, g)), out_buf);
      std::memcpy(call.fake + start + k, out_buf, count * sizeof(float));
    }
    if (call.metrics != nullptr) {
      hn::Store(x, df, lane_x);
      hn::Store(code, du, lane_codes);
      hn::Store(hn::VecFromMask(du, over), du, lane_over);
      for (std::size_t l = 0; l < count; ++l)
        add_metric_at(call, start + k + l, lane_x[l], p.decode_f64[lane_codes[l]] * s * g, lane_over[l] != 0);
    }
  }
}

/// Rule 4over6: whether the block's exact sum of squared errors under block scale a is below that under b
/// (the reference's comparison; ties keep b). Each candidate's elements are the casts of x / (s * g) as in
/// float_scale_elements; an error deq - x is a double (as the reference computes it) whose square enters an
/// exact accumulator as its rounded value plus the fused multiply-add residual. A scale that is not positive
/// dequantizes to 0. Non-finite inputs do not count. A NaN scale, or a finite input that dequantizes to Inf or
/// NaN, makes a candidate's error infinite: a finite error beats it, two infinite ones tie.
HWY_INLINE bool lower_sse(const BlockParams& p, const BlockCall& call, const CastVectors64& c64, const std::uint8_t* xb,
                          std::size_t len, std::size_t start, double a, double b, FastExactSum& acc) {
  const DF64 df;
  const DUh duh;
  const DFh dfh;
  const std::size_t lanes = hn::Lanes(df);
  const InputKind in_kind = call.input;
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN double lane_x[kMaxLanes];
  HWY_ALIGN double lane_deq[2][kMaxLanes];
  acc.reset();
  const double scales[2] = {a, b};
  bool infinite[2] = {std::isnan(a), std::isnan(b)};
  for (std::size_t k = 0; k < len; k += lanes) {
    const std::size_t count = std::min(lanes, len - k);
    const hn::Vec<DUh> u = load_part(in_kind, xb, k, count, in_buf, duh);
    const VF64 x = hn::PromoteTo(df, hn::BitCast(dfh, u));
    hn::Store(x, df, lane_x);
    const V64 random = random_lanes64(p, start + k);
    for (int cand = 0; cand < 2; ++cand) {
      const double s = scales[cand];
      if (!(s > 0)) {  // 0 (or NaN: infinite above)
        hn::Store(hn::Zero(df), df, lane_deq[cand]);
        continue;
      }
      const double d = s * call.g;
      const auto code = hn::TruncateTo(duh, p.codebook ? codebook_quotient_codes64(p, x, d, random, nullptr)
                                                       : quotient_codes64<AnyRounding>(p, c64, x, d, random, nullptr));
      hn::Store(hn::Mul(decode_lanes64(p, code), hn::Set(df, d)), df, lane_deq[cand]);
    }
    for (std::size_t l = 0; l < count; ++l) {
      if (!std::isfinite(lane_x[l])) continue;
      if (!std::isfinite(lane_deq[0][l])) infinite[0] = true;
      if (!std::isfinite(lane_deq[1][l])) infinite[1] = true;
      if (infinite[0] || infinite[1]) continue;  // the sum is no longer needed
      const double ea = lane_deq[0][l] - lane_x[l];
      const double eb = lane_deq[1][l] - lane_x[l];
      const double pa = ea * ea;
      const double pb = eb * eb;
      acc.add(pa);
      acc.add(std::fma(ea, ea, -pa));
      acc.add(-pb);
      acc.add(-std::fma(eb, eb, -pb));
    }
  }
  if (infinite[0] || infinite[1]) return !infinite[0];
  return acc.sign() < 0;
}

/// A block whose float scale is zero: finite elements become zeros of their sign, others are cast as they
/// are, except an infinity kept as the element's infinity under block-nan (the reference's rules).
HWY_NOINLINE void zero_scale_elements(const BlockParams& p, const BlockCall& call, CodeSink& sink,
                                      const std::uint8_t* xb, std::size_t len, std::size_t start) {
  const DUh duh;
  const std::size_t lanes = hn::Lanes(duh);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN std::uint32_t bits[kMaxLanes];
  HWY_ALIGN std::uint32_t codes[kMaxLanes];
  const InputKind in_kind = call.input;
  const std::size_t in_bytes = in_kind == InputKind::F32 ? 4 : 2;
  for (std::size_t k = 0; k < len; k += lanes) {
    const std::size_t count = std::min(lanes, len - k);
    std::memset(in_buf, 0, sizeof(in_buf));
    std::memcpy(in_buf, xb + k * in_bytes, count * in_bytes);
    hn::Store(load_any(in_kind, in_buf, 0, duh), duh, bits);
    for (std::size_t l = 0; l < lanes; ++l) {
      const float xf = std::bit_cast<float>(bits[l]);
      double value = 0;
      bool over = false;
      if (std::isfinite(xf)) {
        codes[l] = p.cast.zero_code[std::signbit(xf) ? 1 : 0];
        value = std::signbit(xf) ? -0.0 : 0.0;
      } else if (std::isinf(xf) && p.specials == SpecialsPolicy::BlockNan && p.element_has_inf) {
        codes[l] = p.cast.inf_code[xf < 0 ? 1 : 0];  // kept as Inf (the reference's rule before the scale's)
        value = xf;
      } else {
        const std::uint32_t random = p.stochastic ? stochastic_bits(p.options->seed, start + k + l) : 0U;
        const CastResult r = cast(*p.element, static_cast<double>(xf), p.element_opts, random);
        codes[l] = r.code;
        value = p.decode_f64[r.code];
        over = r.overflow;
      }
      if (l >= count) continue;
      if (call.out == BlockOut::Fake) call.fake[start + k + l] = static_cast<float>(value);
      if (call.metrics != nullptr) add_metric_at(call, start + k + l, static_cast<double>(xf), value, over);
    }
    if (call.out == BlockOut::Packed) sink.put(duh, hn::Load(duh, codes), start + k, count);
  }
}

/// Statistics of one block: the largest finite magnitude (float32 bits order like the magnitudes), NaN, Inf.
struct BlockStats {
  std::uint32_t amax_bits = 0;
  bool finite = true;  ///< neither NaN nor Inf in the block
  bool has_nan = false;
  bool has_inf = false;
};

/// One reduction in the common case: the largest magnitude bits, specials included; only a block whose
/// largest bits are Inf or NaN needs the finite amax and the two flags separately. The block's last partial
/// vector (rest > 0 elements from full on) is read from in_buf, zero-padded: zeros change nothing here.
HWY_INLINE BlockStats block_stats(InputKind in_kind, const std::uint8_t* xb, const std::uint8_t* in_buf, std::size_t len,
                                  std::size_t full) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU inf_bits = hn::Set(du, 0x7F800000U);
  BlockStats st;
  VU vmax = hn::Zero(du);
  for (std::size_t k = 0; k < full; k += lanes) vmax = hn::Max(vmax, hn::And(load_any(in_kind, xb, k), abs_mask));
  if (full != len) vmax = hn::Max(vmax, hn::And(load_any(in_kind, in_buf, 0), abs_mask));
  st.amax_bits = hn::GetLane(hn::MaxOfLanes(du, vmax));
  st.finite = st.amax_bits < 0x7F800000U;
  if (!st.finite) {
    VU vfin = hn::Zero(du);
    VU vinf = hn::Zero(du);
    for (std::size_t k = 0; k < len; k += lanes) {
      const VU a = hn::And(k == full ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k), abs_mask);
      vfin = hn::Max(vfin, hn::IfThenElseZero(hn::Lt(a, inf_bits), a));
      vinf = hn::Or(vinf, hn::VecFromMask(du, hn::Eq(a, inf_bits)));
    }
    st.has_nan = st.amax_bits > 0x7F800000U;
    st.has_inf = hn::GetLane(hn::MaxOfLanes(du, vinf)) != 0;
    st.amax_bits = hn::GetLane(hn::MaxOfLanes(du, vfin));
  }
  return st;
}

/// Whether a block with these statistics is all NaN under the policy (when the scale format has NaN).
HWY_INLINE bool nan_block(const BlockParams& p, const BlockStats& st) {
  switch (p.specials) {
    case SpecialsPolicy::BlockNan: return st.has_nan || (st.has_inf && !p.element_has_inf);
    case SpecialsPolicy::BlockNanAny: return st.has_nan || st.has_inf;
    default: return false;
  }
}

/// A block of NaN elements (NaN scale code, NaN outputs).
HWY_INLINE void nan_elements(const BlockParams& p, const BlockCall& call, CodeSink& sink, std::size_t start,
                             std::size_t len) {
  if (call.out == BlockOut::Packed) sink.put_repeated(p.nan_block_code, start, len);
  if (call.out == BlockOut::Fake) {
    std::fill(call.fake + start, call.fake + start + len, std::numeric_limits<float>::quiet_NaN());
  }
  if (call.metrics != nullptr) call.metrics->nan_outputs += static_cast<std::int64_t>(len);
}

/// 2^e as float32 in every lane, for e in [-149, 127] (subnormal powers included).
HWY_INLINE VF pow2_lanes(VI e) {
  const DU du;
  const DI di;
  const DF df;
  const VU normal = hn::ShiftLeft<23>(hn::BitCast(du, hn::Add(e, hn::Set(di, 127))));
  // Below 2^-126: the single fraction bit 2^(e + 149).
  const VI shift = hn::Min(hn::Max(hn::Add(e, hn::Set(di, 149)), hn::Zero(di)), hn::Set(di, 31));  // in range: no UB
  const VU sub_bits = hn::Set(du, 1U) << hn::BitCast(du, shift);
  return hn::BitCast(df, hn::IfThenElse(hn::RebindMask(du, hn::Lt(e, hn::Set(di, -126))), sub_bits, normal));
}

/// The default floating-point environment for a scope (round to nearest, exceptions masked, no flush-to-zero,
/// no denormals-are-zero), which the float32 steps of the peers' arithmetic assume; the caller's is restored.
class DefaultFpEnvironment {
 public:
#if HWY_ARCH_X86
  DefaultFpEnvironment() : csr_(_mm_getcsr()) { _mm_setcsr(0x1F80U); }
  ~DefaultFpEnvironment() { _mm_setcsr(csr_); }
#endif
  DefaultFpEnvironment(const DefaultFpEnvironment&) = delete;
  DefaultFpEnvironment& operator=(const DefaultFpEnvironment&) = delete;

 private:
#if HWY_ARCH_X86
  unsigned csr_;
#endif
};

/// microxcaling Python's float32 nearest rounding (mxlab::pow2_element_cast, NearestArith::Float32AddHalf) of
/// the float32 scaled values v, as the bits of the rounded value w; the same float32 operations as the
/// reference, except that the exponent pe = max(floor(log2 |v|), min_exp) is read exactly from the bits where
/// the reference takes floor(fl32(log2 |v|)). The two differ only when fl32 rounds log2 |v| up to the next
/// integer k + 1: then |v| lies within a relative 2^-17 below 2^(k+1) (the float32 ulp of numbers below 128 is
/// at most 2^-16), so a = |v| * 2^(mbits - pe) is within a relative 2^-17 below 2^mbits (reference) or
/// 2^(mbits+1) (here). With mbits < 16 both a + 0.5 floor to that power of two, neither a - 0.5 is an integer,
/// and both give w = 2^(k+1). Below the smallest normal, pe is min_exp either way; for zero, a = 0 gives w = 0
/// for any pe.
HWY_INLINE VU add_half_lanes(const BlockParams& p, VF v) {
  const DU du;
  const DI di;
  const DF df;
  const VU vb = hn::BitCast(du, v);
  const VU abs_bits = hn::And(vb, hn::Set(du, 0x7FFFFFFFU));
  const VF av = hn::BitCast(df, abs_bits);
  VI pe = hn::Zero(di);
  if (p.half_float) {
    const VI field = hn::BitCast(di, hn::ShiftRight<23>(abs_bits));
    pe = hn::Max(hn::Sub(field, hn::Set(di, 127)), hn::Set(di, p.half_min_exp));
  }
  const VI mbits = hn::Set(di, p.half_mbits);
  const VF a = hn::Mul(av, pow2_lanes(hn::Sub(mbits, pe)));  // |v| / 2^pe * 2^mbits: exact
  VF r = hn::Floor(hn::Add(a, hn::Set(df, 0.5F)));
  if (p.cast.rounding == Rounding::NearestEven) {
    // r - 1 where fl32(a - 0.5) is an even integer (fmod(a - 0.5, 2) == 0); every float32 of 2^24 or more is.
    const VF y = hn::Sub(a, hn::Set(df, 0.5F));
    const VF big = hn::Set(df, 16777216.0F);
    const auto integral = hn::Eq(hn::Floor(y), y);
    const VI yi = hn::ConvertTo(di, hn::Min(hn::Abs(y), big));
    const auto even_int = hn::RebindMask(df, hn::Eq(hn::And(yi, hn::Set(di, 1)), hn::Zero(di)));
    const auto even = hn::Or(hn::Ge(hn::Abs(y), big), even_int);
    r = hn::IfThenElse(hn::And(integral, even), hn::Sub(r, hn::Set(df, 1.0F)), r);
  }
  const VF w = hn::Mul(r, pow2_lanes(hn::Sub(pe, mbits)));  // exact, or +inf past float32 as the reference
  return hn::Or(hn::BitCast(du, w), hn::And(vb, hn::Set(du, 0x80000000U)));
}

/// The float32 scaled values v = fl32(x / d) of the float32 lanes x, d = s * g, under the peers' float32 input
/// rounding with a float block scale (InputPrecision::Float32 without the NVFP4 arithmetic): the reference
/// rounds the exact quotient to float32 (cast_quotient into float32). Here the double quotient is rounded to
/// float32, which is the same except where the double lies within twice cast_quotient's window of a float32
/// value or midpoint (a float32 boundary times d may have 57 significant bits); those lanes, and every lane
/// under an infinite d, take the reference's own step. A power-of-two d gives exact quotients.
HWY_INLINE VF f32_quotient_lanes(const BlockParams& p, const CastVectors64& f32v, VF x, double d) {
  const DF df;
  const DF64 df64;
  const D64 d64;
  const DFh dfh;
  const std::size_t lanes = hn::Lanes(df);
  const std::size_t lh = hn::Lanes(df64);
  HWY_ALIGN float xf[kMaxLanes];
  HWY_ALIGN float v[kMaxLanes];
  HWY_ALIGN std::uint64_t fix[kMaxLanes] = {};
  hn::Store(x, df, xf);
  const VF64 dv = hn::Set(df64, d);
  const bool finite_d = std::isfinite(d);
  // A power-of-two d gives exact quotients; short significands never meet a midpoint (check_f32_quotients).
  const bool exact = finite_d && (!p.check_f32_quotients || power_of_two(d));
  bool any = !finite_d;
  for (std::size_t i = 0; i < lanes; i += lh) {
    const VF64 q = hn::Div(hn::PromoteTo(df64, hn::LoadU(dfh, xf + i)), dv);
    store_as_float(q, v + i);
    if (finite_d && !exact) {
      const M64 near = near_boundary64(f32v, q);
      hn::StoreU(hn::VecFromMask(d64, near), d64, fix + i);
      any = any || !hn::AllFalse(d64, near);
    }
  }
  if (any) {
    for (std::size_t l = 0; l < lanes; ++l) {
      if (finite_d && fix[l] == 0) continue;
      const double xl = xf[l];
      v[l] = std::isfinite(xl) ? static_cast<float>(p.f32->decode(cast_quotient(*p.f32, xl, d, p.f32_opts).code))
                               : static_cast<float>(xl / d);
    }
  }
  return hn::Load(df, v);
}

/// The element pass of a block under a peer's float32 arithmetic with a float block scale: the NVFP4 peers'
/// (mxlab::nvfp4_peer_element_input, every step in float32: v = x * min(1 / (s * S_dec), FLT_MAX) for
/// Transformer Engine, x / (s * S_dec) for ModelOpt, IEEE products and quotients in float32 lanes as the
/// scalar float32 ones) or the float32 input rounding alone (v = fl32(x / (s * g)), f32_quotient_lanes); then
/// the peer's element cast. Vectors where some v is NaN or infinite take mxlab::peer_element_cast lane by lane
/// (after the reference's rule for Inf kept as Inf under block-nan).
HWY_NOINLINE void peer_float_elements(const BlockParams& p, const BlockCall& call, const CastVectors& c,
                                      const CastVectors64& f32v, CodeSink& sink, const std::uint8_t* xb,
                                      std::size_t len, std::size_t start, float s, double scale_d) {
  const DU du;
  const DI di;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const QuantOptions& o = *p.options;
  const bool nvfp4 = p.nvfp4_peer;
  const bool te = o.nvfp4_arith == Nvfp4Arith::Te;
  const float te_factor = nvfp4 ? std::fmin(1.0F / (s * call.nvfp4->s_dec), std::numeric_limits<float>::max()) : 0;
  const float mo_divisor = nvfp4 ? s * call.nvfp4->s_dec : 1;
  const double d = scale_d * call.g;  // decode(code) * s * g as the reference's value: exact
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN float lane_v[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  HWY_ALIGN std::uint32_t rnd[kMaxLanes];
  for (std::size_t k = 0; k < len; k += lanes) {
    const std::size_t count = std::min(lanes, len - k);
    const VU u = load_part(in_kind, xb, k, count, in_buf);
    const VF x = hn::BitCast(df, u);
    VF v;
    if (!nvfp4) {
      v = f32_quotient_lanes(p, f32v, x, d);
    } else {
      v = te ? hn::Mul(x, hn::Set(df, te_factor)) : hn::Div(x, hn::Set(df, mo_divisor));
    }
    VU random = hn::Zero(du);
    if (p.stochastic) random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start + k));
    MU over = hn::FirstN(du, 0);
    VU code;
    const VU vb = hn::BitCast(du, v);
    // Codebooks take the reference's element step lane by lane (a table cast of v after the peer's steps).
    if (!p.codebook && hn::AllFalse(du, hn::Gt(hn::And(vb, hn::Set(du, 0x7FFFFFFFU)), hn::Set(du, 0x7F7FFFFFU)))) {
      const VU wb = p.add_half ? add_half_lanes(p, v) : vb;
      code = apply_zero_sign(p, cast_lanes<AnyRounding>(c, wb, random, hn::Zero(di), &over), vb);
    } else {
      hn::Store(u, du, lane_x);
      hn::Store(v, df, lane_v);
      hn::Store(random, du, rnd);
      for (std::size_t l = 0; l < lanes; ++l) {
        const float xf = std::bit_cast<float>(lane_x[l]);
        if (!nvfp4 && std::isinf(xf) && p.specials == SpecialsPolicy::BlockNan && p.element_has_inf) {
          lane_codes[l] = p.cast.inf_code[xf < 0 ? 1 : 0];  // kept as Inf (the reference's rule)
          lane_over[l] = 0;
          continue;
        }
        const float vin = nvfp4 ? nvfp4_peer_element_input(o, *call.nvfp4, xf, s) : lane_v[l];
        const CastResult r = peer_element_cast(*p.element, vin, static_cast<double>(xf), p.element_opts, rnd[l], o);
        lane_codes[l] = r.code;
        lane_over[l] = r.overflow ? ~0U : 0U;
      }
      code = hn::Load(du, lane_codes);
      over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
    }
    if (call.out == BlockOut::Packed) sink.put(du, code, start + k, count);
    if (call.out == BlockOut::Fake) {
      // decode(code) * d in double lanes (exact), rounded once to float32; two halves of the code vector.
      HWY_ALIGN float values[kMaxLanes];
#if HWY_TARGET == HWY_SCALAR
      values[0] = static_cast<float>(p.decode_f64[hn::GetLane(code)] * d);
#else
      const DF64 df64;
      const DUh duh;
      const DI64 di64;
      const VF64 dv = hn::Set(df64, d);
      const auto lower = hn::PromoteTo(di64, hn::BitCast(hn::RebindToSigned<DUh>(), hn::LowerHalf(duh, code)));
      const auto upper = hn::PromoteTo(di64, hn::BitCast(hn::RebindToSigned<DUh>(), hn::UpperHalf(duh, code)));
      store_as_float(hn::Mul(hn::GatherIndex(df64, p.decode_f64.data(), lower), dv), values);
      store_as_float(hn::Mul(hn::GatherIndex(df64, p.decode_f64.data(), upper), dv), values + hn::Lanes(df64));
#endif
      std::memcpy(call.fake + start + k, values, count * sizeof(float));
    }
    if (call.metrics != nullptr)
      add_lane_metrics(p, call, start + k, count, du, u, code, hn::VecFromMask(du, over), d);
  }
}

/// Transformer Engine's 4over6 error of one candidate block scale code sc (mxlab::nvfp4_peer_block_code's float
/// MAE or MSE): the candidate's element codes cast from v = x * min(1 / (s * S_dec), FLT_MAX) in float32 lanes,
/// the terms |val - x| or (val - x)^2 with val = dq * s * A / (448 * 6) in float32 lanes, summed in float32 in
/// element order. False (nothing decided) when some v is NaN or infinite.
HWY_INLINE bool te_4over6_error(const BlockParams& p, const BlockCall& call, const CastVectors& c,
                                const std::uint8_t* xb, std::size_t len, std::size_t start, std::uint32_t sc,
                                float* err) {
  const DU du;
  const DI di;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const std::size_t in_bytes = in_kind == InputKind::F32 ? 4 : 2;
  const Nvfp4PeerTensor& t = *call.nvfp4;
  const double sd = p.scale_of(sc);
  const float s = std::isnan(sd) ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(sd);
  const VF factor = hn::Set(df, std::fmin(1.0F / (s * t.s_dec), std::numeric_limits<float>::max()));
  const bool mse = p.options->four_over_six == FourOverSixMetric::Mse;
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN float terms[kMaxLanes];
  float sum = 0.0F;
  for (std::size_t k = 0; k < len; k += lanes) {
    const std::size_t count = std::min(lanes, len - k);
    const VU u = load_part(in_kind, xb, k, count, in_buf);
    const VF x = hn::BitCast(df, u);
    const VF v = hn::Mul(x, factor);
    if (!hn::AllFalse(du, hn::Gt(hn::And(hn::BitCast(du, v), hn::Set(du, 0x7FFFFFFFU)), hn::Set(du, 0x7F7FFFFFU))))
      return false;
    VU random = hn::Zero(du);
    if (p.stochastic) random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start + k));
    const VU code = cast_lanes<AnyRounding>(c, hn::BitCast(du, v), random, hn::Zero(di), nullptr);
    const VF dq = hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code));
    const VF val = hn::Div(hn::Mul(hn::Mul(dq, hn::Set(df, s)), hn::Set(df, t.amax)), hn::Set(df, t.global_max));
    const VF diff = hn::Sub(val, x);
    hn::Store(mse ? hn::Mul(diff, diff) : hn::Abs(diff), df, terms);
    for (std::size_t l = 0; l < count; ++l) sum = sum + terms[l];
  }
  *err = sum;
  return true;
}

/// Float block scales (rule amax), in groups of blocks: statistics of each block, then the scale codes of
/// the group in one vector cast of the double quotients amax / (target * g) (correctly rounded, as
/// float_scale_elements explains for the elements; the scale cast takes no random bits), then the element
/// passes, each block still in the caches.
HWY_NOINLINE void float_scale_loop(const BlockParams& p, const BlockCall& call) {
  const DU du;
  const DF64 df;
  const D64 d64;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const std::size_t in_bytes = in_kind == InputKind::F32 ? 4 : 2;
  constexpr std::size_t kGroup = 64;
  const CastVectors64 c64(p.cast);
  const CastVectors64 s64(p.scale_cast);
  const VF64 target_g = hn::Set(df, p.scale_target * call.g);
  const bool elements = call.out != BlockOut::None || call.metrics != nullptr;
  const auto* in = static_cast<const std::uint8_t*>(call.x);
  CodeSink sink(p, call);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN double amax[kGroup + kMaxLanes];
  HWY_ALIGN std::uint64_t codes[kGroup + kMaxLanes];
  BlockStats stats[kGroup];
  std::size_t starts[kGroup];
  std::size_t lens[kGroup];
  FastExactSum sse_diff;  // rule 4over6
  constexpr std::uint32_t kNoCode = ~0U;
  std::optional<DefaultFpEnvironment> fp_env;
  fp_env.emplace();  // the float32 steps (peers' arithmetic, fast32 values) assume it
  const CastVectors c32(p.cast);  // the peers' float32 arithmetic: float32 lanes
  const CastVectors64 f32v(p.f32_cast);  // float32 as a grid (the float32 input rounding of float scales)
  std::vector<double> block_x;    // Transformer Engine's 4over6: one block's values and random words
  std::vector<std::uint32_t> block_random;
  // The NVFP4 peers' scale codes of a group in vector lanes (rules other than 4over6, no minimum scale).
  const bool vector_peer_scales =
      p.nvfp4_peer && !p.four_over_six && !(p.min_block_scale > 0) && p.scale_bytes <= 2;
  const DF dfl;
  const CastVectors cs32(p.scale_cast);
  const bool te_scales = p.options->nvfp4_arith == Nvfp4Arith::Te;
  const auto emax_f = static_cast<float>(p.scale_target);
  const float te_scale_factor = call.nvfp4 != nullptr ? call.nvfp4->s_enc * (1.0F / emax_f) : 0.0F;
  const float mo_scale_divisor = call.nvfp4 != nullptr ? emax_f * call.nvfp4->s_dec : 1.0F;
  HWY_ALIGN float pre[kGroup + kMaxLanes];
  HWY_ALIGN std::uint32_t pre_codes[kGroup + kMaxLanes];

  BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
  for (std::int64_t g0 = call.b0; g0 < call.b1; g0 += static_cast<std::int64_t>(kGroup)) {
    const auto count = static_cast<std::size_t>(std::min<std::int64_t>(kGroup, call.b1 - g0));
    for (std::size_t i = 0; i < count; ++i) {
      cursor.next(&starts[i], &lens[i]);
      const std::uint8_t* xb = in + static_cast<std::size_t>(starts[i]) * in_bytes;
      const std::size_t full = lens[i] - lens[i] % lanes;
      if (full != lens[i]) {
        std::memset(in_buf, 0, sizeof(in_buf));
        std::memcpy(in_buf, xb + full * in_bytes, (lens[i] - full) * in_bytes);
      }
      if constexpr (HWY_TARGET != HWY_SCALAR) {
        for (std::size_t k = 0; k < lens[i] * in_bytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
      }
      stats[i] = block_stats(in_kind, xb, in_buf, lens[i], full);
      const float a = std::bit_cast<float>(stats[i].amax_bits);
      amax[i] = a;
      const auto b = static_cast<std::size_t>(g0) + i;
      if (call.amax != nullptr) call.amax[b] = a;
      if (call.tensor_amax != nullptr) *call.tensor_amax = std::max(*call.tensor_amax, a);
      if (call.tensor_nan != nullptr && stats[i].has_nan) *call.tensor_nan = true;
      if (call.tensor_inf != nullptr && stats[i].has_inf) *call.tensor_inf = true;
    }
    if (!elements) continue;
    if (p.nvfp4_peer) {
      if (vector_peer_scales) {
        // The float32 quotients of mxlab::nvfp4_peer_block_code (Transformer Engine: amax * (S_enc * (1 / 6)),
        // ModelOpt: amax / (6 * S_dec)) in float32 lanes, cast to the scale format in one vector cast; blocks
        // with NaN or Inf and the zero-block rule one at a zero quotient call that function instead.
        for (std::size_t i = 0; i < count; ++i) pre[i] = static_cast<float>(amax[i]);
        for (std::size_t i = count; i % lanes != 0; ++i) pre[i] = 0.0F;
        for (std::size_t i = 0; i < count; i += lanes) {
          const VF a = hn::Load(dfl, pre + i);
          const VF q =
              te_scales ? hn::Mul(a, hn::Set(dfl, te_scale_factor)) : hn::Div(a, hn::Set(dfl, mo_scale_divisor));
          hn::Store(q, dfl, pre + i);
          hn::Store(cast_lanes<AnyRounding>(cs32, hn::BitCast(du, q), hn::Zero(du), hn::Zero(DI()), nullptr), du,
                    pre_codes + i);
        }
      }
      for (std::size_t i = 0; i < count; ++i) {
        const auto b = static_cast<std::size_t>(g0) + i;
        const std::uint8_t* xb = in + starts[i] * in_bytes;
        if (nan_block(p, stats[i]) && p.scale_has_nan) {
          if (call.out == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), p.scale_nan_code);
          nan_elements(p, call, sink, starts[i], lens[i]);
          continue;
        }
        std::uint32_t code = kNoCode;
        if (vector_peer_scales && !stats[i].has_nan && !stats[i].has_inf &&
            !(pre[i] == 0.0F && p.options->zero_block == ZeroBlock::One)) {
          code = pre_codes[i];
        }
        const bool te_metric = p.four_over_six && p.options->four_over_six != FourOverSixMetric::ExactSse;
        if (te_metric) {
          const auto [map6, map4] = nvfp4_peer_4over6_candidates(*p.owner, p.scale_opts, *call.nvfp4, amax[i],
                                                                 stats[i].has_nan, stats[i].has_inf);
          float e4 = 0;
          float e6 = 0;
          if (map4 == map6) {
            code = map6;
          } else if (te_4over6_error(p, call, c32, xb, lens[i], starts[i], map4, &e4) &&
                     te_4over6_error(p, call, c32, xb, lens[i], starts[i], map6, &e6)) {
            code = e4 < e6 ? map4 : map6;  // ties (and NaN) keep map-to-6
          } else {
            code = kNoCode;
          }
        }
        if (p.four_over_six && (!te_metric || code == kNoCode)) {
          // The candidates' errors from the reference, which takes the block's values and random words.
          block_x.resize(lens[i]);
          block_random.assign(lens[i], 0U);
          for (std::size_t k = 0; k < lens[i]; ++k) {
            HWY_ALIGN std::uint32_t one[kMaxLanes];
            std::memset(in_buf, 0, sizeof(in_buf));
            std::memcpy(in_buf, xb + k * in_bytes, in_bytes);
            hn::Store(load_any(in_kind, in_buf, 0), du, one);
            block_x[k] = static_cast<double>(std::bit_cast<float>(one[0]));
            if (p.stochastic) block_random[k] = stochastic_bits(p.options->seed, starts[i] + k);
          }
        }
        if (code == kNoCode) {
          code = nvfp4_peer_block_code(*p.owner, p.element_opts, p.scale_opts, *call.nvfp4, amax[i], stats[i].has_nan,
                                       stats[i].has_inf, block_x, block_random);
        }
        if (call.out == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), code);
        const double sd = p.scale_of(code);
        const float s = std::isnan(sd) ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(sd);
        peer_float_elements(p, call, c32, f32v, sink, xb, lens[i], starts[i], s, sd);
      }
      continue;
    }
    const std::size_t l64 = hn::Lanes(df);
    for (std::size_t i = count; i % l64 != 0; ++i) amax[i] = 0;
    for (std::size_t i = 0; i < count; i += l64) {
      const VF64 q = hn::Div(hn::Load(df, amax + i), target_g);
      hn::Store(cast_lanes64<AnyRounding>(s64, q, hn::Zero(d64), nullptr), d64, codes + i);
      if (p.check_scale_quotients) {
        // Quotients near a boundary of the scale grid are cast as the reference casts them (quotient_codes64
        // explains why only those).
        HWY_ALIGN std::uint64_t fix[kMaxLanes];
        hn::Store(hn::VecFromMask(d64, near_boundary64(s64, q)), d64, fix);
        for (std::size_t l = 0; l < l64 && i + l < count; ++l)
          if (fix[l] != 0)
            codes[i + l] = cast_quotient(*p.scale_format, amax[i + l], p.scale_target * call.g, p.scale_opts).code;
      }
    }
    for (std::size_t i = 0; i < count; ++i) {
      const auto b = static_cast<std::size_t>(g0) + i;
      const std::size_t start = starts[i];
      const bool tensor_nan = p.specials == SpecialsPolicy::TensorNan && call.any_nan;
      if ((nan_block(p, stats[i]) || tensor_nan) && p.scale_has_nan) {
        if (call.out == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), p.scale_nan_code);
        nan_elements(p, call, sink, start, lens[i]);
        continue;
      }
      std::uint32_t code = static_cast<std::uint32_t>(codes[i]);
      // The zero-block and minimum-scale rules of float_block_scale_code.
      if (amax[i] == 0 && p.options->zero_block == ZeroBlock::One) code = p.scale_one_code;
      if (p.min_block_scale > 0 && p.scale_of(code) < p.min_block_scale) code = p.min_block_scale_code;
      if (p.four_over_six && amax[i] > 0) {
        // The candidate that maps amax to 2/3 of the element's largest value (4 for E2M1), kept when its
        // squared error is lower.
        const auto alt = float_block_scale_code(*p.owner, p.scale_opts, amax[i], p.scale_target_alt, call.g);
        if (alt != code && lower_sse(p, call, c64, in + starts[i] * in_bytes, lens[i], starts[i], p.scale_of(alt),
                                     p.scale_of(code), sse_diff)) {
          code = alt;
        }
      }
      if (call.out == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), code);
      const double s = p.scale_of(code);
      const std::uint8_t* xb = in + start * in_bytes;
      if (std::isnan(s)) {  // a scale that overflowed to NaN: the block's elements are NaN codes
        nan_elements(p, call, sink, start, lens[i]);
      } else if (s == 0) {
        zero_scale_elements(p, call, sink, xb, lens[i], start);
      } else {
        if (p.float_peer) {
          peer_float_elements(p, call, c32, f32v, sink, xb, lens[i], start, static_cast<float>(s), s);
        } else if (p.codebook) {
          codebook_elements(p, call, sink, xb, lens[i], start, s, call.g);
        } else {
          float_scale_elements<AnyRounding>(p, call, c64, c32, sink, xb, lens[i], start, s);
        }
      }
    }
  }
  if (call.out == BlockOut::Packed) sink.finish();
  if (call.stream) hwy::FlushStream();
}

/// Whether the floating-point environment is the default one the fast path relies on: round to nearest,
/// no flush-to-zero, no denormals-are-zero.
HWY_INLINE bool default_fp_environment() {
#if HWY_ARCH_X86
  return (_mm_getcsr() & 0xE040U) == 0;
#else
  return false;
#endif
}

/// One block of the power-of-two scale path: statistics, scale, element codes, and the requested outputs.
template <class Round, BlockOut kOut>
HWY_INLINE void one_block(const BlockParams& p, const BlockCall& call, const CastVectors& c, const FastVectors& fv,
                          bool fast_ok, CodeSink& sink, std::uint8_t* in_buf, std::int64_t b, std::int64_t start,
                          std::size_t len) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const std::size_t in_bytes = in_kind == InputKind::F32 ? 4 : 2;
  const auto* xb = static_cast<const std::uint8_t*>(call.x) + static_cast<std::size_t>(start) * in_bytes;
  const std::size_t full = len - len % lanes;
  const std::size_t rest = len - full;
  if (rest != 0) {
    // The last partial vector through a zero-padded buffer: zeros change neither amax nor the flags.
    std::memset(in_buf, 0, kMaxLanes * 4);
    std::memcpy(in_buf, xb + full * in_bytes, rest * in_bytes);
  }
  // Every 64-byte line of the input, a little ahead: the hardware prefetcher alone leaves the loop waiting
  // on memory for tensors beyond the caches.
  if constexpr (HWY_TARGET != HWY_SCALAR) {
    for (std::size_t k = 0; k < len * in_bytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
  }
  const BlockStats st = block_stats(in_kind, xb, in_buf, len, full);
  if (call.amax != nullptr) call.amax[b] = std::bit_cast<float>(st.amax_bits);
  if (call.tensor_amax != nullptr) *call.tensor_amax = std::max(*call.tensor_amax, std::bit_cast<float>(st.amax_bits));
  if (kOut == BlockOut::None && call.metrics == nullptr) return;

  const auto out_index = static_cast<std::size_t>(start);
  if (nan_block(p, st) && p.scale_has_nan) {
    if constexpr (kOut == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), p.scale_nan_code);
    nan_elements(p, call, sink, out_index, len);
    return;
  }
  BlockScale bs;
  bs.xe = block_exponent(p, st.amax_bits);
  bs.scode = p.scale_code[static_cast<std::size_t>(bs.xe - p.x_min)];
  bs.scale_d = p.pow2_value_d[static_cast<std::size_t>(bs.xe - p.x_min)];
  if constexpr (kOut == BlockOut::Packed) write_scale(p, call.scales, b, bs.scode);
  if (p.codebook) {
    codebook_elements(p, call, sink, xb, len, out_index, bs.scale_d, 1.0);
  } else if (fast_ok && st.finite && bs.xe >= kFastMinExponent) {
    if constexpr (std::is_same_v<Round, RoundingTag<Rounding::NearestEven>>) {
      block_elements<Round, kOut, true>(p, call, c, fv, sink, xb, in_buf, len, full, out_index, bs);
    }
  } else {
    block_elements<Round, kOut, false>(p, call, c, fv, sink, xb, in_buf, len, full, out_index, bs);
  }
}

/// The common MX case in a tight loop: nearest-even fast path, rule floor, no metrics, rows of whole blocks
/// of whole vectors (blocks are contiguous). A block holding NaN or Inf goes through one_block.
template <InputKind kIn, BlockOut kOut>
HWY_NOINLINE void fast_floor_loop(const BlockParams& p, const BlockCall& call, const CastVectors& c,
                                  const FastVectors& fv, CodeSink& sink) {
  using Rne = RoundingTag<Rounding::NearestEven>;
  const DU du;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  constexpr std::size_t kInBytes = kIn == InputKind::F32 ? 4 : 2;
  const auto block = static_cast<std::size_t>(call.block);
  const auto* in = static_cast<const std::uint8_t*>(call.x);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  for (std::int64_t b = call.b0; b < call.b1; ++b) {
    const std::size_t start = static_cast<std::size_t>(b) * block;
    const std::uint8_t* xb = in + start * kInBytes;
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      for (std::size_t k = 0; k < block * kInBytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
    }
    VU vmax = hn::Zero(du);
    for (std::size_t k = 0; k < block; k += lanes) vmax = hn::Max(vmax, hn::And(load_input<kIn>(xb, k), abs_mask));
    const std::uint32_t amax_bits = hn::GetLane(hn::MaxOfLanes(du, vmax));
    const int xe = amax_bits >= 0x7F800000U ? 0 : block_exponent(p, amax_bits);
    if (amax_bits >= 0x7F800000U || xe < kFastMinExponent) {
      one_block<Rne, kOut>(p, call, c, fv, true, sink, in_buf, b, static_cast<std::int64_t>(start), block);
      continue;
    }
    if (call.amax != nullptr) call.amax[b] = std::bit_cast<float>(amax_bits);
    const auto xi = static_cast<std::size_t>(xe - p.x_min);
    const std::uint32_t scode = p.scale_code[xi];
    const VF inverse = hn::Set(df, p.scale_inverse[xi]);
    const VF scale_v = hn::Set(df, p.pow2_value[xi]);
    if constexpr (kOut == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), scode);
    for (std::size_t k = 0; k < block; k += lanes) {
      const VU u = load_input<kIn>(xb, k);
      MU over;
      VF r;
      const VU code = fast_rne_lanes<kOut == BlockOut::Fake>(fv, u, inverse, &r, &over);
      if constexpr (kOut == BlockOut::Packed) sink.put(du, code, start + k, lanes);
      if constexpr (kOut == BlockOut::Fake) {
        VF value = hn::Mul(hn::BitCast(df, hn::Or(hn::BitCast(du, r), hn::And(u, hn::Set(du, 0x80000000U)))), scale_v);
        if (!hn::AllFalse(du, over)) {
          const VF special =
              hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(DI(), code)), scale_v);
          value = hn::IfThenElse(hn::RebindMask(df, over), special, value);
        }
        float* dst = call.fake + start + k;
        if (call.stream && reinterpret_cast<std::uintptr_t>(dst) % (lanes * sizeof(float)) == 0) {
          hn::Stream(value, df, dst);
        } else {
          hn::StoreU(value, df, dst);
        }
      }
    }
  }
}

/// The general power-of-two path over blocks [b0, b1) (BlockParams::planned): each block's decision is
/// mxlab::pow2_block_plan's; the subtiles' offsets follow the reference's rule; elements are cast in vectors,
/// except vectors holding NaN or Inf under the peers' arithmetic (or Inf times a zero factor), which go
/// through mxlab::pow2_element_cast, the reference's own element step.
/// Runs under the default floating-point environment (the float32 steps must round to nearest without
/// flushing), set for the call and restored after it.
HWY_NOINLINE void plan_loop(const BlockParams& p, const BlockCall& call) {
  const DU du;
  const DI di;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const std::size_t in_bytes = in_kind == InputKind::F32 ? 4 : 2;
  const auto* in = static_cast<const std::uint8_t*>(call.x);
  const CastVectors c(p.cast);
  const bool want_metrics = call.metrics != nullptr;
  const bool elements = call.out != BlockOut::None || want_metrics;
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU inf_bits = hn::Set(du, 0x7F800000U);
  const VU sign_mask = hn::Set(du, 0x80000000U);
  const auto sub = static_cast<std::size_t>(p.subtile);
  CodeSink sink(p, call);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN std::int32_t lane_off[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  HWY_ALIGN float out_buf[kMaxLanes];
  std::vector<std::uint32_t> abs_buf;  // subtiles: |x| bits of the block's finite elements (0 for NaN/Inf)
  std::vector<std::int32_t> element_off;  // subtiles: the offset of each element of the block
  if (sub > 0) {
    abs_buf.resize(static_cast<std::size_t>(call.block) + kMaxLanes);
    element_off.assign(static_cast<std::size_t>(call.block) + kMaxLanes, 0);
  }
  const bool vector_subtiles = sub > 0 && p.rule == ScaleRule::Floor && sub <= lanes && lanes % sub == 0 && sub <= 8 &&
                               (sub & (sub - 1)) == 0;
  const DefaultFpEnvironment fp_env;
  BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
  for (std::int64_t b = call.b0; b < call.b1; ++b) {
    std::size_t start = 0;
    std::size_t len = 0;
    cursor.next(&start, &len);
    const std::uint8_t* xb = in + start * in_bytes;
    const std::size_t full = len - len % lanes;
    if (full != len) {
      std::memset(in_buf, 0, sizeof(in_buf));
      std::memcpy(in_buf, xb + full * in_bytes, (len - full) * in_bytes);
    }
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      for (std::size_t k = 0; k < len * in_bytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
    }
    const BlockStats st = block_stats(in_kind, xb, in_buf, len, full);
    const float amax = std::bit_cast<float>(st.amax_bits);
    if (call.amax != nullptr) call.amax[b] = amax;
    if (call.tensor_amax != nullptr) *call.tensor_amax = std::max(*call.tensor_amax, amax);
    if (call.tensor_nan != nullptr && st.has_nan) *call.tensor_nan = true;
    if (!elements) continue;
    const Pow2BlockPlan plan = pow2_block_plan(*p.owner, static_cast<double>(amax), st.has_nan, st.has_inf,
                                               call.any_nan, p.x_min, p.x_max);
    const auto xi = static_cast<std::size_t>(plan.exponent - p.x_min);
    const std::uint32_t scode = plan.nan_scale ? p.scale_nan_code : p.scale_code[xi];
    if (call.out == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), scode);
    const double scale_d = plan.nan_scale ? std::numeric_limits<double>::quiet_NaN() : p.pow2_value_d[xi];

    // Subtiles: 2^(X - d), d as large as the subtile's own exponent allows (within d <= dmax, X - d >= x_min).
    if (sub > 0) {
      const std::size_t nsub = (len + sub - 1) / sub;
      const int lo = std::max(plan.exponent - p.subtile_dmax, p.x_min);
      if (vector_subtiles) {
        // Rule floor with subtiles of 1, 2, 4 or 8 lanes: each lane takes its subtile's largest magnitude
        // (pairs, quads and octets of lanes exchanged and compared), its exponent read from the bits.
        const VI x_e = hn::Set(di, plan.exponent);
        const VI lo_e = hn::Set(di, lo);
        const bool none = plan.nan_scale;
        for (std::size_t k = 0; k < len; k += lanes) {
          const VU u = k == full ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
          const VU a = hn::And(u, abs_mask);
          VU m = hn::IfThenElseZero(hn::Lt(a, inf_bits), a);
          if (sub >= 2) m = hn::Max(m, hn::Reverse2(du, m));
          if (sub >= 4) m = hn::Max(m, hn::Reverse4(du, m));
          if (sub >= 8) m = hn::Max(m, hn::Reverse8(du, m));
          const VI field = hn::BitCast(di, hn::ShiftRight<23>(m));
          // A float32 subnormal: the exponent of its fraction converted to float (exact), minus 149.
          const VU m_f = hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, m)));
          const VI sub_e = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(m_f)), hn::Set(di, 127 + 149));
          VI e = hn::IfThenElse(hn::Eq(field, hn::Zero(di)), sub_e, hn::Sub(field, hn::Set(di, 127)));
          if (p.clamp == ClampSite::Amax) e = hn::Min(hn::Max(e, hn::Set(di, -126)), hn::Set(di, 127));
          const VI xs = hn::Min(hn::Max(hn::Sub(e, hn::Set(di, p.emax)), lo_e), x_e);
          VI off = hn::Sub(x_e, xs);
          off = none ? hn::Zero(di) : hn::IfThenElseZero(hn::RebindMask(di, hn::Ne(m, hn::Zero(du))), off);
          hn::StoreU(off, di, element_off.data() + k);
        }
      } else {
        for (std::size_t k = 0; k < len; k += lanes) {
          const VU u = k == full ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
          const VU a = hn::And(u, abs_mask);
          hn::StoreU(hn::IfThenElseZero(hn::Lt(a, inf_bits), a), du, abs_buf.data() + k);
        }
        for (std::size_t j = 0; j < nsub; ++j) {
          std::uint32_t m = 0;
          for (std::size_t i = j * sub; i < std::min(len, (j + 1) * sub); ++i) m = std::max(m, abs_buf[i]);
          int off = 0;
          if (!plan.nan_scale && m != 0) off = plan.exponent - std::clamp(block_exponent(p, m), lo, plan.exponent);
          std::fill(element_off.begin() + static_cast<std::ptrdiff_t>(j * sub),
                    element_off.begin() + static_cast<std::ptrdiff_t>(std::min(len, (j + 1) * sub)), off);
        }
      }
      if (call.out == BlockOut::Packed) {
        const std::int64_t r = static_cast<std::int64_t>(start) / call.row;
        const std::int64_t first = r * call.subtiles_per_row +
                                   (static_cast<std::int64_t>(start) - r * call.row) / static_cast<std::int64_t>(sub);
        for (std::size_t j = 0; j < nsub; ++j)
          call.subtile_offsets[static_cast<std::size_t>(first) + j] = static_cast<std::uint8_t>(element_off[j * sub]);
      }
    }
    if (plan.kind == Pow2BlockPlan::Kind::NanCodes) {
      nan_elements(p, call, sink, start, len);
      continue;
    }
    const bool multiply = plan.kind == Pow2BlockPlan::Kind::Multiply;
    const bool zero_block = plan.kind == Pow2BlockPlan::Kind::Zero;
    const VI divisor_e = hn::Set(di, plan.divisor_exponent);
    const VI scale_e = hn::Set(di, plan.exponent);
    const int factor_e = multiply && plan.factor != 0 ? std::ilogb(plan.factor) : 0;
    const VF factor_v = hn::Set(df, static_cast<float>(plan.factor));  // 0 or a power of two >= 2^-149
    const bool deep_scales = p.x_min < -127;
    for (std::size_t k = 0; k < len; k += lanes) {
      const bool tail = k == full;
      const std::size_t count = tail ? len - full : lanes;
      const VU u = tail ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
      VI off = hn::Zero(di);
      if (sub > 0) off = hn::LoadU(di, element_off.data() + k);  // lanes past the block: never stored
      VU random = hn::Zero(du);
      if (p.stochastic) random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start + k));
      const VU abs = hn::And(u, abs_mask);
      const bool specials = !hn::AllFalse(du, hn::Gt(abs, hn::Set(du, 0x7F7FFFFFU)));
      MU over = hn::FirstN(du, 0);
      VU code = hn::Zero(du);
      bool scalar = false;
      if (zero_block) {
        code = hn::Set(du, p.zero_code_pos);
      } else if (p.codebook) {
        if (specials || multiply || p.peer) {
          scalar = true;  // the reference's own element step (mxlab::pow2_element_cast)
        } else {
          // Exact quotients x * 2^(d - X) in double lanes, cast by the codebook's table (codebook_lanes64).
          const DF64 df64;
          const D64 d64;
          const DUh duh;
          const hn::Rebind<std::int32_t, D64> dih;
          const std::size_t l64 = hn::Lanes(df64);
          HWY_ALIGN float xs[kMaxLanes];
          HWY_ALIGN std::int32_t ks[kMaxLanes];
          HWY_ALIGN std::uint32_t rs[kMaxLanes];
          hn::Store(hn::BitCast(df, u), df, xs);
          hn::Store(hn::Sub(off, divisor_e), di, ks);
          hn::Store(random, du, rs);
          for (std::size_t h = 0; h < lanes; h += l64) {
            const VF64 x64 = hn::PromoteTo(df64, hn::LoadU(DFh(), xs + h));
            const auto k64 = hn::PromoteTo(DI64(), hn::LoadU(dih, ks + h));
            const VF64 pow = hn::BitCast(df64, hn::ShiftLeft<52>(hn::Add(k64, hn::Set(DI64(), 1023))));
            M64 cb_over;
            const V64 cb = codebook_lanes64(p, hn::Mul(x64, pow), hn::PromoteTo(d64, hn::LoadU(duh, rs + h)),
                                            &cb_over, nullptr);
            hn::StoreU(hn::TruncateTo(duh, cb), duh, lane_codes + h);
            hn::StoreU(hn::TruncateTo(duh, hn::VecFromMask(d64, cb_over)), duh, lane_over + h);
          }
          code = apply_zero_sign(p, hn::Load(du, lane_codes), u);
          over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
        }
      } else if (p.peer) {
        if (specials) {
          scalar = true;
        } else {
          const VF x = hn::BitCast(df, u);
          // fl32(x / 2^(X - d)) = fl32(x * 2^(d - X)): the power is a float32, the product rounded once. Past
          // 2^127 (scales below 2^-127, as float32 scale formats have) x first takes the excess exactly: the
          // block's elements lie below 2^(X + emax + 2), far from float32's largest values.
          VF v;
          if (multiply) {
            v = hn::Mul(x, factor_v);
          } else if (deep_scales) {
            const VI e = hn::Sub(off, divisor_e);
            const VF x_up = hn::Mul(x, pow2_lanes(hn::Max(hn::Sub(e, hn::Set(di, 127)), hn::Zero(di))));
            v = hn::Mul(x_up, pow2_lanes(hn::Min(e, hn::Set(di, 127))));
          } else {
            v = hn::Mul(x, pow2_lanes(hn::Sub(off, divisor_e)));
          }
          const VU vb = hn::BitCast(du, v);
          VU wb = vb;
          if (p.add_half) wb = add_half_lanes(p, v);
          code = apply_zero_sign(p, cast_lanes<AnyRounding>(c, wb, random, hn::Zero(di), &over), vb);
        }
      } else {
        if (multiply && (plan.factor == 0 ? specials : false)) {
          scalar = true;  // Inf * 0
        } else {
          VU xin = u;
          VI minus_x = hn::Sub(off, divisor_e);
          if (multiply) {
            if (plan.factor == 0) xin = hn::And(u, sign_mask);  // finite x * 0: a zero of x's sign
            minus_x = hn::Set(di, factor_e);
          }
          code = apply_zero_sign(p, cast_lanes<AnyRounding>(c, xin, random, minus_x, &over), u);
        }
      }
      if (scalar) {
        hn::Store(u, du, lane_x);
        HWY_ALIGN std::uint32_t rnd[kMaxLanes];
        hn::Store(random, du, rnd);
        hn::Store(off, di, lane_off);
        for (std::size_t l = 0; l < lanes; ++l) {
          const double x = static_cast<double>(std::bit_cast<float>(lane_x[l]));
          const CastResult r = pow2_element_cast(*p.owner, p.element_opts, plan, lane_off[l], x, rnd[l]);
          lane_codes[l] = r.code;
          lane_over[l] = r.overflow ? ~0U : 0U;
        }
        code = hn::Load(du, lane_codes);
        over = hn::Ne(hn::Load(du, lane_over), hn::Zero(du));
      }
      if (call.out == BlockOut::Packed) sink.put(du, code, start + k, count);
      if (call.out == BlockOut::Fake) {
        // decode(code) * 2^(X - d), rounded once to float32 (NaN under a NaN scale).
        const VF s = plan.nan_scale ? hn::Set(df, std::numeric_limits<float>::quiet_NaN())
                                    : pow2_lanes(hn::Sub(scale_e, off));
        const VF value = hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code)), s);
        hn::Store(value, df, out_buf);
        std::memcpy(call.fake + start + k, out_buf, count * sizeof(float));
      }
      if (want_metrics) {
        hn::Store(u, du, lane_x);
        hn::Store(code, du, lane_codes);
        hn::Store(hn::VecFromMask(du, over), du, lane_over);
        hn::Store(off, di, lane_off);
        for (std::size_t l = 0; l < count; ++l) {
          const double deq = p.decode_f64[lane_codes[l]] * std::ldexp(scale_d, -lane_off[l]);
          add_metric_at(call, start + k + l, static_cast<double>(std::bit_cast<float>(lane_x[l])), deq,
                      lane_over[l] != 0);
        }
      }
    }
  }
  if (call.out == BlockOut::Packed) sink.finish();
}

/// One pass over blocks [b0, b1): block statistics, scale, element codes, and the requested outputs.
template <class Round, BlockOut kOut>
HWY_NOINLINE void block_loop(const BlockParams& p, const BlockCall& call) {
  if (p.float_scales) return float_scale_loop(p, call);  // one instance: mode and output chosen at run time
  if (p.planned) return plan_loop(p, call);
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const CastVectors c(p.cast);
  constexpr bool kRne = std::is_same_v<Round, RoundingTag<Rounding::NearestEven>>;
  const FastVectors fv(p.fast);
  const bool fast_ok = kRne && p.fast.on && default_fp_environment();
  CodeSink sink(p, call);
  const bool uniform = call.metrics == nullptr && p.rule == ScaleRule::Floor &&
                       static_cast<std::size_t>(call.block) % lanes == 0 && call.row % call.block == 0;
  if (kOut != BlockOut::None && fast_ok && uniform) {
    // Whole blocks of whole vectors from an even element: 4-bit codes go straight to the output.
    sink.direct4 = HWY_TARGET != HWY_SCALAR && p.bits == 4 && !p.remap && lanes % 2 == 0 && call.block % 2 == 0;
    if constexpr (kRne && kOut != BlockOut::None) {
      switch (call.input) {
        case InputKind::F32: fast_floor_loop<InputKind::F32, kOut>(p, call, c, fv, sink); break;
        case InputKind::BF16: fast_floor_loop<InputKind::BF16, kOut>(p, call, c, fv, sink); break;
        case InputKind::F16: fast_floor_loop<InputKind::F16, kOut>(p, call, c, fv, sink); break;
      }
    }
  } else {
    HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
    BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
    for (std::int64_t b = call.b0; b < call.b1; ++b) {
      std::size_t start = 0;
      std::size_t len = 0;
      cursor.next(&start, &len);
      one_block<Round, kOut>(p, call, c, fv, fast_ok, sink, in_buf, b, static_cast<std::int64_t>(start), len);
    }
  }
  if constexpr (kOut == BlockOut::Packed) sink.finish();
  if (call.stream) hwy::FlushStream();
}

template <class Round>
HWY_INLINE void block_for_output(const BlockParams& p, const BlockCall& call) {
  switch (call.out) {
    case BlockOut::None: return block_loop<Round, BlockOut::None>(p, call);
    case BlockOut::Fake: return block_loop<Round, BlockOut::Fake>(p, call);
    case BlockOut::Packed: return block_loop<Round, BlockOut::Packed>(p, call);
  }
}

}  // namespace block

/// Entry point of one target (exported by block_kernel.cpp). Nearest-even, the default of every format,
/// has its own instance; the other modes share one that picks the mode (and draws random bits for
/// stochastic rounding) at run time, as does the input kind.
void block_kernel_impl(const BlockParams& p, const BlockCall& call) {
  if (p.cast.rounding == Rounding::NearestEven) return block::block_for_output<RoundingTag<Rounding::NearestEven>>(p, call);
  return block::block_for_output<AnyRounding>(p, call);
}

/// Unpacks count 4-bit codes from byte pairs (a byte widened to 16 bits becomes (first code) | (second code)
/// << 8 in the writer's nibble order).
HWY_INLINE void unpack_nibbles(const std::uint8_t* src, std::size_t count, bool low_first, std::uint8_t* codes) {
  std::size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  {
    const hn::ScalableTag<std::uint16_t> d16;
    const hn::Rebind<std::uint8_t, decltype(d16)> d8b;
    const hn::Repartition<std::uint8_t, decltype(d16)> d8c;
    const std::size_t l16 = hn::Lanes(d16);
    const auto nibble = hn::Set(d16, 0x000F);
    for (; i + l16 <= count / 2; i += l16) {
      const auto w = hn::PromoteTo(d16, hn::LoadU(d8b, src + i));
      const auto lo = hn::And(w, nibble);
      const auto hi = hn::ShiftRight<4>(w);
      const auto two = low_first ? hn::Or(lo, hn::ShiftLeft<8>(hi)) : hn::Or(hi, hn::ShiftLeft<8>(lo));
      hn::StoreU(hn::BitCast(d8c, two), d8c, codes + 2 * i);
    }
  }
#endif
  for (std::size_t c = 2 * i; c < count; ++c) {
    const std::uint32_t byte = src[c / 2];
    const bool second = c % 2 == 1;
    codes[c] = static_cast<std::uint8_t>((second == low_first ? byte >> 4 : byte) & 0xFU);
  }
}

/// Dequantization: codes unpacked per block, decoded by table and multiplied by the block scale.
void dequant_kernel_impl(const BlockParams& p, const DequantCall& call) {
  using block::kChunk;
  const DU du;
  const DF df;
  const DI di;
  const D8 d8;
  const std::size_t lanes = hn::Lanes(du);
  HWY_ALIGN std::uint8_t codes[kChunk + kMaxLanes] = {};
  HWY_ALIGN std::uint32_t wide[kChunk];  // codes of more than 8 bits
  HWY_ALIGN float out_buf[kMaxLanes];
  const std::uint32_t mask = (1U << p.bits) - 1U;
  const auto bits = static_cast<std::size_t>(p.bits);
  // Codes of at most 4 bits index a table that fits one vector (16 float32 lanes or more): a permutation
  // instead of a gather.
  const bool in_vector = p.bits <= 4 && lanes >= 16;
  const VF table = hn::LoadU(df, p.decode_f32.data());
  BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
  for (std::int64_t b = call.b0; b < call.b1; ++b) {
    std::size_t start = 0;
    std::size_t len = 0;
    cursor.next(&start, &len);
    const double scale_d = p.scale_of(read_scale(p, call.scales, b));
    const auto scale_f = static_cast<float>(scale_d);  // exact: scale values are float32 numbers (or NaN)
    const auto scale_v = hn::Set(df, scale_f);
    for (std::size_t done = 0; done < len; done += kChunk) {
      const std::size_t count = std::min(kChunk, len - done);
      const std::size_t first = start + done;
      if (p.wide_codes) {
        // Codes of 9 to 16 bits: three bytes hold each one at any bit offset; the values as below.
        for (std::size_t i = 0; i < count; ++i) {
          const std::size_t bit = (first + i) * bits;
          const std::size_t byte = bit / 8;
          const auto off = static_cast<std::uint32_t>(bit % 8);
          std::uint32_t w = 0;  // the three bytes in stream order: little-endian or big-endian bits
          for (std::size_t j = 0; j < 3; ++j) {
            const std::uint32_t v = byte + j < call.element_bytes ? call.elements[byte + j] : 0U;
            w |= p.low_first ? v << (8 * j) : v << (16 - 8 * j);
          }
          const std::uint32_t code =
              p.low_first ? (w >> off) & mask : (w >> (24U - off - static_cast<std::uint32_t>(bits))) & mask;
          wide[i] = p.remap ? p.code_unmap[code] : code;
        }
        float* out = call.out + first;
        const double d = scale_d * call.g;
        const auto sub = static_cast<std::size_t>(p.subtile);
        const auto r = sub > 0 ? static_cast<std::int64_t>(first) / call.row : 0;
        const std::size_t pos = first - static_cast<std::size_t>(r * call.row);
        const auto sub0 = static_cast<std::size_t>(r * call.subtiles_per_row);
        for (std::size_t i = 0; i < count; ++i) {
          const double e = p.decode_f64[wide[i]];
          if (p.float_scales) {
            out[i] = static_cast<float>((scale_d == 0 && std::isfinite(e)) ? 0.0 : e * d);
          } else if (sub > 0) {
            out[i] = p.decode_f32[wide[i]] * std::ldexp(scale_f, -call.subtile_offsets[sub0 + (pos + i) / sub]);
          } else {
            out[i] = p.decode_f32[wide[i]] * scale_f;
          }
        }
        continue;
      }
      if (bits == 8) {
        std::memcpy(codes, call.elements + first, count);
      } else if (bits == 4 && first % 2 == 0) {
        unpack_nibbles(call.elements + first / 2, count, p.low_first, codes);
      } else {
        for (std::size_t i = 0; i < count; ++i) {
          const std::size_t k = (first + i) * bits;
          const std::size_t byte = k / 8;
          const std::uint32_t b0 = call.elements[byte];
          const std::uint32_t b1 = byte + 1 < call.element_bytes ? call.elements[byte + 1] : 0U;
          const auto off = static_cast<std::uint32_t>(k % 8);
          const std::uint32_t code = p.low_first ? ((b0 | (b1 << 8)) >> off) & mask
                                                 : (((b0 << 8) | b1) >> (16U - off - static_cast<std::uint32_t>(bits))) & mask;
          codes[i] = static_cast<std::uint8_t>(code);
        }
      }
      if (p.remap)
        for (std::size_t i = 0; i < count; ++i) codes[i] = p.code_unmap[codes[i]];
      float* out = call.out + first;
      if (p.float_scales) {
        // decode(code) * s * g, exact in double and rounded once (a zero scale gives +0 for finite codes).
        const double s = scale_d;
        const double d = s * call.g;
        std::size_t i = 0;
        if (s != 0 && !std::isnan(s)) {
          const DF64 df64;
          const DUh duh;
          const DFh dfh;
          const hn::Rebind<std::uint8_t, DUh> d8h;
          const std::size_t lh = hn::Lanes(df64);
          const VF64 dv = hn::Set(df64, d);
          for (; i + lh <= count; i += lh) {
            const auto idx = hn::BitCast(hn::RebindToSigned<DUh>(), hn::PromoteTo(duh, hn::LoadU(d8h, codes + i)));
            const VF64 e = hn::PromoteTo(df64, hn::GatherIndex(dfh, p.decode_f32.data(), idx));
            block::store_as_float(hn::Mul(e, dv), out + i);
          }
        }
        for (; i < count; ++i) {
          const double e = p.decode_f64[codes[i]];
          out[i] = static_cast<float>((s == 0 && std::isfinite(e)) ? 0.0 : e * d);
        }
        continue;
      }
      if (p.subtile > 0) {
        // decode(code) * 2^(X - d) with each subtile's own offset d, rounded once (NaN under a NaN scale).
        const auto sub = static_cast<std::size_t>(p.subtile);
        const auto r = static_cast<std::int64_t>(first) / call.row;
        const std::size_t pos = first - static_cast<std::size_t>(r * call.row);
        const auto sub0 = static_cast<std::size_t>(r * call.subtiles_per_row);
        const float s = scale_f;
        for (std::size_t i = 0; i < count; ++i) {
          const int d = call.subtile_offsets[sub0 + (pos + i) / sub];
          out[i] = p.decode_f32[codes[i]] * std::ldexp(s, -d);
        }
        continue;
      }
      std::size_t i = 0;
      if (in_vector) {
        for (; i + lanes <= count; i += lanes) {
          const VI idx = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, codes + i)));
          hn::StoreU(hn::Mul(hn::TableLookupLanes(table, hn::IndicesFromVec(df, idx)), scale_v), df, out + i);
        }
      }
      for (; i + lanes <= count; i += lanes) {
        const VI idx = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, codes + i)));
        hn::StoreU(hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), idx), scale_v), df, out + i);
      }
      if (i < count) {
        const VI idx = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, codes + i)));  // padded buffer
        hn::Store(hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::And(idx, hn::Set(di, 255))), scale_v), df,
                  out_buf);
        std::memcpy(out + i, out_buf, (count - i) * sizeof(float));
      }
    }
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
