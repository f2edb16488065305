// The reference's power-of-two scale rules (block_scale.cpp; scale_exponent itself is declared in
// mxlab/quantize/quantize.hpp). Internal to engine/quantize.
#pragma once

#include <limits>

#include "mxlab/quantize/block_format.hpp"

namespace mxlab::quantize_detail {

constexpr int kMinusInfExponent = std::numeric_limits<int>::min() / 4;  // log2(0): clamps to the smallest scale
constexpr int kPlusInfExponent = std::numeric_limits<int>::max() / 4;   // log2(inf): clamps to the largest

/// A block's largest finite magnitude and whether it holds NaN or Inf.
struct BlockStats {
  double amax = 0;  // over finite values
  bool nan = false;
  bool inf = false;
};

/// fl32(log2 a), the float32 rounding of the double log2 (AmaxLog2::Float32).
float fl32_log2(float a);

/// floor(v) as an integer; -inf and +inf give kMinusInfExponent and kPlusInfExponent.
int floor_to_int(float v);

/// floor(log2 a) for a > 0 under the reading m.
int floor_of(double a, AmaxLog2 m);

/// Scale exponent of a block whose amax is infinite (policies that let Inf into the amax).
int infinite_amax_exponent(const Format& element, const QuantOptions& o);

/// Whether a block's amax counts as below the FP32 normal range under the reading that picks the scale.
bool amax_below_normal(double amax, const QuantOptions& o);

}  // namespace mxlab::quantize_detail
