// Internal to the exact module: the Boost-backed representation of Rational and the few exact
// primitives the oracle is built from (splitting a value at a power-of-two scale, rounding to binary).
#pragma once

#include <boost/multiprecision/cpp_int.hpp>
#include <cstdint>

#include "mxlab/exact/exact.hpp"

namespace mxlab::exact {

namespace mp = boost::multiprecision;
using Int = mp::cpp_int;
using Rat = mp::cpp_rational;

struct Rational::Impl {
  Rat v;
  bool negative_zero = false;  // only meaningful when v == 0
};

namespace detail {

/// A nonnegative exact value num * 2^exp2 / den with num and den odd (num == 0 for zero), den >= 1.
/// Keeping the power of two apart makes the common dyadic case (den == 1) cheap: values of FP32 or
/// double inputs stay a few limbs wide however large or small their exponent.
struct Mag {
  Int num;
  Int den{1};
  int exp2 = 0;
  bool is_zero() const { return num.is_zero(); }
};

/// A signed exact value (sign bit kept for zero).
struct Exact {
  bool negative = false;
  Mag mag;
};

Mag mag_from_u64(std::uint64_t m, int e);  ///< m * 2^e
Exact exact_from_double(double x);          ///< finite x
Exact exact_from_rat(const Rat& v, bool negative_zero);
Exact exact_of(const Rational& x);
Rat to_rat(const Mag& m);
Rat to_rat(const Exact& x);
Rational to_rational(const Exact& x);

/// floor(log2 m) for nonzero m.
int ilog2(const Mag& m);

/// m * 2^s = n + f with integer n >= 0 and 0 <= f < 1.
struct Split {
  Int n;
  bool frac = false;  ///< f != 0
  int half = -1;      ///< f against 1/2: -1 (also for f == 0), 0, +1
};
Split split(const Mag& m, int s);
/// floor(f * 2^32) for the f of split(m, s).
std::uint64_t fraction_t32(const Mag& m, int s);

/// Rounds to the binary format with `mant_bits` stored mantissa bits, smallest normal exponent
/// `emin` and largest exponent `emax` (ties to even, gradual underflow, overflow to inf), returned
/// as a double: every such format here (f64, f32, f16, bf16) is a subset of binary64.
double round_binary(const Exact& x, int mant_bits, int emin, int emax, bool* inexact);

}  // namespace detail
}  // namespace mxlab::exact
