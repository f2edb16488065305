// Block formats: an element format, how scales are laid over the tensor (tensor, channel, 1-D and 2-D
// tiles, two levels), how a scale is chosen, and every choice the OCP MX specification leaves open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"
#include "mxlab/quantize/block_geometry.hpp"

namespace mxlab {

/// How a block's scale is derived from its largest magnitude (amax). docs/quantization.md.
enum class ScaleRule : std::uint8_t {
  Floor,   ///< X = floor(log2 amax) - emax_elem (OCP MX v1.0 section 6.3)
  Ceil,    ///< X = ceil(log2 amax) - emax_elem
  RCeil,   ///< X = ceil(log2(amax / max_elem)): the smallest power of two that avoids saturation
  Even,    ///< amax rounded (ties to even) to the element's significand width first, then Floor
  MidMax,  ///< the smallest power of two at which amax does not overflow under the element rounding
  Amax,    ///< scale = amax / max_elem rounded in the scale format (float scales: NVFP4, FP32 tensor scale)
  FourOverSix,  ///< NVFP4: per block, map amax to 4 or to 6, whichever gives the lower squared error
  RFloor,  ///< X = floor(log2(amax / max_elem)): the largest power of two with amax / 2^X >= max (rceil rounded down)
};

/// What a scale rule is, as data: one row per rule, in the order of ScaleRule. Code that needs to know what kind
/// of rule it has asks its row (scale_rule_traits) instead of listing rules.
struct ScaleRuleTraits {
  ScaleRule value;
  std::string_view name;     ///< as written in options and experiment files
  bool float_scale;          ///< s = amax / (max g) rounded in the scale format; otherwise a power of two 2^X
  bool compares_candidates;  ///< quantizes a block under several scales and keeps the lowest error, so the scale
                             ///< depends on every element of the block, not on its amax alone
  bool reads_amax_log2;      ///< a power-of-two rule that takes the peers' log2 readings (AmaxLog2)
  std::string_view source;   ///< where the rule is defined
};

inline constexpr ScaleRuleTraits kScaleRules[] = {
    {ScaleRule::Floor, "floor", false, false, true, "OCP MX v1.0 section 6.3"},
    {ScaleRule::Ceil, "ceil", false, false, true, "torchao ScaleCalculationMode.CEIL"},
    {ScaleRule::RCeil, "rceil", false, false, true, "amax / max rounded up (Transformer Engine, torchao RCEIL, ModelOpt)"},
    {ScaleRule::Even, "even", false, false, true, "torchao ScaleCalculationMode.EVEN"},
    {ScaleRule::MidMax, "midmax", false, false, false, "the smallest scale at which amax does not overflow"},
    {ScaleRule::Amax, "amax", true, false, false, "NVFP4"},
    {ScaleRule::FourOverSix, "4over6", true, true, false, "Four Over Six"},
    {ScaleRule::RFloor, "rfloor", false, false, false,
     "amax / max rounded down (PTX cvt.rz.satfinite.ue8m0x2.f32; triton_kernels DequantScaleRoundingMode.ROUND_DOWN)"},
};

constexpr bool scale_rules_in_order() {
  for (std::size_t i = 0; i < sizeof kScaleRules / sizeof kScaleRules[0]; ++i)
    if (static_cast<std::size_t>(kScaleRules[i].value) != i) return false;
  return true;
}
static_assert(scale_rules_in_order(), "kScaleRules lists the rules in the order of ScaleRule");

/// The row of rule r.
constexpr const ScaleRuleTraits& scale_rule_traits(ScaleRule r) { return kScaleRules[static_cast<std::size_t>(r)]; }

/// Where the power-of-two scale exponent is clamped to the scale format's range.
enum class ClampSite : std::uint8_t {
  Exponent,  ///< clamp X itself (OCP: X is stored as E8M0 and clamped to its range)
  Amax,      ///< clamp floor(log2 amax) to the float32 normal range [-126, 127] first, then clamp X
};

/// Scale of a block whose elements are all zero.
enum class ZeroBlock : std::uint8_t {
  Smallest,   ///< the scale format's smallest value (E8M0 code 0x00 = 2^-127), as the spec's clamp gives;
              ///< a float scale (amax rule) is the quotient amax / (max g) = 0
  One,        ///< 2^0; a float scale whose value before rounding is 0 becomes 1.0 (ModelOpt NVFP4)
  MinNormal,  ///< the scale rule applied to amax = 2^-126 (microxcaling adds FP32_MIN_NORMAL to a zero
              ///< amax before its log2); power-of-two scales only
};

/// What NaN and infinite inputs do to a block (docs/profiles.md names the peer of each policy).
enum class SpecialsPolicy : std::uint8_t {
  BlockNan,     ///< NaN makes the block's scale NaN (every element NaN); Inf likewise unless the element
                ///< format has Inf, in which case it stays Inf and the scale uses the finite values
  Element,      ///< the scale uses the finite values; NaN/Inf elements are cast elementwise
  BlockNanAny,  ///< NaN or Inf makes the block's scale NaN for every element format (microxcaling)
  IgnoreNan,    ///< the amax skips NaN (fmaxf) but takes Inf; elements are cast from their scaled values,
                ///< and E8M0 code 0xFE multiplies by 0 (Transformer Engine's exp2f_rcp)
  TorchaoFloor, ///< a NaN in the block gives code 0xFF and elements x / inf; Inf reads as 2^128 through the
                ///< exponent field; NaN elements take PyTorch's cast codes (torchao FLOOR/CEIL/EVEN)
  TorchaoRceil, ///< a NaN gives code 0xFF and elements x * 2^-128; an Inf amax gives the largest code;
                ///< NaN elements take PyTorch's cast codes (torchao RCEIL)
  TensorNan,    ///< a NaN anywhere poisons the tensor amax, hence every block (ModelOpt NVFP4); Inf enters
                ///< the amax; a NaN element takes the largest positive code (searchsorted puts NaN last)
  NanSmallest,  ///< a NaN amax gives the smallest scale (code 0x00) and elements scaled by it; Inf gives the
                ///< largest code (ModelOpt MXFP8: `descale > 0` is false for NaN)
};

/// How floor/ceil of log2 is read from a block's amax (or from the RCEIL quotient) for power-of-two
/// scales.
enum class AmaxLog2 : std::uint8_t {
  Exact,    ///< exactly, from the value (also for FP32 subnormals)
  Field,    ///< from the float32 bit pattern: exponent field - 127 (a subnormal or zero reads -127), ceil adds
            ///< 1 when a mantissa bit is set, even rounds the bits; an Inf amax reads as 2^128 (torchao,
            ///< microxcaling C++). Equal to Exact for finite values once X is clamped to E8M0
  Float32,  ///< floor/ceil of fl32(log2(a)) for the float32 operand a (microxcaling Python, torchao RCEIL,
            ///< ModelOpt MX). fl32(log2) is taken as the float32 rounding of the double log2: this assumes
            ///< a correctly rounded float32 log2, which torch.log2 does not promise
};

/// How the RCEIL quotient q = amax / max_elem is formed before it is rounded up to a power of two.
enum class RceilQuotient : std::uint8_t {
  Exact,      ///< the exact quotient
  F32Div,     ///< fl32(amax / max) (torchao RCEIL, ModelOpt)
  F32MulRcp,  ///< fl32(amax * fl32(1 / max)) (Transformer Engine's max_norm_rcp)
};

/// The factor elements of a block with E8M0 code 0x00 are divided by.
enum class Code0Multiplier : std::uint8_t {
  Exact,      ///< 2^-127, the code's value
  One,        ///< 1: elements are multiplied by 1 instead of 2^127 (TE exp2f_rcp, torchao RCEIL)
  MinNormal,  ///< 2^-126: the scale is clamped to the FP32 normal range first (torchao FLOOR)
};

/// A block whose amax is below the FP32 normal range (microxcaling flush_fp32_subnorms).
enum class AmaxSubnormal : std::uint8_t {
  Keep,           ///< quantize as usual
  Flush,          ///< every element becomes a zero of its input's sign (microxcaling Python: A * 0)
  FlushPositive,  ///< every element becomes +0 (microxcaling C++: scaled_in = 0)
};

/// The float32 bits of a NaN in fake-quantized (float32) outputs.
enum class FakeNan : std::uint8_t {
  Quiet,    ///< a quiet NaN as the arithmetic gives it (the kernels write 0x7FC00000)
  AllOnes,  ///< 0xFFFFFFFF: what PyTorch's CPU `2 ** NaN` gives (microxcaling Python's NaN shared exponent)
};

/// Which zero code an element whose scaled value is zero (or rounds to zero) gets.
enum class ZeroSign : std::uint8_t {
  Keep,          ///< the cast's own: the sign of the scaled value (-0 stays -0)
  MinusZeroPlus, ///< a scaled value of -0 gets the +0 code; negatives that round to 0 keep -0 (ModelOpt
                 ///< NVFP4: sign bit from x < 0)
  ZeroMinus,     ///< a scaled value of +-0 gets the -0 code (ModelOpt MXFP4: (2 - sign(x)) // 2)
};

/// How nearest rounding of an element is computed.
enum class NearestArith : std::uint8_t {
  Exact,           ///< the cast's exact rounding
  Float32AddHalf,  ///< microxcaling Python's _round_mantissa: A = |v| / ulp(v) in float32, then
                   ///< floor(fl32(A + 0.5)) (nearest-away) or that minus [fl32(A - 0.5) mod 2 == 0]
                   ///< (nearest-even). The float32 addition rounds, so a subnormal-range value just below
                   ///< a tie can round up. Other rounding modes are unaffected
};

/// Precision of the inputs and of an element's scaled value before the element cast.
enum class InputPrecision : std::uint8_t {
  Exact,    ///< inputs as given; x / s is rounded once, by the element cast
  Float32,  ///< inputs are first rounded to float32 (RNE, overflow to +-inf) as the peers' FP32 tensors,
            ///< and an element's scaled value is the float32 result of the peer's multiply or divide
};

/// Arithmetic of float block scales under a float32 tensor scale (NVFP4), docs/profiles.md.
enum class Nvfp4Arith : std::uint8_t {
  Exact,     ///< exact quotients rounded once (cast_quotient)
  Te,        ///< Transformer Engine: S_enc = fl32(2688 / amax), s = E4M3(amax_b * (S_enc * fl32(1/6))),
             ///< element E2M1(x * min(1 / (s * S_dec), FLT_MAX)), every step in float32
  ModelOpt,  ///< ModelOpt: S_dec = fl32(amax / 2688), s = E4M3(amax_b / (6 * S_dec)), element
             ///< E2M1(x / (s * S_dec)), every step in float32
};

/// How the 4over6 rule compares its two candidates.
enum class FourOverSixMetric : std::uint8_t {
  ExactSse,  ///< exact sum of squared errors against the input; ties keep the mapping to max
  Mae,       ///< Transformer Engine: float32 sum of |deq - x| in element order; map-to-4 only if smaller
  Mse,       ///< Transformer Engine: float32 sum of (deq - x)^2 in element order
};

/// Encoding of MX integer elements in packed output.
enum class IntEncoding : std::uint8_t { TwosComplement, SignMagnitude };

/// Order of two 4-bit codes in a byte.
enum class NibbleOrder : std::uint8_t {
  LowFirst,   ///< element 2i in bits 0-3, element 2i+1 in bits 4-7 (PyTorch float4_e2m1fn_x2, OCP)
  HighFirst,  ///< element 2i in bits 4-7 (seed 004's packing)
};

/// How scales cover a tensor.
struct ScaleLayout {
  std::optional<Format> scale;         ///< none: no scaling (plain elementwise cast)
  std::optional<Format> tensor_scale;  ///< second level: a per-tensor scale over the block scales
  /// 0 tiles: one scale per tensor; 1: along `axis` (default last); 2: over the last two axes.
  std::vector<TileDim> tiles;
  int axis = -1;  ///< axis of a 1-D tile (negative counts from the end)
  /// Per-channel scaling: one scale per index of this axis, spanning every other axis (kNoAxis: unused).
  static constexpr int kNoAxis = -1000;
  int channel_axis = kNoAxis;
  /// Bits of each subtile's microexponent offset d (when a tile has subtiles).
  int subtile_bits = 1;
  /// N:M structured sparsity along the last axis before quantization (0 = none).
  int sparse_n = 0;
  int sparse_m = 0;
  /// The blocks' shape (tiles, axis, channel axis) as one value: code reads the geometry, not the fields.
  constexpr BlockGeometry geometry() const { return BlockGeometry(tiles, axis, channel_axis); }
};
static_assert(ScaleLayout::kNoAxis == BlockGeometry::kNoAxis);

/// Every option of a block conversion.
struct QuantOptions {
  CastOptions element;  ///< element rounding / overflow (default saturate) / subnormals
  CastOptions scale;    ///< rounding of float scales (NVFP4's UE4M3): nearest-even, saturate
  ScaleRule rule = ScaleRule::Floor;
  ClampSite clamp = ClampSite::Exponent;
  ZeroBlock zero_block = ZeroBlock::Smallest;
  SpecialsPolicy specials = SpecialsPolicy::BlockNan;
  IntEncoding int_encoding = IntEncoding::TwosComplement;
  NibbleOrder nibble_order = NibbleOrder::LowFirst;
  /// NVFP4: smallest block scale (0: none; peers use 2^-6 or 2^-9).
  double min_block_scale = 0;
  /// NVFP4 tensor scale: amax_tensor / (max_scale * max_elem) (RNE to float32) when true.
  bool tensor_scale_from_amax = true;
  /// Peer arithmetic choices (docs/profiles.md, "Options a profile sets"). The defaults are exact.
  InputPrecision input = InputPrecision::Exact;
  AmaxLog2 amax_log2 = AmaxLog2::Exact;
  RceilQuotient rceil_quotient = RceilQuotient::Exact;
  Code0Multiplier code0_multiplier = Code0Multiplier::Exact;
  AmaxSubnormal amax_subnormal = AmaxSubnormal::Keep;
  ZeroSign zero_sign = ZeroSign::Keep;
  FakeNan fake_nan = FakeNan::Quiet;
  NearestArith nearest_arith = NearestArith::Exact;
  Nvfp4Arith nvfp4_arith = Nvfp4Arith::Exact;
  FourOverSixMetric four_over_six = FourOverSixMetric::ExactSse;
  /// The block-scale maximum the tensor scale divides by (0: the scale format's max). Transformer
  /// Engine's 4over6 uses 256 to leave room for the 1.5x map-to-4 scale.
  double tensor_scale_max = 0;
  /// Seed of the stochastic rounding stream; element i of the tensor uses stochastic_bits(seed, i).
  std::uint64_t seed = 0;
  std::string profile = "ocp";  ///< name of the preset the options came from
  bool operator==(const QuantOptions&) const = default;
};

/// A named block format: element + layout + options.
struct BlockFormat {
  std::string name;
  Format element;
  ScaleLayout layout;
  QuantOptions options;

