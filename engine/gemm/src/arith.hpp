// The roundings of the models' double arithmetic: an exact value held as a pair of doubles or in a
// superaccumulator, rounded once to a format. Every format's significand has at most 24 bits (format strings
// are at most 32 bits wide), so a value first rounded to odd at 53 bits rounds to the format as the exact value
// would (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding
// to odd", IEEE TC 2008: odd rounding with p + 2 bits is innocuous for any later rounding to p bits).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "mxlab/core/exact_sum.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab::gemm::detail {

/// A format with resolved options of one rounding mode.
struct Rounder {
  Format format;
  CastOptions options;

  /// x (a double, exact) rounded to the format; NaN stays NaN (also where the format has none); zero is +0.
  double operator()(double x) const {
    if (std::isnan(x)) return x;
    const double r = format.decode(cast(format, x, options).code);
    return r == 0 ? 0.0 : r;
  }
};

Rounder make_rounder(const Format& f, Rounding r);

/// The significand of a finite double as an integer (with its implicit bit) and the weight of its bit 0.
inline std::uint64_t integer_significand(double x, int& weight) {
  const std::uint64_t b = std::bit_cast<std::uint64_t>(x) & 0x7FFFFFFFFFFFFFFFULL;
  const auto field = static_cast<int>(b >> 52);
  weight = field == 0 ? -1074 : field - 1075;
  return (b & ((std::uint64_t{1} << 52) - 1)) | (field == 0 ? 0 : std::uint64_t{1} << 52);
}

/// Significant bits of a finite double (0 for zero or a value that is not finite).
inline int significant_bits(double x) {
  if (x == 0 || !std::isfinite(x)) return 0;
  int weight = 0;
  const std::uint64_t sig = integer_significand(x, weight);
  return static_cast<int>(std::bit_width(sig)) - std::countr_zero(sig);
}

/// The exponent of the lowest set bit of a finite nonzero double.
inline int low_bit_exponent(double x) {
  int weight = 0;
  const std::uint64_t sig = integer_significand(x, weight);
  return weight + std::countr_zero(sig);
}

/// hi + lo rounded to odd at 53 bits, where hi is the nearest double to hi + lo (a two-sum or two-product).
inline double odd_from_pair(double hi, double lo) {
  if (lo == 0 || !std::isfinite(hi)) return hi;
  if ((std::bit_cast<std::uint64_t>(hi) & 1U) != 0) return hi;
  return std::nextafter(hi, lo > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity());
}

/// The exact sum x + y rounded by r (IEEE arithmetic for infinities and NaN).
inline double round_add(const Rounder& r, double x, double y) {
  const double s = x + y;
  if (!std::isfinite(s) || !std::isfinite(x) || !std::isfinite(y)) return r(s);
  const double yv = s - x;
  const double lo = (x - (s - yv)) + (y - yv);  // two-sum: s + lo == x + y exactly
  return r(odd_from_pair(s, lo));
}

/// The exact sum of finite doubles as hi + lo with hi the nearest double to it, when two levels of two-sums
/// hold it exactly (false: the caller sums exactly another way).
inline bool pair_sum(const double* x, std::size_t n, double& hi, double& lo) {
  auto two_sum = [](double a, double b, double& err) {
    const double s = a + b;
    const double bv = s - a;
    err = (a - (s - bv)) + (b - bv);
    return s;
  };
  double s = 0, e = 0, t = 0, u = 0;
  for (std::size_t i = 0; i < n; ++i) {
    s = two_sum(s, x[i], t);
    e = two_sum(e, t, u);
    if (u != 0) return false;
  }
  hi = two_sum(s, e, lo);
  return true;
}

/// The exact product x * y rounded by r.
inline double round_mul(const Rounder& r, double x, double y) {
  const double p = x * y;
  if (!std::isfinite(p) || p == 0) return r(p);
  return r(odd_from_pair(p, std::fma(x, y, -p)));
}

/// The exact value of a superaccumulator rounded by r.
double round_sum(const Rounder& r, const ExactSum& s);

/// s times a double, exactly.
ExactSum scaled(const ExactSum& s, double factor);

}  // namespace mxlab::gemm::detail
