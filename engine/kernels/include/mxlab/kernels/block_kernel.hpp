// SIMD block quantization of float32, bfloat16 and float16 tensors to 1-D block formats along the last
// axis (MX power-of-two scales; float block scales under an optional tensor scale, as NVFP4): fake
// quantization, packed quantization, dequantization of packed data, per-block amax, and error metrics fused
// into the quantize pass. Highway kernels with run-time dispatch (simd_target.hpp), bit for
// bit the scalar reference mxlab::quantize / mxlab::pack / mxlab::analyze (docs/quantization.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/exact_sum.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

namespace kernel_detail {
struct BlockParams;
}

/// Element type of a block kernel's input; F32, BF16 and F16 are read exactly (widened to float32), F64 is
/// narrowed to float32 (nearest-even) a few blocks at a time into each thread's buffer: exact when every value
/// is a float32 value, which is when callers pass float64 (ops::TensorSource::float32_exact).
enum class BlockInputType : std::uint8_t { F32, BF16, F16, F64 };

/// A read-only view of an input tensor's elements: float32 or float64 values, or bfloat16/float16 bit patterns.
struct BlockInput {
  /// float32 elements: anything convertible to std::span<const float> (a vector, a span).
  template <class R>
    requires std::is_convertible_v<const R&, std::span<const float>>
  BlockInput(const R& x) {  // NOLINT(google-explicit-constructor): a float32 tensor is the common case
    const std::span<const float> s = x;
    data = s.data();
    size = s.size();
  }
  static BlockInput bf16(std::span<const std::uint16_t> bits) { return {BlockInputType::BF16, bits}; }
  static BlockInput f16(std::span<const std::uint16_t> bits) { return {BlockInputType::F16, bits}; }
  static BlockInput f64(std::span<const double> values) { return {BlockInputType::F64, values.data(), values.size()}; }

  /// The exact value of element i.
  double value(std::size_t i) const;

  BlockInputType type = BlockInputType::F32;
  const void* data = nullptr;
  std::size_t size = 0;

 private:
  BlockInput(BlockInputType t, std::span<const std::uint16_t> bits) : type(t), data(bits.data()), size(bits.size()) {}
  BlockInput(BlockInputType t, const void* p, std::size_t n) : type(t), data(p), size(n) {}
};

/// The tensor-level quantities a pass over some of a tensor's blocks needs from the whole tensor: the tensor
/// scale of two-level formats (or the NVFP4 peers' float32 tensor quantities) and, under NaN/Inf policy
/// tensor-nan, whether the tensor holds a NaN. BlockKernel::tensor_facts computes them once per tensor.
struct BlockTensorFacts {
  TensorScale scale;         ///< two-level formats: the tensor scale (value 1 otherwise)
  Nvfp4PeerTensor peer;      ///< the NVFP4 peer arithmetic's tensor quantities (where it applies)
  bool any_nan = false;      ///< the tensor holds a NaN (read only under policy tensor-nan)
};

/// How a block kernel call splits its work. Results never depend on `threads`, on the block range
/// chosen or on the SIMD target.
struct BlockRun {
  unsigned threads = 1;  ///< worker threads; 0 = all hardware threads
  /// Only blocks [first_block, end_block) of the tensor (row-major block order; end_block < 0: to the last
  /// block). The input is still the whole tensor (element indices, stochastic rounding and tensor-level
  /// passes refer to it); the outputs hold the range only: fake values from the range's first element,
  /// packed codes from its first element (whose bit offset must be a multiple of 8), scale codes, amax values
  /// and subtile offsets from the range's first block and subtile. Metrics cover the range.
  std::int64_t first_block = 0;
  std::int64_t end_block = -1;
  /// Tensor-level quantities from tensor_facts() for this tensor; null: computed by the call (a first pass
  /// over the whole tensor where the format needs one).
  const BlockTensorFacts* facts = nullptr;
};

