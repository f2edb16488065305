// Exact parsing of number literals: decimal and C99 hexadecimal floating-point text become rationals
// digit by digit (no strtod, so nothing is rounded); nan and inf are recognised by parse_number().
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "exact_detail.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/core/text.hpp"

namespace mxlab::exact {
namespace {

// Written exponents beyond this would build integers of hundreds of thousands of digits: they are
// refused rather than computed (a double's range needs |e| <= 1074 in either base).
constexpr long kMaxExponent = 100000;

// Significand digits beyond this are refused: far more than any cast needs (a double's exact decimal
// expansion has at most 767 significant digits), and the big-integer work stays bounded.
constexpr std::size_t kMaxDigits = 100000;

Error number_error(std::string_view text, const std::string& what) {
  return make_error("number " + quote_input(text) + ": " + what);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<Rational> parse_rational(std::string_view text_in) {
  const std::string_view text = trim(text_in);
  if (text.empty()) return number_error(text_in, "empty text, expected a number");
  std::size_t i = 0;
  bool negative = false;
  if (text[i] == '+' || text[i] == '-') {
    negative = text[i] == '-';
    ++i;
  }
  {
    const std::string rest = lower(text.substr(i));
    if (rest == "nan" || rest == "inf" || rest == "infinity")
      return number_error(text_in, "not a finite number (NaN and infinity are not rationals)");
  }
  const bool hex = i + 1 < text.size() && text[i] == '0' && (text[i + 1] == 'x' || text[i + 1] == 'X');
  if (hex) i += 2;
  const int base = hex ? 16 : 10;
  auto digit = [&](char c) { return hex ? hex_digit(c) : (c >= '0' && c <= '9' ? c - '0' : -1); };

  // Significand: digits, optional point, digits; the value is mant * base^-frac_digits.
  // Digits are gathered 15 at a time in a machine word, so the work is linear in the length per big step
  // rather than one big multiplication per digit.
  Int mant = 0;
  long frac_digits = 0;
  std::size_t digits = 0;
  bool point = false;
  std::uint64_t chunk = 0, chunk_scale = 1;
  int chunk_digits = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (point) return number_error(text_in, "a second '.' at position " + std::to_string(i + 1));
      point = true;
      continue;
    }
    const int d = digit(c);
    if (d < 0) break;
    chunk = chunk * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
    chunk_scale *= static_cast<std::uint64_t>(base);
    if (++chunk_digits == 15) {
      mant = mant * chunk_scale + chunk;
      chunk = 0, chunk_scale = 1, chunk_digits = 0;
    }
    if (++digits > kMaxDigits)
      return number_error(text_in, "more than " + std::to_string(kMaxDigits) + " digits");
    if (point) ++frac_digits;
  }
  if (chunk_digits > 0) mant = mant * chunk_scale + chunk;
  if (digits == 0)
    return number_error(text_in, hex ? "no hexadecimal digits after '0x'" : "no digits in the significand");

  // Exponent: 'e' (power of 10) for decimal, 'p' (power of 2) for hexadecimal, as in C99.
  long exponent = 0;
  if (i < text.size()) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    const char marker = hex ? 'p' : 'e';
    if (c != marker) {
      return number_error(text_in, "unexpected character '" + std::string(1, text[i]) + "' at position " +
                                       std::to_string(i + 1));
    }
    ++i;
    bool exp_negative = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
      exp_negative = text[i] == '-';
      ++i;
    }
    std::size_t exp_digits = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      exponent = exponent * 10 + (text[i] - '0');
      ++exp_digits;
      if (exponent > kMaxExponent)
        return number_error(text_in, "exponent out of range (at most " + std::to_string(kMaxExponent) +
                                         " in magnitude)");
    }
    if (exp_digits == 0)
      return number_error(text_in, std::string("the exponent after '") + marker + "' has no digits");
    if (i < text.size()) {
      return number_error(text_in, "unexpected character '" + std::string(1, text[i]) + "' at position " +
                                       std::to_string(i + 1));
    }
    if (exp_negative) exponent = -exponent;
  }

  Rat v;
  if (hex) {
    const long e2 = exponent - 4 * frac_digits;
    v = e2 >= 0 ? Rat(mant << e2) : Rat(mant, Int(1) << -e2);
  } else {
    const long e10 = exponent - frac_digits;
    const Int scale = mp::pow(Int(10), static_cast<unsigned>(e10 >= 0 ? e10 : -e10));
    v = e10 >= 0 ? Rat(mant * scale) : Rat(mant, scale);
  }
  auto impl = std::make_unique<Rational::Impl>();
  impl->negative_zero = negative && v.is_zero();
  impl->v = negative ? Rat(-v) : v;
  return Rational(std::move(impl));
}

Number Number::finite(Rational v) {
  Number n;
  n.value = std::move(v);
  return n;
}

Number Number::from_double(double x) {
  Number n;
  if (x != x) {
    n.kind = Kind::Nan;
    n.nan_negative = std::signbit(x);
  } else if (x == std::numeric_limits<double>::infinity()) {
    n.kind = Kind::PosInf;
  } else if (x == -std::numeric_limits<double>::infinity()) {
    n.kind = Kind::NegInf;
  } else {
    n.value = Rational::from_double(x);
  }
  return n;
}

bool Number::negative() const {
  switch (kind) {
    case Kind::Finite: return value.negative();
    case Kind::Nan: return nan_negative;
    case Kind::PosInf: return false;
    case Kind::NegInf: return true;
  }
  return false;
}

Result<Number> parse_number(std::string_view text_in) {
  const std::string key = lower(trim(text_in));
  std::string_view body = key;
  bool negative = false;
  if (!body.empty() && (body.front() == '+' || body.front() == '-')) {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  Number n;
  if (body == "nan") {
    n.kind = Number::Kind::Nan;
    n.nan_negative = negative;
    return n;
  }
  if (body == "inf" || body == "infinity") {
    n.kind = negative ? Number::Kind::NegInf : Number::Kind::PosInf;
    return n;
  }
  auto r = parse_rational(text_in);
  if (!r) return r.error();
  n.value = std::move(*r);
  return n;
}

}  // namespace mxlab::exact
