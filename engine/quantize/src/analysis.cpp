// Error analysis with exact per-element errors and exact sums.
#include "mxlab/quantize/analysis.hpp"

#include <cmath>
#include <limits>

namespace mxlab {

void ErrorStats::add(double x, double deq, std::uint8_t flags) {
  if (std::isnan(deq)) {
    ++nan_outputs;
    return;
  }
  if (!std::isfinite(x) || !std::isfinite(deq)) return;
  ++count;
  if (x != 0) {
    ++nonzero_inputs;
    if (deq == 0) ++underflows;
  }
  if (flags & QuantizedTensor::kOverflow) ++saturations;
  // The error deq - x exactly, as s + t (two-sum), then its square exactly.
  const double s = deq - x;
  const double bb = s - deq;
  const double t = (deq - (s - bb)) + (-x - bb);
  sse.add_product(s, s);
  if (t != 0) {
    sse.add_product(s, t);
    sse.add_product(s, t);
    sse.add_product(t, t);
    error_sum.add(t);
  }
  error_sum.add(s);
  signal.add_square(x);
  const double ae = std::fabs(s);
  if (ae > max_abs_error) max_abs_error = ae;
  if (x != 0) {
    const double re = ae / std::fabs(x);
    if (re > max_rel_error) max_rel_error = re;
  }
}

void ErrorStats::merge(const ErrorStats& o) {
  count += o.count;
  nonzero_inputs += o.nonzero_inputs;
  underflows += o.underflows;
  saturations += o.saturations;
  nan_outputs += o.nan_outputs;
  sse.add(o.sse);
  signal.add(o.signal);
  error_sum.add(o.error_sum);
  max_abs_error = std::max(max_abs_error, o.max_abs_error);
  max_rel_error = std::max(max_rel_error, o.max_rel_error);
}

// With no finite input-output pair (every output NaN, or no elements) there is no error to average: the
// metrics are NaN, never the perfect score 0 / +inf.
double ErrorStats::mse() const {
  return count ? sse.to_double() / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
}
double ErrorStats::rmse() const { return std::sqrt(mse()); }
double ErrorStats::sqnr_db() const {
  if (count == 0) return std::numeric_limits<double>::quiet_NaN();
  const double e = sse.to_double();
  if (e == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal.to_double() / e);
}
double ErrorStats::underflow_ratio() const {
  return nonzero_inputs ? static_cast<double>(underflows) / static_cast<double>(nonzero_inputs) : 0.0;
}
double ErrorStats::saturation_ratio() const {
  return count ? static_cast<double>(saturations) / static_cast<double>(count) : 0.0;
}

Analysis analyze(const BlockFormat& f, std::span<const double> x, const QuantizedTensor& q) {
  Analysis a;
  std::int64_t n = 1;
  for (auto d : q.shape) n *= d;
  a.bits_per_element = f.stored_bits_per_element(q.shape);
  std::vector<std::int64_t> block_of;
  if (f.layout.scale) {
    block_of = BlockIndexer(q.shape, f.layout).block_of_all();
    a.blocks.resize(q.scale_codes.size());
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double d = q.values[i];
    const std::uint8_t fl = q.flags.empty() ? 0 : q.flags[i];
    a.total.add(v, d, fl);
    if (f.layout.scale) {
      const auto b = static_cast<std::size_t>(block_of[i]);
      a.blocks[b].add(v, d, fl);
      if (std::isfinite(v) && v != 0 && q.block_amax[b] > 0) {
        const int g = floor_log2(q.block_amax[b]) - floor_log2(v);
        ++a.gap_histogram[g];
        a.by_gap[g].add(v, d, fl);
      }
    }
  }
  return a;
}

void for_each_block(const BlockFormat& f, std::span<const double> x, const QuantizedTensor& q,
                    const std::function<bool(std::size_t block, const ErrorStats& stats)>& visit) {
  if (!f.layout.scale) return;
  const std::vector<std::int64_t> block_of = BlockIndexer(q.shape, f.layout).block_of_all();
  const std::size_t blocks = q.scale_codes.size();
  // The elements of every block, in element order (a counting sort by block): start[b] .. start[b + 1].
  std::vector<std::size_t> start(blocks + 1, 0);
  for (auto b : block_of) ++start[static_cast<std::size_t>(b) + 1];
  for (std::size_t b = 0; b < blocks; ++b) start[b + 1] += start[b];
  std::vector<std::size_t> order(x.size());
  {
    std::vector<std::size_t> next(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < x.size(); ++i) order[next[static_cast<std::size_t>(block_of[i])]++] = i;
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    ErrorStats s;
    for (std::size_t k = start[b]; k < start[b + 1]; ++k) {
      const std::size_t i = order[k];
      s.add(x[i], q.values[i], q.flags.empty() ? 0 : q.flags[i]);
    }
    if (!visit(b, s)) return;
  }
}

}  // namespace mxlab
