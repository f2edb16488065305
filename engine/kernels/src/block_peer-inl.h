// Block kernels, the peers' float32 arithmetic with float block scales: microxcaling's add-half rounding, the
// float32 input rounding of scaled values, and the NVFP4 peers' (Transformer Engine, ModelOpt) element and
// scale steps, 4over6 included.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_PEER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_PEER_INL_H_
#undef MXLAB_KERNELS_BLOCK_PEER_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_PEER_INL_H_
#endif

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <hwy/highway.h>

#include "block_io-inl.h"
#include "block_lanes-inl.h"
#include "block_metrics-inl.h"
#include "block_quotient-inl.h"
#include "block_scale-inl.h"
#include "mxlab/core/random.hpp"
#include "mxlab/quantize/quantize.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

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
HWY_NOINLINE inline void peer_float_elements(const BlockParams& p, const BlockCall& call, const CastVectors& c,
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

/// Buffers of the NVFP4 peers' group step.
struct PeerGroupScratch {
  HWY_ALIGN float pre[BlockGroup::kSize + kMaxLanes];                ///< the peers' float32 scale quotients
  HWY_ALIGN std::uint32_t pre_codes[BlockGroup::kSize + kMaxLanes];  ///< their scale codes
  std::vector<double> block_x;             ///< Transformer Engine's 4over6 (reference): one block's values
  std::vector<std::uint32_t> block_random;  ///< and random words
};

/// The float32 quotients of mxlab::nvfp4_peer_block_code for a group's blocks (Transformer Engine:
/// amax * (S_enc * (1 / 6)), ModelOpt: amax / (6 * S_dec)) in float32 lanes, cast to the scale format in one
/// vector cast.
HWY_INLINE void peer_group_scale_codes(const BlockParams& p, const BlockCall& call, const BlockGroup& g,
                                       PeerGroupScratch& s) {
  const DU du;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  const CastVectors cs32(p.scale_cast);
  const auto emax_f = static_cast<float>(p.scale_target);
  const bool te = p.options->nvfp4_arith == Nvfp4Arith::Te;
  const float te_factor = call.nvfp4->s_enc * (1.0F / emax_f);
  const float mo_divisor = emax_f * call.nvfp4->s_dec;
  for (std::size_t i = 0; i < g.count; ++i) s.pre[i] = static_cast<float>(g.amax[i]);
  for (std::size_t i = g.count; i % lanes != 0; ++i) s.pre[i] = 0.0F;
  for (std::size_t i = 0; i < g.count; i += lanes) {
    const VF a = hn::Load(df, s.pre + i);
    const VF q = te ? hn::Mul(a, hn::Set(df, te_factor)) : hn::Div(a, hn::Set(df, mo_divisor));
    hn::Store(q, df, s.pre + i);
    hn::Store(cast_lanes<AnyRounding>(cs32, hn::BitCast(du, q), hn::Zero(du), hn::Zero(DI()), nullptr), du,
              s.pre_codes + i);
  }
}

/// The NVFP4 peers' scale code of block i of a group (mxlab::nvfp4_peer_block_code): the group's vector code
/// where it applies, Transformer Engine's 4over6 choice in float32 lanes (te_4over6_error), and otherwise the
/// reference's function, given the block's values and random words for 4over6.
HWY_INLINE std::uint32_t peer_block_code(const BlockParams& p, const BlockCall& call, const CastVectors& c32,
                                         const BlockGroup& g, std::size_t i, bool vector_codes, PeerGroupScratch& s) {
  const DU du;
  constexpr std::uint32_t kNoCode = ~0U;
  const BlockStats& st = g.stats[i];
  const std::uint8_t* xb = g.xb(call, i);
  std::uint32_t code = kNoCode;
  if (vector_codes && !st.has_nan && !st.has_inf && !(s.pre[i] == 0.0F && p.options->zero_block == ZeroBlock::One))
    code = s.pre_codes[i];
  const bool te_metric = p.four_over_six && p.options->four_over_six != FourOverSixMetric::ExactSse;
  if (te_metric) {
    const auto [map6, map4] =
        nvfp4_peer_4over6_candidates(*p.owner, p.scale_opts, *call.nvfp4, g.amax[i], st.has_nan, st.has_inf);
    float e4 = 0;
    float e6 = 0;
    if (map4 == map6) {
      code = map6;
    } else if (te_4over6_error(p, call, c32, xb, g.lens[i], g.starts[i], map4, &e4) &&
               te_4over6_error(p, call, c32, xb, g.lens[i], g.starts[i], map6, &e6)) {
      code = e4 < e6 ? map4 : map6;  // ties (and NaN) keep map-to-6
    } else {
      code = kNoCode;
    }
  }
  if (code != kNoCode) return code;
  if (p.four_over_six) {
    // The candidates' errors from the reference, which takes the block's values and random words.
    const std::size_t in_bytes = call.input == InputKind::F32 ? 4 : 2;
    s.block_x.resize(g.lens[i]);
    s.block_random.assign(g.lens[i], 0U);
    for (std::size_t k = 0; k < g.lens[i]; ++k) {
      HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4] = {};
      HWY_ALIGN std::uint32_t one[kMaxLanes];
      std::memcpy(in_buf, xb + k * in_bytes, in_bytes);
      hn::Store(load_any(call.input, in_buf, 0), du, one);
      s.block_x[k] = static_cast<double>(std::bit_cast<float>(one[0]));
      if (p.stochastic) s.block_random[k] = stochastic_bits(p.options->seed, g.starts[i] + k);
    }
  }
  return nvfp4_peer_block_code(*p.owner, p.element_opts, p.scale_opts, *call.nvfp4, g.amax[i], st.has_nan, st.has_inf,
                               s.block_x, s.block_random);
}

/// A group of blocks under the NVFP4 peers' scale rules: each block's scale code (peer_block_code) and element
/// pass (peer_float_elements). Blocks with NaN or Inf and the zero-block rule one at a zero quotient take the
/// reference's function instead of the vector codes, as do rules with a minimum scale.
HWY_INLINE void peer_group(const BlockParams& p, const BlockCall& call, const CastVectors& c32,
                           const CastVectors64& f32v, CodeSink& sink, const BlockGroup& g, PeerGroupScratch& s) {
  const bool vector_codes = !p.four_over_six && !(p.min_block_scale > 0) && p.scale_bytes <= 2;
  if (vector_codes) peer_group_scale_codes(p, call, g, s);
  for (std::size_t i = 0; i < g.count; ++i) {
    const auto b = g.first + static_cast<std::int64_t>(i);
    if (nan_block(p, g.stats[i]) && p.scale_has_nan) {
      if (call.out == BlockOut::Packed) write_scale(p, call.scales, b, p.scale_nan_code);
      nan_elements(p, call, sink, g.starts[i], g.lens[i]);
      continue;
    }
    const std::uint32_t code = peer_block_code(p, call, c32, g, i, vector_codes, s);
    if (call.out == BlockOut::Packed) write_scale(p, call.scales, b, code);
    const double sd = p.scale_of(code);
    const float sf = std::isnan(sd) ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(sd);
    peer_float_elements(p, call, c32, f32v, sink, g.xb(call, i), g.lens[i], g.starts[i], sf, sd);
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
