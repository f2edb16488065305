// Exact worst-case quantization error of a block format at each exponent gap (docs/bounds.md).
//
// A block with largest magnitude amax has shared exponent S_e = floor(log2 amax); an element x != 0
// has gap g = S_e - floor(log2 |x|). The bound at gap g is the supremum of |q(x) - x| (in units of
// 2^S_e) and of |q(x) - x| / |x| over every admissible pair: amax in [1, 2), x in [2^-g, 2^(1-g)),
// |x| <= amax, with q computed as mxlab::quantize does. Two independent computations are offered:
// closed forms derived from the format's columns and the scale rule, and a brute-force walk over
// every element code and rounding boundary that evaluates the reference quantizer. They must agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::exact {

/// The worst case at one exponent gap.
struct GapBound {
  int gap = 0;
  Rational max_abs;             ///< sup |q(x) - x| / 2^S_e
  Rational max_rel;             ///< sup |q(x) - x| / |x|
  bool abs_attained = false;    ///< some admissible x reaches max_abs (else it is only approached)
  bool rel_attained = false;    ///< some admissible x reaches max_rel
  bool full_underflow = false;  ///< every admissible x at this gap quantizes to zero
  double max_abs_f64 = 0;       ///< max_abs rounded to double
  double max_rel_f64 = 0;       ///< max_rel rounded to double
  /// Enumeration only: samples at which the reference quantizer contradicted the piecewise-constant
  /// rounding between consecutive boundaries, the sign symmetry q(-x) = -q(x), or the block scale of
  /// the amax piece. Always 0 for a correct quantizer (and for analytic bounds).
  std::int64_t inconsistent_samples = 0;
};

/// One interval of amax in [1, 2) over which the block scale is constant.
struct ScalePiece {
  Rational scale;  ///< block scale times tensor scale (g = 1), in units of 2^S_e
  Rational amax_lo;
  Rational amax_hi;
  bool lo_closed = true;
  bool hi_closed = false;
};

/// Checks that the bound is defined for the format's options: a block scale, deterministic
/// round-to-nearest elements that saturate, no flushing, no N:M sparsity, a power-of-two rule other
/// than 4over6 or the amax rule with a scale format of at most 16 bits; elements of at most 16 bits
/// that are floats (optionally with a re-read exponent field 0) or signed symmetric integers. The error
/// names the first unsupported choice.
std::optional<Error> check_bounds_support(const BlockFormat& f);

/// The scale pieces derived from the rule's definition (analytic) ...
Result<std::vector<ScalePiece>> analytic_scale_pieces(const BlockFormat& f);
/// ... and found by evaluating the reference quantizer on either side of every candidate breakpoint.
Result<std::vector<ScalePiece>> enumerated_scale_pieces(const BlockFormat& f);

/// Closed-form bounds for gaps 0..max_gap (docs/bounds.md).
Result<std::vector<GapBound>> analytic_bounds(const BlockFormat& f, int max_gap);
/// Exhaustive bounds for gaps 0..max_gap: every element code and rounding boundary of every scale
/// piece, errors exact at all piece endpoints, q from mxlab::quantize at samples inside every piece.
Result<std::vector<GapBound>> enumerated_bounds(const BlockFormat& f, int max_gap);

/// The first gap from which every admissible x quantizes to zero (relative error 1 from there on).
Result<int> full_underflow_gap(const BlockFormat& f);

/// Largest gap the functions accept.
inline constexpr int kMaxBoundGap = 512;

/// Equal exact values and equal flags (attained, full underflow); inconsistent samples must be 0.
bool same_bound(const GapBound& a, const GapBound& b);

/// Exact text of a nonnegative rational: "2^k" for powers of two (and "1", "0"), else the exact
/// decimal of Rational::to_decimal ("0.0234375", "1/65").
std::string exact_text(const Rational& x);

/// The comparison table of two block formats, one row per gap 0..max_gap (max_gap < 0: the larger
/// full-underflow gap of the two): exact and double bounds of A and B, which is smaller, whether each
/// supremum is attained, and whether the analytic and enumerated bounds agree.
Result<Table> bounds_table(const BlockFormat& a, const BlockFormat& b, int max_gap = -1);

}  // namespace mxlab::exact
