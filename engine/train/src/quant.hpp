// Internal: quantization of GEMM operands through ops::fake_quantize and the per-operand metrics of a step.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mxlab/gemm/model.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/train/recipe.hpp"
#include "mxlab/train/scaling.hpp"

namespace mxlab::train::detail {

/// Counts of one quantized operand over a step (summed over its GEMM calls).
struct OperandStats {
  std::int64_t count = 0;
  std::int64_t nonzero = 0;    ///< inputs that are not zero
  std::int64_t underflow = 0;  ///< nonzero inputs whose quantized value is zero
  double sse = 0;              ///< sum of squared quantization errors (double)
  bool delayed = false;        ///< cast with a delayed per-tensor scale
  std::int64_t saturated = 0;  ///< delayed: inputs whose scaled magnitude exceeds the format's largest value
  float scale = 0;             ///< delayed: the scale of the step
};

/// The delayed scaling state of every operand that has one, by "layer.role", in model construction order.
using DelayedStates = std::vector<std::pair<std::string, AmaxHistory>>;

/// What a forward or backward pass needs besides its tensors.
struct QuantContext {
  unsigned threads = 1;
  bool collect = false;   ///< measure OperandStats this step
  bool training = true;   ///< keep what backward needs
  /// Rounds the outputs (forward and backward) of the non-GEMM layers (activations, pooling, layer norm,
  /// attention softmax); none: FP32.
  const ops::FakeQuantizer* nongemm = nullptr;
  /// Delayed scaling states (none: no operand has one); casts record their amax only while training.
  DelayedStates* delayed = nullptr;
  /// The accumulation model of every GEMM (docs/gemm.md, "In training"); none: Eigen's float32 product.
  const gemm::Model* accumulate = nullptr;
  std::vector<std::pair<std::string, OperandStats>> stats;  ///< "layer.role", in first-use order
  /// While set, every at() call gets an entry of its own here instead of the stats: a unit of work run beside
  /// others (attention's (sequence, head) units) keeps its counts apart, and replay() adds them to the step's
  /// stats in the units' order, each call's terms in the order one thread would have added them.
  std::deque<std::pair<std::string, OperandStats>>* log = nullptr;

