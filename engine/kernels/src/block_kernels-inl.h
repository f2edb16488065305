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
#include "mxlab/quantize/quantize.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace block {

using DU = hn::ScalableTag<std::uint32_t>;
using DI = hn::RebindToSigned<DU>;
using DF = hn::Rebind<float, DU>;
using D8 = hn::Rebind<std::uint8_t, DU>;
using VU = hn::Vec<DU>;
using VI = hn::Vec<DI>;
using MU = hn::Mask<DU>;

constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(std::uint32_t);
/// Codes buffered before they are bit-packed.
constexpr std::size_t kChunk = 4096;

// Stochastic rounding bits: stochastic_bits(seed, index) of core/random.hpp, one index per lane.
HWY_INLINE VU mix32_lanes(VU x) {
  const DU du;
  x = hn::Xor(x, hn::ShiftRight<16>(x));
  x = hn::Mul(x, hn::Set(du, 0x7FEB352DU));
  x = hn::Xor(x, hn::ShiftRight<15>(x));
  x = hn::Mul(x, hn::Set(du, 0x846CA68BU));
  return hn::Xor(x, hn::ShiftRight<16>(x));
}

HWY_INLINE VU stochastic_bits_lanes(std::uint64_t key, std::uint64_t index) {
  const DU du;
  const auto lo0 = static_cast<std::uint32_t>(index);
  const auto hi0 = static_cast<std::uint32_t>(index >> 32);
  const VU lo = hn::Add(hn::Set(du, lo0), hn::Iota(du, 0));
  // A lane whose low word wrapped past 2^32 carries into the high word (mask lanes are all ones = -1).
  const VU hi = hn::Sub(hn::Set(du, hi0), hn::VecFromMask(du, hn::Lt(lo, hn::Set(du, lo0))));
  VU x = mix32_lanes(hn::Xor(lo, hn::Set(du, static_cast<std::uint32_t>(key))));
  x = hn::Xor(x, hn::Set(du, static_cast<std::uint32_t>(key >> 32)));
  x = hn::Xor(x, hn::Mul(hi, hn::Set(du, 0x9E3779B9U)));
  return mix32_lanes(x);
}

/// ElementParams as vectors, broadcast once per call.
struct ElementVectors {
  explicit ElementVectors(const ElementParams& p)
      : exponent_clamp(hn::Set(DI(), p.exponent_clamp)),
        quantum_drop(hn::Set(DI(), p.quantum_drop)),
        quantum_min(hn::Set(DI(), p.quantum_min)),
        field_base(hn::Set(DI(), p.field_offset - p.quantum_min)),
        tiny_below(hn::Set(DI(), p.tiny_below_exponent)),
        tiny_code(hn::Set(DU(), p.tiny_code)),
        limit_pos(hn::Set(DU(), p.limit[0])),
        limit_neg(hn::Set(DU(), p.limit[1])),
        flush_below(hn::Set(DU(), p.flush_below)),
        neg_xor(hn::Set(DU(), p.neg_xor)),
        neg_add(hn::Set(DU(), p.neg_add)),
        neg_mask(hn::Set(DU(), p.neg_mask)),
        neg_or(hn::Set(DU(), p.neg_or)),
        zero_pos(hn::Set(DU(), p.zero_code[0])),
        zero_neg(hn::Set(DU(), p.zero_code[1])),
        overflow_pos(hn::Set(DU(), p.overflow_code[0])),
        overflow_neg(hn::Set(DU(), p.overflow_code[1])),
        inf_pos(hn::Set(DU(), p.inf_code[0])),
        inf_neg(hn::Set(DU(), p.inf_code[1])),
        nan_pos(hn::Set(DU(), p.nan_code[0])),
        nan_neg(hn::Set(DU(), p.nan_code[1])),
        mantissa_shift(p.mantissa_shift),
        random_bits(p.random_bits),
        random_bits_v(hn::Set(DI(), p.random_bits)),
        has_tiny(p.has_tiny),
        inf_overflows(p.inf_overflows) {}

  VI exponent_clamp, quantum_drop, quantum_min, field_base, tiny_below;
  VU tiny_code, limit_pos, limit_neg, flush_below, neg_xor, neg_add, neg_mask, neg_or;
  VU zero_pos, zero_neg, overflow_pos, overflow_neg, inf_pos, inf_neg, nan_pos, nan_neg;
  int mantissa_shift;
  int random_bits;
  VI random_bits_v;
  bool has_tiny;
  bool inf_overflows;
};

