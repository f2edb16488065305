// Ground truth in exact rational arithmetic (Boost.Multiprecision, kept out of this header): the
// exact value of every code, exact parsing of number literals, and the correctly rounded cast of any
// rational per docs/casting.md, written from that text independently of formats/cast.cpp.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/exact_sum.hpp"
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

  static Rational from_double(double x);  ///< exact, -0 kept; throws std::domain_error for NaN and inf
  static Rational from_int(std::int64_t k);
  static Rational pow2(int e);  ///< 2^e exactly

  bool is_zero() const;
  bool negative() const;  ///< sign bit, true also for -0
  int compare(const Rational& other) const;  ///< -1, 0, +1 (-0 == +0)
  friend bool operator==(const Rational& a, const Rational& b) { return a.compare(b) == 0; }
  friend std::weak_ordering operator<=>(const Rational& a, const Rational& b) {
    const int c = a.compare(b);
    return c < 0 ? std::weak_ordering::less : (c > 0 ? std::weak_ordering::greater : std::weak_ordering::equivalent);
  }

  // Arithmetic is exact; a zero result is -0 where IEEE 754 round-to-nearest gives -0.
  Rational operator+(const Rational& o) const;
  Rational operator-(const Rational& o) const;
  Rational operator*(const Rational& o) const;
  Rational operator/(const Rational& o) const;  ///< throws std::domain_error for a zero divisor
  Rational operator-() const;
  Rational abs() const;
  /// Multiplies by 2^e exactly.
  Rational ldexp(int e) const;
  /// floor(log2 |x|) for nonzero x (exact also for non-dyadic values); throws for zero.
  int ilog2() const;

  /// Exact decimal text: dyadic rationals have a finite expansion ("0.0029296875", "-448", "-0");
  /// other rationals are written "p/q".
  std::string to_decimal() const;
  /// The nearest double (ties to even), with overflow to +-inf; the sign of zero is kept.
  double to_double() const;
  /// True when the value is a dyadic rational (denominator a power of two).
  bool is_dyadic() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }
  explicit Rational(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

/// The exact value of a superaccumulator's parts: (-1)^negative * sum(limbs[i] * 2^(32 i)) * 2^exponent.
Rational from_parts(const ExactSum::Parts& parts);

/// Parses a decimal ("-1.25e-3", "7", ".5", "1e400") or C99 hexadecimal ("0x1.8p+3", "-0X.Ap-1",
/// "0x1p-1074") literal exactly (no strtod). "nan", "inf", "-inf" are not rationals: use parse_number().
Result<Rational> parse_rational(std::string_view text);

/// A number as a cast sees it: a rational, or NaN / +-inf.
struct Number {
  enum class Kind : std::uint8_t { Finite, Nan, PosInf, NegInf };
  Kind kind = Kind::Finite;
  Rational value;              ///< the value of a finite number (sign of zero kept)
  bool nan_negative = false;   ///< the sign bit of a NaN

  static Number finite(Rational v);
  static Number from_double(double x);  ///< any double, NaN and inf included
  bool negative() const;  ///< the sign bit (of the value, of the NaN, or NegInf)
  bool is_finite() const { return kind == Kind::Finite; }
};

/// Parses what parse_rational() accepts, and "nan", "inf", "+inf", "-inf", "infinity" (any case,
/// NaN with an optional sign).
Result<Number> parse_number(std::string_view text);

/// What a code means, read from the format's columns (FormatSpec), not via Format::decode.
struct CodeInfo {
  Number number;           ///< the exact value, or NaN / inf
  bool subnormal = false;  ///< a float code with exponent field 0 (of the re-read field, if any) and mantissa != 0
  bool unused = false;     ///< the most negative code of a symmetric integer: it decodes, a cast never produces it
};
CodeInfo code_info(const Format& f, std::uint32_t code);

/// The exact value of a code that is finite (class zero, subnormal, normal, or unused-but-decodable
/// integer code), computed from the format's columns; throws std::domain_error for NaN and inf codes.
Rational code_value(const Format& f, std::uint32_t code);

/// Exact error of a code against an exact input: value(code) - x (code must be finite).
Rational error(const Format& f, std::uint32_t code, const Rational& x);

/// Where an input lies relative to a format's values: everything the steps of docs/casting.md need,
/// before any option is applied, so one placement serves every rounding mode and policy.
struct Placement {
  enum class Kind : std::uint8_t { Nan, Inf, Finite };
  /// A value of the format next to the input, or a point of the continued grid beyond +-max.
  struct Neighbour {
    std::uint32_t code = 0;  ///< its code (for a zero: the zero of the input's sign where it exists)
    bool odd = false;        ///< the code's last bit (continued points: opposite of their finite neighbour)
    bool beyond = false;     ///< a continued-grid point past +-max (no code)
    bool zero = false;
    bool subnormal = false;
  };
  Kind kind = Kind::Finite;
  bool negative = false;       ///< the input's sign bit
  bool zero = false;           ///< the input is +-0
  bool exact = false;          ///< the input is a value of the format, whose code is tz.code
  bool clamp = false;          ///< codebooks: the input lies past an end value (tz)
  bool below_smallest = false; ///< a format without zero: the input lies below its smallest value (tz)
  Neighbour tz;                ///< the neighbour toward zero
  Neighbour az;                ///< the neighbour away from zero
  int half = 0;                ///< |x - tz| against |az - tz| / 2: -1, 0, +1
  bool has_fraction = false;   ///< t32 is set
  std::uint64_t t32 = 0;       ///< floor(d * 2^32), d = |x - tz| / |az - tz| (codebooks: d computed in double)
  /// Nonzero |x| below the smallest normal of each SourceType (indexed by its value): the flush-input test.
  std::array<bool, 4> below_source_normal{};
};

/// The exact value set of a format and the casting rules of docs/casting.md applied to it.
class Oracle {
 public:
  /// Table: the sorted exact values of every code (formats up to 16 bits). Grid: the binade formula
  /// (floats without a re-read exponent field 0, and integers; any width). Auto: Table up to 16 bits.
  enum class Path : std::uint8_t { Auto, Table, Grid };
  /// Throws std::invalid_argument when the path cannot serve the format.
  explicit Oracle(const Format& f, Path path = Path::Auto);

  const Format& format() const;
  Path path() const;  ///< Table or Grid

  struct Value {
    Rational value;
    std::uint32_t code;
  };
  /// Table path: the finite codes (unused integer code excluded) in ascending order of value, -0 before +0.
  const std::vector<Value>& values() const;

  /// Derived quantities read off the enumerated values (Table path).
  struct Properties {
    Rational max_finite;
    Rational lowest;
    Rational min_normal;    ///< smallest positive value whose code is not subnormal
    Rational min_positive;  ///< smallest positive value (0 if there is none)
    int emax = 0;           ///< floor(log2) of the largest magnitude (floats, integers: of max_finite)
    std::uint64_t finite_count = 0;
  };
  Properties properties() const;

  /// The canonical NaN code of this sign (docs/casting.md step 1); requires a NaN.
  std::uint32_t nan_code(bool negative) const;
  /// The largest finite value beyond which the grid continues, and the first continued point
  /// (floats, integers), or the largest codebook value (then `continued` equals it).
  Rational max_value() const;
  Rational continued_point() const;

  Placement place(const Number& x, bool with_fraction = false) const;
  Placement place(double x, bool with_fraction = false) const;
  /// Applies the options (resolved, or Overflow::Default) to a placement; `random` is the 32-bit word of
  /// stochastic rounding, which needs a placement made with_fraction.
  CastResult round(const Placement& p, const CastOptions& o, std::uint32_t random = 0) const;
  CastResult round(const Number& x, const CastOptions& o, std::uint32_t random = 0) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

/// Correctly rounded cast of an exact value per docs/casting.md, for every deterministic rounding
/// mode (not Stochastic). Options are resolved here (Overflow::Default). For formats up to 16 bits this
/// searches the exact sorted value set; above, it uses the grid formula.
CastResult round_exact(const Format& f, const Rational& x, const CastOptions& o);
/// As above for any number (NaN, inf included) and every rounding mode; `random` drives Stochastic.
CastResult round_exact(const Format& f, const Number& x, const CastOptions& o, std::uint32_t random = 0);

/// Rounds an exact value to a source type (f64/f32/f16/bf16) with ties to even, as a double; sets
/// `inexact` (if not null) when the value was not representable. Overflow gives +-inf.
double round_to_source(const Rational& x, SourceType t, bool* inexact);

}  // namespace mxlab::exact
