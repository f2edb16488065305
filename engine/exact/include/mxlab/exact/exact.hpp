// Ground truth in exact rational arithmetic (Boost.Multiprecision, kept out of this header): the
// exact value of every code, exact parsing of number literals, and the correctly rounded cast of any
// rational under each deterministic mode, written from docs/casting.md independently of formats/cast.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab::exact {

/// An exact rational number (value semantics). Also represents -0 (sign kept separately for zero).
class Rational {
 public:
  Rational();  ///< +0
  Rational(const Rational& other);
  Rational(Rational&& other) noexcept;
  Rational& operator=(const Rational& other);
  Rational& operator=(Rational&& other) noexcept;
  ~Rational();

  static Rational from_double(double x);  ///< exact; x must be finite
  static Rational from_int(std::int64_t k);

  bool is_zero() const;
  bool negative() const;  ///< sign bit, true also for -0
  int compare(const Rational& other) const;  ///< -1, 0, +1 (-0 == +0)

  Rational operator+(const Rational& o) const;
  Rational operator-(const Rational& o) const;
  Rational operator*(const Rational& o) const;
  Rational operator-() const;
  /// Multiplies by 2^e exactly.
  Rational ldexp(int e) const;

  /// Exact decimal text: dyadic rationals have a finite expansion ("0.0029296875", "-448", "-0");
  /// other rationals are written "p/q".
  std::string to_decimal() const;
  /// The nearest double (ties to even), with overflow to +-inf.
  double to_double() const;
  /// True when the value is a dyadic rational (denominator a power of two).
  bool is_dyadic() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }
  explicit Rational(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

/// Parses a decimal ("-1.25e-3", "7", ".5") or C99 hexadecimal ("0x1.8p+3", "-0X.Ap-1") literal exactly.
/// "nan", "inf", "-inf" are not rationals: use parse_number().
Result<Rational> parse_rational(std::string_view text);

/// A parsed input literal: a rational, or NaN / +-inf.
struct Number {
  enum class Kind { Finite, Nan, PosInf, NegInf } kind = Kind::Finite;
  Rational value;
};
Result<Number> parse_number(std::string_view text);

/// The exact value of a code that is finite (class zero, subnormal, normal, or unused-but-decodable
/// integer code), computed from the format's columns (FormatSpec), not via Format::decode.
Rational code_value(const Format& f, std::uint32_t code);

/// Correctly rounded cast of an exact value (finite) per docs/casting.md, for every deterministic
/// rounding mode (not Stochastic). `x_negative_zero` marks the input -0. Options must be resolved.
/// For formats up to 16 bits this searches the exact sorted value set; above, it uses the grid formula.
CastResult round_exact(const Format& f, const Rational& x, const CastOptions& o);

/// Rounds an exact value to a source type (f64/f32/f16/bf16) with ties to even, as a double; sets
/// `inexact` when the value was not representable. Overflow gives +-inf.
double round_to_source(const Rational& x, SourceType t, bool* inexact);

/// Exact error of a code against an exact input: value(code) - x (code must be finite).
Rational error(const Format& f, std::uint32_t code, const Rational& x);

}  // namespace mxlab::exact
