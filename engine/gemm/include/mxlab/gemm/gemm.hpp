// Dot products and GEMMs of block-scaled operands (docs/gemm.md): the exact reference (every product and the
// sum exact, one rounding at the end) and the accumulation models of model.hpp, over operands whose blocks run
// along the reduction axis K.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/exact_sum.hpp"
#include "mxlab/core/progress.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"
#include "mxlab/gemm/model.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::gemm {

/// A quantized matrix of `rows` x `depth` (row-major) whose blocks run along its rows, the reduction axis: A as
/// it is (M x K), B as its transpose (N x K). Element k of row r is element[r*depth+k] * scale[..] * tensor_scale.
struct Operand {
  std::string format;            ///< the block format's name ("float32" for unquantized operands)
  std::int64_t rows = 0;
  std::int64_t depth = 0;
  std::vector<double> element;   ///< the decoded element codes (NaN codes give NaN)
  std::vector<double> scale;     ///< each element's block scale, times 2^-d of its subtile (NaN: a NaN scale)
  std::vector<std::uint8_t> block_start;  ///< 1 where an element begins a new block along its row
  double tensor_scale = 1;       ///< NVFP4's second-level scale, or the one scale of a per-tensor format (e4m3:float32)
  std::vector<double> value;     ///< element * scale * tensor_scale, exact (docs/quantization.md)

  std::size_t at(std::int64_t row, std::int64_t k) const { return static_cast<std::size_t>(row * depth + k); }
};

/// Quantizes x (rows x depth, row-major) with a block format whose blocks lie along the rows and splits it into
/// elements, scales and block starts: by the SIMD block kernel where it covers the format and x is float32 values
/// (as `mxlab quantize`), else by the reference quantizer (mxlab::quantize); the same codes either way.
Result<Operand> quantize_operand(const BlockFormat& f, std::span<const double> x, std::int64_t rows, std::int64_t depth);

/// An operand of unquantized values: each value an element with scale 1, one block per row.
Operand plain_operand(std::string name, std::span<const double> x, std::int64_t rows, std::int64_t depth);

/// An operand of values already quantized with f along its rows (a fake quantization's output: each value the
/// dequantized value of its element): each value an element with scale 1 and tensor scale 1, and a block start
/// wherever f's blocks (or subtiles) along the rows begin; without f, or for a format without block scales, one
/// block per row. The models then act on the values with f's block boundaries (docs/gemm.md, "In training").
Operand values_operand(std::string name, const BlockFormat* f, std::span<const double> x, std::int64_t rows,
                       std::int64_t depth);

/// x (rows x cols, row-major) transposed.
std::vector<double> transpose(std::span<const double> x, std::int64_t rows, std::int64_t cols);

/// What the special values of the two rows make of their dot product (OCP MX v1.0 section 6.3 and IEEE 754):
/// NaN when an element or scale is NaN, a product is infinity times zero, or infinities of both signs meet;
/// an infinity when the infinite products share its sign; None when every product is finite.
enum class Special : std::uint8_t { None, Nan, PosInf, NegInf };
Special dot_special(const Operand& a, std::int64_t row_a, const Operand& b, std::int64_t row_b);

/// The exact dot product of row row_a of a and row row_b of b (their depths must agree): specials as
/// dot_special says, else every product exact and the sum exact.
struct ExactDot {
  Special special = Special::None;
  ExactSum sum;
};
ExactDot exact_dot(const Operand& a, std::int64_t row_a, const Operand& b, std::int64_t row_b);

/// The exact dot product rounded once to `out` (zero results are +0).
double round_once(const ExactDot& d, const Format& out, Rounding rounding = Rounding::NearestEven);

/// A matrix of doubles, row-major.
struct Matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<double> values;
};

/// How the entries of a GEMM were computed: by the SIMD kernel (mxlab/kernels/gemm_kernel.hpp), or by the scalar
/// definition (special values, lanes the kernel marked, or the whole GEMM when the kernel cannot take it).
struct GemmPath {
  std::int64_t kernel = 0;
  std::int64_t scalar = 0;
  std::string why_scalar;  ///< why the kernel took no entry (empty when it ran)
};

/// C = A B (b holds B's transpose): each entry the exact dot product rounded once to `out`; threads 0 = all.
/// Progress (entries of C) goes to `reporter`; once it is cancelled the GEMMs stop early and C is incomplete.
Result<Matrix> exact_gemm(const Operand& a, const Operand& b, const Format& out, unsigned threads = 0,
                          GemmPath* path = nullptr, const Reporter* reporter = nullptr);

/// C = A B with each entry the exact dot product rounded to the nearest double (error statistics' reference).
Matrix exact_gemm_double(const Operand& a, const Operand& b, unsigned threads = 0, GemmPath* path = nullptr,
                         const Reporter* reporter = nullptr);

