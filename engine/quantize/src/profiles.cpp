// Peer profiles (docs/profiles.md): each profile checks that a block format is one its peer produces, then sets
// every option the peer's source determines.
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/formats/catalogue.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab {
namespace {

bool is_catalogue(const Format& f, std::string_view name) {
  const Format* c = find_catalogue_format(name);
  return c != nullptr && f.name() == c->name();
}
bool element_is_one_of(const BlockFormat& f, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names)
    if (is_catalogue(f.element, n)) return true;
  return false;
}
bool mx_scaled(const BlockFormat& f) {
  return f.layout.scale && is_catalogue(*f.layout.scale, "float8_e8m0fnu") && !f.layout.tensor_scale &&
         f.layout.geometry().tiled() && !f.layout.geometry().per_channel();
}
bool nvfp4_scaled(const BlockFormat& f) {
  return is_catalogue(f.element, "float4_e2m1fn") && f.layout.scale && is_catalogue(*f.layout.scale, "ue4m3") &&
         f.layout.tensor_scale && is_catalogue(*f.layout.tensor_scale, "float32") &&
         f.layout.geometry().tiled() && !f.layout.geometry().per_channel();
}
bool has_subtiles_or_sparsity(const BlockFormat& f) {
  return f.layout.geometry().has_subtiles() || f.layout.sparse_m > 0;
}
/// 1-D tiles of any size along any axis (size > 0: a tile of a whole axis is a channel scale).
bool one_d(const BlockFormat& f) { return f.layout.geometry().one_d_sized(); }
bool one_d_of(const BlockFormat& f, std::int64_t k) { return one_d(f) && f.layout.geometry().block_size() == k; }
bool square_of(const BlockFormat& f, std::int64_t k) { return f.layout.geometry().square_of(k); }

QuantOptions reset_options(const QuantOptions& old, ScaleRule rule) {
  QuantOptions o;
  o.element.overflow = Overflow::Saturate;
  o.scale.overflow = Overflow::Saturate;
  o.rule = rule;
  o.seed = old.seed;
  return o;
}

using Covers = bool (*)(const BlockFormat&);
using Sets = void (*)(QuantOptions&);

struct Profile {
  std::string_view name;
  std::string_view covers_text;  // what the peer produces, for the error message
  Covers covers;
  Sets sets;
};

void set_microxcaling_common(QuantOptions& o) {
  o.rule = ScaleRule::Floor;
  o.input = InputPrecision::Float32;  // _quantize_mx works on the FP32 tensor
  o.code0_multiplier = Code0Multiplier::Exact;  // A / 2**shared_exp with 2^-127 a float32 subnormal
  o.specials = SpecialsPolicy::BlockNanAny;      // log2(NaN or Inf) -> NaN shared exponent
  o.element.rounding = Rounding::NearestAway;    // round="nearest": sign(A) * floor(|A| + 0.5)
  o.element.overflow = Overflow::Saturate;       // saturate_normals=True, clamp to +-max_norm
}

bool covers_microxcaling(const BlockFormat& f) {
  return mx_scaled(f) && one_d(f) && !has_subtiles_or_sparsity(f) &&
         element_is_one_of(f, {"float8_e4m3fn", "float8_e5m2", "float6_e3m2fn", "float6_e2m3fn", "float4_e2m1fn",
                               "mxint8", "mxint4", "mxint2"});
}
bool covers_torchao(const BlockFormat& f) {
  // to_mx: blocks along the last dimension only.
  return mx_scaled(f) && one_d(f) && f.layout.geometry().along_last_axis() && !has_subtiles_or_sparsity(f) &&
         element_is_one_of(f, {"float8_e4m3fn", "float8_e5m2", "float6_e3m2fn", "float6_e2m3fn", "float4_e2m1fn"});
}
bool covers_te_mxfp8(const BlockFormat& f) {
  return mx_scaled(f) && (one_d_of(f, 32) || square_of(f, 32)) && !has_subtiles_or_sparsity(f) &&
         element_is_one_of(f, {"float8_e4m3fn", "float8_e5m2"});
}
bool covers_te_nvfp4(const BlockFormat& f) {
  return nvfp4_scaled(f) && (one_d_of(f, 16) || square_of(f, 16)) && !has_subtiles_or_sparsity(f);
}
bool covers_te_nvfp4_4over6(const BlockFormat& f) {
  // 1-D only: the 16x16 variant sums the candidates' errors with warp shuffles in an order not modelled.
  return nvfp4_scaled(f) && one_d_of(f, 16) && !has_subtiles_or_sparsity(f);
}
bool covers_modelopt_nvfp4(const BlockFormat& f) {
  return nvfp4_scaled(f) && one_d(f) && f.layout.geometry().along_last_axis() && !has_subtiles_or_sparsity(f);
}
bool covers_modelopt_mxfp8(const BlockFormat& f) {
  return mx_scaled(f) && one_d_of(f, 32) && f.layout.geometry().along_last_axis() && !has_subtiles_or_sparsity(f) &&
         element_is_one_of(f, {"float8_e4m3fn"});
}
bool covers_modelopt_mxfp4(const BlockFormat& f) {
  return mx_scaled(f) && one_d(f) && f.layout.geometry().along_last_axis() && !has_subtiles_or_sparsity(f) &&
         element_is_one_of(f, {"float4_e2m1fn"});
}
bool covers_any(const BlockFormat&) { return true; }

void set_torchao_common(QuantOptions& o) {
  o.input = InputPrecision::Float32;       // data_hp.to(torch.float32)
  o.amax_log2 = AmaxLog2::Field;           // extracted_pow2 from the exponent bits
  o.code0_multiplier = Code0Multiplier::MinNormal;  // torch.clamp(scale_fp32, min=F32_MIN_NORMAL)
  o.specials = SpecialsPolicy::TorchaoFloor;
  o.element.rounding = Rounding::NearestEven;
  o.nibble_order = NibbleOrder::LowFirst;  // pack_uint4 after PR #3123 (high-first before it)
}

void set_te_nvfp4_common(QuantOptions& o) {
  o.input = InputPrecision::Float32;
  o.nvfp4_arith = Nvfp4Arith::Te;
  o.specials = SpecialsPolicy::IgnoreNan;  // fmaxf / __hmax amax reductions
  o.zero_block = ZeroBlock::Smallest;      // E4M3 scale 0 for a zero block
  o.scale.overflow = Overflow::Saturate;   // __nv_fp8_e4m3 conversion is satfinite
  o.element.rounding = Rounding::NearestEven;  // cvt.rn.satfinite.e2m1x2.f32
  o.nibble_order = NibbleOrder::LowFirst;
}

constexpr Profile kProfiles[] = {
    {"ocp", "every block format", covers_any, [](QuantOptions&) {}},
    {"microxcaling",
     "MX formats with E8M0 scales and 1-D blocks: fp8_e4m3, fp8_e5m2, fp6_e3m2, fp6_e2m3, fp4, int8, int4, int2",
     covers_microxcaling,
     [](QuantOptions& o) {
       set_microxcaling_common(o);
       o.amax_log2 = AmaxLog2::Float32;      // torch.floor(torch.log2(...))
       o.zero_block = ZeroBlock::MinNormal;  // shared_exp + FP32_MIN_NORMAL * (shared_exp == 0)
       o.nearest_arith = NearestArith::Float32AddHalf;  // torch.floor(torch.abs(A) + 0.5) in float32
       // sign(A) * floor(|A| + 0.5): torch.sign(-0.0) is 0, so -0 becomes +0; a negative that rounds to 0 is -0.
       o.zero_sign = ZeroSign::MinusZeroPlus;
       // shared_exp[shared_exp > scale_emax] = NaN: reached by int8 (emax 0) when log2 rounds up to 128.
       o.scale.overflow = Overflow::Nan;
       o.fake_nan = FakeNan::AllOnes;  // A * 2**shared_exp with 2**NaN = 0xFFFFFFFF (PyTorch on the CPU)
     }},
    {"microxcaling-cuda",
     "MX formats with E8M0 scales and 1-D blocks: fp8_e4m3, fp8_e5m2, fp6_e3m2, fp6_e2m3, fp4, int8, int4, int2",
     covers_microxcaling,
     [](QuantOptions& o) {
       set_microxcaling_common(o);
       o.amax_log2 = AmaxLog2::Field;       // get_biased_exponent(max_values[m_i])
       o.zero_block = ZeroBlock::Smallest;  // field 0 -> clamp to -127
     }},
    {"torchao-floor", "MX formats with E8M0 scales, 1-D blocks on the last axis: e4m3, e5m2, e3m2, e2m3, e2m1",
     covers_torchao,
     [](QuantOptions& o) {
       set_torchao_common(o);
       o.rule = ScaleRule::Floor;
     }},
    {"torchao-ceil", "MX formats with E8M0 scales, 1-D blocks on the last axis: e4m3, e5m2, e3m2, e2m3, e2m1",
     covers_torchao,
     [](QuantOptions& o) {
       set_torchao_common(o);
       o.rule = ScaleRule::Ceil;
     }},
    {"torchao-even", "MX formats with E8M0 scales, 1-D blocks on the last axis: e4m3, e5m2, e3m2, e2m3, e2m1",
     covers_torchao,
     [](QuantOptions& o) {
       set_torchao_common(o);
       o.rule = ScaleRule::Even;
     }},
    {"torchao-rceil", "MX formats with E8M0 scales, 1-D blocks on the last axis: e4m3, e5m2, e3m2, e2m3, e2m1",
     covers_torchao,
     [](QuantOptions& o) {
       o.rule = ScaleRule::RCeil;
       o.input = InputPrecision::Float32;
       o.rceil_quotient = RceilQuotient::F32Div;  // descale = max_abs / max_pos
       o.amax_log2 = AmaxLog2::Float32;           // torch.ceil(torch.log2(descale))
       o.code0_multiplier = Code0Multiplier::One; // torch.where(exponent == 0, 1.0, ...)
       o.specials = SpecialsPolicy::TorchaoRceil;
       o.element.rounding = Rounding::NearestEven;
       o.nibble_order = NibbleOrder::LowFirst;
     }},
    {"transformer-engine", "MXFP8 (e4m3 or e5m2 elements, E8M0 scales) with 1x32 / 32x1 or 32x32 blocks",
     covers_te_mxfp8,
     [](QuantOptions& o) {
       o.rule = ScaleRule::RCeil;
       o.input = InputPrecision::Float32;
       o.rceil_quotient = RceilQuotient::F32MulRcp;  // thread_amax * max_norm_rcp
       o.amax_log2 = AmaxLog2::Exact;                // cvt.rp.satfinite.ue8m0x2.f32 rounds the float up exactly
       o.code0_multiplier = Code0Multiplier::One;    // exp2f_rcp(0) = 1
       o.specials = SpecialsPolicy::IgnoreNan;
       o.element.rounding = Rounding::NearestEven;   // cvt.rn.satfinite.e4m3x2.f32
     }},
    {"transformer-engine-nvfp4", "NVFP4 (e2m1 elements, ue4m3 block scales, float32 tensor scale) with 1x16 or 16x16 blocks",
     covers_te_nvfp4,
     [](QuantOptions& o) {
       o.rule = ScaleRule::Amax;
       set_te_nvfp4_common(o);
     }},
    {"transformer-engine-nvfp4-4over6-mae",
     "NVFP4 (e2m1 elements, ue4m3 block scales, float32 tensor scale) with 1x16 blocks", covers_te_nvfp4_4over6,
     [](QuantOptions& o) {
       o.rule = ScaleRule::FourOverSix;
       set_te_nvfp4_common(o);
       o.four_over_six = FourOverSixMetric::Mae;
       o.tensor_scale_max = 256;  // nvfp4_4over6_e4m3_use_256 = 'all'
     }},
    {"transformer-engine-nvfp4-4over6-mse",
     "NVFP4 (e2m1 elements, ue4m3 block scales, float32 tensor scale) with 1x16 blocks", covers_te_nvfp4_4over6,
     [](QuantOptions& o) {
       o.rule = ScaleRule::FourOverSix;
       set_te_nvfp4_common(o);
       o.four_over_six = FourOverSixMetric::Mse;
       o.tensor_scale_max = 256;
     }},
    {"modelopt", "NVFP4 (e2m1 elements, ue4m3 block scales, float32 tensor scale) with 1-D blocks on the last axis",
     covers_modelopt_nvfp4,
     [](QuantOptions& o) {
       o.rule = ScaleRule::Amax;
       o.input = InputPrecision::Float32;
       o.nvfp4_arith = Nvfp4Arith::ModelOpt;
       o.specials = SpecialsPolicy::TensorNan;   // reduce_amax propagates NaN into weights_scaling_factor_2
       o.zero_block = ZeroBlock::One;            // per_block_scale[per_block_scale == 0] = 1.0
       o.scale.overflow = Overflow::Nan;         // .to(torch.float8_e4m3fn) does not saturate
       o.zero_sign = ZeroSign::MinusZeroPlus;    // sign_bit = (weight < 0)
       o.element.rounding = Rounding::NearestEven;  // searchsorted + odd-bound correction
       o.nibble_order = NibbleOrder::LowFirst;   // (q[..., 1::2] << 4) | q[..., 0::2]
     }},
    {"modelopt-mxfp8", "MXFP8 e4m3 with E8M0 scales and 1x32 blocks on the last axis", covers_modelopt_mxfp8,
     [](QuantOptions& o) {
       o.rule = ScaleRule::RCeil;
       o.input = InputPrecision::Float32;
       o.rceil_quotient = RceilQuotient::F32Div;    // amax.float() / cls.E4M3_MAX
       o.amax_log2 = AmaxLog2::Float32;             // torch.ceil(torch.log2(descale))
       o.code0_multiplier = Code0Multiplier::Exact; // torch.exp2(127 - scale): 2^127 for code 0
       o.specials = SpecialsPolicy::NanSmallest;
       o.element.rounding = Rounding::NearestEven;
     }},
    {"modelopt-mxfp4", "MXFP4 (e2m1 elements, E8M0 scales) with 1-D blocks on the last axis", covers_modelopt_mxfp4,
     [](QuantOptions& o) {
       o.rule = ScaleRule::RCeil;
       o.input = InputPrecision::Float32;
       o.rceil_quotient = RceilQuotient::F32Div;  // input_amax / cls.E2M1_max
       o.amax_log2 = AmaxLog2::Float32;           // torch.ceil(torch.maximum(torch.log2(descale), -127))
       o.code0_multiplier = Code0Multiplier::Exact;
       o.specials = SpecialsPolicy::BlockNanAny;  // the peer's NaN/Inf result is undefined (float -> uint8)
       o.element.rounding = Rounding::NearestZero;  // counts bounds strictly below |x|
       o.zero_sign = ZeroSign::ZeroMinus;         // (2 - sign(x)) // 2 is 1 for x = 0
       o.nibble_order = NibbleOrder::LowFirst;    // even indices in the low bits
     }},
};

}  // namespace