/// Element codes of x / 2^X for float32 bits u, with minus_x = -X added to the exponent (exact for every
/// quotient, FP32 subnormal ones included). *over receives the lanes whose cast overflowed.
template <Rounding kRound>
HWY_INLINE VU cast_lanes(const ElementVectors& c, VU u, VU random, VI minus_x, MU* over_out) {
  const DU du;
  const DI di;
  const DF df;
  const VU one = hn::Set(du, 1U);
  const VU abs = hn::And(u, hn::Set(du, 0x7FFFFFFFU));
  const MU neg = hn::RebindMask(du, hn::Lt(hn::BitCast(di, u), hn::Zero(di)));

  // |x| = sig * 2^(e - 23) with sig in [2^23, 2^24); a subnormal is normalised through an exact int->float.
  const VU biased = hn::ShiftRight<23>(abs);
  const VU fraction = hn::And(abs, hn::Set(du, 0x007FFFFFU));
  const MU input_subnormal = hn::Eq(biased, hn::Zero(du));
  const VU fraction_f = hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, fraction)));
  const VU sig = hn::Or(hn::And(hn::IfThenElse(input_subnormal, fraction_f, abs), hn::Set(du, 0x007FFFFFU)),
                        hn::Set(du, 0x00800000U));
  const VU biased_e =
      hn::IfThenElse(input_subnormal, hn::Sub(hn::ShiftRight<23>(fraction_f), hn::Set(du, 149U)), biased);
  // The exponent of the quotient x / 2^X.
  const VI e = hn::Add(hn::Sub(hn::BitCast(di, biased_e), hn::Set(di, 127)), minus_x);

  const VI ec = hn::Min(e, c.exponent_clamp);
  const VI qe = hn::Max(hn::Sub(ec, c.quantum_drop), c.quantum_min);
  const VI k = hn::Add(hn::Sub(qe, ec), hn::Set(di, 23));
  const VU ks = hn::BitCast(du, hn::Min(k, hn::Set(di, 25)));
  const VU kept = sig >> ks;
  const VU rem = hn::And(sig, hn::Sub(one << ks, one));
  const VU half = one << hn::Sub(ks, one);
  const VU tz = hn::Add(hn::ShiftLeftSame(hn::BitCast(du, hn::Add(qe, c.field_base)), c.mantissa_shift), kept);

  VU chosen = tz;
  if constexpr (kRound != Rounding::TowardZero) {
    const MU inexact = hn::Not(hn::Eq(rem, hn::Zero(du)));
    const MU tz_odd = hn::TestBit(tz, one);
    MU away;
    if constexpr (kRound == Rounding::NearestEven) {
      away = hn::Or(hn::Gt(rem, half), hn::And(hn::Eq(rem, half), tz_odd));
    } else if constexpr (kRound == Rounding::NearestAway) {
      away = hn::Not(hn::Lt(rem, half));
    } else if constexpr (kRound == Rounding::NearestZero) {
      away = hn::Gt(rem, half);
    } else if constexpr (kRound == Rounding::Up) {
      away = hn::AndNot(neg, inexact);
    } else if constexpr (kRound == Rounding::Down) {
      away = hn::And(neg, inexact);
    } else if constexpr (kRound == Rounding::Odd) {
      away = hn::AndNot(tz_odd, inexact);
    } else {
      static_assert(kRound == Rounding::Stochastic);
      // t = floor(rem / 2^k * 2^R); away iff t > (2^R - 1) - r with r the top R bits of the random word.
      const VI kr = hn::Sub(k, c.random_bits_v);
      const VU down = hn::BitCast(du, hn::Min(hn::Max(kr, hn::Zero(di)), hn::Set(di, 31)));
      const VU up = hn::BitCast(du, hn::Max(hn::Neg(kr), hn::Zero(di)));
      const VU t = (rem << up) >> down;
      const VU threshold = hn::ShiftRightSame(hn::Not(random), 32 - c.random_bits);
      away = hn::Gt(t, threshold);
    }
    chosen = hn::Sub(tz, hn::VecFromMask(du, away));
  }

  const VU inf_bits = hn::Set(du, 0x7F800000U);
  const MU finite = hn::Lt(abs, inf_bits);
  MU over = hn::Gt(chosen, hn::IfThenElse(neg, c.limit_neg, c.limit_pos));
  const VU negative = hn::Or(hn::And(hn::Add(hn::Xor(chosen, c.neg_xor), c.neg_add), c.neg_mask), c.neg_or);
  VU code = hn::IfThenElse(neg, negative, chosen);
  code = hn::IfThenElse(hn::Lt(chosen, c.flush_below), hn::IfThenElse(neg, c.zero_neg, c.zero_pos), code);
  code = hn::IfThenElse(over, hn::IfThenElse(neg, c.overflow_neg, c.overflow_pos), code);
  if (c.has_tiny) code = hn::IfThenElse(hn::RebindMask(du, hn::Lt(e, c.tiny_below)), c.tiny_code, code);
  const MU zero_input = hn::Eq(abs, hn::Zero(du));
  code = hn::IfThenElse(zero_input, hn::IfThenElse(neg, c.zero_neg, c.zero_pos), code);
  const MU is_inf = hn::Eq(abs, inf_bits);
  code = hn::IfThenElse(is_inf, hn::IfThenElse(neg, c.inf_neg, c.inf_pos), code);
  code = hn::IfThenElse(hn::Gt(abs, inf_bits), hn::IfThenElse(neg, c.nan_neg, c.nan_pos), code);
  over = hn::AndNot(zero_input, hn::And(over, finite));
  if (c.inf_overflows) over = hn::Or(over, is_inf);
  *over_out = over;
  return code;
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

