// The error counts of a quantized copy as a plain loop over its elements gives them (the trainer's operand
// metrics, engine/train): nonzero inputs, underflows and the squared errors added in index order.
#pragma once

#include <cstdint>
#include <span>

namespace mxlab {

/// Counts of out against x: nonzero is the number of x[i] != 0, underflow of those with out[i] == 0, and sse
/// the squared errors e = double(out[i]) - double(x[i]), e * e, added from 0 one at a time in index order
/// (difference, square and each sum rounded to double): bit for bit the sum of that plain loop.
struct PlainErrorSums {
  std::int64_t nonzero = 0;
  std::int64_t underflow = 0;
  double sse = 0;
};

/// PlainErrorSums of out against x (out has at least x.size() values), as a SIMD kernel on the best target the
/// CPU supports: the sum runs a chunk of terms at a time where that gives the plain loop's value (error_sums.cpp).
PlainErrorSums plain_error_sums(std::span<const float> x, std::span<const float> out);

}  // namespace mxlab
