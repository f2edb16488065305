// The format catalogue: one row per named format. Only the columns are typed; max finite, min normal,
// emax and code counts are derived, and the static_asserts below pin them to the OCP/IEEE facts.
#include "mxlab/formats/catalogue.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <mutex>
#include <vector>

#include "mxlab/core/text.hpp"

namespace mxlab {
namespace {

constexpr FormatSpec flt(int e, int m, int bias, Specials sp, bool is_signed = true, bool subnormals = true,
                         FormatRole role = FormatRole::Element) {
  FormatSpec s;
  s.kind = FormatKind::Float;
  s.exponent_bits = e;
  s.mantissa_bits = m;
  s.bias = bias;
  s.specials = sp;
  s.is_signed = is_signed;
  s.subnormals = subnormals;
  s.role = role;
  return s;
}

constexpr FormatSpec integer(int bits, int frac, bool is_signed, bool symmetric) {
  FormatSpec s;
  s.kind = FormatKind::Integer;
  s.int_bits = bits;
  s.frac_bits = frac;
  s.is_signed = is_signed;
  s.symmetric = symmetric;
  return s;
}

constexpr FormatSpec mxsf() {
  FormatSpec s = flt(2, 5, 3, Specials::None);
  s.sub_exponent_bits = 3;
  s.sub_mantissa_bits = 2;
  s.sub_bias = 10;
  return s;
}

constexpr FormatSpec codebook(std::span<const double> values) {
  FormatSpec s;
  s.kind = FormatKind::Codebook;
  s.codebook = values;
  s.is_signed = true;
  return s;
}

// NF4 (Dettmers et al., QLoRA, 2023, appendix E; bitsandbytes): float32 constants, index order.
constexpr double kNf4[] = {
    double(-1.0f),
    double(-0.6961928009986877f),
    double(-0.5250730514526367f),
    double(-0.39491748809814453f),
    double(-0.28444138169288635f),
    double(-0.18477343022823334f),
    double(-0.09105003625154495f),
    double(0.0f),
    double(0.07958029955625534f),
    double(0.16093020141124725f),
    double(0.24611230194568634f),
    double(0.33791524171829224f),
    double(0.44070982933044434f),
    double(0.5626170039176941f),
    double(0.7229568362236023f),
    double(1.0f),
};

// The E2M1 value set as a lookup table in code order (seed 004's codebook; 0b1000 is -0).
constexpr double kE2m1Codebook[] = {0.0,  0.5,  1.0,  1.5,  2.0,  3.0,  4.0,  6.0,
                                    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};

constexpr CatalogueRow kRows[] = {
    {"float32", "fp32,f32,e8m23", "IEEE 754 binary32: E8 M23 bias 127, inf and NaN in the all-ones exponent",
     flt(8, 23, 127, Specials::Ieee)},
    {"float16", "fp16,f16,half,e5m10", "IEEE 754 binary16: E5 M10 bias 15, inf and NaN", flt(5, 10, 15, Specials::Ieee)},
    {"bfloat16", "bf16,e8m7", "bfloat16: E8 M7 bias 127, inf and NaN", flt(8, 7, 127, Specials::Ieee)},
    {"float8_e5m2", "e5m2,fp8_e5m2,mxfp8_e5m2",
     "OFP8 E5M2: bias 15, IEEE-style: inf at S.11111.00, NaN S.11111.{01,10,11}", flt(5, 2, 15, Specials::Ieee)},
    {"float8_e4m3fn", "e4m3,e4m3fn,fp8_e4m3,mxfp8_e4m3",
     "OFP8 E4M3: bias 7, no inf, NaN only S.1111.111 (extended range to 448)", flt(4, 3, 7, Specials::AllOnesNan)},
    {"float8_e4m3", "e4m3_ieee", "E4M3 with IEEE-style specials (ml_dtypes float8_e4m3): bias 7, max 240",
     flt(4, 3, 7, Specials::Ieee)},
    {"float8_e3m4", "e3m4", "E3M4 with IEEE-style specials (ml_dtypes float8_e3m4): bias 3, max 15.5",
     flt(3, 4, 3, Specials::Ieee)},
    {"float8_e4m3fnuz", "e4m3fnuz", "E4M3 bias 8, no inf, no -0, NaN is 0x80 (AMD/Graphcore)",
     flt(4, 3, 8, Specials::NegZeroNan)},
    {"float8_e5m2fnuz", "e5m2fnuz", "E5M2 bias 16, no inf, no -0, NaN is 0x80 (AMD/Graphcore)",
     flt(5, 2, 16, Specials::NegZeroNan)},
    {"float8_e4m3b11fnuz", "e4m3b11fnuz", "E4M3 bias 11, no inf, no -0, NaN is 0x80 (TPU)",
     flt(4, 3, 11, Specials::NegZeroNan)},
    {"float6_e3m2fn", "e3m2,e3m2fn,fp6_e3m2,mxfp6_e3m2", "OCP MX FP6 E3M2: bias 3, no inf, no NaN, max 28",
     flt(3, 2, 3, Specials::None)},
    {"float6_e2m3fn", "e2m3,e2m3fn,fp6_e2m3,mxfp6_e2m3", "OCP MX FP6 E2M3: bias 1, no inf, no NaN, max 7.5",
     flt(2, 3, 1, Specials::None)},
    {"float4_e2m1fn", "e2m1,e2m1fn,fp4,fp4_e2m1,mxfp4", "OCP MX FP4 E2M1: bias 1, no inf, no NaN, max 6",
     flt(2, 1, 1, Specials::None)},
    {"float8_e8m0fnu", "e8m0,ue8m0,e8m0fnu,e8m0_scale",
     "OCP MX scale UE8M0: unsigned, bias 127, code c is 2^(c-127), no zero, 0xFF is NaN",
     flt(8, 0, 127, Specials::AllOnesNan, false, false, FormatRole::Scale)},
    {"ue4m3", "float7_ue4m3,e4m3_scale,nvfp4_scale",
     "NVFP4 block scale: the positive half of E4M3 (unsigned, bias 7, max 448, NaN 0x7F)",
     flt(4, 3, 7, Specials::AllOnesNan, false, true, FormatRole::Scale)},
    {"float8_e2m5b3", "e2m5b3,boost_e2m5_element",
     "BOOST / block minifloat E2M5: bias 3 relative to the shared exponent, no specials, max 1.96875",
     flt(2, 5, 3, Specials::None)},
    {"float8_mxsf", "mxsf_element,e2m5b3_e3m2b10",
     "MX-SAFE element: E2M5 bias 3; exponent field 00 re-read as E3M2 bias 10 (docs/casting.md)", mxsf()},
    {"mxint8", "mx_int8,int8_mx", "OCP MXINT8 element: two's complement k * 2^-6, -128 unused (max 127/64)",
     integer(8, 6, true, true)},
    {"mxint4", "mx_int4,int4_mx", "MX fixed point INT4: k * 2^-2, -8 unused (max 7/4)", integer(4, 2, true, true)},
    {"mxint2", "mx_int2,int2_mx", "MX fixed point INT2: k * 2^0, -2 unused (values -1, 0, 1)",
     integer(2, 0, true, true)},
    {"int8", "i8", "two's complement 8-bit integer", integer(8, 0, true, false)},
    {"int4", "i4", "two's complement 4-bit integer", integer(4, 0, true, false)},
    {"uint8", "u8", "unsigned 8-bit integer", integer(8, 0, false, false)},
    {"uint4", "u4", "unsigned 4-bit integer", integer(4, 0, false, false)},
    {"nf4", "normalfloat4", "NormalFloat4 codebook (QLoRA): 16 float32 quantiles of N(0,1) scaled to [-1, 1]",
     codebook(kNf4)},
    {"e2m1_codebook", "fp4_codebook,nvfp4_codebook",
     "E2M1 value set as an explicit lookup table in code order (seed 004), -0 at 0b1000", codebook(kE2m1Codebook)},
};

constexpr const FormatSpec& row(std::string_view name) {
  for (const auto& r : kRows)
    if (r.name == name) return r.spec;
  return kRows[0].spec;  // unreachable in the checks below (a wrong name fails them)
}

// ---- formats.md, "Element formats" and "Scale formats": derived values must equal the table. ----
struct Facts {
  std::string_view name;
  int bits;
  int emax;
  double max;
  double min_normal;
  double min_sub;
};
constexpr Facts kFacts[] = {
    {"float8_e5m2", 8, 15, 57344, pow2(-14), pow2(-16)},
    {"float8_e4m3fn", 8, 8, 448, pow2(-6), pow2(-9)},
    {"float6_e3m2fn", 6, 4, 28, pow2(-2), pow2(-4)},
    {"float6_e2m3fn", 6, 2, 7.5, 1, pow2(-3)},
    {"float4_e2m1fn", 4, 2, 6, 1, pow2(-1)},
    {"mxint8", 8, 0, 127.0 / 64, pow2(-6), pow2(-6)},
    {"float16", 16, 15, 65504, pow2(-14), pow2(-24)},
    {"bfloat16", 16, 127, (2 - pow2(-7)) * pow2(127), pow2(-126), pow2(-133)},
    {"float32", 32, 127, (2 - pow2(-23)) * pow2(127), pow2(-126), pow2(-149)},
    {"float8_e8m0fnu", 8, 127, pow2(127), pow2(-127), pow2(-127)},
    {"ue4m3", 7, 8, 448, pow2(-6), pow2(-9)},
    {"float8_e4m3fnuz", 8, 7, 240, pow2(-7), pow2(-10)},
    {"float8_e5m2fnuz", 8, 15, 57344, pow2(-15), pow2(-17)},
    {"float8_e4m3b11fnuz", 8, 4, 30, pow2(-10), pow2(-13)},
    {"float8_e4m3", 8, 7, 240, pow2(-6), pow2(-9)},
    {"float8_e3m4", 8, 3, 15.5, pow2(-2), pow2(-6)},
    {"float8_e2m5b3", 8, 0, 1.96875, pow2(-2), pow2(-7)},
    {"float8_mxsf", 8, 0, 1.96875, pow2(-9), pow2(-11)},
};
constexpr bool facts_hold() {
  for (const auto& f : kFacts) {
    const FormatSpec& s = row(f.name);
    if (format_bits(s) != f.bits || emax(s) != f.emax || max_finite(s) != f.max || min_normal(s) != f.min_normal ||
        min_positive(s) != f.min_sub)
      return false;
  }
  return true;
}
static_assert(facts_hold(), "a catalogue row disagrees with the format facts (docs)");
static_assert(finite_count(row("float8_e4m3fn")) == 254);  // 126 positive nonzero codes, each signed, +-0
static_assert(finite_count(row("float8_e5m2")) == 248);
static_assert(finite_count(row("float8_e8m0fnu")) == 255);
static_assert(finite_count(row("mxint8")) == 255);
static_assert(max_finite(row("nf4")) == 1.0 && lowest(row("nf4")) == -1.0);
static_assert(lowest(row("int8")) == -128 && lowest(row("mxint8")) == -127.0 / 64);

}  // namespace

std::span<const CatalogueRow> catalogue_rows() { return kRows; }

std::span<const Format> catalogue_formats() {
  static const std::vector<Format> formats = [] {
    std::vector<Format> v;
    v.reserve(std::size(kRows));
    for (const auto& r : kRows) {
      auto f = Format::make(std::string(r.name), r.spec);
      if (!f) std::abort();  // a catalogue row that does not validate is a build defect
      v.push_back(std::move(*f));
    }
    return v;
  }();
  return formats;
}

const CatalogueRow* find_catalogue_row(std::string_view canonical_name) {
  for (const auto& r : kRows)
    if (r.name == canonical_name) return &r;
  return nullptr;
}

const Format* find_catalogue_format(std::string_view name) {
  const std::string key = lower(name);
  const auto formats = catalogue_formats();
  for (std::size_t i = 0; i < std::size(kRows); ++i) {
    if (kRows[i].name == key) return &formats[i];
    std::string_view rest = kRows[i].aliases;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string_view alias = rest.substr(0, comma);
      if (alias == key) return &formats[i];
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return nullptr;
}

}  // namespace mxlab
