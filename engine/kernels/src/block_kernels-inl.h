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

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "block_params.hpp"
#include "grid_cast-inl.h"
#include "mxlab/quantize/quantize.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace block {

/// Codes buffered before they are bit-packed.
constexpr std::size_t kChunk = 4096;

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

/// Where a block loop's element codes go: straight into the packed output (8-bit codes) or through a
/// buffer that is bit-packed when full.
struct CodeSink {
  const BlockParams& p;
  const BlockCall& call;
  bool direct8;
  std::size_t buffered = 0;
  HWY_ALIGN std::uint8_t codes[kChunk + kMaxLanes];
  HWY_ALIGN std::uint8_t packed[kChunk / 2 + kMaxLanes];

  bool direct4;

  CodeSink(const BlockParams& params, const BlockCall& c)
      : p(params), call(c), direct8(params.bits == 8 && !params.remap), direct4(c.direct4 && HWY_TARGET != HWY_SCALAR) {}

  void flush() {
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

  /// The codes of elements [index, index + count) of the tensor (count <= lanes; the rest are padding).
  HWY_INLINE void put(VU code, std::size_t index, std::size_t count) {
    const D8 d8;
    const auto code8 = hn::TruncateTo(d8, code);
    if (direct8) {
      std::uint8_t* dst = call.elements + index;
      if (count == hn::Lanes(d8)) {
        if (call.stream && hn::Lanes(d8) >= 16 && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) {
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
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      if (direct4) {
        // Two codes per 64-bit lane: its low byte becomes the packed pair.
        const hn::Repartition<std::uint64_t, DU> d64;
        const hn::Rebind<std::uint8_t, decltype(d64)> d8p;
        const auto v = hn::BitCast(d64, code);
        const auto pair = p.low_first ? hn::Or(v, hn::ShiftRight<28>(v)) : hn::Or(hn::ShiftLeft<4>(v), hn::ShiftRight<32>(v));
        const auto bytes = hn::TruncateTo(d8p, pair);
        std::uint8_t* dst = call.elements + index / 2;
        if (count == hn::Lanes(d8)) {
          hn::StoreU(bytes, d8p, dst);
        } else {
          HWY_ALIGN std::uint8_t tail[kMaxLanes];
          hn::Store(bytes, d8p, tail);
          std::memcpy(dst, tail, count / 2);
        }
        return;
      }
    }
    if (buffered + hn::Lanes(d8) > kChunk) flush();
    hn::StoreU(code8, d8, codes + buffered);
    buffered += count;
  }

  void put_repeated(std::uint8_t code, std::size_t index, std::size_t count) {
    if (direct8) {
      std::memset(call.elements + index, code, count);
      return;
    }
    if (direct4) {
      const auto c = static_cast<unsigned>(code & 0xFU);
      std::memset(call.elements + index / 2, static_cast<int>(c | (c << 4)), count / 2);
      return;
    }
    for (std::size_t k = 0; k < count; ++k) {
      if (buffered == kChunk) flush();
      codes[buffered++] = code;
    }
  }

  void finish() {
    if (buffered != 0) flush();
  }
};

/// Per-block constants of the element pass.
struct BlockScale {
  int xe;                 ///< the block's scale 2^xe
  std::uint8_t scode;     ///< its code
  double scale_d;         ///< its value
};

/// The element pass over one block of len elements at xb (rest > 0: the last partial vector is in in_buf).
template <class Round, InputKind kIn, BlockOut kOut, bool kFast>
HWY_INLINE void block_elements(const BlockParams& p, const BlockCall& call, const CastVectors& c,
                               const FastVectors& fv, CodeSink& sink, const std::uint8_t* xb,
                               const std::uint8_t* in_buf, std::size_t len, std::size_t full, std::size_t start,
                               const BlockScale& bs) {
  const DU du;
  const DF df;
  const DI di;
  const std::size_t lanes = hn::Lanes(du);
  const bool want_metrics = call.metrics != nullptr;
  const VI minus_x = hn::Set(di, -bs.xe);
  const VF scale_v = hn::Set(df, p.scale_value[bs.scode]);
  const VF inverse = hn::Set(df, p.scale_inverse[static_cast<std::size_t>(bs.xe - p.x_min)]);
  HWY_ALIGN float out_buf[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_x[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
  for (std::size_t k = 0; k < len; k += lanes) {
    const bool tail = k == full;  // only when len is not a multiple of lanes
    const std::size_t count = tail ? len - full : lanes;
    const VU u = tail ? load_input<kIn>(in_buf, 0) : load_input<kIn>(xb, k);
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
      if constexpr (std::is_same_v<Round, RoundingTag<Rounding::Stochastic>>) {
        random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start) + k);
      }
      code = cast_lanes<Round>(c, u, random, minus_x, want_metrics ? &over : nullptr);
      if constexpr (kOut == BlockOut::Fake) {
        value = hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code)), scale_v);
      }
    }
    if constexpr (kOut == BlockOut::Packed) sink.put(code, start + k, count);
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
    if (want_metrics) {
      hn::Store(u, du, lane_x);
      hn::Store(code, du, lane_codes);
      hn::Store(hn::VecFromMask(du, over), du, lane_over);
      for (std::size_t l = 0; l < count; ++l) {
        const double deq = p.decode_f64[lane_codes[l]] * bs.scale_d;
        add_metric(*call.metrics, static_cast<double>(std::bit_cast<float>(lane_x[l])), deq, lane_over[l] != 0);
      }
    }
  }
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