  OperandStats& at(const std::string& key);
  /// This context's settings for a unit of work on one thread, logging its counts into `unit_log`.
  QuantContext unit(std::deque<std::pair<std::string, OperandStats>>* unit_log) const {
    QuantContext c;
    c.threads = 1, c.collect = collect, c.training = training, c.nongemm = nongemm, c.delayed = delayed;
    c.accumulate = accumulate, c.log = unit_log;
    return c;
  }
  /// Adds a unit's logged counts to the stats (or to this context's own log), as at() would have.
  void replay(const std::deque<std::pair<std::string, OperandStats>>& unit_log);
  /// The delayed scaling state of the operand, or null.
  AmaxHistory* delayed_state(const std::string& key) const;
};

/// The quantizers of a layer's five roles (none: FP32), prepared once per layer.
struct LayerFormats {
  std::vector<std::shared_ptr<const ops::FakeQuantizer>> by_role =
      std::vector<std::shared_ptr<const ops::FakeQuantizer>>(kRoleCount);
  const ops::FakeQuantizer* get(Role r) const { return by_role[static_cast<std::size_t>(r)].get(); }
};

/// Whether the quantizer's blocks are 2-D tiles over the last two axes.
inline bool is_2d(const ops::FakeQuantizer* q) { return q != nullptr && q->format().layout.geometry().two_d(); }

/// x rounded in place with ctx.nongemm (no metrics).
void round_nongemm(std::span<float> x, std::int64_t rows, std::int64_t cols, QuantContext& ctx);

/// out = fake quantization of x (rows x cols, row-major, blocks along the last axis or 2-D tiles) through
/// ops (FakeQuantizer, as ops::fake_quantize); with ctx.collect, adds the operand's counts to ctx.stats[key].
/// An operand with a delayed scaling state is cast as Transformer Engine casts it: fl32(x * scale) through the
/// (saturating) element quantizer, times fl32(1 / scale); its amax is recorded while training.
/// With columns, the blocks run down x's columns (ops::FakeQuantizer::run_columns). Throws std::runtime_error
/// with the engine's message on failure.
void quantize_operand(const ops::FakeQuantizer& f, std::span<const float> x, std::int64_t rows, std::int64_t cols,
                      std::span<float> out, QuantContext& ctx, const std::string& key, bool columns = false);

/// quantize_operand of x along its rows with rows_q (key rows_key) and down its columns with columns_q (key
/// columns_key) in one pass over x (ops::FakeQuantizer::run_rows_and_columns); two calls when either operand
/// has a delayed scaling state.
void quantize_rows_and_columns(const ops::FakeQuantizer& rows_q, const ops::FakeQuantizer& columns_q,
                               std::span<const float> x, std::int64_t rows, std::int64_t cols, std::span<float> out_rows,
                               std::span<float> out_columns, QuantContext& ctx, const std::string& rows_key,
                               const std::string& columns_key);

/// Whether one cast under delayed scaling gives x's values for both its uses (delayed_cast_both's condition):
/// both keys have a delayed scaling state, with the same scale, and the quantizers the same element format
/// without block scales, N:M sparsity or stochastic rounding.
bool one_delayed_cast(const ops::FakeQuantizer& rows_q, const ops::FakeQuantizer& columns_q, const QuantContext& ctx,
                      const std::string& rows_key, const std::string& columns_key);

/// x cast once under delayed scaling for both its uses, along its rows (rows_key) and down its columns
/// (columns_key), into out, when one cast gives both: the same element format without block scales, N:M sparsity
/// or stochastic rounding (an elementwise cast, whose values do not depend on the direction) and the same scale in
/// both keys' states; the metrics, saturations and recorded amaxes are those of two casts. False, with nothing
/// done, otherwise.
bool delayed_cast_both(const ops::FakeQuantizer& rows_q, const ops::FakeQuantizer& columns_q, std::span<const float> x,
                       std::int64_t rows, std::int64_t cols, std::span<float> out, QuantContext& ctx,
                       const std::string& rows_key, const std::string& columns_key);

/// x quantized once for both its uses, along its rows (rows_key) and down its columns (columns_key), into out,
/// when the two quantizers give the same values in either direction (ops::FakeQuantizer::same_values: an element
/// cast or a per-tensor scale of one format) and neither key has a delayed scaling state; the metrics are those
/// of two quantizations. False, with nothing done, otherwise.
bool quantize_once_both(const ops::FakeQuantizer& rows_q, const ops::FakeQuantizer& columns_q, std::span<const float> x,
                        std::int64_t rows, std::int64_t cols, std::span<float> out, QuantContext& ctx,
                        const std::string& rows_key, const std::string& columns_key);

/// The accumulation model a recipe names (none when its `accumulate` is empty), or the model parser's error.
Result<std::optional<gemm::Model>> accumulation_model(const Recipe& recipe);

/// One operand of a product under an accumulation model: a rows x cols float32 matrix (row-major) as QGemm holds
/// it, the quantizer of its role (null: unquantized), and whether the product reads it transposed. Its 1-D blocks
/// run along the product's reduction axis either way (QGemm quantizes each operand along it); 2-D tiles lie in
/// the matrix as it is, so a transposed read turns R x C tiles into C x R.
struct ModelOperand {
  const float* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  const ops::FakeQuantizer* quantizer = nullptr;
  bool transposed = false;
};

/// out (M x N, row-major) = A B^T under ctx.accumulate through gemm::model_gemm, where A (M x K) and B^T (N x K)
/// are the operands as read by the product: each value an element with scale 1 and its role's block starts along
/// K (gemm::values_operand), C rounded to float32. Throws std::runtime_error with the engine's message.
void model_product(const ModelOperand& a, const ModelOperand& bt, float* out, const QuantContext& ctx,
                   const std::string& key);

/// Adds the counts of one quantization of x to out (count, nonzero inputs, underflows, squared error: the errors'
/// squares added in index order in double, mxlab::plain_error_sums).
void add_counts(OperandStats& s, std::span<const float> x, std::span<const float> out);

}  // namespace mxlab::train::detail
