// Block formats: an element format, how scales are laid over the tensor (tensor, channel, 1-D and 2-D
// tiles, two levels), how a scale is chosen, and every choice the OCP MX specification leaves open.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"

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
};

/// Where the power-of-two scale exponent is clamped to the scale format's range.
enum class ClampSite : std::uint8_t {
  Exponent,  ///< clamp X itself (OCP: X is stored as E8M0 and clamped to its range)
  Amax,      ///< clamp floor(log2 amax) to the float32 normal range [-126, 127] first, then clamp X
};

/// Scale of a block whose elements are all zero.
enum class ZeroBlock : std::uint8_t {
  Smallest,  ///< the scale format's smallest value (E8M0 code 0x00 = 2^-127), as the spec's clamp gives
  One,       ///< 2^0
};

/// What NaN and infinite inputs do to a block.
enum class SpecialsPolicy : std::uint8_t {
  BlockNan,  ///< NaN makes the block's scale NaN (every element NaN); Inf likewise unless the element
             ///< format has Inf, in which case it stays Inf and the scale uses the finite values
  Element,   ///< the scale uses the finite values; NaN/Inf elements are cast elementwise
};

/// Encoding of MX integer elements in packed output.
enum class IntEncoding : std::uint8_t { TwosComplement, SignMagnitude };

/// Order of two 4-bit codes in a byte.
enum class NibbleOrder : std::uint8_t {
  LowFirst,   ///< element 2i in bits 0-3, element 2i+1 in bits 4-7 (PyTorch float4_e2m1fn_x2, OCP)
  HighFirst,  ///< element 2i in bits 4-7 (seed 004's packing)
};

/// One dimension of a tile: size 0 means the whole extent of the axis (a channel scale).
struct TileDim {
  std::int64_t size = 0;
  /// Subtile size along this axis (0: no subtiles). Subtiles carry shared microexponents: each subtile
  /// of a block scaled by 2^X uses 2^(X - d) with a d of subtile_bits bits (docs/quantization.md).
  std::int64_t subtile = 0;
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
};

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
  /// Seed of the stochastic rounding stream; element i of the tensor uses stochastic_bits(seed, i).
  std::uint64_t seed = 0;
  std::string profile = "ocp";  ///< name of the preset the options came from
};

/// A named block format: element + layout + options.
struct BlockFormat {
  std::string name;
  Format element;
  ScaleLayout layout;
  QuantOptions options;

  /// Storage bits per element including scales (for a tensor of `count` elements with 1-D/2-D tiles).
  double bits_per_element(std::int64_t tensor_elements) const;
  /// Number of elements per block (product of tile sizes; 0 when a tile spans a whole axis).
  std::int64_t block_elements() const;
};

/// Parses a block spec: short names (mxfp8_e4m3, mxfp8_e5m2, mxfp6_e3m2, mxfp6_e2m3, mxfp4, mxint8,
/// mxint4, mxint2, nvfp4, mxsf, boost_e2m5) with an optional @K or @RxC block override, or
/// ELEMENT:SCALESPEC with a TensorCast scale spec ("e2m1:e8m0_t32", "e4m3:float32_t16_t16",
/// "int8:float32_t0", "e4m3:e8m0_t16s4_t16s4", "e2m1:e4m3_float32_t16", "e4m3:float32").
Result<BlockFormat> parse_block_format(std::string_view text);

/// Applies a named peer profile's options (docs/profiles.md) to a block format.
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

/// Short names of the standard block formats.
std::vector<std::string> block_format_names();

}  // namespace mxlab
