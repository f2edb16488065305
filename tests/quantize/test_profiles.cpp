// Checks the peer profiles against the peers' source formulas quoted in docs/profiles.md: hand-worked
// cases of each profile's defining choices, the three computed disagreement cases, and small independent
// float32 transcriptions of each peer's conversion compared bit for bit on seeded random FP32 tensors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "mxlab/core/random.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"

using namespace mxlab;

namespace {

float f32(std::uint32_t b) { return std::bit_cast<float>(b); }
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

BlockFormat prof(const std::string& spec, const std::string& profile) {
  INFO(spec << " with profile " << profile);
  auto f = parse_block_format(spec);
  REQUIRE(f.ok());
  auto p = apply_profile(*f, profile);
  if (!p.ok()) FAIL(p.error().message);
  return *p;
}
BlockFormat plain(const std::string& spec) { return prof(spec, "ocp"); }

QuantizedTensor qz(const BlockFormat& f, const std::vector<float>& xf, std::vector<std::int64_t> shape = {}) {
  std::vector<double> x(xf.begin(), xf.end());
  if (shape.empty()) shape = {static_cast<std::int64_t>(x.size())};
  auto q = quantize(f, x, shape);
  if (!q.ok()) FAIL(q.error().message);
  return *q;
}

// ================================================================================================
// Transcriptions of the peers' code (docs/profiles.md quotes the lines). Written from the peer sources
// in plain float arithmetic, without the library under test.
// ================================================================================================

/// torch.log2 on a float32 tensor, taken as correctly rounded (the float32 rounding of the double log2;
/// the test "float32 log2" below checks that against long double).
float torch_log2(float a) { return static_cast<float>(std::log2(static_cast<double>(a))); }

/// c10::detail::fp8e4m3fn_from_fp32_value: RNE, not saturating (>= 480 and the carry past 448 give NaN).
std::uint32_t c10_e4m3fn(float f) {
  constexpr std::uint32_t fp8_max = UINT32_C(1087) << 20;
  constexpr std::uint32_t denorm_mask = UINT32_C(141) << 23;
  std::uint32_t f_bits = bits(f);
  std::uint8_t result = 0;
  const std::uint32_t sign = f_bits & UINT32_C(0x80000000);
  f_bits ^= sign;
  if (f_bits >= fp8_max) {
    result = 0x7f;
  } else if (f_bits < (UINT32_C(121) << 23)) {
    f_bits = bits(f32(f_bits) + f32(denorm_mask));
    result = static_cast<std::uint8_t>(f_bits - denorm_mask);
  } else {
    const std::uint32_t mant_odd = (f_bits >> 20) & 1;
    f_bits += (static_cast<std::uint32_t>(7 - 127) << 23) + 0x7FFFF;
    f_bits += mant_odd;
    result = static_cast<std::uint8_t>(f_bits >> 20);
  }
  result = static_cast<std::uint8_t>(result | (sign >> 24));
  return result;
}

/// c10::detail::fp8e5m2_from_fp32_value.
std::uint32_t c10_e5m2(float f) {
  constexpr std::uint32_t fp32_inf = UINT32_C(255) << 23;
  constexpr std::uint32_t fp8_max = UINT32_C(143) << 23;
  constexpr std::uint32_t denorm_mask = UINT32_C(134) << 23;
  std::uint32_t f_bits = bits(f);
  std::uint8_t result = 0;
  const std::uint32_t sign = f_bits & UINT32_C(0x80000000);
  f_bits ^= sign;
  if (f_bits >= fp8_max) {
    result = f_bits > fp32_inf ? UINT8_C(0x7F) : UINT8_C(0x7C);
  } else if (f_bits < (UINT32_C(113) << 23)) {
    f_bits = bits(f32(f_bits) + f32(denorm_mask));
    result = static_cast<std::uint8_t>(f_bits - denorm_mask);
  } else {
    const std::uint32_t mant_odd = (f_bits >> 21) & 1;
    f_bits += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xFFFFF;
    f_bits += mant_odd;
    result = static_cast<std::uint8_t>(f_bits >> 21);
  }
  result = static_cast<std::uint8_t>(result | (sign >> 24));
  return result;
}

/// torchao custom_fp_utils._f32_to_fpx_unpacked (FP4/FP6 elements).
std::uint32_t torchao_f32_to_fpx(float xf, int ebits, int mbits) {
  const int exp_bias = (1 << (ebits - 1)) - 1;
  const std::uint32_t max_int = (1U << (ebits + mbits)) - 1;
  const std::uint32_t sign_mask = 1U << (ebits + mbits);
  const std::uint32_t magic_adder = (1U << (23 - mbits - 1)) - 1;
  const auto max_normal = static_cast<float>(std::ldexp(1.0, ((1 << ebits) - 1) - exp_bias) *
                                             static_cast<double>((1 << (mbits + 1)) - 1) / (1 << mbits));
  const auto min_normal = static_cast<float>(std::ldexp(1.0, 1 - exp_bias));
  const int denorm_exp = (127 - exp_bias) + (23 - mbits) + 1;
  const std::uint32_t denorm_mask_int = static_cast<std::uint32_t>(denorm_exp) << 23;
  const float denorm_mask_float = f32(denorm_mask_int);
  std::uint32_t x = bits(xf);
  const std::uint32_t sign = x & 0x80000000U;
  x ^= sign;
  const float xv = f32(x);
  const bool saturate_mask = xv >= max_normal;
  const bool denormal_mask = !saturate_mask && xv < min_normal;
  const bool normal_mask = !(saturate_mask || denormal_mask);
  const auto denormal_x = static_cast<std::uint8_t>(bits(xv + denorm_mask_float) - denorm_mask_int);
  std::uint32_t normal_x = x;
  const std::uint32_t mant_odd = (normal_x >> (23 - mbits)) & 1;
  normal_x += static_cast<std::uint32_t>((exp_bias - 127) * (1 << 23)) + magic_adder;
  normal_x += mant_odd;
  const auto normal_u8 = static_cast<std::uint8_t>(normal_x >> (23 - mbits));
  std::uint32_t r = max_int;
  if (denormal_mask) r = denormal_x;
  if (normal_mask) r = normal_u8;
  const std::uint32_t sign_lp = (sign >> (23 + 8 - mbits - ebits)) & sign_mask;
  return (r | sign_lp) & 0xFFU;
}

/// Value of an E4M3 (fn) code.
float e4m3_value(std::uint32_t c) {
  if ((c & 0x7F) == 0x7F) return kNaN;
  const int e = static_cast<int>((c >> 3) & 0xF);
  const int m = static_cast<int>(c & 7);
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0F + static_cast<float>(m) / 8, e - 7);
  return (c & 0x80) ? -v : v;
}

/// cvt.rn.satfinite.e2m1x2.f32 (RNE, saturating at +-6), the threshold form of TE's Python reference.
std::uint32_t e2m1_rn_satfinite(float v) {
  const float a = std::fabs(v);
  std::uint32_t m = 7;
  if (a <= 0.25F) m = 0;
  else if (a < 0.75F) m = 1;
  else if (a <= 1.25F) m = 2;
  else if (a < 1.75F) m = 3;
  else if (a <= 2.5F) m = 4;
  else if (a < 3.5F) m = 5;
  else if (a <= 5.0F) m = 6;
  return (std::signbit(v) ? 8U : 0U) | m;
}
float e2m1_value(std::uint32_t c) {
  static const float v[8] = {0.0F, 0.5F, 1.0F, 1.5F, 2.0F, 3.0F, 4.0F, 6.0F};
  return (c & 8) ? -v[c & 7] : v[c & 7];
}

/// ModelOpt NVFP4QTensor._cast_fp4: torch.searchsorted (lower bound with !(mid >= val)), the odd-bound
/// correction at bounds[[1, 3, 5]], and the sign bit from weight < 0.
std::uint32_t modelopt_cast_fp4(float w) {
  static const float bounds[7] = {0.25F, 0.75F, 1.25F, 1.75F, 2.5F, 3.5F, 5.0F};
  const std::uint32_t sign_bit = w < 0 ? 1 : 0;
  const float a = std::fabs(w);
  std::int64_t start = 0, end = 7;
  while (start < end) {
    const std::int64_t mid = start + ((end - start) >> 1);
    if (!(bounds[mid] >= a)) start = mid + 1;
    else end = mid;
  }
  const std::uint32_t odd = (a == bounds[1] || a == bounds[3] || a == bounds[5]) ? 1 : 0;
  return (sign_bit << 3) + static_cast<std::uint32_t>(start) + odd;
}

/// ModelOpt MXFP4QTensor cast_fp4: sign_bit = (2 - sign(x)) // 2, ord = sum(|x| - bounds > 0).
std::uint32_t modelopt_mxfp4_cast(float x) {
  static const float bounds[7] = {0.25F, 0.75F, 1.25F, 1.75F, 2.5F, 3.5F, 5.0F};
  const float sign = x > 0 ? 1.0F : (x < 0 ? -1.0F : 0.0F);
  const auto sign_bit = static_cast<std::uint32_t>(std::floor((2.0F - sign) / 2.0F));
  std::uint32_t ord = 0;
  for (float b : bounds) ord += (std::fabs(x) - b > 0) ? 1 : 0;
  return sign_bit * 8 + ord;
}

