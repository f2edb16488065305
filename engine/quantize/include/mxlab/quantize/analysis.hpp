// Error analysis of a quantized tensor against its input: exact per-element errors, exact sums,
// underflow / saturation / NaN counts, storage cost, and the exponent-gap histogram of seed 003.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "mxlab/core/exact_sum.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

/// Error totals over a set of elements. Sums are exact (ExactSum); the doubles are their roundings.
struct ErrorStats {
  std::int64_t count = 0;          ///< finite inputs with finite outputs
  std::int64_t nonzero_inputs = 0;
  std::int64_t underflows = 0;     ///< nonzero inputs that became zero
  std::int64_t saturations = 0;    ///< elements whose cast overflowed (clamped or special)
  std::int64_t nan_outputs = 0;    ///< outputs that are NaN
  ExactSum sse;                    ///< sum of squared errors, exact
  ExactSum signal;                 ///< sum of squared inputs, exact
  ExactSum error_sum;              ///< sum of signed errors, exact (bias)
  double max_abs_error = 0;
  double max_rel_error = 0;        ///< over nonzero inputs, |e| / |x| in double

  void add(double x, double deq, std::uint8_t flags);
  void merge(const ErrorStats& o);
  double mse() const;              ///< sse / count; NaN when count is 0 (every output NaN)
  double rmse() const;
  double sqnr_db() const;          ///< 10 log10(signal / sse); +inf when sse is 0; NaN when count is 0
  double underflow_ratio() const;  ///< underflows / nonzero inputs
  double saturation_ratio() const; ///< saturations / count
};

struct Analysis {
  ErrorStats total;
  std::vector<ErrorStats> blocks;             ///< per block (row-major over the block grid)
  /// Exponent gap g = floor(log2 amax_block) - floor(log2 |x|) of nonzero finite inputs (seed 003 Fig. 1a).
  std::map<int, std::int64_t> gap_histogram;
  std::map<int, ErrorStats> by_gap;           ///< errors of the elements at each gap
  double bits_per_element = 0;
};

/// Analyzes q (from quantize(f, x, shape)) against x.
Analysis analyze(const BlockFormat& f, std::span<const double> x, const QuantizedTensor& q);

/// Each block's error totals, in block order (row-major over the block grid), handed to `visit` one at a time
/// (the same figures as analyze's Analysis::blocks, in memory that does not grow with the number of blocks
/// beyond two indexes per element). Stops early when `visit` returns false; f must have block scales.
void for_each_block(const BlockFormat& f, std::span<const double> x, const QuantizedTensor& q,
                    const std::function<bool(std::size_t block, const ErrorStats& stats)>& visit);

}  // namespace mxlab
