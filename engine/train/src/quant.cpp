// Internal: quantization of GEMM operands through ops and their underflow and error counts.
#include "quant.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "mxlab/ops/ops.hpp"

namespace mxlab::train::detail {

OperandStats& QuantContext::at(const std::string& key) {
  for (auto& [k, s] : stats)
    if (k == key) return s;
  stats.emplace_back(key, OperandStats{});
  return stats.back().second;
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
                      std::span<float> out, QuantContext& ctx, const std::string& key) {
  ops::Run run;
  run.threads = ctx.threads;
  auto r = f.run(x, {rows, cols}, out, run);
  if (!r) throw std::runtime_error("quantizing " + key + " with " + f.format().name + ": " + r.error().message);
  if (!ctx.collect) return;
  OperandStats& s = ctx.at(key);
  std::int64_t nonzero = 0, underflow = 0;
  double sse = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool nz = x[i] != 0.0F;
    nonzero += nz ? 1 : 0;
    underflow += (nz && out[i] == 0.0F) ? 1 : 0;
    const double e = static_cast<double>(out[i]) - static_cast<double>(x[i]);
    sse += e * e;
  }
  s.count += static_cast<std::int64_t>(x.size());
  s.nonzero += nonzero;
  s.underflow += underflow;
  s.sse += sse;
}

}  // namespace mxlab::train::detail