/// Transformer Engine ptx::float_to_e8m0, software path (cvt.rp.satfinite.ue8m0x2.f32).
std::uint32_t te_float_to_e8m0(float val) {
  if (std::isnan(val)) return 0xFF;
  if (std::isinf(val)) return 0xFE;
  if (val == 0.0F) return 0x00;
  const std::uint32_t u = bits(val);
  std::uint32_t exponent = (u >> 23) & 0xFF;
  const std::uint32_t mantissa = u & 0x7FFFFF;
  if ((mantissa > 0 && exponent != 0xFE) && !(exponent == 0 && mantissa <= 0x400000)) ++exponent;
  return exponent;
}
/// ptx::exp2f_rcp: (biased_exp == 0) ? 1 : __int_as_float((254 - biased_exp) << FP32_MANTISSA_BITS).
float te_exp2f_rcp(std::uint32_t b) {
  return b == 0 ? 1.0F : f32(static_cast<std::uint32_t>((254 - static_cast<int>(b)) * (1 << 23)));
}
/// cvt.rn.satfinite.{e4m3,e5m2}x2.f32: RNE, saturating. A NaN product on the GPU is the canonical NaN
/// 0x7FFFFFFF, which CUDA's host conversion maps to 0x7F (E4M3) and 0x7E | 3 (E5M2, payload bits).
std::uint32_t te_cvt_fp8(float v, bool e5m2) {
  if (std::isnan(v)) return 0x7FU;
  const float m = e5m2 ? 57344.0F : 448.0F;
  const float c = std::fmin(std::fmax(v, -m), m);
  return e5m2 ? c10_e5m2(c) : c10_e4m3fn(c);
}

/// microxcaling _quantize_elemwise_core for round="nearest", saturate_normals=True, in float32:
/// _safe_lshift, _round_mantissa (sign(A) * floor(|A| + 0.5)), _safe_rshift, clamp to max_norm.
float mx_elemwise_nearest(float a, int bits, int exp_bits, float max_norm) {
  if (!std::isfinite(a)) return kNaN;  // a NaN block scale: every element of the block is NaN
  float out = a;
  float private_exp = 0;
  if (exp_bits != 0) {
    private_exp = std::floor(torch_log2(std::fabs(a) + (a == 0 ? 1.0F : 0.0F)));
    const auto min_exp = static_cast<float>(-(1 << (exp_bits - 1)) + 2);
    private_exp = std::max(private_exp, min_exp);
    out = out / std::ldexp(1.0F, static_cast<int>(private_exp)) * std::ldexp(1.0F, bits - 2);
  } else {
    out = out * std::ldexp(1.0F, bits - 2);
  }
  const float sign = out > 0 ? 1.0F : (out < 0 ? -1.0F : 0.0F);
  out = sign * std::floor(std::fabs(out) + 0.5F);
  if (exp_bits != 0) out = out / std::ldexp(1.0F, bits - 2) * std::ldexp(1.0F, static_cast<int>(private_exp));
  else out = out / std::ldexp(1.0F, bits - 2);
  return std::fmin(std::fmax(out, -max_norm), max_norm);
}
/// microxcaling C++ quantize_elemwise with rd_away: exact round-half-away on the element grid
/// (integer shifts of the float32 bits), then the clamp to max_norm.
float mx_elemwise_exact_away(float a, int bits, int exp_bits, float max_norm) {
  const int mb = bits - 2;
  int e = 0;
  if (exp_bits != 0) {
    const int min_exp = -(1 << (exp_bits - 1)) + 2;
    e = a == 0 ? min_exp : std::max(std::ilogb(a), min_exp);
  }
  const double q = std::ldexp(1.0, e - mb);
  const double r = std::floor(std::fabs(static_cast<double>(a)) / q + 0.5) * q;
  return static_cast<float>(std::copysign(std::min(r, static_cast<double>(max_norm)), a));
}

// ---- Element descriptors for the emulations ----
struct Elem {
  const char* block;  ///< mxlab block format
  int ebits;          ///< exponent bits (0: MX integer)
  int mbits;          ///< explicit mantissa (fraction) bits
  int emax;           ///< OCP emax, torchao's *_MAX_POW2
  float max;
};
const Elem kE4M3{"mxfp8_e4m3", 4, 3, 8, 448.0F};
const Elem kE5M2{"mxfp8_e5m2", 5, 2, 15, 57344.0F};
const Elem kE3M2{"mxfp6_e3m2", 3, 2, 4, 28.0F};
const Elem kE2M3{"mxfp6_e2m3", 2, 3, 2, 7.5F};
const Elem kE2M1{"mxfp4", 2, 1, 2, 6.0F};
const Elem kInt8{"mxint8", 0, 6, 0, 127.0F / 64};

struct Emu {
  std::vector<std::uint32_t> scales;
  std::vector<std::uint32_t> codes;
  std::vector<float> values;
  float tensor_scale = 0;
  std::size_t map4_picks = 0;  ///< 4over6: blocks that took the map-to-4 candidate
};

float nan_max(float m, float v) { return (std::isnan(m) || std::isnan(v)) ? kNaN : std::max(m, v); }

/// microxcaling _quantize_mx, Python path (custom_cuda=False), values.
Emu emu_microxcaling(const std::vector<float>& x, std::size_t k, const Elem& el, bool python) {
  Emu r;
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) {
    float amax = 0;
    for (std::size_t i = b0; i < b0 + k; ++i) amax = nan_max(amax, std::fabs(x[i]));
    float se = 0;
    if (python) {
      se = std::floor(torch_log2(amax + FLT_MIN * (amax == 0 ? 1.0F : 0.0F)));
    } else {
      const int field = static_cast<int>((bits(amax) >> 23) & 0xFF);  // get_biased_exponent
      se = field == 255 ? kNaN : static_cast<float>(field - 127);
    }
    se = se - static_cast<float>(el.emax);
    if (se > 127) se = kNaN;
    if (se < -127) se = -127;
    r.scales.push_back(std::isnan(se) ? 0xFFU : static_cast<std::uint32_t>(static_cast<int>(se) + 127));
    const float scale = std::isnan(se) ? kNaN : std::ldexp(1.0F, static_cast<int>(se));
    for (std::size_t i = b0; i < b0 + k; ++i) {
      const float a = x[i] / scale;
      const int bits_total = el.mbits + 2;
      const float out = python ? mx_elemwise_nearest(a, bits_total, el.ebits, el.max)
                               : mx_elemwise_exact_away(a, bits_total, el.ebits, el.max);
      r.values.push_back(std::isnan(a) ? kNaN : out * scale);
    }
  }
  return r;
}

enum class TorchaoMode { Floor, Ceil, Even, Rceil };

std::uint32_t torchao_cast(float d, const Elem& el) {
  if (el.ebits == 4) return c10_e4m3fn(d);
  if (el.ebits == 5) return c10_e5m2(d);
  return torchao_f32_to_fpx(d, el.ebits, el.mbits);
}

/// torchao to_mx (b88afaf4).
Emu emu_torchao(const std::vector<float>& x, std::size_t k, const Elem& el, TorchaoMode mode) {
  Emu r;
  const float max_pos = el.max;
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) {
    float max_abs = 0;  // torch.amax(torch.abs(data_hp), -1): NaN propagates
    for (std::size_t i = b0; i < b0 + k; ++i) max_abs = nan_max(max_abs, std::fabs(x[i]));
    if (mode == TorchaoMode::Rceil) {
      const float descale = max_abs / max_pos;
      std::uint32_t exponent = 0xFF;
      if (!std::isnan(descale))
        exponent = static_cast<std::uint32_t>(std::clamp(std::ceil(torch_log2(descale)), -127.0F, 127.0F) + 127);
      const float descale_fp = exponent == 0 ? 1.0F : std::ldexp(1.0F, 127 - static_cast<int>(exponent));
      r.scales.push_back(exponent);
      for (std::size_t i = b0; i < b0 + k; ++i) {
        float d = x[i] * descale_fp;
        if (!std::isnan(d)) d = std::min(std::max(d, -max_pos), max_pos);
        r.codes.push_back(torchao_cast(d, el));
      }
      continue;
    }
    const bool nan_amax = std::isnan(max_abs);
    if (mode == TorchaoMode::Even) {
      const std::uint32_t val_to_add = 1U << (23 - el.mbits - 1);
      const std::uint32_t mask = ((1U << (8 + 1)) - 1) << 23;
      max_abs = f32((bits(max_abs) + val_to_add) & mask);
      if (nan_amax) max_abs = kNaN;
    }
    const std::uint32_t max_abs_int32 = bits(max_abs);
    int extracted_pow2 = static_cast<int>((max_abs_int32 >> 23) & 0xFF) - 127;
    if (mode == TorchaoMode::Ceil && (max_abs_int32 & 0x7FFFFF) > 0) extracted_pow2 += 1;
    const int unbiased = std::clamp(extracted_pow2 - el.emax, -127, 128);
    std::uint32_t biased = static_cast<std::uint32_t>(unbiased + 127) & 0xFF;
    if (std::isnan(max_abs)) biased = 0xFF;
    r.scales.push_back(biased);
    float scale_fp32 = f32(biased << 23);
    scale_fp32 = std::max(scale_fp32, FLT_MIN);  // torch.clamp(scale_fp32, min=F32_MIN_NORMAL)
    for (std::size_t i = b0; i < b0 + k; ++i) {
      float d = x[i] / scale_fp32;
      if (el.ebits >= 4 && !std::isnan(d)) d = std::min(std::max(d, -max_pos), max_pos);
      r.codes.push_back(torchao_cast(d, el));
    }
  }
  return r;
}

/// Transformer Engine quantize_mxfp8_kernel (rowwise 1x32).
Emu emu_te_mxfp8(const std::vector<float>& x, std::size_t k, const Elem& el) {
  Emu r;
  const auto max_norm_rcp = static_cast<float>(1.0 / static_cast<double>(el.max));
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) {
    float amax = 0;
    for (std::size_t i = b0; i < b0 + k; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const std::uint32_t e8 = te_float_to_e8m0(amax * max_norm_rcp);
    r.scales.push_back(e8);
    const float s = te_exp2f_rcp(e8);
    for (std::size_t i = b0; i < b0 + k; ++i) r.codes.push_back(te_cvt_fp8(x[i] * s, el.ebits == 5));
  }
  return r;
}

/// compute_global_encode_scaling_factor_FP4<E4M3_MAX>.
float te_global_encode(float global_amax, float e4m3_max) {
  float global_encode_scale = e4m3_max * 6.0F / global_amax;
  global_encode_scale = std::fmin(global_encode_scale, FLT_MAX);
  if (global_amax == 0.0F || global_encode_scale == 0.0F) return 1.0F;
  return global_encode_scale;
}
std::uint32_t e4m3_satfinite(float v) { return c10_e4m3fn(std::fmin(v, 448.0F)); }  // v >= 0 here

