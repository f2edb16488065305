// Internal: quantization of GEMM operands through ops and their underflow and error counts.
#include "quant.hpp"

#include <algorithm>
#include <utility>
#include <cmath>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "mxlab/gemm/gemm.hpp"
#include "mxlab/kernels/error_sums.hpp"
#include "mxlab/ops/ops.hpp"

namespace mxlab::train::detail {

OperandStats& QuantContext::at(const std::string& key) {
  if (log != nullptr) return log->emplace_back(key, OperandStats{}).second;
  for (auto& [k, s] : stats)
    if (k == key) return s;
  stats.emplace_back(key, OperandStats{});
  return stats.back().second;
}

void QuantContext::replay(const std::deque<std::pair<std::string, OperandStats>>& unit_log) {
  for (const auto& [key, e] : unit_log) {
    OperandStats& s = at(key);
    s.count += e.count;
    s.nonzero += e.nonzero;
    s.underflow += e.underflow;
    s.sse += e.sse;  // the entry's sse is its call's sum itself (0 + sum): the same additions as one thread's
    s.saturated += e.saturated;
    if (e.delayed) s.delayed = true, s.scale = e.scale;
  }
}

AmaxHistory* QuantContext::delayed_state(const std::string& key) const {
  if (delayed == nullptr) return nullptr;
  for (auto& [k, h] : *delayed)
    if (k == key) return &h;
  return nullptr;
}

void round_nongemm(std::span<float> x, std::int64_t rows, std::int64_t cols, QuantContext& ctx) {
  if (ctx.nongemm == nullptr || x.empty()) return;
  thread_local std::vector<float> buf;
  buf.resize(x.size());
  ops::Run run;
  run.threads = ctx.threads;
  auto r = ctx.nongemm->run(x, {rows, cols}, buf, run);
  if (!r) throw std::runtime_error("rounding a non-GEMM output with " + ctx.nongemm->format().name + ": " + r.error().message);
  std::copy(buf.begin(), buf.end(), x.begin());
}

void quantize_operand(const ops::FakeQuantizer& f, std::span<const float> x, std::int64_t rows, std::int64_t cols,
                      std::span<float> out, QuantContext& ctx, const std::string& key, bool columns) {
  ops::Run run;
  run.threads = ctx.threads;
  auto quantize = [&](std::span<const float> in) {
    return columns ? f.run_columns(in, rows, cols, out, run) : f.run(in, {rows, cols}, out, run);
  };
  AmaxHistory* delayed = ctx.delayed_state(key);
  std::int64_t saturated = 0;
  if (delayed != nullptr) {
    auto r = delayed_cast(f, x, rows, cols, out, *delayed, ctx.training, run, columns);
    if (!r) throw std::runtime_error("quantizing " + key + " with " + f.format().name + ": " + r.error().message);
    saturated = *r;
  } else {
    auto r = quantize(x);
    if (!r) throw std::runtime_error("quantizing " + key + " with " + f.format().name + ": " + r.error().message);
  }
  if (!ctx.collect) return;
  OperandStats& s = ctx.at(key);
  if (delayed != nullptr) {
    s.delayed = true;
    s.saturated += saturated;
    s.scale = delayed->scale();
  }
  add_counts(s, x, out);
}

void quantize_rows_and_columns(const ops::FakeQuantizer& rows_q, const ops::FakeQuantizer& columns_q,
                               std::span<const float> x, std::int64_t rows, std::int64_t cols, std::span<float> out_rows,
                               std::span<float> out_columns, QuantContext& ctx, const std::string& rows_key,
                               const std::string& columns_key) {
  if (ctx.delayed_state(rows_key) != nullptr || ctx.delayed_state(columns_key) != nullptr) {
    quantize_operand(rows_q, x, rows, cols, out_rows, ctx, rows_key);
    quantize_operand(columns_q, x, rows, cols, out_columns, ctx, columns_key, true);
    return;
  }
  ops::Run run;
  run.threads = ctx.threads;
  auto r = rows_q.run_rows_and_columns(x, rows, cols, out_rows, columns_q, out_columns, run);
  if (!r)
    throw std::runtime_error("quantizing " + rows_key + " with " + rows_q.format().name + " and " + columns_key +
                             " with " + columns_q.format().name + ": " + r.error().message);
  if (!ctx.collect) return;
  add_counts(ctx.at(rows_key), x, out_rows);
  add_counts(ctx.at(columns_key), x, out_columns);
}

Result<std::optional<gemm::Model>> accumulation_model(const Recipe& recipe) {
  if (recipe.accumulate.empty()) return std::optional<gemm::Model>{};
  auto m = gemm::parse_model(recipe.accumulate);
  if (!m) return make_error("recipe '" + recipe.name + "', accumulate: " + m.error().message);
  return std::optional<gemm::Model>(std::move(*m));
}

void model_product(const ModelOperand& a, const ModelOperand& bt, float* out, const QuantContext& ctx,
                   const std::string& key) {
  const auto values = [](const ModelOperand& op) {
    return gemm::ValuesMatrix{op.data, op.rows, op.cols, op.quantizer != nullptr ? &op.quantizer->format() : nullptr,
                              op.transposed};
  };
  auto c = gemm::values_product(*ctx.accumulate, values(a), values(bt), ctx.threads);
  if (!c) throw std::runtime_error("the product " + key + " under model '" + ctx.accumulate->name + "': " + c.error().message);
  std::copy(c->begin(), c->end(), out);
}

void add_counts(OperandStats& s, std::span<const float> x, std::span<const float> out) {
  const PlainErrorSums e = plain_error_sums(x, out);
  s.count += static_cast<std::int64_t>(x.size());
  s.nonzero += e.nonzero;
  s.underflow += e.underflow;
  s.sse += e.sse;
}

bool one_delayed_cast(const ops::FakeQuantizer& rows_q, const ops::FakeQuantizer& columns_q, const QuantContext& ctx,
                      const std::string& rows_key, const std::string& columns_key) {
  const AmaxHistory* rows_state = ctx.delayed_state(rows_key);
  const AmaxHistory* columns_state = ctx.delayed_state(columns_key);
  if (rows_state == nullptr || columns_state == nullptr) return false;
  const BlockFormat& f = rows_q.format();
  const BlockFormat& g = columns_q.format();
  return f.name == g.name && f.options.element.overflow == g.options.element.overflow && !f.layout.scale &&
         f.layout.sparse_m == 0 && f.options.element.rounding != Rounding::Stochastic &&
         rows_state->scale() == columns_state->scale();
}

bool delayed_cast_both(const ops::FakeQuantizer& rows_q, const ops::FakeQuantizer& columns_q, std::span<const float> x,
                       std::int64_t rows, std::int64_t cols, std::span<float> out, QuantContext& ctx,
                       const std::string& rows_key, const std::string& columns_key) {
  if (!one_delayed_cast(rows_q, columns_q, ctx, rows_key, columns_key)) return false;
  AmaxHistory* rows_state = ctx.delayed_state(rows_key);
  AmaxHistory* columns_state = ctx.delayed_state(columns_key);
  const BlockFormat& f = rows_q.format();
  ops::Run run;
  run.threads = ctx.threads;
  float amax = 0;
  auto r = delayed_cast(rows_q, x, rows, cols, out, *rows_state, ctx.training, run, false, &amax);
  if (!r) throw std::runtime_error("quantizing " + rows_key + " with " + f.name + ": " + r.error().message);
  if (ctx.training) columns_state->record(amax);
  if (ctx.collect)
    for (const auto& [key, state] : {std::pair{&rows_key, rows_state}, std::pair{&columns_key, columns_state}}) {
      OperandStats& s = ctx.at(*key);
      s.delayed = true;
      s.saturated += *r;
      s.scale = state->scale();
      add_counts(s, x, out);
    }
  return true;
}

bool quantize_once_both(const ops::FakeQuantizer& rows_q, const ops::FakeQuantizer& columns_q, std::span<const float> x,
                        std::int64_t rows, std::int64_t cols, std::span<float> out, QuantContext& ctx,
                        const std::string& rows_key, const std::string& columns_key) {
  if (ctx.delayed_state(rows_key) != nullptr || ctx.delayed_state(columns_key) != nullptr ||
      !rows_q.same_values(columns_q))
    return false;
  quantize_operand(rows_q, x, rows, cols, out, ctx, rows_key);
  if (ctx.collect) add_counts(ctx.at(columns_key), x, out);
  return true;
}

}  // namespace mxlab::train::detail
