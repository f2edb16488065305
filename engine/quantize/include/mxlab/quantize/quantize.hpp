// The scalar reference block quantizer: tensor in, element codes + scale codes + dequantized values
// out, exactly as docs/quantization.md defines. SIMD kernels must match it bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab {

/// Maps element positions of a tensor to blocks (tiles, channels, whole tensor; partial edge tiles
/// are padding-free: they simply hold fewer elements).
class BlockIndexer {
 public:
  BlockIndexer(const std::vector<std::int64_t>& shape, const ScaleLayout& layout);
  BlockIndexer(const std::vector<std::int64_t>& shape, const BlockGeometry& geometry);
  /// Per-axis tile extent (the whole axis where the layout does not tile it... see .cpp).
  const std::vector<std::int64_t>& tile() const { return tile_; }
  /// Number of blocks along each axis.
  const std::vector<std::int64_t>& grid() const { return grid_; }
  std::int64_t block_count() const { return blocks_; }
  /// Block of every element, in row-major element order.
  std::vector<std::int64_t> block_of_all() const;
  /// The row-major indices of block b's elements, in their row-major order, and the block's extent along each
  /// axis (a tile, cut at the tensor's edges) in *extent.
  std::vector<std::int64_t> elements_of(std::int64_t b, std::vector<std::int64_t>* extent) const;
  /// Indexer of the subtiles (tiles replaced by their subtiles), or the same blocks without subtiles.
  static BlockIndexer subtiles(const std::vector<std::int64_t>& shape, const ScaleLayout& layout);

 private:
  std::vector<std::int64_t> shape_, tile_, grid_;
  std::int64_t blocks_ = 1;
};

/// A quantized tensor: fake-quant values and the packed form's parts, unpacked.
struct QuantizedTensor {
  std::vector<std::int64_t> shape;
  std::vector<double> values;             ///< dequantized values (exact doubles), row-major
  std::vector<std::uint32_t> codes;       ///< element codes, row-major
  std::vector<std::int64_t> block_grid;   ///< blocks per axis
  std::vector<std::uint32_t> scale_codes; ///< one per block, row-major over block_grid
  std::vector<double> scale_values;       ///< decoded block scales (NaN for a NaN scale)
  std::vector<int> shared_exponents;      ///< X of power-of-two block scales (kNoExponent otherwise)
  std::vector<double> block_amax;         ///< largest finite magnitude of each block (0 if none)
  /// Subtiles (shared microexponents): the grid of subtiles and each one's offset d (scale 2^(X-d)).
  std::vector<std::int64_t> subtile_grid;
  std::vector<std::uint32_t> subtile_offsets;
  /// Per element: kInexact | kOverflow | kUnderflow | kInvalid from the element cast.
  std::vector<std::uint8_t> flags;
  static constexpr std::uint8_t kInexact = 1, kOverflow = 2, kUnderflow = 4, kInvalid = 8;
  bool has_tensor_scale = false;
  std::uint32_t tensor_scale_code = 0;
  double tensor_scale = 1.0;
  static constexpr int kNoExponent = -100000;
};

/// Quantizes x (row-major, `shape`) with the block format. Errors name the problem (shape mismatch,
/// an option the formats cannot honour).
Result<QuantizedTensor> quantize(const BlockFormat& f, std::span<const double> x, const std::vector<std::int64_t>& shape);

/// Whether the values of negative inputs that become zero are -0 though the element's zero code is unsigned
/// (integer elements under ZeroSign::MinusZeroPlus: microxcaling's sign(x) * 0).
bool negative_zero_values(const BlockFormat& f);

/// Under negative_zero_values: whether a negative input x that became zero, in a block whose elements are
/// divided by 2^divisor_exponent, has the value -0. It is sign(x) * 0 unless the peer's float32 quotient
/// fl32(x / 2^divisor_exponent) is itself -0 (torch.sign(-0.0) is 0, so that gives +0).
bool negative_zero_value(const BlockFormat& f, double x, int divisor_exponent);

/// Dequantizes element codes with their block scales (the inverse of the packed form), exactly.
std::vector<double> dequantize(const BlockFormat& f, const QuantizedTensor& q);

/// Correctly rounded cast of the exact quotient n / d (d > 0) to a format, for every rounding mode;
/// stochastic rounding uses the fraction of the double quotient when d is not a power of two.
CastResult cast_quotient(const Format& f, double n, double d, const CastOptions& o, std::uint32_t random = 0);

/// The tensor scale of a two-level format (layout.tensor_scale) for a tensor whose largest finite
/// magnitude is tensor_amax: g = amax / (max block scale * max element) rounded in the tensor scale's
/// format, or 1 for an all-zero tensor, when the options do not take it from the amax, or when the rounded
/// value is not a positive finite number.
struct TensorScale {
  std::uint32_t code = 0;
  double value = 1.0;
};
Result<TensorScale> choose_tensor_scale(const BlockFormat& f, double tensor_amax);

/// The code of a float block scale (rule amax) for a block with finite amax under tensor scale g: amax /
/// (target * g) rounded in the scale format (scale_opts resolved for it), then the zero-block and minimum
/// block-scale rules of the options.
std::uint32_t float_block_scale_code(const BlockFormat& f, const CastOptions& scale_opts, double amax, double target,
                                     double g);