/// Transformer Engine NVFP4 (1x16): compute_decoding_scaling_factor, compute_scaling_coefficient<float>,
/// cvt.rn.satfinite.e2m1x2.f32.
Emu emu_te_nvfp4(const std::vector<float>& x, std::size_t k) {
  Emu r;
  float global_amax = 0;
  for (float v : x) global_amax = std::fmax(global_amax, std::fabs(v));
  const float S_enc = te_global_encode(global_amax, 448.0F);
  const auto S_dec = static_cast<float>(1.0 / static_cast<double>(S_enc));
  r.tensor_scale = S_dec;
  constexpr float fp4_max_inv = 1.0F / 6.0F;
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) {
    float block_amax = 0;
    for (std::size_t i = b0; i < b0 + k; ++i) block_amax = std::fmax(block_amax, std::fabs(x[i]));
    const std::uint32_t sc = e4m3_satfinite(block_amax * (S_enc * fp4_max_inv));
    r.scales.push_back(sc);
    const float scale_rcp = std::fmin(1.0F / (e4m3_value(sc) * S_dec), FLT_MAX);
    for (std::size_t i = b0; i < b0 + k; ++i) r.codes.push_back(e2m1_rn_satfinite(x[i] * scale_rcp));
  }
  return r;
}

/// Transformer Engine 4over6 (quantize_4over6_kernel.cuh, non-fast-math error, E4M3_MAX = 256).
Emu emu_te_4over6(const std::vector<float>& x, std::size_t k, bool mse) {
  Emu r;
  constexpr float e4m3_max = 256.0F;
  float global_amax = 0;
  for (float v : x) global_amax = std::fmax(global_amax, std::fabs(v));
  const float S_enc = te_global_encode(global_amax, e4m3_max);
  r.tensor_scale = 1.0F / S_enc;
  constexpr float err_denom = 6.0F * e4m3_max;
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) {
    float block_amax = 0;
    for (std::size_t i = b0; i < b0 + k; ++i) block_amax = std::fmax(block_amax, std::fabs(x[i]));
    const float base = block_amax / 6.0F * S_enc;
    const std::uint32_t map4 = e4m3_satfinite(std::fmin(base * 1.5F, 448.0F));
    const std::uint32_t map6 = e4m3_satfinite(std::fmin(base, 448.0F));
    const float S_dec = 1.0F / S_enc;
    std::vector<std::uint32_t> c4, c6;
    float err4 = 0, err6 = 0;
    for (auto [sc, codes, err] : {std::tuple{map4, &c4, &err4}, std::tuple{map6, &c6, &err6}}) {
      const float sf = e4m3_value(sc);
      const float inv = std::fmin(1.0F / (sf * S_dec), FLT_MAX);
      for (std::size_t i = b0; i < b0 + k; ++i) {
        const std::uint32_t c = e2m1_rn_satfinite(x[i] * inv);
        codes->push_back(c);
        const float val = e2m1_value(c) * sf * global_amax / err_denom;
        const float diff = val - x[i];
        *err = *err + (mse ? diff * diff : std::fabs(diff));
      }
    }
    const bool pick_map4 = err4 < err6;
    r.map4_picks += pick_map4 ? 1 : 0;
    r.scales.push_back(pick_map4 ? map4 : map6);
    const auto& chosen = pick_map4 ? c4 : c6;
    r.codes.insert(r.codes.end(), chosen.begin(), chosen.end());
  }
  return r;
}

/// ModelOpt NVFP4QTensor.quantize (real quantization, weights_scaling_factor_2 from the tensor).
Emu emu_modelopt_nvfp4(const std::vector<float>& x, std::size_t k) {
  Emu r;
  float mx = -kInf, mn = kInf;  // reduce_amax: torch.max, torch.min, maximum of their abs (NaN propagates)
  for (float v : x) {
    mx = std::isnan(v) || std::isnan(mx) ? kNaN : std::max(mx, v);
    mn = std::isnan(v) || std::isnan(mn) ? kNaN : std::min(mn, v);
  }
  const float amax = nan_max(std::fabs(mx), std::fabs(mn));
  const float wsf2 = amax / (6.0F * 448.0F);
  r.tensor_scale = wsf2;
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) {
    float per_block_amax = 0;
    for (std::size_t i = b0; i < b0 + k; ++i) per_block_amax = nan_max(per_block_amax, std::fabs(x[i]));
    float per_block_scale = per_block_amax / (6.0F * wsf2);
    if (per_block_scale == 0) per_block_scale = 1.0F;
    const std::uint32_t sc = c10_e4m3fn(per_block_scale);
    r.scales.push_back(sc);
    const float d = e4m3_value(sc) * wsf2;
    for (std::size_t i = b0; i < b0 + k; ++i) r.codes.push_back(modelopt_cast_fp4(x[i] / d));
  }
  return r;
}

/// ModelOpt MXFP8QTensor.quantize.
Emu emu_modelopt_mxfp8(const std::vector<float>& x, std::size_t k) {
  Emu r;
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) {
    float amax = 0;
    for (std::size_t i = b0; i < b0 + k; ++i) amax = nan_max(amax, std::fabs(x[i]));
    const float descale = amax / 448.0F;
    const float log2_descale = descale > 0 ? torch_log2(descale) : -127.0F;
    const float e = std::clamp(std::ceil(log2_descale), -127.0F, 127.0F);
    const auto code = static_cast<std::uint32_t>(e + 127);
    r.scales.push_back(code);
    const float scale_factor = std::ldexp(1.0F, 127 - static_cast<int>(code));
    for (std::size_t i = b0; i < b0 + k; ++i) {
      float v = x[i] * scale_factor;
      if (!std::isnan(v)) v = std::min(std::max(v, -448.0F), 448.0F);
      r.codes.push_back(c10_e4m3fn(v));
    }
  }
  return r;
}

/// ModelOpt MXFP4QTensor.quantize.
Emu emu_modelopt_mxfp4(const std::vector<float>& x, std::size_t k) {
  Emu r;
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) {
    float amax = 0;
    for (std::size_t i = b0; i < b0 + k; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float descale = amax / 6.0F;
    const float e = std::ceil(std::max(torch_log2(descale), -127.0F));
    r.scales.push_back(static_cast<std::uint32_t>(e + 127));
    const float scale = std::ldexp(1.0F, static_cast<int>(e));
    for (std::size_t i = b0; i < b0 + k; ++i) r.codes.push_back(modelopt_mxfp4_cast(x[i] / scale));
  }
  return r;
}

// ================================================================================================
// Seeded FP32 test tensors: random blocks, blocks of element-grid midpoints, amaxes a few ulps from
// powers of two and from max * 2^E, zeros and FP32 subnormals.
// ================================================================================================

float nudge(float v, int ulps) {
  for (; ulps > 0; --ulps) v = std::nextafter(v, kInf);
  for (; ulps < 0; ++ulps) v = std::nextafter(v, -kInf);
  return v;
}
float random_float(Rng& rng, int emin, int emax) {
  const int e = emin + static_cast<int>(rng.next_u32() % static_cast<std::uint32_t>(emax - emin + 1));
  const float m = 1.0F + static_cast<float>(rng.next_u32() & 0x7FFFFF) * 0x1p-23F;
  const float v = std::ldexp(m, e);
  return (rng.next_u32() & 1) ? -v : v;
}
int small_int(Rng& rng, int lo, int hi) {
  return lo + static_cast<int>(rng.next_u32() % static_cast<std::uint32_t>(hi - lo + 1));
}

/// One block of k values for an element format with positive values `grid` (ascending, from the
/// catalogue) and largest value gmax.
void fill_block(Rng& rng, float* out, std::size_t k, const std::vector<double>& grid, double gmax) {
  const int kind = small_int(rng, 0, 5);
  const int E = small_int(rng, -124, 100);
  switch (kind) {
    case 0: {  // random magnitudes over a few binades, somewhere in the float32 range
      const int top = small_int(rng, -135, 110);
      for (std::size_t i = 0; i < k; ++i) out[i] = random_float(rng, top - small_int(rng, 0, 14), top);
      break;
    }
    case 1:
    case 2: {  // amax = gmax * 2^E (every pow2 rule gives X = E), the rest near grid midpoints
      out[0] = static_cast<float>(std::ldexp(gmax, E));
      if (kind == 2) out[0] = nudge(out[0], small_int(rng, -2, 2));
      for (std::size_t i = 1; i < k; ++i) {
        const std::size_t j = static_cast<std::size_t>(small_int(rng, 0, static_cast<int>(grid.size()) - 2));
        const double mid = (grid[j] + grid[j + 1]) / 2;
        float v = static_cast<float>(std::ldexp(mid, E));
        v = nudge(v, small_int(rng, -1, 1) * small_int(rng, 0, 2));
        out[i] = (rng.next_u32() & 1) ? -v : v;
      }
      break;
    }
    case 3: {  // amax a few ulps from a power of two (float32 log2 rounds to it)
      const int P = small_int(rng, -128, 126);
      out[0] = nudge(std::ldexp(1.0F, P), small_int(rng, -3, 3));
      for (std::size_t i = 1; i < k; ++i) out[i] = out[0] * static_cast<float>(rng.uniform());
      break;
    }
    case 4: {  // zeros, signed zeros and FP32 subnormals
      const int sub = small_int(rng, 0, 2);
      for (std::size_t i = 0; i < k; ++i) {
        if (sub == 0) out[i] = (rng.next_u32() & 1) ? -0.0F : 0.0F;
        else out[i] = f32(rng.next_u32() & (sub == 1 ? 0x007FFFFFU : 0x807FFFFFU));
      }
      break;
    }
    default: {  // values at and around midpoints relative to a random (non power of two) amax
      const float amax = random_float(rng, E - 2, E + 2);
      out[0] = amax;
      for (std::size_t i = 1; i < k; ++i) {
        const std::size_t j = static_cast<std::size_t>(small_int(rng, 0, static_cast<int>(grid.size()) - 2));
        const double mid = (grid[j] + grid[j + 1]) / 2 / gmax;
        out[i] = nudge(static_cast<float>(mid * std::fabs(static_cast<double>(amax))), small_int(rng, -1, 1));
      }
      break;
    }
  }
}