/// One pass over blocks [b0, b1): block statistics, scale, element codes, and the requested outputs.
template <class Round, InputKind kIn, BlockOut kOut>
HWY_NOINLINE void block_loop(const BlockParams& p, const BlockCall& call) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const CastVectors c(p.cast);
  constexpr bool kRne = std::is_same_v<Round, RoundingTag<Rounding::NearestEven>>;
  const FastVectors fv(p.fast);
  const bool fast_ok = kRne && p.fast.on && default_fp_environment();
  constexpr std::size_t kInBytes = kIn == InputKind::F32 ? 4 : 2;
  const bool want_metrics = call.metrics != nullptr;
  const bool elements = kOut != BlockOut::None || want_metrics;
  const auto* in = static_cast<const std::uint8_t*>(call.x);
  CodeSink sink(p, call);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU inf_bits = hn::Set(du, 0x7F800000U);

  // Row and block-in-row advance incrementally: no division per block.
  std::int64_t r = call.b0 / call.blocks_per_row;
  std::int64_t j = call.b0 - r * call.blocks_per_row;
  for (std::int64_t b = call.b0; b < call.b1; ++b, ++j) {
    if (j == call.blocks_per_row) {
      j = 0;
      ++r;
    }
    const std::int64_t start = r * call.row + j * call.block;
    const auto len = static_cast<std::size_t>(std::min(call.block, call.row - j * call.block));
    const std::uint8_t* xb = in + static_cast<std::size_t>(start) * kInBytes;
    const std::size_t full = len - len % lanes;
    const std::size_t rest = len - full;
    if (rest != 0) {
      // The last partial vector through a zero-padded buffer: zeros change neither amax nor the flags.
      std::memset(in_buf, 0, sizeof(in_buf));
      std::memcpy(in_buf, xb + full * kInBytes, rest * kInBytes);
    }
    // Every 64-byte line of the input, 4 KiB ahead: the hardware prefetcher alone leaves the loop waiting
    // on memory for tensors beyond the caches.
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      for (std::size_t k = 0; k < len * kInBytes; k += 64) hwy::Prefetch(xb + k + 8192);
    }

    // Block statistics: the largest finite magnitude (float32 bits order like the magnitudes), NaN, Inf.
    // One reduction in the common case: the largest magnitude bits, specials included; only a block whose
    // largest bits are Inf or NaN needs the finite amax and the two flags separately.
    VU vmax = hn::Zero(du);
    for (std::size_t k = 0; k < full; k += lanes) vmax = hn::Max(vmax, hn::And(load_input<kIn>(xb, k), abs_mask));
    if (rest != 0) vmax = hn::Max(vmax, hn::And(load_input<kIn>(in_buf, 0), abs_mask));
    std::uint32_t amax_bits = hn::GetLane(hn::MaxOfLanes(du, vmax));
    const bool finite = amax_bits < 0x7F800000U;
    bool has_nan = false;
    bool has_inf = false;
    if (!finite) {
      VU vfin = hn::Zero(du);
      VU vinf = hn::Zero(du);
      for (std::size_t k = 0; k < len; k += lanes) {
        const VU a = hn::And(k == full ? load_input<kIn>(in_buf, 0) : load_input<kIn>(xb, k), abs_mask);
        vfin = hn::Max(vfin, hn::IfThenElseZero(hn::Lt(a, inf_bits), a));
        vinf = hn::Or(vinf, hn::VecFromMask(du, hn::Eq(a, inf_bits)));
      }
      has_nan = amax_bits > 0x7F800000U;
      has_inf = hn::GetLane(hn::MaxOfLanes(du, vinf)) != 0;
      amax_bits = hn::GetLane(hn::MaxOfLanes(du, vfin));
    }
    if (call.amax != nullptr) call.amax[b] = std::bit_cast<float>(amax_bits);
    if (!elements) continue;

    bool nan_block = false;
    switch (p.specials) {
      case SpecialsPolicy::BlockNan: nan_block = has_nan || (has_inf && !p.element_has_inf); break;
      case SpecialsPolicy::BlockNanAny: nan_block = has_nan || has_inf; break;
      default: break;
    }
    const auto out_index = static_cast<std::size_t>(start);
    if (nan_block && p.scale_has_nan) {
      if constexpr (kOut == BlockOut::Packed) {
        call.scales[b] = p.scale_nan_code;
        sink.put_repeated(p.nan_block_code, out_index, len);
      }
      if constexpr (kOut == BlockOut::Fake) {
        std::fill(call.fake + out_index, call.fake + out_index + len, std::numeric_limits<float>::quiet_NaN());
      }
      if (want_metrics) call.metrics->nan_outputs += static_cast<std::int64_t>(len);
      continue;
    }
    BlockScale bs;
    bs.xe = block_exponent(p, amax_bits);
    bs.scode = p.scale_code[static_cast<std::size_t>(bs.xe - p.x_min)];
    bs.scale_d = p.scale_value_d[bs.scode];
    if constexpr (kOut == BlockOut::Packed) call.scales[b] = bs.scode;
    if (fast_ok && finite) {
      if constexpr (kRne) {
        block_elements<Round, kIn, kOut, true>(p, call, c, fv, sink, xb, in_buf, len, full, out_index, bs);
      }
    } else {
      block_elements<Round, kIn, kOut, false>(p, call, c, fv, sink, xb, in_buf, len, full, out_index, bs);
    }
  }
  if constexpr (kOut == BlockOut::Packed) sink.finish();
  if (call.stream) hwy::FlushStream();
}