/// N:M sparsity along the last axis of rows of `last` elements, as quantize applies it before scaling: in each
/// group of m consecutive elements of a row (the last group possibly shorter), the n_keep largest magnitudes
/// survive (ties keep the lower index); the others become +0.
void apply_nm_sparsity(std::span<double> x, std::int64_t last, int n_keep, int m);

/// The combinations of options no rule defines (quantize reports them as errors), or nothing.
std::optional<Error> check_block_options(const BlockFormat& f);

/// The per-block decision of a power-of-two scale rule (the reference's, shared with the SIMD kernels): the
/// scale, and how the block's elements are brought to the element format.
struct Pow2BlockPlan {
  enum class Kind : std::uint8_t {
    Divide,    ///< x / 2^divisor_exponent (the scale, or the code-0 multiplier's divisor)
    NanCodes,  ///< a NaN scale: every element gets the NaN code (or +0)
    Multiply,  ///< x * factor: a peer's multiplier for a special code (0, 2^-128), or a flushed block
    Zero,      ///< every element +0 (microxcaling C++ flush)
  };
  Kind kind = Kind::Divide;
  bool nan_scale = false;    ///< the scale code is the scale format's NaN (no exponent)
  int exponent = 0;          ///< the block's scale 2^exponent, clamped to the scale format (unless nan_scale)
  int divisor_exponent = 0;  ///< Divide: log2 of the divisor
  double factor = 0;         ///< Multiply: 0 or a power of two
};

/// The plan of a block whose largest finite magnitude is amax, holding NaN (nan) or Inf (inf), in a tensor
/// holding NaN (tensor_nan). x_min and x_max are the scale format's exponent range (floor(log2) of its
/// smallest positive and largest finite values). The rule must be a power-of-two rule.
Pow2BlockPlan pow2_block_plan(const BlockFormat& f, double amax, bool nan, bool inf, bool tensor_nan, int x_min,
                              int x_max);

/// log2 of what the elements of a block with scale 2^exponent are divided by (the code-0 multiplier's rule).
int pow2_divisor_exponent(const QuantOptions& o, int exponent, int x_min);

/// The element code of input x in a block with power-of-two plan `plan`, in a subtile with microexponent
/// offset `offset` (0 without subtiles): the reference's element step for the power-of-two rules, peer
/// float32 arithmetic included. element_opts are the resolved element options.
CastResult pow2_element_cast(const BlockFormat& f, const CastOptions& element_opts, const Pow2BlockPlan& plan,
                             int offset, double x, std::uint32_t random);

/// The element code of a peer's float32 scaled value v for input x (InputPrecision::Float32 and the NVFP4 peer
/// arithmetic): NaN codes per the NaN/Inf policy, microxcaling's float32 nearest arithmetic, the zero-sign rule.
CastResult peer_element_cast(const Format& e, float v, double x, const CastOptions& element_opts, std::uint32_t random,
                             const QuantOptions& o);

/// NVFP4 under a peer's float32 arithmetic (Nvfp4Arith::Te or ModelOpt, docs/profiles.md): the tensor-level
/// float32 quantities, from the tensor's NaN, Inf and largest finite magnitude.
struct Nvfp4PeerTensor {
  float amax = 0;   ///< the peer's tensor amax A (NaN or Inf under the policies that propagate them)
  float s_enc = 1;  ///< Transformer Engine's encode scale S_enc
  float s_dec = 1;  ///< the decode scale S_dec, the tensor scale
  float global_max = 0;  ///< the largest block scale times the largest element (448 * 6 = 2688)
  TensorScale scale;  ///< S_dec's code in the tensor-scale format and its value
};
Result<Nvfp4PeerTensor> nvfp4_peer_tensor(const BlockFormat& f, bool any_nan, bool any_inf, double finite_amax);

/// The block scale code of one block under the NVFP4 peer arithmetic (rule amax, or Transformer Engine's
/// 4over6 with the block's elements x and their random words), for a block that is not all NaN.
std::uint32_t nvfp4_peer_block_code(const BlockFormat& f, const CastOptions& element_opts, const CastOptions& scale_opts,
                                    const Nvfp4PeerTensor& t, double amax, bool nan, bool inf,
                                    std::span<const double> x, std::span<const std::uint32_t> random);

/// Transformer Engine's 4over6 candidates: the block scale codes mapping the block's amax to 6 (first) and to 4.
std::pair<std::uint32_t, std::uint32_t> nvfp4_peer_4over6_candidates(const BlockFormat& f, const CastOptions& scale_opts,
                                                                      const Nvfp4PeerTensor& t, double amax, bool nan,
                                                                      bool inf);

/// The float32 value the NVFP4 peer arithmetic casts for input xf under decoded block scale s.
float nvfp4_peer_element_input(const QuantOptions& o, const Nvfp4PeerTensor& t, float xf, float s);

/// The power-of-two scale exponent X of a block under the options (amax finite and > 0), before
/// clamping to the scale format.
int scale_exponent(const Format& element, double amax, const QuantOptions& o);

}  // namespace mxlab