std::vector<double> positive_grid(const Format& e) {
  std::vector<double> g;
  for (const auto& en : e.sorted_values())
    if (en.value >= 0 && (g.empty() || en.value != g.back())) g.push_back(en.value);
  return g;
}

std::vector<float> random_tensor(Rng& rng, std::size_t rows, std::size_t cols, std::size_t k, const Format& e) {
  std::vector<float> x(rows * cols);
  const auto grid = positive_grid(e);
  for (std::size_t b0 = 0; b0 < x.size(); b0 += k) fill_block(rng, &x[b0], k, grid, e.max_finite());
  return x;
}

/// NVFP4 tensors: one tensor amax, block amaxes whose scaled value lies near an E4M3 midpoint, elements
/// near E2M1 midpoints of their block.
std::vector<float> random_nvfp4_tensor(Rng& rng, std::size_t n, std::size_t k) {
  std::vector<float> x(n);
  const float A = random_float(rng, -20, 20);
  const auto e4m3 = positive_grid(*find_catalogue_format("ue4m3"));
  const auto e2m1 = positive_grid(*find_catalogue_format("e2m1"));
  for (std::size_t b0 = 0; b0 < n; b0 += k) {
    const int kind = small_int(rng, 0, 3);
    float bamax = 0;
    if (kind == 0) {
      bamax = std::fabs(A) * static_cast<float>(rng.uniform());
    } else {
      const std::size_t j = static_cast<std::size_t>(small_int(rng, 0, static_cast<int>(e4m3.size()) - 2));
      const double t = kind == 3 ? e4m3[j + 1] : (e4m3[j] + e4m3[j + 1]) / 2;
      bamax = nudge(static_cast<float>(t * 6 * std::fabs(static_cast<double>(A)) / 2688), small_int(rng, -3, 3));
      bamax = std::min(bamax, std::fabs(A));
    }
    x[b0] = (rng.next_u32() & 1) ? -bamax : bamax;
    for (std::size_t i = b0 + 1; i < b0 + k; ++i) {
      const std::size_t j = static_cast<std::size_t>(small_int(rng, 0, static_cast<int>(e2m1.size()) - 2));
      const double mid = (e2m1[j] + e2m1[j + 1]) / 2 / 6;
      float v = nudge(static_cast<float>(mid * static_cast<double>(bamax)), small_int(rng, -2, 2));
      if (small_int(rng, 0, 9) == 0) v = 0.0F;
      x[i] = (rng.next_u32() & 1) ? -v : v;
    }
  }
  x[static_cast<std::size_t>(small_int(rng, 0, static_cast<int>(n) - 1))] = A;  // the tensor amax
  return x;
}

/// Compares codes (and scale codes) of a profile with an emulation; reports the first difference.
void compare_codes(const QuantizedTensor& q, const Emu& emu, const std::vector<float>& x, const std::string& what) {
  INFO(what);
  REQUIRE(q.scale_codes.size() == emu.scales.size());
  const std::size_t k = x.size() / emu.scales.size();
  for (std::size_t b = 0; b < emu.scales.size(); ++b) {
    if (q.scale_codes[b] != emu.scales[b]) {
      FAIL_CHECK("block " << b << " amax bits 0x" << std::hex << bits(static_cast<float>(q.block_amax[b]))
                          << ": scale code 0x" << q.scale_codes[b] << ", peer 0x" << emu.scales[b]);
      return;
    }
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (q.codes[i] != emu.codes[i]) {
      FAIL_CHECK("element " << i << " (block " << i / k << ") x bits 0x" << std::hex << bits(x[i]) << ": code 0x"
                            << q.codes[i] << ", peer 0x" << emu.codes[i]);
      return;
    }
  }
}

void compare_values(const QuantizedTensor& q, const Emu& emu, const std::vector<float>& x, const std::string& what) {
  INFO(what);
  REQUIRE(q.scale_codes.size() == emu.scales.size());
  for (std::size_t b = 0; b < emu.scales.size(); ++b) {
    if (q.scale_codes[b] != emu.scales[b]) {
      FAIL_CHECK("block " << b << ": scale code 0x" << std::hex << q.scale_codes[b] << ", peer 0x" << emu.scales[b]);
      return;
    }
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = emu.values[i];
    const bool same = (std::isnan(want) && std::isnan(q.values[i])) || want == q.values[i];
    if (!same) {
      FAIL_CHECK("element " << i << " x bits 0x" << std::hex << bits(x[i]) << std::dec << ": value " << q.values[i]
                            << ", peer " << want);
      return;
    }
  }
}

}  // namespace

// ================================================================================================
// Options and profiles
// ================================================================================================

TEST_CASE("profile option names parse and print", "[profiles]") {
  auto round_trip = [](auto values, auto parse) {
    for (auto v : values) {
      auto back = parse(to_string(v));
      REQUIRE(back.ok());
      CHECK(*back == v);
    }
  };
  round_trip(std::vector{AmaxLog2::Exact, AmaxLog2::Field, AmaxLog2::Float32}, parse_amax_log2);
  round_trip(std::vector{RceilQuotient::Exact, RceilQuotient::F32Div, RceilQuotient::F32MulRcp}, parse_rceil_quotient);
  round_trip(std::vector{Code0Multiplier::Exact, Code0Multiplier::One, Code0Multiplier::MinNormal},
             parse_code0_multiplier);
  round_trip(std::vector{AmaxSubnormal::Keep, AmaxSubnormal::Flush, AmaxSubnormal::FlushPositive},
             parse_amax_subnormal);
  round_trip(std::vector{ZeroSign::Keep, ZeroSign::MinusZeroPlus, ZeroSign::ZeroMinus}, parse_zero_sign);
  round_trip(std::vector{NearestArith::Exact, NearestArith::Float32AddHalf}, parse_nearest_arith);
  round_trip(std::vector{InputPrecision::Exact, InputPrecision::Float32}, parse_input_precision);
  round_trip(std::vector{Nvfp4Arith::Exact, Nvfp4Arith::Te, Nvfp4Arith::ModelOpt}, parse_nvfp4_arith);
  round_trip(std::vector{FourOverSixMetric::ExactSse, FourOverSixMetric::Mae, FourOverSixMetric::Mse},
             parse_four_over_six_metric);
  round_trip(std::vector{ZeroBlock::Smallest, ZeroBlock::One, ZeroBlock::MinNormal}, parse_zero_block);
  round_trip(std::vector{SpecialsPolicy::BlockNan, SpecialsPolicy::Element, SpecialsPolicy::BlockNanAny,
                         SpecialsPolicy::IgnoreNan, SpecialsPolicy::TorchaoFloor, SpecialsPolicy::TorchaoRceil,
                         SpecialsPolicy::TensorNan, SpecialsPolicy::NanSmallest},
             parse_specials_policy);
  auto bad = parse_rceil_quotient("f32-mul");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("f32-mul-rcp"));
}

TEST_CASE("profiles: names, options set, and formats they do not cover", "[profiles]") {
  const auto names = profile_names();
  for (const char* n : {"ocp", "microxcaling", "microxcaling-cuda", "torchao-floor", "torchao-ceil", "torchao-even",
                        "torchao-rceil", "transformer-engine", "transformer-engine-nvfp4",
                        "transformer-engine-nvfp4-4over6-mae", "transformer-engine-nvfp4-4over6-mse", "modelopt",
                        "modelopt-mxfp8", "modelopt-mxfp4"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());

  // ocp leaves the exact defaults.
  const auto ocp = plain("mxfp8_e4m3");
  const auto def = parse_block_format("mxfp8_e4m3");
  REQUIRE(def.ok());
  CHECK(ocp.options.rule == def->options.rule);
  CHECK(ocp.options.input == InputPrecision::Exact);
  CHECK(ocp.options.amax_log2 == AmaxLog2::Exact);
  CHECK(ocp.options.specials == SpecialsPolicy::BlockNan);
  CHECK(ocp.options.element.rounding == Rounding::NearestEven);
  CHECK(plain("nvfp4").options.rule == ScaleRule::Amax);

  const auto mx = prof("mxfp4", "microxcaling");
  CHECK(mx.options.profile == "microxcaling");
  CHECK(mx.options.element.rounding == Rounding::NearestAway);
  CHECK(mx.options.amax_log2 == AmaxLog2::Float32);
  CHECK(prof("mxfp4", "microxcaling-cuda").options.amax_log2 == AmaxLog2::Field);
  const auto te = prof("mxfp8_e4m3", "transformer-engine");
  CHECK(te.options.rule == ScaleRule::RCeil);
  CHECK(te.options.rceil_quotient == RceilQuotient::F32MulRcp);
  CHECK(te.options.code0_multiplier == Code0Multiplier::One);
  const auto mo = prof("nvfp4", "modelopt");
  CHECK(mo.options.nvfp4_arith == Nvfp4Arith::ModelOpt);
  CHECK(mo.options.scale.overflow == Overflow::Nan);
  CHECK(prof("nvfp4", "modelopt-nvfp4").options.profile == "modelopt");

  struct Bad {
    const char* spec;
    const char* profile;
  };
  for (Bad b : {Bad{"mxfp4", "transformer-engine-nvfp4"}, Bad{"nvfp4", "transformer-engine"},
                Bad{"mxfp8_e5m2", "modelopt-mxfp8"}, Bad{"mxfp4", "modelopt"}, Bad{"mxint8", "torchao-floor"},
                Bad{"mxsf", "microxcaling"}, Bad{"mxfp8_e4m3@16", "transformer-engine"},
                Bad{"nvfp4@16x16", "transformer-engine-nvfp4-4over6-mae"}, Bad{"nvfp4", "modelopt-mxfp4"}}) {
    INFO(b.spec << " " << b.profile);
    auto f = parse_block_format(b.spec);
    REQUIRE(f.ok());
    auto r = apply_profile(*f, b.profile);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("covers"));
    CHECK_THAT(r.error().message, Catch::Contains(b.spec));
  }
  CHECK(prof("nvfp4@16x16", "transformer-engine-nvfp4").options.nvfp4_arith == Nvfp4Arith::Te);
  auto unknown = apply_profile(*def, "torchao");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message, Catch::Contains("torchao-floor"));
}

