// The reference's element step under a divisor: the correctly rounded cast of an exact quotient n / d
// (cast_quotient) and the zero-sign rule on exactly computed elements. SIMD twin: engine/kernels/src/
// block_quotient-inl.h.
#include "block_quotient.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mxlab/core/bits.hpp"
#include "mxlab/formats/codepoints.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {
namespace quantize_detail {

bool is_pow2(double d) {
  int e = 0;
  return d > 0 && std::frexp(d, &e) == 0.5;
}

/// The zero-sign rule on an exactly computed element (InputPrecision::Exact): the scaled value is zero
/// exactly when the input is.
void exact_zero_sign(const Format& e, double x, CastResult& r, const QuantOptions& o) {
  if (x != 0 || !e.has_negative_zero()) return;
  if (o.zero_sign == ZeroSign::MinusZeroPlus && std::signbit(x)) r.code = e.zero_code(false);
  if (o.zero_sign == ZeroSign::ZeroMinus) r.code = e.zero_code(true);
}

}  // namespace quantize_detail

using namespace quantize_detail;

namespace {

/// The finite values adjacent to v in the format (NaN when there is none on that side).
void adjacent_values(const Format& f, double v, double* prev, double* next) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  *prev = nan;
  *next = nan;
  const auto table = f.sorted_values();
  if (!table.empty()) {
    const auto it = std::upper_bound(table.begin(), table.end(), v,
                                     [](double x, const Format::Entry& e) { return x < e.value; });
    if (it != table.end()) *next = it->value;
    const auto lo = std::lower_bound(table.begin(), table.end(), v,
                                     [](const Format::Entry& e, double x) { return e.value < x; });
    if (lo != table.begin()) *prev = (lo - 1)->value;
    return;
  }
  // Wide formats: step on the grid around v.
  const FormatSpec& s = f.spec();
  if (s.kind == FormatKind::Integer) {
    const double step = std::ldexp(1.0, -s.frac_bits);
    if (v + step <= f.max_finite()) *next = v + step;
    if (v - step >= f.lowest()) *prev = v - step;
    return;
  }
  const int emin = min_normal_exponent(s);
  auto gap_at = [&](double a) {  // spacing of the grid just above magnitude a
    const int e = a == 0 ? emin : std::max(floor_log2(a), emin);
    return std::ldexp(1.0, e - s.mantissa_bits);
  };
  const double a = std::fabs(v);
  const double up = gap_at(a);
  // Spacing below a: the same unless a is a power of two at or above the smallest normal.
  double down = up;
  if (a != 0 && is_pow2(a) && floor_log2(a) > emin) down = up / 2;
  if (v >= 0) {
    if (v + up <= f.max_finite()) *next = v + up;
    if (a != 0) *prev = v - down;
    else if (s.is_signed) *prev = -up;
  } else {
    *next = v + down;
    if (-(a + up) >= f.lowest()) *prev = v - up;
  }
}

}  // namespace

CastResult cast_quotient(const Format& f, double n, double d, const CastOptions& o, std::uint32_t random) {
  if (!std::isfinite(n)) return cast(f, n, o, random);
  if (is_pow2(d)) {
    int e = 0;
    std::frexp(d, &e);
    double q = std::ldexp(n, 1 - e);
    if (q == 0 && n != 0) q = std::copysign(std::numeric_limits<double>::denorm_min(), n);
    return cast(f, q, o, random);
  }
  double q = n / d;
  if (std::isinf(q)) q = std::copysign(std::numeric_limits<double>::max(), n);
  if (q == 0 && n != 0) q = std::copysign(std::numeric_limits<double>::denorm_min(), n);
  // The cast of q decides like the cast of the exact n/d unless a rounding boundary lies between
  // them (|n/d - q| <= ulp(q)/2). Boundaries are format values and midpoints of neighbours; for each
  // one near q, the sign of n - b*d is found exactly with one fused multiply-add, and q is replaced by
  // b (exact quotient) or by the double next to b on the correct side.
  CastOptions nearest = o;
  nearest.rounding = Rounding::NearestEven;
  nearest.overflow = Overflow::Saturate;
  nearest.subnormals = SubnormalMode::Keep;
  const double v = f.decode(cast(f, q, nearest).code);
  double prev = 0, next = 0;
  adjacent_values(f, v, &prev, &next);
  double candidates[5] = {v, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN(),
                          std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  if (!std::isnan(next)) candidates[1] = (v + next) * 0.5;
  if (!std::isnan(prev)) candidates[2] = (prev + v) * 0.5;
  if (f.kind() != FormatKind::Codebook && (v == f.max_finite() || v == f.lowest())) {
    // The continued grid beyond the ends decides overflow: its first point and the midpoint to it.
    const FormatSpec& s = f.spec();
    const double step = s.kind == FormatKind::Integer ? std::ldexp(1.0, -s.frac_bits)
                                                      : std::ldexp(1.0, f.emax() - s.mantissa_bits);
    const double beyond = v > 0 ? v + step : v - step;
    candidates[3] = beyond;
    candidates[4] = (v + beyond) * 0.5;
  }
  const double tol = 4 * std::fabs(q) * std::numeric_limits<double>::epsilon() +
                     4 * std::numeric_limits<double>::denorm_min();
  for (double b : candidates) {
    if (std::isnan(b) || std::fabs(q - b) > tol) continue;
    const double r = std::fma(-b, d, n);  // n - b*d, rounded once: its sign is exact
    if (r == 0) {
      q = b;
    } else {
      q = std::nextafter(b, r > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity());
    }
    break;
  }
  return cast(f, q, o, random);
}

}  // namespace mxlab
