// The engine's entry points, one per job: every front end (CLI command, experiment point, training
// operand, GUI view) builds these requests and calls these functions, never the kernels or the scalar
// reference directly. Each picks the SIMD kernel where it covers the request and the scalar reference only
// where the kernel refuses it; the results are the reference's, bit for bit, whichever runs.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/progress.hpp"
#include "mxlab/ops/tensor_source.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/quantize/analysis.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/pack.hpp"

namespace mxlab {
class BlockKernel;  // mxlab/kernels/block_kernel.hpp: kernels stay private to ops
class CastKernel;   // mxlab/kernels/cast_kernel.hpp
class DecodeKernel;
}

namespace mxlab::ops {

/// How a job runs. Results never depend on the thread count.
struct Run {
  unsigned threads = 0;   ///< worker threads; 0 = every hardware thread
  Reporter reporter;      ///< progress (elements done of total, per format) and cancellation
  std::int64_t chunk_elements = 0;  ///< elements per streamed chunk (0: 2^20); results do not depend on it
};

/// The message of a job stopped by Run::reporter.cancel.
inline constexpr const char* kCancelled = "cancelled";

/// The SIMD target the kernels run on here ("AVX3", "AVX2", "SSE4", "scalar"...).
std::string simd_target();

/// Which engine computes a format: "simd:TARGET" (the kernels) or "reference" with the kernel's reason.
std::string engine_for(const BlockFormat& f);

// ---- analyze

/// One block's figures (AnalyzeOptions::per_block).
struct BlockSummary {
  double amax = 0;   ///< largest finite magnitude in the block
  double scale = 0;  ///< the block's decoded scale times the tensor scale
  ErrorStats stats;
};

/// Receives per-block summaries as they are made: the format's index in the request, the block's index
/// (row-major over the block grid) and its figures. An error stops the analysis and is returned.
using BlockSink = std::function<std::optional<Error>(std::size_t format, std::size_t block, const BlockSummary&)>;

struct AnalyzeOptions {
  bool gaps = false;       ///< exponent-gap histogram and errors by gap
  bool per_block = false;  ///< one summary per block (kept in FormatAnalysis::blocks unless block_sink is set)
  /// With per_block: summaries go here, format after format and block after block, and are not kept, so
  /// memory does not grow with the number of blocks.
  BlockSink block_sink;
};

/// Number of blocks of `f` over a tensor of this shape (0 for formats without block scales).
std::int64_t block_count(const BlockFormat& f, const std::vector<std::int64_t>& shape);

/// The analysis of one block format on one tensor.
struct FormatAnalysis {
  BlockFormat format;
  std::string engine;      ///< engine_for(format), or why the reference ran
  ErrorStats total;
  double bits_per_element = 0;
  std::map<int, std::int64_t> gap_histogram;  ///< AnalyzeOptions::gaps
  std::map<int, ErrorStats> by_gap;           ///< AnalyzeOptions::gaps
  std::vector<BlockSummary> blocks;           ///< AnalyzeOptions::per_block
};

/// Quantizes the tensor with every format and measures the error exactly (mxlab::analyze's figures), reading
/// the tensor once per format in chunks: memory stays bounded by the input plus a fixed working set, whatever
/// the number of formats or blocks (except per_block summaries).
Result<std::vector<FormatAnalysis>> analyze(const std::vector<BlockFormat>& formats, const TensorSource& input,
                                            const AnalyzeOptions& options = {}, const Run& run = {});

// ---- quantize

/// What quantize writes for each chunk of the tensor, in order.
struct QuantizeSink {
  /// Fake quantization: dequantized values of elements [first, first + values.size()) as float32 (the
  /// reference's values rounded to float32, exact unless beyond the float32 range).
  std::function<std::optional<Error>(std::size_t first, std::span<const float> values)> fake;
};

struct QuantizeResult {
  std::string engine;
  /// Error totals: count, sse, signal, underflows, saturations, NaN outputs and max abs error (analyze adds the
  /// error sum and the largest relative error).
  ErrorStats stats;
};

/// Fake quantization streamed to sink.fake chunk by chunk; the error totals only with_stats (they cost a
/// fused exact-metrics pass).
Result<QuantizeResult> quantize_fake(const BlockFormat& f, const TensorSource& input, const QuantizeSink& sink,
                                     const Run& run = {}, bool with_stats = false);

/// Fake quantization of float32 values held in memory (GEMM operands, GUI views): out[i] = the dequantized
/// value of x[i] (as quantize_fake's values), in one pass without copies; with a result, its engine and error
/// totals. Blocks run along the last axis of `shape` (for a GEMM operand, put the reduction axis last).
Result<std::size_t> fake_quantize(const BlockFormat& f, std::span<const float> x, const std::vector<std::int64_t>& shape,
                                  std::span<float> out, const Run& run = {}, QuantizeResult* result = nullptr);

/// A block format made ready once for many in-memory fake quantizations (the GEMM operands of every training
/// step): run() gives fake_quantize's values, bit for bit, without preparing the kernel again on each call.
class FakeQuantizer {
 public:
  explicit FakeQuantizer(const BlockFormat& f);
  const BlockFormat& format() const { return format_; }
  /// As fake_quantize(format(), x, shape, out, run, result).
  Result<std::size_t> run(std::span<const float> x, const std::vector<std::int64_t>& shape, std::span<float> out,
                          const Run& run = {}, QuantizeResult* result = nullptr) const;
  /// As run() on the transpose of x (rows x cols, row-major: the format's blocks run down x's columns), with
  /// the values written back in x's layout: out[i * cols + j] = run(x^T, {cols, rows})[j * rows + i], bit for
  /// bit. Formats whose values do not depend on element positions (element casts and per-tensor scales without
  /// stochastic rounding) quantize x as it lies; 1-D blocks run down the columns on the block kernel
  /// (BlockKernel::fake_quantize_columns); every other format quantizes a transposed copy.
  Result<std::size_t> run_columns(std::span<const float> x, std::int64_t rows, std::int64_t cols, std::span<float> out,
                                  const Run& run = {}) const;
  /// Whether the format's values do not depend on element positions (element casts and per-tensor scales,
  /// without N:M sparsity or stochastic rounding): along the rows and down the columns alike.
  bool positionless() const;
  /// Whether this quantizer and `other` give the same values in either direction: both positionless, with the
  /// same format text and options.
  bool same_values(const FakeQuantizer& other) const;
  /// run(x, {rows, cols}, out) and columns.run_columns(x, rows, cols, out_columns) in one pass over x: a chunk of
  /// whole column blocks at a time, quantized along its rows and down its columns while in the caches (the
  /// same values as the two calls, which it makes instead where a format's values depend on more than the
  /// chunk: tensor-level scales, stochastic rounding, whole-axis blocks, the reference). Where both give the same
  /// values (same_values), one quantization and a copy.
  Result<std::size_t> run_rows_and_columns(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                                           std::span<float> out, const FakeQuantizer& columns,
                                           std::span<float> out_columns, const Run& run = {}) const;
  /// What run_scaled reports of its input: the largest magnitude (NaN ignored, as fmax ignores it) and how many
  /// scaled values exceed the limit in magnitude.
  struct ScaledStats {
    float amax = 0.0F;
    std::int64_t above = 0;
  };
  /// Whether run_scaled covers this format: a plain element cast on the SIMD kernels, and down a matrix's
  /// columns (columns) only without stochastic rounding (whose random words follow the transposed positions).
  bool scaled_native(bool columns) const;
  /// An element cast under a per-tensor scale, as delayed scaling casts (docs/training.md): out[i] =
  /// fl32(v[i] * inverse), v = run() of fl32(x[i] * scale), bit for bit, with ScaledStats of x (above: |fl32(x[i]
  /// * scale)| > limit). One pass over x in chunks that stay in the caches, over the run's threads. An error
  /// where !scaled_native(false).
  Result<ScaledStats> run_scaled(std::span<const float> x, float scale, float inverse, float limit,
                                 std::span<float> out, const Run& run = {}) const;