TEST_CASE("option combinations no rule defines are errors", "[profiles]") {
  auto f = plain("mxfp8_e4m3");
  f.options.amax_log2 = AmaxLog2::Float32;
  f.options.rule = ScaleRule::RCeil;
  auto r = quantize(f, std::vector<double>{1.0}, {1});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("f32-div"));
  auto g = plain("mxfp8_e4m3");
  g.options.nvfp4_arith = Nvfp4Arith::Te;
  CHECK_FALSE(quantize(g, std::vector<double>{1.0}, {1}).ok());
  auto h = plain("nvfp4");
  h.options.specials = SpecialsPolicy::TorchaoFloor;
  CHECK_FALSE(quantize(h, std::vector<double>{1.0}, {1}).ok());
  auto n = plain("mxfp4");
  n.options.nearest_arith = NearestArith::Float32AddHalf;
  CHECK_FALSE(quantize(n, std::vector<double>{1.0}, {1}).ok());
}

// ================================================================================================
// Hand-worked cases, each derived from the formulas in docs/profiles.md
// ================================================================================================

TEST_CASE("element rounding: microxcaling ties away, OCP ties to even, ModelOpt MXFP4 ties toward zero",
          "[profiles]") {
  // amax 6: X = floor(log2 6) - 2 = 0 for the floor rules, ceil(log2(6/6)) = 0 for ModelOpt's rceil.
  const std::vector<float> x = {6.0F, 2.5F, 0.25F, -2.5F, 5.0F, 0.75F, 1.75F, 3.5F};
  const auto o = qz(plain("mxfp4"), x);
  const auto m = qz(prof("mxfp4", "microxcaling"), x);
  const auto c = qz(prof("mxfp4", "microxcaling-cuda"), x);
  const auto z = qz(prof("mxfp4", "modelopt-mxfp4"), x);
  for (const auto* q : {&o, &m, &c, &z}) CHECK(q->scale_codes[0] == 127);
  CHECK(o.values == std::vector<double>{6, 2, 0, -2, 4, 1, 2, 4});
  CHECK(m.values == std::vector<double>{6, 3, 0.5, -3, 6, 1, 2, 4});
  CHECK(c.values == m.values);
  CHECK(z.values == std::vector<double>{6, 2, 0, -2, 4, 0.5, 1.5, 3});
  CHECK(z.codes[0] == 0x7);
  CHECK(z.codes[3] == 0xC);  // -2
}

TEST_CASE("microxcaling Python rounds with floor(|A| + 0.5) in float32", "[profiles]") {
  // Block amax 4: X = 0. x = 0x3E7FFFFF = 0.25 - 2^-26 lies in E2M1's subnormal range, so A = 2x =
  // 0.5 - 2^-25 and fl32(A + 0.5) = 1 (a tie between 1 - 2^-24 and 1, to even): the element becomes 0.5.
  // Exact rounding (OCP, microxcaling C++) gives 0.
  const std::vector<float> x = {4.0F, f32(0x3E7FFFFF), -f32(0x3E7FFFFF)};
  CHECK(qz(prof("mxfp4", "microxcaling"), x).values == std::vector<double>{4, 0.5, -0.5});
  CHECK(qz(prof("mxfp4", "microxcaling-cuda"), x).values == std::vector<double>{4, 0, -0.0});
  CHECK(qz(plain("mxfp4"), x).values == std::vector<double>{4, 0, -0.0});
}

TEST_CASE("truncation: microxcaling round=floor and the floor scale rule", "[profiles]") {
  auto f = prof("mxfp4", "microxcaling");
  f.options.element.rounding = Rounding::TowardZero;  // round="floor": sign(A) * floor(|A|)
  CHECK(qz(f, {5.9F, 2.9F, -2.9F, 0.49F}).values == std::vector<double>{4, 2, -2, 0});
  // torchao FLOOR reads the exponent field of 511.99997 (0x43FFFFFF): 8, so X = 0 and the amax saturates
  // to 448; RCEIL rules round 511.99997 / 448 up to 2 (X = 1) and the amax becomes 256.
  const std::vector<float> a = {f32(0x43FFFFFF)};
  const auto fl = qz(prof("mxfp8_e4m3", "torchao-floor"), a);
  CHECK(fl.scale_codes[0] == 127);
  CHECK(fl.codes[0] == 0x7E);
  for (const char* p : {"torchao-rceil", "transformer-engine", "modelopt-mxfp8"}) {
    INFO(p);
    const auto rc = qz(prof("mxfp8_e4m3", p), a);
    CHECK(rc.scale_codes[0] == 128);
    CHECK(rc.codes[0] == 0x78);  // 256 = 2^8: exponent field 15
  }
}

TEST_CASE("the smallest scale: clamp to 2^-127 and what code 0x00 multiplies by", "[profiles]") {
  // amax 2^-130: every rule clamps X to -127 (code 0x00). The element 2^-130 is then
  //   exact (OCP, microxcaling, ModelOpt): 2^-130 / 2^-127 = 0.125 (E4M3 0x20);
  //   torchao FLOOR: 2^-130 / 2^-126 = 0.0625 (0x18), half of what the code means;
  //   TE and torchao RCEIL: 2^-130 * 1, which rounds to 0.
  const std::vector<float> x = {std::ldexp(1.0F, -130)};
  struct Case {
    const char* profile;
    std::uint32_t code;
  };
  for (Case c : {Case{"ocp", 0x20}, Case{"microxcaling", 0x20}, Case{"microxcaling-cuda", 0x20},
                 Case{"modelopt-mxfp8", 0x20}, Case{"torchao-floor", 0x18}, Case{"transformer-engine", 0x00},
                 Case{"torchao-rceil", 0x00}}) {
    INFO(c.profile);
    const auto q = qz(prof("mxfp8_e4m3", c.profile), x);
    CHECK(q.scale_codes[0] == 0x00);
    CHECK(q.codes[0] == c.code);
  }
}

TEST_CASE("microxcaling Python: a shared exponent above 127 is a NaN block; an underflowed quotient gives +0",
          "[profiles]") {
  // fl32(log2(FLT_MAX)) rounds to 128; MXINT8's emax is 0, so shared_exp = 128 > scale_emax = 127 and
  // _quantize_mx sets it to NaN: the whole block is NaN. FP8 (emax 8) stays in range.
  const std::vector<float> big = {FLT_MAX, 1.0F, -2.0F, 0.0F};
  const auto mi = qz(prof("mxint8", "microxcaling"), big);
  CHECK(mi.scale_codes[0] == 0xFF);
  for (double v : mi.values) CHECK(std::isnan(v));
  CHECK(qz(prof("mxint8", "microxcaling-cuda"), big).scale_codes[0] == 0xFE);  // field reading: 127
  CHECK(qz(plain("mxint8"), big).scale_codes[0] == 0xFE);
  CHECK(qz(prof("mxfp8_e4m3", "microxcaling"), big).scale_codes[0] == 127 + 128 - 8);  // 120: in range
  // Just below the power of two where fl32(log2) still reads 127: an ordinary block.
  CHECK(qz(prof("mxint8", "microxcaling"), {0x1p127F, 1.0F}).scale_codes[0] == 0xFE);

  // Negative inputs that become zero in MXINT8 (scale 2^60): sign(A) * floor(|A| * 64 + 0.5) is -0 when the
  // float32 quotient A / 2^60 is a negative number, but +0 when that quotient underflowed to -0
  // (torch.sign(-0.0) is 0): |A| <= 2^(60 - 150) does.
  const float tiny = -0x1p-91F;  // quotient 2^-151: underflows
  const float edge = -0x1p-90F;  // quotient 2^-150: the tie goes to 0 as well
  const float small = -0x1.8p-90F;  // quotient 1.5 x 2^-150: the subnormal 2^-149
  const float sub = -0x1p-140F;  // a float32 subnormal input
  const auto nz = qz(prof("mxint8", "microxcaling"), {0x1p60F, tiny, edge, small, sub, -0x1p40F});
  REQUIRE(nz.scale_codes[0] == 127 + 60);
  CHECK(std::bit_cast<std::uint64_t>(nz.values[1]) == std::bit_cast<std::uint64_t>(0.0));
  CHECK(std::bit_cast<std::uint64_t>(nz.values[2]) == std::bit_cast<std::uint64_t>(0.0));
  CHECK(std::bit_cast<std::uint64_t>(nz.values[3]) == std::bit_cast<std::uint64_t>(-0.0));
  CHECK(std::bit_cast<std::uint64_t>(nz.values[4]) == std::bit_cast<std::uint64_t>(0.0));
  CHECK(std::bit_cast<std::uint64_t>(nz.values[5]) == std::bit_cast<std::uint64_t>(-0.0));
}

