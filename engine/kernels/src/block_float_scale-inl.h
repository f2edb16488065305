// Block kernels, float block scales (rule amax and 4over6) and two-level scales (a tensor scale above them):
// scale codes of a group of blocks in one vector cast, then each block's element pass.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_FLOAT_SCALE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_FLOAT_SCALE_INL_H_
#undef MXLAB_KERNELS_BLOCK_FLOAT_SCALE_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_FLOAT_SCALE_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "block_codebook-inl.h"
#include "block_peer-inl.h"
#include "block_quotient-inl.h"
#include "block_rne-inl.h"
#include "block_scale-inl.h"
#include "mxlab/core/random.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

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
HWY_NOINLINE inline void zero_scale_elements(const BlockParams& p, const BlockCall& call, CodeSink& sink,
                                      const std::uint8_t* xb, std::size_t len, std::size_t start) {
  const DUh duh;
  const std::size_t lanes = hn::Lanes(duh);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN std::uint32_t bits[kMaxLanes];
  HWY_ALIGN std::uint32_t codes[kMaxLanes];
  const InputKind in_kind = call.input;
  const std::size_t in_bytes = in_kind == InputKind::F32 ? 4 : 2;
  if (in_kind == InputKind::F32 && call.out == BlockOut::Fake && call.metrics == nullptr) {
    // Fake values of finite float32 inputs without metrics: the inputs' sign bits (zeros of their signs).
    bool finite = true;
    for (std::size_t k = 0; k < len; ++k) {
      std::uint32_t u;
      std::memcpy(&u, xb + 4 * k, 4);
      finite = finite && (u & 0x7FFFFFFFU) < 0x7F800000U;
    }
    if (finite) {
      for (std::size_t k = 0; k < len; ++k) {
        std::uint32_t u;
        std::memcpy(&u, xb + 4 * k, 4);
        call.fake[start + k] = std::bit_cast<float>(u & 0x80000000U);
      }
      return;
    }
  }
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

/// The cast vectors of the float-scale path.
struct FloatScaleVectors {
  explicit FloatScaleVectors(const BlockParams& p) : c64(p.cast), s64(p.scale_cast), c32(p.cast), f32v(p.f32_cast) {}
  CastVectors64 c64;  ///< elements, double lanes
  CastVectors64 s64;  ///< scales, double lanes
  CastVectors c32;    ///< elements, float32 lanes (fast32, the peers' float32 arithmetic)
  CastVectors64 f32v;  ///< float32 as a grid (the float32 input rounding of float scales)
};

/// The scale quotients amax / (target * g) of a group's blocks in one vector cast to the scale format
/// (correctly rounded, as float_scale_elements explains for the elements; the scale cast takes no random
/// bits). Quotients near a boundary of the scale grid are cast as the reference casts them
/// (quotient_codes64 explains why only those).
HWY_INLINE void group_scale_codes(const BlockParams& p, const BlockCall& call, const CastVectors64& s64,
                                  BlockGroup& g) {
  const DF64 df;
  const D64 d64;
  const std::size_t l64 = hn::Lanes(df);
  const VF64 target_g = hn::Set(df, p.scale_target * call.g);
  for (std::size_t i = g.count; i % l64 != 0; ++i) g.amax[i] = 0;
  for (std::size_t i = 0; i < g.count; i += l64) {
    const VF64 q = hn::Div(hn::Load(df, g.amax + i), target_g);
    hn::Store(cast_lanes64<AnyRounding>(s64, q, hn::Zero(d64), nullptr), d64, g.codes + i);
    if (!p.check_scale_quotients) continue;
    HWY_ALIGN std::uint64_t fix[kMaxLanes];
    hn::Store(hn::VecFromMask(d64, near_boundary64(s64, q)), d64, fix);
    for (std::size_t l = 0; l < l64 && i + l < g.count; ++l)
      if (fix[l] != 0)
        g.codes[i + l] = cast_quotient(*p.scale_format, g.amax[i + l], p.scale_target * call.g, p.scale_opts).code;
  }
}

/// Block i of a group: the scale rules of float_block_scale_code past the vector cast (NaN blocks, zero
/// blocks, the minimum scale, 4over6), the scale code, and the element pass for the scale's value.
HWY_INLINE void float_block(const BlockParams& p, const BlockCall& call, const FloatScaleVectors& v, CodeSink& sink,
                            const BlockGroup& g, std::size_t i, FastExactSum& sse_diff) {
  const auto b = static_cast<std::int64_t>(g.first) + static_cast<std::int64_t>(i);
  const std::size_t start = g.starts[i];
  const std::size_t len = g.lens[i];
  const std::uint8_t* xb = g.xb(call, i);
  const bool tensor_nan = p.specials == SpecialsPolicy::TensorNan && call.any_nan;
  if ((nan_block(p, g.stats[i]) || tensor_nan) && p.scale_has_nan) {
    if (call.out == BlockOut::Packed) write_scale(p, call.scales, b, p.scale_nan_code);
    nan_elements(p, call, sink, start, len);
    return;
  }
  auto code = static_cast<std::uint32_t>(g.codes[i]);
  if (g.amax[i] == 0 && p.options->zero_block == ZeroBlock::One) code = p.scale_one_code;
  if (p.min_block_scale > 0 && p.scale_of(code) < p.min_block_scale) code = p.min_block_scale_code;
  if (p.four_over_six && g.amax[i] > 0) {
    // The candidate that maps amax to 2/3 of the element's largest value (4 for E2M1), kept when its
    // squared error is lower.
    const auto alt = float_block_scale_code(*p.owner, p.scale_opts, g.amax[i], p.scale_target_alt, call.g);
    if (alt != code && lower_sse(p, call, v.c64, xb, len, start, p.scale_of(alt), p.scale_of(code), sse_diff)) code = alt;
  }
  if (call.out == BlockOut::Packed) write_scale(p, call.scales, b, code);
  const double s = p.scale_of(code);
  if (std::isnan(s)) {  // a scale that overflowed to NaN: the block's elements are NaN codes
    nan_elements(p, call, sink, start, len);
  } else if (s == 0) {
    zero_scale_elements(p, call, sink, xb, len, start);
  } else if (p.float_peer) {
    peer_float_elements(p, call, v.c32, v.f32v, sink, xb, len, start, static_cast<float>(s), s);
  } else if (p.codebook) {
    codebook_elements(p, call, sink, xb, len, start, s, call.g);
  } else {
    float_scale_elements<AnyRounding>(p, call, v.c64, v.c32, sink, xb, len, start, s);
  }
}

/// One block's scale in the float-scale tight loops past their group's vector cast (group_scale_codes):
/// float_block's minimum block scale, then whether the block takes the nearest-even fast step (finite, a nonzero
/// amax, s and s * g within the fast range) or is a finite block whose scale is zero (zeros of its elements'
/// signs; rule one gives an all-zero block the scale one instead, which float_block applies).
struct FastFloatBlock {
  std::uint32_t code = 0;
  double s = 0;
  bool fast = false;
  bool zero = false;
};
HWY_INLINE FastFloatBlock fast_float_block(const BlockParams& p, std::uint64_t group_code, double amax, bool finite,
                                           double g) {
  FastFloatBlock b;
  b.code = static_cast<std::uint32_t>(group_code);
  if (p.min_block_scale > 0 && p.scale_of(b.code) < p.min_block_scale) b.code = p.min_block_scale_code;
  b.s = p.scale_of(b.code);
  const double d = b.s * g;
  b.fast = finite && amax != 0 && b.s > 0x1p-100 && b.s < 0x1p100 && d > 0x1p-120 && d < 0x1p120;
  b.zero = finite && b.s == 0 && !(amax == 0 && p.options->zero_block == ZeroBlock::One);
  return b;
}

/// Whether the float-scale tight loop (fast_float_loop) covers the call: rule amax on a float element grid under
/// nearest-even (BlockParams::FastRne of FastKind::Float, and fast32), no peer arithmetic or zero-sign rule, codes or values out
/// without metrics or tensor-wide statistics, rows of whole blocks of whole vectors (or, for fake values, rows
/// shorter than a block: one block each, a first convolution's taps), decode * s * g rounded once (short scale
/// significands, or g = 1, with g a float32).
HWY_INLINE bool fast_float_call(const BlockParams& p, const BlockCall& call) {
  const std::size_t lanes = hn::Lanes(DU());
  return p.fast.on && p.fast.kind == FastKind::Float && p.fast32 && !p.four_over_six && !p.nvfp4_peer && !p.float_peer && !p.codebook &&
         (p.zero_sign == ZeroSign::Keep || !p.has_negative_zero) && call.out != BlockOut::None &&
         call.metrics == nullptr && call.tensor_amax == nullptr && call.tensor_nan == nullptr &&
         call.tensor_inf == nullptr && !(p.specials == SpecialsPolicy::TensorNan && call.any_nan) &&
         ((static_cast<std::size_t>(call.block) % lanes == 0 && call.row % call.block == 0) ||
          (call.row < call.block && call.out == BlockOut::Fake)) &&
         (p.fast32_short_scales || call.g == 1.0) && static_cast<double>(static_cast<float>(call.g)) == call.g;
}

/// The common float-scale case (NVFP4 and other rule-amax formats) in a tight loop over groups of blocks: the
/// block maxima, the group's scale codes in one vector cast (group_scale_codes), then each block's elements by
/// the nearest-even fast path (fast_rne_lanes, fast_rne_fake) on the float32 quotients q = |x| * fl32(1 / (s * g)). A vector
/// with a lane near a rounding boundary of the grid (near_boundary32: there fl32 q and the exact quotient may
/// round apart) goes through float_scale_elements, and so does every block float_block treats specially (NaN
/// or Inf inside, zero amax, a scale outside [2^-100, 2^100]). Values are decode(code) * s, times g when
/// g != 1, in float32: the rounded magnitude r is decode(code), and r * s is exact (fast_float_call).
template <InputKind kIn, BlockOut kOut>
HWY_NOINLINE void fast_float_loop(const BlockParams& p, const BlockCall& call, const FloatScaleVectors& v,
                                  CodeSink& sink) {
  const DU du;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  constexpr std::size_t kInBytes = kIn == InputKind::F32 ? 4 : 2;
  const FastVectors fv(p.fast);
  // Blocks lie one after another: whole blocks of whole vectors, or rows shorter than a block (one block a row,
  // its last vector partial: masked under AVX-512, a zero-padded buffer elsewhere).
  const auto block = static_cast<std::size_t>(std::min(call.block, call.row));
  const std::size_t full = block - block % lanes;
  HWY_ALIGN std::uint8_t tail_buf[kMaxLanes * 4] = {};
  HWY_ALIGN float tail_out[kMaxLanes];
  const auto tail = [&](const std::uint8_t* xb) {
    if constexpr (kMaskedTail) {
      return load_input_n<kIn>(xb, full, block - full);
    } else {
      std::memcpy(tail_buf, xb + full * kInBytes, (block - full) * kInBytes);
      return load_input<kIn>(tail_buf, 0);
    }
  };
  const auto* in = static_cast<const std::uint8_t*>(call.x);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VF g_v = hn::Set(df, static_cast<float>(call.g));
  const bool unit_g = call.g == 1.0;
  const DF64 df64;
  const DFh dfh;
  const std::size_t l64 = hn::Lanes(df64);
  const VF64 g64 = hn::Set(df64, call.g);
  BlockGroup group;
  FastExactSum sse_diff;  // float_block's signature (rule 4over6 does not come here)
  HWY_ALIGN double scale_d[BlockGroup::kSize + kMaxLanes] = {};
  HWY_ALIGN float inverse_f[BlockGroup::kSize + kMaxLanes];
  bool fast[BlockGroup::kSize];
  // Fake values of a finite block whose scale is zero: zeros of the elements' signs (zero_scale_elements),
  // written here a vector at a time (all-zero blocks: a gradient's zeros after ReLU or max pooling).
  bool zero_scale[BlockGroup::kSize];
  const VU sign_mask = hn::Set(du, 0x80000000U);
  for (std::int64_t g0 = call.b0; g0 < call.b1; g0 += static_cast<std::int64_t>(BlockGroup::kSize)) {
    group.first = g0;
    group.count = static_cast<std::size_t>(std::min<std::int64_t>(BlockGroup::kSize, call.b1 - g0));
    for (std::size_t i = 0; i < group.count; ++i) {
      const std::size_t start = (static_cast<std::size_t>(g0) + i) * block;
      const std::uint8_t* xb = in + start * kInBytes;
      if constexpr (HWY_TARGET != HWY_SCALAR) {
        for (std::size_t k = 0; k < block * kInBytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
      }
      VU vmax = hn::Zero(du);
      for (std::size_t k = 0; k < full; k += lanes) vmax = hn::Max(vmax, hn::And(load_input<kIn>(xb, k), abs_mask));
      if (full != block) vmax = hn::Max(vmax, hn::And(tail(xb), abs_mask));
      BlockStats st;
      st.amax_bits = hn::GetLane(hn::MaxOfLanes(du, vmax));
      if (st.amax_bits >= 0x7F800000U) {
        // block_stats reads a partial last vector from a zero-padded copy.
        HWY_ALIGN std::uint8_t stats_buf[kMaxLanes * 4] = {};
        std::memcpy(stats_buf, xb + full * kInBytes, (block - full) * kInBytes);
        st = block_stats(kIn, xb, stats_buf, block, full);
      }
      group.stats[i] = st;
      group.starts[i] = start;
      group.lens[i] = block;
      const float a = std::bit_cast<float>(st.amax_bits);
      group.amax[i] = a;
      if (call.amax != nullptr) call.amax[static_cast<std::size_t>(g0) + i] = a;
    }
    group_scale_codes(p, call, v.s64, group);
    // The blocks' scales and the float32 multipliers fl32(1 / (s * g)) ahead of the element passes, so that no
    // block waits on its own division.
    for (std::size_t i = 0; i < group.count; ++i) {
      const FastFloatBlock b = fast_float_block(p, group.codes[i], group.amax[i], group.stats[i].finite, call.g);
      group.codes[i] = b.code;
      fast[i] = b.fast;
      zero_scale[i] = kOut == BlockOut::Fake && b.zero;
      scale_d[i] = b.fast ? b.s : 1;  // a harmless divisor elsewhere: float_block handles the block
    }
    for (std::size_t i = 0; i < group.count; i += l64) {
      const VF64 inv = hn::Div(hn::Set(df64, 1.0), hn::Mul(hn::Load(df64, scale_d + i), g64));
      hn::Store(hn::DemoteTo(dfh, inv), dfh, inverse_f + i);
    }
    for (std::size_t i = 0; i < group.count; ++i) {
      if (zero_scale[i] && full == block) {
        float* out = call.fake + group.starts[i];
        const std::uint8_t* xb = in + group.starts[i] * kInBytes;
        for (std::size_t k = 0; k < block; k += lanes)
          store_values(call, hn::BitCast(df, hn::And(load_input<kIn>(xb, k), sign_mask)), out + k);
        continue;
      }
      if (zero_scale[i]) {
        zero_scale_elements(p, call, sink, in + group.starts[i] * kInBytes, block, group.starts[i]);
        continue;
      }
      if (!fast[i]) {
        float_block(p, call, v, sink, group, i, sse_diff);
        continue;
      }
      const auto b = g0 + static_cast<std::int64_t>(i);
      if constexpr (kOut == BlockOut::Packed) write_scale(p, call.scales, b, static_cast<std::uint32_t>(group.codes[i]));
      const double s = scale_d[i];
      const std::size_t start = group.starts[i];
      const std::uint8_t* xb = in + start * kInBytes;
      const VF inverse = hn::Set(df, inverse_f[i]);
      const VF s_v = hn::Set(df, static_cast<float>(s));
      if constexpr (kOut == BlockOut::Fake) {
        if (full != block) {  // the row's one block of fewer than a vector's lanes past its whole vectors
          const VU u = tail(xb);
          const std::size_t count = block - full;
          const VF q = hn::Mul(hn::BitCast(df, hn::And(u, abs_mask)), inverse);
          if (!hn::AllFalse(du, near_boundary32(v.c32, q, u))) {
            float_scale_elements<AnyRounding>(p, call, v.c64, v.c32, sink, xb + full * kInBytes, count, start + full, s);
          } else {
            const VF value = fast_rne_fake(fv, u, inverse, s_v);
            hn::Store(unit_g ? value : hn::Mul(value, g_v), df, tail_out);
            std::memcpy(call.fake + start + full, tail_out, count * sizeof(float));
          }
        }
      }
      for (std::size_t k = 0; k < full; k += lanes) {
        const VU u = load_input<kIn>(xb, k);
        const VF q = hn::Mul(hn::BitCast(df, hn::And(u, abs_mask)), inverse);
        if (!hn::AllFalse(du, near_boundary32(v.c32, q, u))) {
          float_scale_elements<AnyRounding>(p, call, v.c64, v.c32, sink, xb + k * kInBytes, lanes, start + k, s);
          continue;
        }
        if constexpr (kOut == BlockOut::Packed) {
          MU over;
          VF r;
          sink.put(du, fast_rne_lanes<false>(fv, u, inverse, &r, &over), start + k, lanes);
        } else {
          const VF value = fast_rne_fake(fv, u, inverse, s_v);
          store_values(call, unit_g ? value : hn::Mul(value, g_v), call.fake + start + k);
        }
      }
    }
  }
}

/// Float block scales (rule amax), in groups of blocks: statistics of each block (read_group), then the
/// scale codes of the group in one vector cast of the double quotients amax / (target * g) (group_scale_codes),
/// then the element passes (float_block), each block still in the caches. The NVFP4 peers' scale rules take
/// their own group step (peer_group, block_peer-inl.h).
HWY_NOINLINE inline void float_scale_loop(const BlockParams& p, const BlockCall& call) {
  if (tensor_facts_only(call)) return tensor_facts_loop(call);
  const bool elements = call.out != BlockOut::None || call.metrics != nullptr;
  const FloatScaleVectors v(p);
  CodeSink sink(p, call);
  if (fast_float_call(p, call)) {
    const DefaultFpEnvironment fp_env;  // fast_rne_lanes and the float32 quotients assume it
    // Whole blocks of whole vectors from an even element: 4-bit codes go straight to the output.
    sink.direct4 = HWY_TARGET != HWY_SCALAR && p.bits == 4 && !p.remap && hn::Lanes(DU()) % 2 == 0 &&
                   call.block % 2 == 0 && call.out == BlockOut::Packed;
    const bool fake = call.out == BlockOut::Fake;
    switch (call.input) {
      case InputKind::F32:
        fake ? fast_float_loop<InputKind::F32, BlockOut::Fake>(p, call, v, sink)
             : fast_float_loop<InputKind::F32, BlockOut::Packed>(p, call, v, sink);
        break;
      case InputKind::BF16:
        fake ? fast_float_loop<InputKind::BF16, BlockOut::Fake>(p, call, v, sink)
             : fast_float_loop<InputKind::BF16, BlockOut::Packed>(p, call, v, sink);
        break;
      case InputKind::F16:
        fake ? fast_float_loop<InputKind::F16, BlockOut::Fake>(p, call, v, sink)
             : fast_float_loop<InputKind::F16, BlockOut::Packed>(p, call, v, sink);
        break;
    }
    if (call.out == BlockOut::Packed) sink.finish();
    if (call.stream) hwy::FlushStream();
    return;
  }
  BlockGroup group;
  PeerGroupScratch peer_scratch;
  FastExactSum sse_diff;  // rule 4over6
  const DefaultFpEnvironment fp_env;  // the float32 steps (peers' arithmetic, fast32 values) assume it
  BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
  for (std::int64_t g0 = call.b0; g0 < call.b1; g0 += static_cast<std::int64_t>(BlockGroup::kSize)) {
    read_group(call, cursor, g0, group);
    if (!elements) continue;
    if (p.nvfp4_peer) {
      peer_group(p, call, v.c32, v.f32v, sink, group, peer_scratch);
      continue;
    }
    group_scale_codes(p, call, v.s64, group);
    for (std::size_t i = 0; i < group.count; ++i) float_block(p, call, v, sink, group, i, sse_diff);
  }
  if (call.out == BlockOut::Packed) sink.finish();
  if (call.stream) hwy::FlushStream();
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