 private:
  /// run() before NaN values take the format's bits (QuantOptions::fake_nan).
  Result<std::size_t> run_values(std::span<const float> x, const std::vector<std::int64_t>& shape,
                                 std::span<float> out, const Run& run, QuantizeResult* result) const;
  /// Formats without a scale (a plain element cast): the SIMD cast and decode kernels.
  Result<std::size_t> run_elements(std::span<const float> x, std::span<float> out, const Run& run,
                                   QuantizeResult* result) const;
  /// A per-tensor scale or 2-D tiles: the block kernel of the same format with one block per row, run over
  /// the tensor as one row, or over each tile's elements gathered into a row (quantize.cpp says when that is
  /// the reference's computation).
  Result<std::size_t> run_gathered(std::span<const float> x, const std::vector<std::int64_t>& shape,
                                   std::span<float> out, const Run& run, QuantizeResult* result) const;
  BlockFormat format_;
  std::shared_ptr<const BlockKernel> kernel_;  ///< the SIMD kernel when it covers the format, else the reference
  std::shared_ptr<const BlockKernel> rows_;    ///< per-tensor scales and 2-D tiles: the kernel of whole-row blocks
  std::shared_ptr<const CastKernel> cast_;     ///< formats without a scale: the cast kernel, when it covers them
  std::shared_ptr<const DecodeKernel> decode_;
  CastOptions element_options_;
  /// Whether rows [r0, r1) of a matrix quantize alone to what they give within it (1-D blocks along the rows on
  /// the block kernel, without tensor-level quantities or stochastic rounding).
  bool rows_stand_alone() const;
};

/// Packed quantization of the whole tensor (as mxlab::pack of mxlab::quantize); with a result, its engine and
/// error totals (as quantize_fake's with_stats).
Result<PackedTensor> quantize_packed(const BlockFormat& f, const TensorSource& input, const Run& run = {},
                                     QuantizeResult* result = nullptr);

/// Dequantizes a packed tensor (the inverse of quantize_packed) to its exact values.
Result<std::vector<double>> dequantize(const BlockFormat& f, const PackedTensor& packed, const Run& run = {});

}  // namespace mxlab::ops