/// Error totals of a quantize pass, defined as mxlab::ErrorStats (analysis.hpp) over the whole tensor:
/// the sums are exact and equal those of mxlab::analyze.
struct BlockMetrics {
  std::int64_t count = 0;           ///< finite inputs with finite outputs
  std::int64_t nonzero_inputs = 0;  ///< among count
  std::int64_t underflows = 0;      ///< nonzero inputs that became zero
  std::int64_t saturations = 0;     ///< counted elements whose cast overflowed
  std::int64_t nan_outputs = 0;
  ExactSum sse;                     ///< sum of squared errors, exact
  ExactSum signal;                  ///< sum of squared inputs, exact
  ExactSum error_sum;               ///< sum of signed errors, exact (bias)
  double max_abs_error = 0;
  double max_rel_error = 0;         ///< over nonzero inputs, |e| / |x| in double

  double mse() const { return count ? sse.to_double() / static_cast<double>(count) : 0.0; }
};

/// The packed form (docs/quantization.md "Packed form", as mxlab::pack writes it).
struct BlockPacked {
  std::vector<std::uint8_t> elements;  ///< element codes bit-packed at their width
  std::vector<std::uint8_t> scales;    ///< one scale code per block, in block order, little-endian in
                                       ///< BlockKernel::scale_bytes() bytes
  std::vector<std::uint8_t> tensor_scale;  ///< two-level formats: the tensor scale code, little-endian
  std::vector<std::uint8_t> subtile_offsets;  ///< subtile formats: one microexponent offset per subtile
};

/// What is wrong with a call over a rows x cols matrix whose input holds x_size values and whose output has
/// room for out_size (a negative dimension, a size that does not match, an output too short), or nullopt.
std::optional<Error> matrix_call_error(std::size_t x_size, std::int64_t rows, std::int64_t cols, std::size_t out_size);

/// A block quantizer for one block format, reduced once to the constants the SIMD code takes.
///
/// Supported: element formats CastKernel supports of at most 16 bits (the MX float and integer elements,
/// BOOST E2M5, the MX-SAFE element, unsigned integers, float16 or bfloat16 elements under block scales),
/// 1-D blocks along the last axis (a fixed size or the whole axis), and either
///  - power-of-two scales (E8M0, or powers of two in float16, bfloat16 or float32 codes) under every scale
///    rule giving a power-of-two scale (floor, ceil, rceil, even, midmax), both clamp sites, or
///  - a float scale format of at most 32 bits whose values are float32 numbers (E4M3, UE4M3, E5M2, float16,
///    bfloat16, float32) under rule amax, optionally below a tensor scale of at most 24 significant bits
///    (NVFP4's two levels), with the zero-block and minimum-scale rules;
/// every zero-block rule, the NaN/Inf policies block-nan, block-nan-any and element, every element rounding
/// mode (stochastic with stochastic_bits(seed, element index)), overflow policy and the subnormal modes
/// keep and flush-output, both nibble orders and both integer encodings. Power-of-two scales also take every
/// peer arithmetic option and NaN/Inf policy (every E8M0 peer profile) and subtiles; float scales take rule
/// 4over6, the float32 input rounding and the NVFP4 peers' float32 arithmetic. Codebook elements (NF4) take the
/// same options (except Transformer Engine's 4over6 metrics); N:M sparsity prunes a copy of the tensor first.
/// Everything else (2-D tiles, channel scales, elements of more than 16 bits) is reported by
/// unsupported_reason().
class BlockKernel {
 public:
  /// Why the SIMD kernel cannot quantize with this block format, or an empty string when it can.
  static std::string unsupported_reason(const BlockFormat& f);
  static bool supports(const BlockFormat& f) { return unsupported_reason(f).empty(); }

  static Result<BlockKernel> make(const BlockFormat& f);