std::vector<std::string> profile_names() {
  std::vector<std::string> v;
  for (const auto& p : kProfiles) v.emplace_back(p.name);
  return v;
}

Result<BlockFormat> apply_profile(BlockFormat f, std::string_view profile) {
  // ModelOpt's NVFP4 real quantizer is the profile "modelopt"; "modelopt-nvfp4" names it too.
  const std::string_view lookup = profile == "modelopt-nvfp4" ? std::string_view("modelopt") : profile;
  for (const auto& p : kProfiles) {
    if (p.name != lookup) continue;
    if (!p.covers(f))
      return make_error("profile '" + std::string(p.name) + "' covers " + std::string(p.covers_text) +
                        "; the block format '" + f.name + "' is not one of them");
    const bool pow2 = f.layout.scale && f.layout.scale->spec().kind == FormatKind::Float &&
                      f.layout.scale->spec().mantissa_bits == 0;
    QuantOptions o = reset_options(f.options, pow2 ? ScaleRule::Floor : ScaleRule::Amax);
    p.sets(o);
    o.profile = std::string(p.name);
    f.options = o;
    return f;
  }
  std::string msg = "unknown profile '" + std::string(profile) + "' (known:";
  for (const auto& n : profile_names()) msg += " " + n;
  return make_error(msg + ")");
}

}  // namespace mxlab