template <class Round, InputKind kIn>
HWY_INLINE void block_for_input(const BlockParams& p, const BlockCall& call) {
  switch (call.out) {
    case BlockOut::None: return block_loop<Round, kIn, BlockOut::None>(p, call);
    case BlockOut::Fake: return block_loop<Round, kIn, BlockOut::Fake>(p, call);
    case BlockOut::Packed: return block_loop<Round, kIn, BlockOut::Packed>(p, call);
  }
}

template <class Round>
HWY_INLINE void block_for_rounding(const BlockParams& p, const BlockCall& call) {
  switch (call.input) {
    case InputKind::F32: return block_for_input<Round, InputKind::F32>(p, call);
    case InputKind::BF16: return block_for_input<Round, InputKind::BF16>(p, call);
    case InputKind::F16: return block_for_input<Round, InputKind::F16>(p, call);
  }
}

}  // namespace block

/// Entry point of one target (exported by block_kernel.cpp). Nearest-even, the default of every format,
/// and stochastic rounding have their own instances; the other modes share one that picks at run time.
void block_kernel_impl(const BlockParams& p, const BlockCall& call) {
  switch (p.cast.rounding) {
    case Rounding::NearestEven: return block::block_for_rounding<RoundingTag<Rounding::NearestEven>>(p, call);
    case Rounding::Stochastic: return block::block_for_rounding<RoundingTag<Rounding::Stochastic>>(p, call);
    default: return block::block_for_rounding<AnyRounding>(p, call);
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
  HWY_ALIGN float out_buf[kMaxLanes];
  const std::uint32_t mask = (1U << p.bits) - 1U;
  const auto bits = static_cast<std::size_t>(p.bits);
  for (std::int64_t b = call.b0; b < call.b1; ++b) {
    const std::int64_t r = b / call.blocks_per_row;
    const std::int64_t j = b - r * call.blocks_per_row;
    const auto start = static_cast<std::size_t>(r * call.row + j * call.block);
    const auto len = static_cast<std::size_t>(std::min(call.block, call.row - j * call.block));
    const auto scale_v = hn::Set(df, p.scale_value[call.scales[b]]);
    for (std::size_t done = 0; done < len; done += kChunk) {
      const std::size_t count = std::min(kChunk, len - done);
      const std::size_t first = start + done;
      if (bits == 8) {
        std::memcpy(codes, call.elements + first, count);
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
      std::size_t i = 0;
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