template <Rounding kRound>
HWY_NOINLINE void block_loop(const BlockParams& p, const BlockCall& call) {
  const DU du;
  const DF df;
  const DI di;
  const D8 d8;
  const std::size_t lanes = hn::Lanes(du);
  const ElementVectors c(p.cast);
  const bool want_fake = (call.outputs & static_cast<unsigned>(BlockOutput::Fake)) != 0;
  const bool want_packed = (call.outputs & static_cast<unsigned>(BlockOutput::Packed)) != 0;
  const bool want_amax = (call.outputs & static_cast<unsigned>(BlockOutput::Amax)) != 0;
  const bool want_metrics = (call.outputs & static_cast<unsigned>(BlockOutput::Metrics)) != 0;
  const bool elements = want_fake || want_packed || want_metrics;

  HWY_ALIGN std::uint8_t codes_buf[kChunk + kMaxLanes];
  std::size_t buffered = 0;
  auto flush = [&] {
    if (p.remap)
      for (std::size_t i = 0; i < buffered; ++i) codes_buf[i] = p.code_map[codes_buf[i]];
    call.writer->write(codes_buf, buffered);
    buffered = 0;
  };
  HWY_ALIGN float in_buf[kMaxLanes];
  HWY_ALIGN float out_buf[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_codes[kMaxLanes];
  HWY_ALIGN std::uint32_t lane_over[kMaxLanes];
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
    const float* xb = call.x + start;
    const std::size_t full = len - len % lanes;
    const std::size_t rest = len - full;
    if (rest != 0) {
      // The last partial vector through a zero-padded buffer: zeros change neither amax nor the flags.
      std::fill(in_buf, in_buf + lanes, 0.0F);
      std::memcpy(in_buf, xb + full, rest * sizeof(float));
    }
    // Every 64-byte line of the input, 4 KiB ahead: the hardware prefetcher alone leaves the loop waiting
    // on memory for tensors beyond the caches.
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      for (std::size_t k = 0; k < len; k += 16) hwy::Prefetch(xb + k + 1024);
    }

    // Block statistics: the largest finite magnitude (float32 bits order like the magnitudes), NaN, Inf.
    // One reduction in the common case: the largest magnitude bits, specials included; only a block whose
    // largest bits are Inf or NaN needs the finite amax and the two flags separately.
    VU vmax = hn::Zero(du);
    for (std::size_t k = 0; k < full; k += lanes) vmax = hn::Max(vmax, hn::And(hn::BitCast(du, hn::LoadU(df, xb + k)), abs_mask));
    if (rest != 0) vmax = hn::Max(vmax, hn::And(hn::BitCast(du, hn::Load(df, in_buf)), abs_mask));
    std::uint32_t amax_bits = hn::GetLane(hn::MaxOfLanes(du, vmax));
    bool has_nan = false;
    bool has_inf = false;
    if (amax_bits >= 0x7F800000U) {
      VU vfin = hn::Zero(du);
      VU vinf = hn::Zero(du);
      auto stats = [&](VU u) {
        const VU a = hn::And(u, abs_mask);
        vfin = hn::Max(vfin, hn::IfThenElseZero(hn::Lt(a, inf_bits), a));
        vinf = hn::Or(vinf, hn::VecFromMask(du, hn::Eq(a, inf_bits)));
      };
      for (std::size_t k = 0; k < full; k += lanes) stats(hn::BitCast(du, hn::LoadU(df, xb + k)));
      if (rest != 0) stats(hn::BitCast(du, hn::Load(df, in_buf)));
      has_nan = amax_bits > 0x7F800000U;
      has_inf = hn::GetLane(hn::MaxOfLanes(du, vinf)) != 0;
      amax_bits = hn::GetLane(hn::MaxOfLanes(du, vfin));
    }
    if (want_amax) call.amax[b] = std::bit_cast<float>(amax_bits);
    if (!elements) continue;

    bool nan_block = false;
    switch (p.specials) {
      case SpecialsPolicy::BlockNan: nan_block = has_nan || (has_inf && !p.element_has_inf); break;
      case SpecialsPolicy::BlockNanAny: nan_block = has_nan || has_inf; break;
      default: break;
    }
    const auto out_index = static_cast<std::size_t>(start);
    if (nan_block && p.scale_has_nan) {
      if (want_packed) {
        call.scales[b] = p.scale_nan_code;
        for (std::size_t k = 0; k < len; ++k) {
          if (buffered == kChunk) flush();
          codes_buf[buffered++] = p.nan_block_code;
        }
      }
      if (want_fake) std::fill(call.fake + out_index, call.fake + out_index + len, std::numeric_limits<float>::quiet_NaN());
      if (want_metrics) call.metrics->nan_outputs += static_cast<std::int64_t>(len);
      continue;
    }
    const int xe = block_exponent(p, amax_bits);
    const std::uint8_t scode = p.scale_code[static_cast<std::size_t>(xe - p.x_min)];
    if (want_packed) call.scales[b] = scode;
    const VI minus_x = hn::Set(di, -xe);
    const auto scale_v = hn::Set(df, p.scale_value[scode]);
    const double scale_d = p.scale_value_d[scode];

    auto element_vector = [&](VU u, std::size_t k, std::size_t count, float* fake_dst) {
      VU random = hn::Zero(du);
      if constexpr (kRound == Rounding::Stochastic) {
        random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start) + k);
      }
      MU over;
      const VU code = cast_lanes<kRound>(c, u, random, minus_x, &over);
      if (want_packed) {
        if (buffered + lanes > kChunk) flush();
        hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, code)), d8, codes_buf + buffered);
        buffered += count;
      }
      if (want_fake) {
        const auto value = hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code)), scale_v);
        hn::StoreU(value, df, fake_dst);
      }
      if (want_metrics) {
        hn::Store(code, du, lane_codes);
        hn::Store(hn::VecFromMask(du, over), du, lane_over);
        const float* xs = xb + k;
        for (std::size_t l = 0; l < count; ++l) {
          const double deq = p.decode_f64[lane_codes[l]] * scale_d;
          add_metric(*call.metrics, static_cast<double>(xs[l]), deq, lane_over[l] != 0);
        }
      }
    };
    for (std::size_t k = 0; k < full; k += lanes) {
      element_vector(hn::BitCast(du, hn::LoadU(df, xb + k)), k, lanes, call.fake + out_index + k);
    }
    if (rest != 0) {
      element_vector(hn::BitCast(du, hn::Load(df, in_buf)), full, rest, out_buf);
      if (want_fake) std::memcpy(call.fake + out_index + full, out_buf, rest * sizeof(float));
    }
  }
  if (want_packed && buffered != 0) flush();
}

}  // namespace block

/// Entry point of one target (exported by block_kernel.cpp).
void block_kernel_impl(const BlockParams& p, const BlockCall& call) {
  switch (p.cast.rounding) {
    case Rounding::NearestEven: return block::block_loop<Rounding::NearestEven>(p, call);
    case Rounding::NearestAway: return block::block_loop<Rounding::NearestAway>(p, call);
    case Rounding::NearestZero: return block::block_loop<Rounding::NearestZero>(p, call);
    case Rounding::TowardZero: return block::block_loop<Rounding::TowardZero>(p, call);
    case Rounding::Up: return block::block_loop<Rounding::Up>(p, call);
    case Rounding::Down: return block::block_loop<Rounding::Down>(p, call);
    case Rounding::Odd: return block::block_loop<Rounding::Odd>(p, call);
    case Rounding::Stochastic: return block::block_loop<Rounding::Stochastic>(p, call);
  }
}

/// Dequantization: codes unpacked per block, decoded by table and multiplied by the block scale.
void dequant_kernel_impl(const BlockParams& p, const DequantCall& call) {
  using namespace block;  // NOLINT(google-build-using-namespace): this target's vector types
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