/// Why the model cannot run these operands (its double arithmetic would not be exact), or nothing.
std::optional<Error> check_model_operands(const Model& m, const Operand& a, const Operand& b);

/// The dot product of row row_a of a and row row_b of b under the model, rounded to `out` (docs/gemm.md).
/// The operands must pass check_model_operands.
double model_dot(const Model& m, const Operand& a, std::int64_t row_a, const Operand& b, std::int64_t row_b,
                 const Format& out);

/// C = A B under the model (b holds B's transpose): the SIMD kernel where it is exact, the scalar definition
/// elsewhere, the same bits either way. `scalar_only` skips the kernel (tests and benches compare the two).
Result<Matrix> model_gemm(const Model& m, const Operand& a, const Operand& b, const Format& out, unsigned threads = 0,
                          GemmPath* path = nullptr, bool scalar_only = false, const Reporter* reporter = nullptr);

/// One operand of a product of fake-quantized values, as a training GEMM holds it: a rows x cols float32 matrix
/// (row-major), the block format its values were quantized with (null: unquantized), and whether the product reads
/// it transposed. Its 1-D blocks run along the product's reduction axis either way; 2-D tiles lie in the matrix as
/// it is, so a transposed read turns R x C tiles into C x R.
struct ValuesMatrix {
  const float* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  const BlockFormat* format = nullptr;
  bool transposed = false;
};

/// C (M x N, row-major) = A B^T under the model, A (M x K) and B^T (N x K) as the product reads them: each value an
/// element with scale 1 and its format's block starts along K (values_operand), each entry rounded to float32 (docs/
/// gemm.md, "In training"). The product of `mxlab train` under a recipe's `accumulate` and of the Python drop-in
/// layers. Errors: reduction depths that differ, or operands the model cannot take (check_model_operands).
Result<std::vector<float>> values_product(const Model& m, const ValuesMatrix& a, const ValuesMatrix& bt,
                                          unsigned threads = 0);

// ---- the job every front end runs

/// Error of a matrix against a reference, entry by entry (entries where either is NaN are counted apart;
/// relative errors over the entries whose reference is nonzero).
struct ErrorSummary {
  std::int64_t count = 0;           ///< entries compared (both not NaN)
  std::int64_t nan_count = 0;       ///< entries where the result or the reference is NaN
  std::int64_t zero_reference = 0;  ///< compared entries whose reference is 0 (no relative error)
  double max_rel_error = 0;
  double mean_rel_error = 0;
  double p50_rel_error = 0, p90_rel_error = 0, p99_rel_error = 0;  ///< nearest-rank percentiles
  double max_abs_error = 0;
  double sqnr_db = 0;               ///< 10 log10(sum ref^2 / sum (c - ref)^2); inf when equal
  double signal = 0;                ///< sum ref^2
  double noise = 0;                 ///< sum (c - ref)^2
};
ErrorSummary compare(std::span<const double> c, std::span<const double> reference);

struct GemmRequest {
  BlockFormat format_a;                ///< A's block format (blocks along K)
  BlockFormat format_b;                ///< B's block format, applied to B's transpose (N x K, blocks along K)
  std::vector<Model> models;           ///< accumulation models to run
  std::optional<Format> out;           ///< C's format (none: float32)
  std::int64_t m = 0, k = 0, n = 0;
  std::vector<double> a;               ///< M x K, row-major
  std::vector<double> b;               ///< K x N, row-major
  unsigned threads = 0;
  Reporter reporter;                   ///< progress of each GEMM (entries of C) and cancellation
};

struct ModelResult {
  Model model;
  Matrix c;
  ErrorSummary vs_exact;  ///< against the exact product of the quantized operands
  ErrorSummary vs_fp32;   ///< against the exact product of the operands as float32 (unquantized)
};

struct GemmReport {
  ErrorSummary exact_vs_fp32;  ///< the exact product of the quantized operands against the float32 one
  std::vector<ModelResult> models;
};

/// Quantizes both operands, computes the exact product of the quantized and of the float32 operands and C under
/// every model, and compares them. Errors name the request's part (shape, format, model); a cancelled request
/// gives the error "cancelled".
Result<GemmReport> run(const GemmRequest& request);

/// Accumulation models separated by ';' ("tensorcore-trunc14;exact"), each a preset or key=value settings.
Result<std::vector<Model>> parse_models(std::string_view text);

/// The columns of report_table (its header, no rows).
Table report_header();

/// The report as `mxlab gemm` and the Python package give it: the exact product of the quantized operands against
/// fp32, then each model against exact and against fp32 (model, reference, formats, shape, the ErrorSummary's
/// counts and errors, the model's definition).
Table report_table(const GemmRequest& request, const GemmReport& report);

}  // namespace mxlab::gemm