  /// Storage bits per element including scales (for a tensor of `count` elements with 1-D/2-D tiles).
  double bits_per_element(std::int64_t tensor_elements) const;
  /// Bits stored per element for a tensor of this shape (docs/quantization.md "Storage cost"): element bits,
  /// plus every block's scale in whole bytes (partial edge blocks and one-element blocks included), subtile
  /// offsets, and the tensor scale, divided by the element count.
  double stored_bits_per_element(const std::vector<std::int64_t>& shape) const;
  /// Number of elements per block (product of tile sizes; 0 when a tile spans a whole axis).
  std::int64_t block_elements() const;
};

/// Parses a block spec: short names (mxfp8_e4m3, mxfp8_e5m2, mxfp6_e3m2, mxfp6_e2m3, mxfp4, mxint8,
/// mxint4, mxint2, nvfp4, mxsf, boost_e2m5) with an optional @K or @RxC block override, or
/// ELEMENT:SCALESPEC with a TensorCast scale spec ("e2m1:e8m0_t32", "e4m3:float32_t16_t16",
/// "int8:float32_t0", "e4m3:e8m0_t16s4_t16s4", "e2m1:e4m3_float32_t16", "e4m3:float32").
Result<BlockFormat> parse_block_format(std::string_view text);

/// Applies a named peer profile's options (docs/profiles.md) to a block format: every option is reset
/// to its default (the seed is kept), then the profile's choices are set and its name recorded. A
/// profile applied to a block format the peer does not produce is an error that names what it covers.
Result<BlockFormat> apply_profile(BlockFormat f, std::string_view profile);

/// Names of the known profiles.
std::vector<std::string> profile_names();

Result<ScaleRule> parse_scale_rule(std::string_view text);
std::string_view to_string(ScaleRule r);
Result<ZeroBlock> parse_zero_block(std::string_view text);
std::string_view to_string(ZeroBlock z);
Result<SpecialsPolicy> parse_specials_policy(std::string_view text);
std::string_view to_string(SpecialsPolicy s);
Result<ClampSite> parse_clamp_site(std::string_view text);
std::string_view to_string(ClampSite c);
Result<NibbleOrder> parse_nibble_order(std::string_view text);
std::string_view to_string(NibbleOrder n);
Result<IntEncoding> parse_int_encoding(std::string_view text);
std::string_view to_string(IntEncoding e);
Result<AmaxLog2> parse_amax_log2(std::string_view text);
std::string_view to_string(AmaxLog2 a);
Result<RceilQuotient> parse_rceil_quotient(std::string_view text);
std::string_view to_string(RceilQuotient r);
Result<Code0Multiplier> parse_code0_multiplier(std::string_view text);
std::string_view to_string(Code0Multiplier c);
Result<AmaxSubnormal> parse_amax_subnormal(std::string_view text);
std::string_view to_string(AmaxSubnormal a);
Result<ZeroSign> parse_zero_sign(std::string_view text);
Result<FakeNan> parse_fake_nan(std::string_view text);
std::string_view to_string(FakeNan n);
std::string_view to_string(ZeroSign z);
Result<NearestArith> parse_nearest_arith(std::string_view text);
std::string_view to_string(NearestArith n);
Result<InputPrecision> parse_input_precision(std::string_view text);
std::string_view to_string(InputPrecision p);
Result<Nvfp4Arith> parse_nvfp4_arith(std::string_view text);
std::string_view to_string(Nvfp4Arith a);
Result<FourOverSixMetric> parse_four_over_six_metric(std::string_view text);
std::string_view to_string(FourOverSixMetric m);

/// Short names of the standard block formats.
std::vector<std::string> block_format_names();

}  // namespace mxlab