TEST_CASE("all-zero blocks", "[profiles]") {
  const std::vector<float> z = {0.0F, -0.0F};
  // microxcaling Python replaces a zero amax by 2^-126: X = max(-126 - emax, -127), -126 for MXINT8.
  CHECK(qz(prof("mxint8", "microxcaling"), z).scale_codes[0] == 0x01);
  CHECK(qz(prof("mxint8", "microxcaling-cuda"), z).scale_codes[0] == 0x00);
  CHECK(qz(prof("mxfp8_e4m3", "microxcaling"), z).scale_codes[0] == 0x00);
  CHECK(qz(plain("mxint8"), z).scale_codes[0] == 0x00);
  // The largest FP32 subnormal: fl32(log2) rounds to -126 on the Python path.
  CHECK(qz(prof("mxint8", "microxcaling"), {f32(0x007FFFFF)}).scale_codes[0] == 0x01);
  CHECK(qz(prof("mxint8", "microxcaling-cuda"), {f32(0x007FFFFF)}).scale_codes[0] == 0x00);

  // NVFP4: a zero block of a nonzero tensor. ModelOpt replaces the scale 0 by 1.0 (E4M3 0x38); TE and the
  // exact default keep 0.
  std::vector<float> x(32, 0.0F);
  x[0] = 4.0F;
  CHECK(qz(prof("nvfp4", "modelopt"), x).scale_codes[1] == 0x38);
  CHECK(qz(prof("nvfp4", "transformer-engine-nvfp4"), x).scale_codes[1] == 0x00);
  CHECK(qz(plain("nvfp4"), x).scale_codes[1] == 0x00);
  // An all-zero tensor: ModelOpt's S_dec = 0 / 2688 = 0, so every block scale is 0 / (6 * 0) = NaN and
  // every element 0 / NaN, which searchsorted puts after every bound (code 0x7). TE sets S_enc = 1.
  const auto mo = qz(prof("nvfp4", "modelopt"), std::vector<float>(16, 0.0F));
  CHECK(mo.scale_codes[0] == 0x7F);
  CHECK(mo.codes[0] == 0x7);
  CHECK(mo.tensor_scale == 0.0);
  const auto te = qz(prof("nvfp4", "transformer-engine-nvfp4"), std::vector<float>(16, 0.0F));
  CHECK(te.scale_codes[0] == 0x00);
  CHECK(te.codes[0] == 0x0);
  CHECK(te.tensor_scale == 1.0);
}

TEST_CASE("NaN and infinity, profile by profile", "[profiles]") {
  const std::vector<float> n = {1.0F, kNaN, -2.0F, 300.0F};
  // microxcaling: the block is NaN.
  const auto mx = qz(prof("mxfp8_e4m3", "microxcaling"), n);
  CHECK(mx.scale_codes[0] == 0xFF);
  CHECK(std::isnan(mx.values[0]));
  CHECK(qz(prof("mxfp8_e5m2", "microxcaling"), {1.0F, kInf}).scale_codes[0] == 0xFF);  // Inf too, even for E5M2
  CHECK(qz(plain("mxfp8_e5m2"), {1.0F, kInf}).scale_codes[0] != 0xFF);
  // torchao FLOOR: code 0xFF, elements x / inf: finite -> +-0, NaN -> NaN (0x7F).
  const auto tf = qz(prof("mxfp8_e4m3", "torchao-floor"), n);
  CHECK(tf.scale_codes[0] == 0xFF);
  CHECK(tf.codes == std::vector<std::uint32_t>{0x00, 0x7F, 0x80, 0x00});
  // torchao RCEIL: code 0xFF, elements x * 2^-128; 2^127 * 2^-128 = 0.5 (E4M3 0x30).
  const auto tr = qz(prof("mxfp8_e4m3", "torchao-rceil"), {kNaN, std::ldexp(1.0F, 127), 1.0F});
  CHECK(tr.scale_codes[0] == 0xFF);
  CHECK(tr.codes == std::vector<std::uint32_t>{0x7F, 0x30, 0x00});
  // torchao FP4: a NaN goes through _f32_to_fpx_unpacked's normal branch: 0x7FC00000 gives +1.5 (0x3).
  const auto t4 = qz(prof("mxfp4", "torchao-floor"), {kNaN, 1.0F, -kNaN});
  CHECK(t4.codes == std::vector<std::uint32_t>{0x3, 0x0, 0xB});
  // TE: NaN is not in the amax (max 300: q = 300/448 -> 2^0, code 127); the NaN element stays NaN.
  const auto te = qz(prof("mxfp8_e4m3", "transformer-engine"), n);
  CHECK(te.scale_codes[0] == 127);
  CHECK(te.codes[1] == 0x7F);
  CHECK(te.values[3] == 288.0);
  // TE: Inf gives code 0xFE and the multiplier 0, so Inf becomes NaN (the GPU's canonical NaN) and the
  // rest 0; a negative NaN input is canonical (positive) after the multiply too.
  const auto ti = qz(prof("mxfp8_e4m3", "transformer-engine"), {kInf, 3.0F, -3.0F});
  CHECK(ti.scale_codes[0] == 0xFE);
  CHECK(ti.codes == std::vector<std::uint32_t>{0x7F, 0x00, 0x80});
  CHECK(qz(prof("mxfp8_e5m2", "transformer-engine"), {-kNaN, 1.0F}).codes[0] == 0x7F);
  // torchao FLOOR: Inf reads as 2^128: X = 128 - 8 = 120 (code 247); Inf saturates to 448.
  const auto fi = qz(prof("mxfp8_e4m3", "torchao-floor"), {kInf, 3.0F});
  CHECK(fi.scale_codes[0] == 247);
  CHECK(fi.codes == std::vector<std::uint32_t>{0x7E, 0x00});
  // torchao RCEIL and ModelOpt MXFP8: log2(inf) clamps to 127 (code 254); Inf * 2^-127 saturates.
  CHECK(qz(prof("mxfp8_e4m3", "torchao-rceil"), {kInf, 3.0F}).scale_codes[0] == 254);
  CHECK(qz(prof("mxfp8_e4m3", "modelopt-mxfp8"), {kInf, 3.0F}).codes[0] == 0x7E);
  // ModelOpt MXFP8: `descale > 0` is false for NaN: code 0x00, finite elements * 2^127 saturate.
  const auto m8 = qz(prof("mxfp8_e4m3", "modelopt-mxfp8"), {kNaN, 1.0F, -0.5F, 0.0F});
  CHECK(m8.scale_codes[0] == 0x00);
  CHECK(m8.codes == std::vector<std::uint32_t>{0x7F, 0x7E, 0xFE, 0x00});
  // ModelOpt NVFP4: a NaN anywhere makes S_dec NaN: every block scale 0x7F, every element code 0x7.
  std::vector<float> x(32, 1.0F);
  x[20] = kNaN;
  const auto mo = qz(prof("nvfp4", "modelopt"), x);
  CHECK(mo.scale_codes == std::vector<std::uint32_t>{0x7F, 0x7F});
  CHECK(mo.codes[0] == 0x7);
  CHECK(std::isnan(mo.tensor_scale));
  // TE NVFP4: NaN is not in the amaxes; the block scale comes from the other values.
  const auto tn = qz(prof("nvfp4", "transformer-engine-nvfp4"), x);
  CHECK(tn.scale_codes[1] == tn.scale_codes[0]);

  // NVFP4 with an Inf in block 1. ModelOpt: S_dec = inf; block 0's scale 1 / (6 inf) = 0 becomes 1.0
  // (0x38) and its elements x / inf = +-0 get code 0x0 (the sign bit is x < 0); block 1's inf / inf is
  // NaN (0x7F) and its elements NaN (0x7).
  std::vector<float> y(32, 1.0F);
  y[1] = -1.0F;
  y[16] = kInf;
  y[17] = 2.0F;
  const auto mi = qz(prof("nvfp4", "modelopt"), y);
  CHECK(std::isinf(mi.tensor_scale));
  CHECK(mi.scale_codes == std::vector<std::uint32_t>{0x38, 0x7F});
  CHECK(mi.codes[0] == 0x0);
  CHECK(mi.codes[1] == 0x0);
  CHECK(mi.codes[17] == 0x7);
  // TE: the global amax is Inf, so S_enc = 2688 / inf = 0 is replaced by 1. Block 0: fl32(1 * fl32(1/6)) =
  // 0.16666667 rounds to E4M3 0.171875 (0x23); 1 * fl32(1 / 0.171875) = 5.818 -> 6 (0x7). Block 1: inf
  // saturates to 448 (0x7E); Inf * fl32(1/448) -> 6, 2 / 448 -> 0.
  const auto ti4 = qz(prof("nvfp4", "transformer-engine-nvfp4"), y);
  CHECK(ti4.tensor_scale == 1.0);
  CHECK(ti4.scale_codes == std::vector<std::uint32_t>{0x23, 0x7E});
  CHECK(ti4.codes[0] == 0x7);
  CHECK(ti4.codes[1] == 0xF);
  CHECK(ti4.codes[16] == 0x7);
  CHECK(ti4.codes[17] == 0x0);
}

TEST_CASE("microxcaling flush_fp32_subnorms zeroes a block whose amax is an FP32 subnormal", "[profiles]") {
  const std::vector<float> x = {f32(0x00400000), -f32(0x00200000)};  // 2^-127, -2^-128
  auto py = prof("mxfp8_e4m3", "microxcaling");
  CHECK(qz(py, x).values == std::vector<double>{std::ldexp(1.0, -127), -std::ldexp(1.0, -128)});  // X = -127
  CHECK(qz(py, x).codes == std::vector<std::uint32_t>{0x38, 0xB0});  // 1.0 and -0.5
  py.options.amax_subnormal = AmaxSubnormal::Flush;                 // A * (shared_exp > -127)
  const auto f = qz(py, x);
  CHECK(f.values == std::vector<double>{0.0, 0.0});
  // Python multiplies by 0, then rounds the -0 with sign(-0.0) * floor(0.5) = +0 (zero_sign minus-zero-plus):
  // _quantize_mx(..., flush_fp32_subnorms=True) on CPU returns 0x00000000 for both.
  CHECK(f.codes == std::vector<std::uint32_t>{0x00, 0x00});
  auto cu = prof("mxfp8_e4m3", "microxcaling-cuda");
  cu.options.amax_subnormal = AmaxSubnormal::FlushPositive;  // scaled_in = 0
  CHECK(qz(cu, x).codes == std::vector<std::uint32_t>{0x00, 0x00});
  // The largest subnormal: fl32(log2) = -126 on the Python path, so the block is not flushed there.
  const std::vector<float> big = {f32(0x007FFFFF)};
  CHECK(qz(py, big).values[0] != 0.0);
  CHECK(qz(cu, big).values[0] == 0.0);
}

