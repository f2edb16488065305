// The reference's emulation of the peers' float32 arithmetic (docs/profiles.md): PyTorch's NaN codes,
// microxcaling's add-half rounding, the element step of float32 scaled values, and NVFP4 under Transformer
// Engine's and ModelOpt's float32 expressions. SIMD twin: engine/kernels/src/block_peer-inl.h.
#include "block_peer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "block_plan.hpp"
#include "block_scale.hpp"
#include "mxlab/core/bits.hpp"
#include "mxlab/core/exact_sum.hpp"
#include "mxlab/formats/codepoints.hpp"

namespace mxlab {

using namespace quantize_detail;

namespace {

/// The code PyTorch gives a NaN element: c10's FP8 casts return 0x7F | sign for E4M3 and E5M2 alike;
/// torchao's _f32_to_fpx_unpacked sends a NaN down its normal-number branch, so the FP4/FP6 code is
/// computed from the NaN's bits (the quiet NaN 0x7FC00000 gives the code of +1.5). Elements torchao has no
/// cast for (integers, codebooks) take the plain cast's NaN code: +0.
std::uint32_t torch_nan_code(const Format& e, float v) {
  const std::uint32_t bits = float_bits(v);
  const std::uint32_t sign = bits & 0x80000000U;
  const FormatSpec& s = e.spec();
  const int width = e.bits();
  if (e.has_nan()) return (sign ? std::uint32_t{1} << (width - 1) : 0U) | ((std::uint32_t{1} << (width - 1)) - 1);
  if (s.kind != FormatKind::Float || s.exponent_bits < 1) return e.has_zero() ? e.zero_code(false) : e.max_code(true);
  const int ebits = s.exponent_bits;
  const int mbits = s.mantissa_bits;
  const std::uint32_t x = bits ^ sign;
  const std::uint32_t mant_odd = (x >> (23 - mbits)) & 1U;
  const auto exp_bias = static_cast<std::int32_t>((1U << (ebits - 1)) - 1);
  // val_to_add = ((exp_bias - F32_EXP_BIAS) << MBITS_F32) + magic_adder, in int32 (two's complement).
  const auto val_to_add =
      static_cast<std::uint32_t>((exp_bias - 127) * (1 << 23)) + ((std::uint32_t{1} << (23 - mbits - 1)) - 1);
  const std::uint32_t normal = ((x + val_to_add + mant_odd) >> (23 - mbits)) & 0xFFU;  // .to(torch.uint8)
  const std::uint32_t sign_lp = (sign >> (23 + 8 - mbits - ebits)) & (std::uint32_t{1} << (ebits + mbits));
  return (normal | sign_lp) & ((std::uint32_t{1} << width) - 1);
}

/// microxcaling Python's _quantize_elemwise_core for nearest rounding, in float32 (NearestArith):
/// private_exp = max(floor(log2(|v| + (v == 0))), min_exp); A = |v| / 2^private_exp * 2^mbits;
/// nearest: floor(A + 0.5); even: floor(A + 0.5) - ((A - 0.5) % 2 == 0); back to v's scale. The result
/// lies on the element's (continued) grid, so the cast afterwards is exact or saturates.
float float32_add_half_round(const Format& e, float v, Rounding rounding) {
  const FormatSpec& s = e.spec();
  const float av = std::fabs(v);
  const int mbits = s.kind == FormatKind::Float ? s.mantissa_bits : s.frac_bits;
  int pe = 0;
  if (s.kind == FormatKind::Float) {
    pe = floor_to_int(fl32_log2(av + (av == 0 ? 1.0F : 0.0F)));
    pe = std::max(pe, min_normal_exponent(s));
  }
  const float a = std::ldexp(std::ldexp(av, -pe), mbits);  // x / 2**exp * 2**bits: exact scalings
  float r = std::floor(a + 0.5F);
  if (rounding == Rounding::NearestEven && std::fmod(a - 0.5F, 2.0F) == 0.0F) r = r - 1.0F;
  return std::copysign(std::ldexp(std::ldexp(r, -mbits), pe), v);
}

/// The peer's amax of a block or tensor: TensorNan propagates NaN (torch.max), IgnoreNan skips it (fmaxf);
/// both take Inf. The other policies reduce over finite values.
float nvfp4_peer_amax(const QuantOptions& o, bool nan, bool inf, double amax) {
  if (o.specials == SpecialsPolicy::TensorNan && nan) return std::numeric_limits<float>::quiet_NaN();
  if ((o.specials == SpecialsPolicy::TensorNan || o.specials == SpecialsPolicy::IgnoreNan) && inf)
    return std::numeric_limits<float>::infinity();
  return static_cast<float>(amax);
}

/// The E4M3 block scale code of the float32 value pre under the zero-block and minimum-scale rules.
std::uint32_t nvfp4_peer_scale_code(const BlockFormat& f, const CastOptions& scale_opts, float pre) {
  const QuantOptions& o = f.options;
  const Format& sf = *f.layout.scale;
  if (pre == 0.0F && o.zero_block == ZeroBlock::One) pre = 1.0F;  // per_block_scale[per_block_scale == 0] = 1.0
  CastResult r = cast(sf, static_cast<double>(pre), scale_opts);
  if (o.min_block_scale > 0 && sf.decode(r.code) < o.min_block_scale) r = cast(sf, o.min_block_scale, scale_opts);
  return r.code;
}

}  // namespace

CastResult peer_element_cast(const Format& e, float v, double x, const CastOptions& co, std::uint32_t random,
                             const QuantOptions& o) {
  CastResult r;
  if (std::isnan(v)) {
    switch (o.specials) {
      case SpecialsPolicy::TorchaoFloor:
      case SpecialsPolicy::TorchaoRceil:
        r.code = torch_nan_code(e, v);
        r.invalid = !e.has_nan();
        return r;
      case SpecialsPolicy::IgnoreNan:
        // Transformer Engine runs on the GPU, where a NaN operand or an invalid product (Inf * 0) gives
        // the canonical NaN 0x7FFFFFFF; CUDA's conversion of it is the all-ones NaN code (E4M3 and E5M2
        // 0x7F). A format without NaN gets +0 (docs/profiles.md: not verified against the hardware).
        if (!e.has_nan()) return cast(e, static_cast<double>(v), co, random);
        r.code = (std::uint32_t{1} << (e.bits() - 1)) - 1;
        return r;
      case SpecialsPolicy::TensorNan:
        // torch.searchsorted puts NaN after every bound, and NaN < 0 is false: the largest positive code.
        r.code = e.max_code(false);
        r.invalid = true;
        return r;
      default: return cast(e, static_cast<double>(v), co, random);
    }
  }
  const bool add_half = o.nearest_arith == NearestArith::Float32AddHalf && std::isfinite(v) &&
                        (co.rounding == Rounding::NearestAway || co.rounding == Rounding::NearestEven);
  if (add_half) {
    const float w = float32_add_half_round(e, v, co.rounding);
    r = cast(e, static_cast<double>(w), co, random);  // on the grid: exact, or saturating beyond max
    if (w != v) r.inexact = true;
    if (w == 0 && v != 0) r.underflow = true;
  } else {
    r = cast(e, static_cast<double>(v), co, random);
  }
  if (v == 0 && x != 0 && std::isfinite(x)) r.inexact = r.underflow = true;  // lost in the float32 step
  if (v == 0 && e.has_negative_zero()) {
    if (o.zero_sign == ZeroSign::MinusZeroPlus && std::signbit(v)) r.code = e.zero_code(false);
    if (o.zero_sign == ZeroSign::ZeroMinus) r.code = e.zero_code(true);
  }
  return r;
}

Result<Nvfp4PeerTensor> nvfp4_peer_tensor(const BlockFormat& f, bool any_nan, bool any_inf, double finite_amax) {
  const QuantOptions& o = f.options;
  const Format& sf = *f.layout.scale;
  const Format& tf = *f.layout.tensor_scale;
  const float flt_max = std::numeric_limits<float>::max();
  const auto emax_f = static_cast<float>(f.element.max_finite());  // 6
  const auto smax_f = static_cast<float>(o.tensor_scale_max > 0 ? o.tensor_scale_max : sf.max_finite());
  const float global_max = smax_f * emax_f;  // 448 * 6 = 2688, exact
  Nvfp4PeerTensor t;
  t.global_max = global_max;
  t.amax = o.tensor_scale_from_amax ? nvfp4_peer_amax(o, any_nan, any_inf, finite_amax) : global_max;
  if (o.nvfp4_arith == Nvfp4Arith::Te) {
    // compute_global_encode_scaling_factor_FP4: fp8_max * fp4_max / global_amax, FLT_MAX cap, 1 for 0.
    t.s_enc = std::fmin(global_max / t.amax, flt_max);
    if (t.amax == 0.0F || t.s_enc == 0.0F) t.s_enc = 1.0F;
    t.s_dec = 1.0F / t.s_enc;
  } else {
    // get_weights_scaling_factor_2: reduce_amax(input).float() / (6.0 * 448.0).
    t.s_dec = t.amax / global_max;
  }
  auto to = resolve_options(tf, CastOptions{});
  if (!to) return make_error("tensor scale format: " + to.error().message);
  t.scale.code = cast(tf, static_cast<double>(t.s_dec), *to).code;
  t.scale.value = static_cast<double>(t.s_dec);
  return t;
}

float nvfp4_peer_element_input(const QuantOptions& o, const Nvfp4PeerTensor& t, float xf, float s) {
  // Te: r = min(1 / (s * S_dec), FLT_MAX) and x * r; ModelOpt: x / (s * S_dec).
  if (o.nvfp4_arith == Nvfp4Arith::Te) return xf * std::fmin(1.0F / (s * t.s_dec), std::numeric_limits<float>::max());
  return xf / (s * t.s_dec);
}

std::pair<std::uint32_t, std::uint32_t> nvfp4_peer_4over6_candidates(const BlockFormat& f, const CastOptions& scale_opts,
                                                                      const Nvfp4PeerTensor& t, double amax, bool nan,
                                                                      bool inf) {
  // Transformer Engine 4over6 (quantize_4over6_kernel.cuh, compute_scale_pair and make_candidates):
  // base = block_amax / 6 * S_enc; map-to-6 E4M3(min(base, 448)), map-to-4 E4M3(min(1.5 base, 448)).
  const auto emax_f = static_cast<float>(f.element.max_finite());
  const auto scale_max = static_cast<float>(f.layout.scale->max_finite());
  const float base = nvfp4_peer_amax(f.options, nan, inf, amax) / emax_f * t.s_enc;
  return {nvfp4_peer_scale_code(f, scale_opts, std::fmin(base, scale_max)),
          nvfp4_peer_scale_code(f, scale_opts, std::fmin(base * 1.5F, scale_max))};
}

std::uint32_t nvfp4_peer_block_code(const BlockFormat& f, const CastOptions& element_opts, const CastOptions& scale_opts,
                                    const Nvfp4PeerTensor& t, double amax, bool nan, bool inf,
                                    std::span<const double> x, std::span<const std::uint32_t> random) {
  const QuantOptions& o = f.options;
  const Format& e = f.element;
  const Format& sf = *f.layout.scale;
  const float nanf = std::numeric_limits<float>::quiet_NaN();
  const auto emax_f = static_cast<float>(e.max_finite());
  auto scale_code = [&](float pre) { return nvfp4_peer_scale_code(f, scale_opts, pre); };
  auto decoded = [&](std::uint32_t code) {
    const double v = sf.decode(code);
    return std::isnan(v) ? nanf : static_cast<float>(v);
  };
  const float ab = nvfp4_peer_amax(o, nan, inf, amax);
  if (o.rule != ScaleRule::FourOverSix) {
    // Te compute_decoding_scaling_factor: block_amax * (S_enc * fp4_max_inv), cast to E4M3 (satfinite);
    // ModelOpt get_weights_scaling_factor: per_block_amax / (6.0 * weights_scaling_factor_2).
    if (o.nvfp4_arith == Nvfp4Arith::Te) return scale_code(ab * (t.s_enc * (1.0F / emax_f)));
    return scale_code(ab / (emax_f * t.s_dec));
  }
  const auto [map6, map4] = nvfp4_peer_4over6_candidates(f, scale_opts, t, amax, nan, inf);
  if (map4 == map6) return map6;
  // Candidate codes of the block's elements under block scale code sc.
  auto codes_of = [&](std::uint32_t sc) {
    const float s = decoded(sc);
    std::vector<std::uint32_t> codes;
    for (std::size_t k = 0; k < x.size(); ++k)
      codes.push_back(
          cast(e, static_cast<double>(nvfp4_peer_element_input(o, t, static_cast<float>(x[k]), s)), element_opts,
               random[k])
              .code);
    return codes;
  };
  // accumulate_dequant_error: val = dequant * sf * global_amax / (6 * E4M3_MAX), diff = val - x, and
  // err += |diff| (MAE) or diff * diff (MSE), in float32 and element order, starting from 0.
  auto float_error = [&](std::uint32_t sc) {
    const float s = decoded(sc);
    const auto codes = codes_of(sc);
    float err = 0.0F;
    for (std::size_t k = 0; k < codes.size(); ++k) {
      const auto xf = static_cast<float>(x[k]);
      const auto dq = static_cast<float>(e.decode(codes[k]));
      const float val = dq * s * t.amax / t.global_max;
      const float diff = val - xf;
      err = err + (o.four_over_six == FourOverSixMetric::Mse ? diff * diff : std::fabs(diff));
    }
    return err;
  };
  // The exact metric: the exact sum of (deq - x)^2 over finite inputs, deq = e * s * S_dec.
  auto exact_error = [&](std::uint32_t sc) {
    const double s = sf.decode(sc);
    const auto codes = codes_of(sc);
    ExactSum sse;
    for (std::size_t k = 0; k < codes.size(); ++k) {
      const double v = x[k];
      if (!std::isfinite(v)) continue;
      const double deq = e.decode(codes[k]) * s * static_cast<double>(t.s_dec);  // <= 31 significant bits
      sse.add_product(deq, deq);
      sse.add_product(deq, -2 * v);
      sse.add_product(v, v);
    }
    return sse;
  };
  bool pick_map4 = false;  // err_map4 < err_map6; ties (and NaN) select map-to-6
  if (o.four_over_six == FourOverSixMetric::ExactSse) {
    ExactSum diff = exact_error(map4);
    diff.subtract(exact_error(map6));
    pick_map4 = diff.sign() < 0;
  } else {
    pick_map4 = float_error(map4) < float_error(map6);
  }
  return pick_map4 ? map4 : map6;
}

namespace quantize_detail {

Result<QuantizedTensor> quantize_nvfp4_peer(const Run& c, QuantizedTensor q) {
  const BlockFormat& f = c.f;
  const Format& e = f.element;
  const Format& sf = *f.layout.scale;
  const auto nblocks = c.stats.size();
  bool any_nan = false, any_inf = false;
  double finite_amax = 0;
  for (const auto& st : c.stats) {
    any_nan = any_nan || st.nan;
    any_inf = any_inf || st.inf;
    finite_amax = std::max(finite_amax, st.amax);
  }
  auto t = nvfp4_peer_tensor(f, any_nan, any_inf, finite_amax);
  if (!t) return t.error();
  q.has_tensor_scale = true;
  q.tensor_scale_code = t->scale.code;
  q.tensor_scale = t->scale.value;

  std::vector<std::vector<std::size_t>> members(nblocks);
  for (std::size_t i = 0; i < c.x.size(); ++i) members[static_cast<std::size_t>(c.block_of[i])].push_back(i);
  std::vector<double> bx;
  std::vector<std::uint32_t> br;
  for (std::size_t b = 0; b < nblocks; ++b) {
    const BlockStats& st = c.stats[b];
    if (block_is_nan(f, st.nan, st.inf) && sf.has_nan()) {
      q.scale_codes[b] = sf.nan_code(false);
      q.scale_values[b] = std::numeric_limits<double>::quiet_NaN();
      for (std::size_t i : members[b]) {
        q.codes[i] = e.has_nan() ? e.nan_code(false) : e.zero_code(false);
        q.values[i] = std::numeric_limits<double>::quiet_NaN();
      }
      continue;
    }
    bx.clear();
    br.clear();
    for (std::size_t i : members[b]) {
      bx.push_back(c.x[i]);
      br.push_back(c.random(i));
    }
    const std::uint32_t code = nvfp4_peer_block_code(f, c.elem_opts, c.scale_opts, *t, st.amax, st.nan, st.inf, bx, br);
    q.scale_codes[b] = code;
    q.scale_values[b] = sf.decode(code);
    const float s = std::isnan(q.scale_values[b]) ? std::numeric_limits<float>::quiet_NaN()
                                                   : static_cast<float>(q.scale_values[b]);
    for (std::size_t i : members[b]) {
      const auto xf = static_cast<float>(c.x[i]);
      const CastResult r = peer_element_cast(e, nvfp4_peer_element_input(f.options, *t, xf, s), c.x[i], c.elem_opts,
                                             c.random(i), f.options);
      q.codes[i] = r.code;
      q.flags[i] = flags_of(r);
      q.values[i] = e.decode(r.code) * q.scale_values[b] * q.tensor_scale;
    }
  }
  return q;
}

}  // namespace quantize_detail
}  // namespace mxlab