  const BlockFormat& format() const { return format_; }
  /// Elements per block along the last axis of a tensor whose last axis has `row_length` elements.
  std::int64_t block_size(std::int64_t row_length) const;
  /// Blocks of a tensor with this shape (row-major, blocks along the last axis).
  std::int64_t block_count(const std::vector<std::int64_t>& shape) const;
  /// Subtiles of a tensor with this shape (0 for a format without subtiles), in row-major order.
  std::int64_t subtile_count(const std::vector<std::int64_t>& shape) const;
  /// Bytes of one packed scale code (1 for scale formats of at most 8 bits; 2 or 4 for float16, bfloat16 and
  /// float32 scales).
  std::size_t scale_bytes() const;
  /// Bytes of the packed element codes of `elements` elements.
  std::size_t packed_element_bytes(std::size_t elements) const;

  /// out[i] = the dequantized value of element i (mxlab::quantize's value rounded to float32: exact
  /// unless it exceeds the float32 range). Optionally the fused error metrics.
  Result<std::size_t> fake_quantize(BlockInput x, const std::vector<std::int64_t>& shape,
                                    std::span<float> out, const BlockRun& run = {},
                                    BlockMetrics* metrics = nullptr) const;
  /// Fake quantization of the transpose of x, a rows x cols row-major float32 matrix, written in x's own layout:
  /// the format's blocks run down x's columns (block_size(rows) consecutive rows of one column each), and
  /// out[i * cols + j] = fake_quantize(x^T, {cols, rows})[j * rows + i], bit for bit. Where columns_native(),
  /// a vector of columns at a time without a transposed copy; elsewhere through one. Threads split the panels
  /// of block rows; block ranges (BlockRun::first_block, end_block) do not apply.
  Result<std::size_t> fake_quantize_columns(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                                            std::span<float> out, const BlockRun& run = {}) const;
  /// Fake quantization of a rows x cols row-major float32 matrix in 2-D tiles of tile_rows x tile_cols (the last
  /// tile row and column partial), each tile one block of this kernel's format: out = the format's values of each
  /// tile's elements quantized as one block (as the tile's rows gathered one after the other), bit for bit. Only
  /// where columns_native() without float block scales (the power-of-two column kernel, a band of tile_rows rows
  /// at a time); threads split the bands.
  Result<std::size_t> fake_quantize_tiles(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                                          std::int64_t tile_rows, std::int64_t tile_cols, std::span<float> out,
                                          const BlockRun& run = {}) const;
  /// Whether fake_quantize_tiles takes this kernel's format (columns_native() with power-of-two scales).
  bool tiles_native() const;
  /// Whether fake_quantize_columns runs down the columns itself (power-of-two scales under rule floor with the
  /// nearest-even fast path of the exact rules, no subtiles, N:M sparsity, stochastic rounding or -0 rule; or
  /// float block scales under rule amax on their nearest-even fast path, float_columns_native) rather than on a
  /// transposed copy.
  bool columns_native() const;
  /// Float block scales down columns: rule amax on a float element grid with the float32 fast path, nearest-even,
  /// no peer arithmetic, rule 4over6, subtiles, N:M sparsity, -0 rule or tensor-nan policy. A two-level format
  /// whose tensor scale is not a float32 (or, with long scale significands, not 1) still takes the transposed
  /// copy.
  bool float_columns_native() const;
  /// Packed element codes and scale codes (as mxlab::pack of mxlab::quantize); optionally the metrics.
  Result<BlockPacked> quantize_packed(BlockInput x, const std::vector<std::int64_t>& shape,
                                      const BlockRun& run = {}, BlockMetrics* metrics = nullptr) const;
  /// As quantize_packed, into caller-provided arrays of packed_element_bytes(n) and block_count(shape) *
  /// scale_bytes() bytes; two-level formats report their tensor scale in *tensor_scale if given; subtile formats write
  /// subtile_count(shape) offsets.
  Result<std::size_t> quantize_packed(BlockInput x, const std::vector<std::int64_t>& shape,
                                      std::span<std::uint8_t> elements, std::span<std::uint8_t> scales,
                                      const BlockRun& run = {}, BlockMetrics* metrics = nullptr,
                                      TensorScale* tensor_scale = nullptr,
                                      std::span<std::uint8_t> subtile_offsets = {}) const;
  /// The error metrics alone (the quantize pass without outputs).
  Result<BlockMetrics> metrics(BlockInput x, const std::vector<std::int64_t>& shape,
                               const BlockRun& run = {}) const;
  /// Dequantizes packed codes and scale codes to float32 (mxlab::dequantize rounded to float32); two-level
  /// formats multiply by the decoded tensor scale (not negative; NaN and 0 as quantization may report them),
  /// subtile formats take the subtiles' offsets.
  Result<std::size_t> dequantize(std::span<const std::uint8_t> elements, std::span<const std::uint8_t> scales,
                                 const std::vector<std::int64_t>& shape, std::span<float> out,
                                 const BlockRun& run = {}, double tensor_scale = 1.0,
                                 std::span<const std::uint8_t> subtile_offsets = {}) const;
  /// The tensor scale of a two-level format for this tensor (as mxlab::quantize picks it); an error for
  /// other formats.
  Result<TensorScale> tensor_scale(BlockInput x, const std::vector<std::int64_t>& shape,
                                   const BlockRun& run = {}) const;
  /// The tensor-level quantities of x (a pass over the whole tensor where the format needs one, else none),
  /// for calls over ranges of its blocks (BlockRun::facts).
  Result<BlockTensorFacts> tensor_facts(BlockInput x, const std::vector<std::int64_t>& shape,
                                        const BlockRun& run = {}) const;
  /// Whether the format needs tensor_facts() to be computed over the whole tensor (two-level scales, the NVFP4
  /// peer arithmetic, policy tensor-nan); ranges of other formats need no facts.
  bool needs_tensor_facts() const;
  /// First element of block b of a tensor whose last axis has row_length elements.
  std::int64_t block_first_element(std::int64_t b, std::int64_t row_length) const;
  /// Blocks, elements and subtiles that a call with this block range covers (clamped to the tensor).
  struct RangeSize {
    std::int64_t blocks = 0, elements = 0, subtiles = 0;
  };
  RangeSize range_size(const std::vector<std::int64_t>& shape, const BlockRun& run) const;
  /// Largest finite magnitude of every block (0 if none), as QuantizedTensor::block_amax.
  Result<std::size_t> block_amax(BlockInput x, const std::vector<std::int64_t>& shape,
                                 std::span<float> amax, const BlockRun& run = {}) const;

  /// The scalar reference for speed comparisons: mxlab::quantize on the exact values of x, then mxlab::pack.
  static Result<BlockPacked> reference_packed(const BlockFormat& f, BlockInput x,
                                              const std::vector<std::int64_t>& shape);

 private:
  enum class Mode : std::uint8_t;
  BlockKernel(BlockFormat f, std::shared_ptr<const kernel_detail::BlockParams> p);
  struct Outputs;
  Result<std::size_t> run(Mode mode, BlockInput x, const std::vector<std::int64_t>& shape, const Outputs& out,
                          const BlockRun& run) const;
  /// N:M sparsity: a copy of x (in *storage) with the pruned elements set to +0, as mxlab::quantize prunes.
  BlockInput prune_nm(BlockInput x, std::int64_t row, const BlockRun& run, std::vector<std::uint8_t>* storage) const;
  /// The NVFP4 peer arithmetic's tensor quantities (a first pass for the tensor's NaN, Inf and amax).
  Result<Nvfp4PeerTensor> nvfp4_peer_tensor(BlockInput x, const std::vector<std::int64_t>& shape,
                                            const BlockRun& run) const;

  BlockFormat format_;
  std::shared_ptr<const kernel_detail::BlockParams> params_;
};

}  // namespace mxlab