TEST_CASE("signed zeros: ModelOpt NVFP4 and MXFP4", "[profiles]") {
  std::vector<float> x(16, 0.0F);
  x[0] = 6.0F;
  x[1] = -0.0F;
  x[2] = -0.1F;  // rounds to -0
  x[3] = 0.0F;
  const auto mo = qz(prof("nvfp4", "modelopt"), x);
  CHECK(mo.codes[1] == 0x0);  // sign_bit = (weight < 0): -0.0 is not negative
  CHECK(mo.codes[2] == 0x8);
  CHECK(qz(plain("nvfp4"), x).codes[1] == 0x8);
  const auto m4 = qz(prof("mxfp4", "modelopt-mxfp4"), {6.0F, 0.0F, -0.0F, 0.1F, -0.1F});
  CHECK(m4.codes == std::vector<std::uint32_t>{0x7, 0x8, 0x8, 0x0, 0x8});  // (2 - sign(0)) // 2 = 1
}

TEST_CASE("E4M3 block-scale cast: ModelOpt does not saturate, TE does", "[profiles]") {
  // With the tensor scale fixed at 1 (weights_scaling_factor_2 = 1, S_enc = 1), a block amax 6 * 464 is
  // a tie that rounds to 448; 6 * 465 is past the midpoint: NaN for ModelOpt, 448 for TE's satfinite.
  auto mo = prof("nvfp4", "modelopt");
  auto te = prof("nvfp4", "transformer-engine-nvfp4");
  mo.options.tensor_scale_from_amax = false;
  te.options.tensor_scale_from_amax = false;
  std::vector<float> x(32, 1.0F);
  x[0] = 6.0F * 464;
  x[16] = 6.0F * 465;
  const auto m = qz(mo, x);
  CHECK(m.tensor_scale == 1.0);
  CHECK(m.scale_codes == std::vector<std::uint32_t>{0x7E, 0x7F});
  CHECK(qz(te, x).scale_codes == std::vector<std::uint32_t>{0x7E, 0x7E});
}

TEST_CASE("the three computed disagreement cases of docs/profiles.md", "[profiles]") {
  // 1. microxcaling Python vs C++, fp8_e4m3, block amax 0x417FFFFF (15.999999): fl32(log2) = 4.
  const std::vector<float> a1 = {f32(0x417FFFFF)};
  const auto py = qz(prof("mxfp8_e4m3", "microxcaling"), a1);
  const auto cu = qz(prof("mxfp8_e4m3", "microxcaling-cuda"), a1);
  CHECK(py.shared_exponents[0] == -4);
  CHECK(py.values[0] == 16.0);
  CHECK(cu.shared_exponents[0] == -5);
  CHECK(cu.values[0] == 14.0);
  // 2. torchao RCEIL vs TE, E4M3, amax 0x45E00001: q = 0x41800001, fl32(log2 q) = 4: code 131, element
  //    448.00003 clamped to 448; TE (and the exact rule) round q up to 32: code 132, element 224.
  const std::vector<float> a2 = {f32(0x45E00001)};
  const auto tr = qz(prof("mxfp8_e4m3", "torchao-rceil"), a2);
  const auto te = qz(prof("mxfp8_e4m3", "transformer-engine"), a2);
  auto exact = plain("mxfp8_e4m3");
  exact.options.rule = ScaleRule::RCeil;
  const auto ex = qz(exact, a2);
  CHECK(tr.scale_codes[0] == 131);
  CHECK(tr.values[0] == 16.0 * 448);
  CHECK(te.scale_codes[0] == 132);
  CHECK(te.values[0] == 32.0 * 224);
  CHECK(ex.scale_codes[0] == 132);
  // 3. TE vs ModelOpt NVFP4: tensor amax 0x418A972F, block amax 0x402849DE. TE's fl32(amax_b * fl32(S_enc *
  //    fl32(1/6))) = 68.0000076 -> 72; ModelOpt's fl32(amax_b / fl32(6 S_dec)) = 68 exactly, a tie -> 64;
  //    the exact quotient 68.0000022 -> 72.
  std::vector<float> x(32, 0.0F);
  x[0] = f32(0x418A972F);
  x[16] = f32(0x402849DE);
  CHECK(qz(prof("nvfp4", "transformer-engine-nvfp4"), x).scale_values[1] == 72.0);
  CHECK(qz(prof("nvfp4", "modelopt"), x).scale_values[1] == 64.0);
  CHECK(qz(plain("nvfp4"), x).scale_values[1] == 72.0);
}

TEST_CASE("FP4 nibble order of the profiles", "[profiles]") {
  for (const char* p : {"torchao-floor", "torchao-rceil", "modelopt-mxfp4"}) {
    const auto f = prof("mxfp4", p);
    CHECK(f.options.nibble_order == NibbleOrder::LowFirst);
    const auto q = qz(f, {1.0F, 2.0F});  // X = floor(log2 2) - 2 = -1 (rceil: ceil(log2(2/6)) = -1)
    const auto packed = pack(f, q);
    CHECK(packed.elements[0] == ((q.codes[1] << 4) | q.codes[0]));
  }
  CHECK(prof("nvfp4", "modelopt").options.nibble_order == NibbleOrder::LowFirst);
}

TEST_CASE("float32 log2: the float32 rounding of the double log2 matches long double near every power of two",
          "[profiles]") {
  // Floor/ceil of fl32(log2 a) can only differ from the exact ones when a is near a power of two; there the
  // assumed correctly rounded float32 log2 is compared with one rounded from long double.
  for (int k = -149; k <= 127; ++k) {
    const std::uint32_t p = bits(std::ldexp(1.0F, k));
    for (int d = -300; d <= 300; ++d) {
      const std::uint32_t b = p + static_cast<std::uint32_t>(d);
      if (static_cast<std::int32_t>(b) <= 0 || b >= 0x7F800000U) continue;
      const float a = f32(b);
      const auto l = static_cast<float>(log2l(static_cast<long double>(a)));
      if (torch_log2(a) != l) FAIL_CHECK("a = 0x" << std::hex << b);
    }
  }
}

TEST_CASE("float32 log2: the floor rule's exponent equals floor(fl32(log2 amax)) for every exponent", "[profiles]") {
  // The floor rule reads the exponent field where the mantissa keeps log2 below the next integer; every
  // exponent field, the mantissas next to that bound exhaustively and others spread over the binade.
  for (const Elem* el : {&kE4M3, &kE2M1, &kInt8}) {
    auto f = plain(el->block);
    f.options.amax_log2 = AmaxLog2::Float32;
    f.options.rule = ScaleRule::Floor;
    const int emax = f.element.emax();
    for (std::uint32_t field = 0; field <= 254; ++field) {
      auto check = [&](std::uint32_t m) {
        const std::uint32_t b = field << 23 | m;
        if (b == 0) return;
        const float a = f32(b);
        const int want = static_cast<int>(std::floor(torch_log2(a))) - emax;
        if (scale_exponent(f.element, a, f.options) != want) FAIL_CHECK(el->block << " a = 0x" << std::hex << b);
      };
      for (std::uint32_t m = 0x7FE000U; m <= 0x7FFFFFU; ++m) check(m);
      for (std::uint32_t m = 0; m < 0x7FE000U; m += 4099) check(m);
      for (std::uint32_t m = 0; m < 64; ++m) check(m);
    }
  }
}

// ================================================================================================
// Seeded random tensors: every profile equals the transcription of its peer, code for code
// ================================================================================================

TEST_CASE("random tensors: microxcaling Python and C++ paths", "[profiles][random]") {
  for (const Elem* el : {&kE4M3, &kE5M2, &kE3M2, &kE2M3, &kE2M1, &kInt8}) {
    const auto py = prof(el->block, "microxcaling");
    const auto cu = prof(el->block, "microxcaling-cuda");
    for (std::uint64_t seed = 1; seed <= 100; ++seed) {
      Rng rng(seed * 7919 + static_cast<std::uint64_t>(el->mbits));
      auto x = random_tensor(rng, 16, 64, 32, py.element);
      if (seed % 5 == 0) x[static_cast<std::size_t>(small_int(rng, 0, 1023))] = seed % 10 == 0 ? kNaN : -kInf;
      const std::string what = std::string(el->block) + " seed " + std::to_string(seed);
      compare_values(qz(py, x, {16, 64}), emu_microxcaling(x, 32, *el, true), x, what + " (Python)");
      compare_values(qz(cu, x, {16, 64}), emu_microxcaling(x, 32, *el, false), x, what + " (C++)");
    }
  }
}

TEST_CASE("random tensors: torchao FLOOR, CEIL, EVEN and RCEIL", "[profiles][random]") {
  struct Mode {
    const char* profile;
    TorchaoMode mode;
  };
  for (const Elem* el : {&kE4M3, &kE5M2, &kE3M2, &kE2M3, &kE2M1}) {
    for (Mode m : {Mode{"torchao-floor", TorchaoMode::Floor}, Mode{"torchao-ceil", TorchaoMode::Ceil},
                   Mode{"torchao-even", TorchaoMode::Even}, Mode{"torchao-rceil", TorchaoMode::Rceil}}) {
      const auto f = prof(el->block, m.profile);
      for (std::uint64_t seed = 1; seed <= 60; ++seed) {
        Rng rng(seed * 104729 + static_cast<std::uint64_t>(el->ebits));
        auto x = random_tensor(rng, 8, 128, 32, f.element);
        if (seed % 4 == 0) x[static_cast<std::size_t>(small_int(rng, 0, 1023))] = seed % 8 == 0 ? kNaN : kInf;
        if (seed % 6 == 0) x[static_cast<std::size_t>(small_int(rng, 0, 1023))] = -kNaN;
        compare_codes(qz(f, x, {8, 128}), emu_torchao(x, 32, *el, m.mode), x,
                      std::string(el->block) + " " + m.profile + " seed " + std::to_string(seed));
      }
    }
  }
}

TEST_CASE("random tensors: Transformer Engine MXFP8 and ModelOpt MXFP8 / MXFP4", "[profiles][random]") {
  for (const Elem* el : {&kE4M3, &kE5M2}) {
    const auto f = prof(el->block, "transformer-engine");
    for (std::uint64_t seed = 1; seed <= 100; ++seed) {
      Rng rng(seed * 31337 + static_cast<std::uint64_t>(el->ebits));
      auto x = random_tensor(rng, 8, 128, 32, f.element);
      if (seed % 4 == 0) x[static_cast<std::size_t>(small_int(rng, 0, 1023))] = seed % 8 == 0 ? -kNaN : kInf;
      compare_codes(qz(f, x, {8, 128}), emu_te_mxfp8(x, 32, *el), x, "TE " + std::string(el->block) + " seed " +
                                                                            std::to_string(seed));
    }
  }
  const auto m8 = prof("mxfp8_e4m3", "modelopt-mxfp8");
  const auto m4 = prof("mxfp4", "modelopt-mxfp4");
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    Rng rng(seed * 65537);
    auto x = random_tensor(rng, 8, 128, 32, m8.element);
    if (seed % 4 == 0) x[static_cast<std::size_t>(small_int(rng, 0, 1023))] = seed % 8 == 0 ? kNaN : -kInf;
    compare_codes(qz(m8, x, {8, 128}), emu_modelopt_mxfp8(x, 32), x, "ModelOpt MXFP8 seed " + std::to_string(seed));
    const auto y = random_tensor(rng, 8, 128, 32, m4.element);
    compare_codes(qz(m4, y, {8, 128}), emu_modelopt_mxfp4(y, 32), y, "ModelOpt MXFP4 seed " + std::to_string(seed));
  }
}

TEST_CASE("random tensors: NVFP4 under Transformer Engine, its 4over6, and ModelOpt", "[profiles][random]") {
  const auto te = prof("nvfp4", "transformer-engine-nvfp4");
  const auto mae = prof("nvfp4", "transformer-engine-nvfp4-4over6-mae");
  const auto mse = prof("nvfp4", "transformer-engine-nvfp4-4over6-mse");
  const auto mo = prof("nvfp4", "modelopt");
  const auto ex = plain("nvfp4");
  std::size_t te_vs_mo = 0, te_vs_exact = 0, picked_map4 = 0, blocks = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    Rng rng(seed * 2654435761ULL);
    auto x = random_nvfp4_tensor(rng, 16 * 64, 16);
    if (seed % 30 == 0) x[static_cast<std::size_t>(small_int(rng, 0, 1023))] = kNaN;  // ModelOpt: all NaN
    const std::string what = "seed " + std::to_string(seed);
    const std::vector<std::int64_t> shape = {16, 64};
    const auto qm = qz(mo, x, shape);
    const Emu em = emu_modelopt_nvfp4(x, 16);
    compare_codes(qm, em, x, "ModelOpt " + what);
    CHECK(bits(static_cast<float>(qm.tensor_scale)) == bits(em.tensor_scale));
    if (seed % 30 == 0) continue;  // TE's NaN element code is not modelled (docs/profiles.md)
    const auto qt = qz(te, x, shape);
    const Emu et = emu_te_nvfp4(x, 16);
    compare_codes(qt, et, x, "TE " + what);
    CHECK(qt.tensor_scale == static_cast<double>(et.tensor_scale));
    const auto q4 = qz(mae, x, shape);
    const Emu e4 = emu_te_4over6(x, 16, false);
    compare_codes(q4, e4, x, "TE 4over6 MAE " + what);
    picked_map4 += e4.map4_picks;
    CHECK(q4.tensor_scale == static_cast<double>(e4.tensor_scale));
    compare_codes(qz(mse, x, shape), emu_te_4over6(x, 16, true), x, "TE 4over6 MSE " + what);
    const auto qe = qz(ex, x, shape);
    for (std::size_t b = 0; b < qt.scale_codes.size(); ++b) {
      ++blocks;
      te_vs_mo += qt.scale_codes[b] != qm.scale_codes[b] ? 1 : 0;
      te_vs_exact += qt.scale_codes[b] != qe.scale_codes[b] ? 1 : 0;
    }
  }
  // The near-midpoint blocks make the peers disagree: the comparisons above exercised those cases.
  INFO("blocks " << blocks << ", TE vs ModelOpt " << te_vs_mo << ", TE vs exact " << te_vs_exact << ", map-to-4 "
                  << picked_map4);
  CHECK(te_vs_mo > 20);
  CHECK(picked_map4 > 20);
  CHECK(te_vs_exact > 0);
}

TEST_CASE("random tensors reach the choices where MX peers differ", "[profiles][random]") {
  // The comparisons above are only as strong as their data: count, on the same generator, how often
  // neighbouring profiles disagree. Each pair differs by the choices named in its comment.
  auto differing = [](const char* spec, const char* a, const char* b) {
    const auto fa = prof(spec, a);
    const auto fb = prof(spec, b);
    std::size_t scales = 0, codes = 0;
    for (std::uint64_t seed = 1; seed <= 40; ++seed) {
      Rng rng(seed * 7);
      const auto x = random_tensor(rng, 8, 128, 32, fa.element);
      const auto qa = qz(fa, x, {8, 128});
      const auto qb = qz(fb, x, {8, 128});
      for (std::size_t i = 0; i < qa.scale_codes.size(); ++i) scales += qa.scale_codes[i] != qb.scale_codes[i];
      for (std::size_t i = 0; i < x.size(); ++i) codes += qa.codes[i] != qb.codes[i];
    }
    INFO(spec << ": " << a << " vs " << b << ": " << scales << " scale codes, " << codes << " element codes differ");
    CHECK(scales + codes > 0);
    return std::pair{scales, codes};
  };
  // float32 log2 near powers of two; nearest-away in float32 vs exact.
  CHECK(differing("mxfp8_e4m3", "microxcaling", "microxcaling-cuda").first > 0);
  CHECK(differing("mxfp4", "microxcaling", "microxcaling-cuda").second > 0);
  // ties away vs ties to even.
  CHECK(differing("mxfp6_e2m3", "microxcaling-cuda", "ocp").second > 0);
  // float32 log2 of the quotient vs its exact round-up; code 0x00 multiplier 1 in both.
  CHECK(differing("mxfp8_e4m3", "torchao-rceil", "transformer-engine").first > 0);
  // code 0x00: 2^-126 vs 2^-127.
  CHECK(differing("mxfp8_e5m2", "torchao-floor", "ocp").second > 0);
  // code 0x00: 2^127 vs 1.
  CHECK(differing("mxfp8_e4m3", "modelopt-mxfp8", "transformer-engine").second > 0);
  // ties toward zero and the sign of zero vs the exact rceil rule.
  CHECK(differing("mxfp4", "modelopt-mxfp4", "torchao-rceil").second > 0);
  // microxcaling Python's floor(fl32(|A| + 0.5)) against exact nearest-away on the same scales.
  for (const char* spec : {"mxfp4", "mxfp6_e3m2", "mxfp8_e4m3"}) {
    const auto py = prof(spec, "microxcaling");
    auto exact_round = py;
    exact_round.options.nearest_arith = NearestArith::Exact;
    std::size_t codes = 0;
    for (std::uint64_t seed = 1; seed <= 40; ++seed) {
      Rng rng(seed * 11);
      const auto x = random_tensor(rng, 8, 128, 32, py.element);
      const auto a = qz(py, x, {8, 128});
      const auto b = qz(exact_round, x, {8, 128});
      for (std::size_t i = 0; i < x.size(); ++i) codes += a.codes[i] != b.codes[i];
    }
    INFO(spec);
    CHECK(codes > 0);
  }
}

// microxcaling's Python path rounds with sign(A) * floor(abs(A) + 0.5) in float32: torch.sign(-0.0) is 0, so a
// -0 input comes out +0, and a negative that rounds to 0 comes out -0 (also for integer elements, whose one zero
// code cannot say so: the value carries the sign). Values read off microxcaling's _quantize_mx on CPU.
TEST_CASE("profiles: microxcaling's signs of zero", "[profiles]") {
  const std::vector<double> x = {-0.0, 0.0, -1e-9, 1e-9, 4.0, -3.0, -0.004, 0.004};
  for (const char* spec : {"mxfp8_e4m3", "mxfp4", "mxfp6_e3m2", "mxint8"}) {
    INFO(spec);
    const BlockFormat f = prof(spec, "microxcaling");
    auto q = quantize(f, x, {static_cast<std::int64_t>(x.size())});
    REQUIRE(q.ok());
    CHECK(q->values[0] == 0.0);
    CHECK_FALSE(std::signbit(q->values[0]));  // -0 in, +0 out
    CHECK_FALSE(std::signbit(q->values[1]));
    CHECK(q->values[2] == 0.0);
    CHECK(std::signbit(q->values[2]));  // a negative that rounds to 0 keeps its sign
    CHECK_FALSE(std::signbit(q->values[3]));
    // The OCP default keeps the cast's own sign: -0 stays -0 for floats, integers give +0.
    auto o = quantize(plain(spec), x, {static_cast<std::int64_t>(x.size())});
    REQUIRE(o.ok());
    const bool is_int = f.element.kind() == FormatKind::Integer;
    CHECK(std::signbit(o->values[0]) == !is_int);
  }
  // MXINT8: the block's scale is 2^(2-0) = 4; -0.004 / 4 is below half a step (2^-7), so its value is -0.
  const BlockFormat i8 = prof("mxint8", "microxcaling");
  auto q = quantize(i8, x, {static_cast<std::int64_t>(x.size())});
  REQUIRE(q.ok());
  CHECK(q->codes[6] == 0);
  CHECK(std::signbit(q->values[6]));
  CHECK_FALSE(std::signbit(q->values[7]));
}
