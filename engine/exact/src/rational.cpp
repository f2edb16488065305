// Exact rationals with a signed zero, their decimal text, and correctly rounded conversion to the
// binary source types (IEEE 754 roundTiesToEven with gradual underflow and overflow to infinity).
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "exact_detail.hpp"

namespace mxlab::exact {
namespace detail {

Mag mag_from_u64(std::uint64_t m, int e) {
  Mag r;
  if (m == 0) return r;
  const int tz = std::countr_zero(m);
  r.num = m >> tz;
  r.exp2 = e + tz;
  return r;
}

Exact exact_from_double(double x) {
  // IEEE 754 binary64: biased exponent 0 holds the subnormals m * 2^-1074.
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  if (biased == 0x7FF) throw std::domain_error("exact value of a NaN or infinity");
  const std::uint64_t frac = bits & ((std::uint64_t{1} << 52) - 1);
  Exact r;
  r.negative = (bits >> 63) != 0;
  if (biased == 0) {
    r.mag = mag_from_u64(frac, -1074);
  } else {
    r.mag = mag_from_u64(frac | (std::uint64_t{1} << 52), biased - 1075);
  }
  return r;
}

Exact exact_from_rat(const Rat& v, bool negative_zero) {
  Exact r;
  if (v.is_zero()) {
    r.negative = negative_zero;
    return r;
  }
  r.negative = v < 0;
  Int n = mp::abs(mp::numerator(v));
  Int d = mp::denominator(v);
  const auto k1 = static_cast<int>(mp::lsb(n));
  const auto k2 = static_cast<int>(mp::lsb(d));
  n >>= k1;
  d >>= k2;
  r.mag.num = std::move(n);
  r.mag.den = std::move(d);
  r.mag.exp2 = k1 - k2;
  return r;
}

Exact exact_of(const Rational& x) { return exact_from_rat(x.impl().v, x.impl().negative_zero); }

Rat to_rat(const Mag& m) {
  if (m.is_zero()) return Rat(0);
  Int n = m.num;
  Int d = m.den;
  if (m.exp2 >= 0) {
    n <<= m.exp2;
  } else {
    d <<= -m.exp2;
  }
  return Rat(n, d);
}

Rat to_rat(const Exact& x) {
  Rat v = to_rat(x.mag);
  return x.negative ? Rat(-v) : v;
}

Rational to_rational(const Exact& x) {
  auto impl = std::make_unique<Rational::Impl>();
  impl->v = to_rat(x);
  impl->negative_zero = x.negative && x.mag.is_zero();
  return Rational(std::move(impl));
}

int ilog2(const Mag& m) {
  const auto a = static_cast<int>(mp::msb(m.num));
  if (m.den == 1) return m.exp2 + a;
  const auto b = static_cast<int>(mp::msb(m.den));
  // |x| >= 2^(exp2 + a - b)  <=>  num * 2^b >= den * 2^a
  const Int lhs = m.num << b;
  const Int rhs = m.den << a;
  return lhs >= rhs ? m.exp2 + a - b : m.exp2 + a - b - 1;
}

Split split(const Mag& m, int s) {
  Split r;
  if (m.is_zero()) return r;
  const long k = static_cast<long>(m.exp2) + s;
  if (m.den == 1) {
    if (k >= 0) {
      r.n = m.num << k;
      return r;
    }
    // num is odd, so any bit shifted out leaves a nonzero fraction; f == 1/2 only when exactly the
    // last (set) bit is shifted out.
    const auto sh = static_cast<unsigned long>(-k);
    r.frac = true;
    if (sh > static_cast<unsigned long>(mp::msb(m.num)) + 1) {
      r.half = -1;
      return r;
    }
    r.n = m.num >> sh;
    r.half = mp::bit_test(m.num, static_cast<unsigned>(sh - 1)) ? (sh == 1 ? 0 : 1) : -1;
    return r;
  }
  Int a = m.num;
  Int b = m.den;
  if (k >= 0) {
    a <<= k;
  } else {
    b <<= -k;
  }
  Int rem;
  mp::divide_qr(a, b, r.n, rem);
  r.frac = !rem.is_zero();
  if (r.frac) {
    const Int twice = rem << 1;
    r.half = twice < b ? -1 : (twice == b ? 0 : 1);
  }
  return r;
}

std::uint64_t fraction_t32(const Mag& m, int s) {
  if (m.is_zero()) return 0;
  const long k = static_cast<long>(m.exp2) + s;
  if (m.den == 1) {
    if (k >= 0) return 0;
    const auto sh = static_cast<unsigned long>(-k);
    Int t;
    if (sh >= 32) {
      t = (m.num >> (sh - 32)) & Int(0xFFFFFFFFU);
    } else {
      t = (m.num & ((Int(1) << sh) - 1)) << (32 - sh);
    }
    return t.convert_to<std::uint64_t>();
  }
  Int a = m.num;
  Int b = m.den;
  if (k >= 0) {
    a <<= k;
  } else {
    b <<= -k;
  }
  const Int rem = a % b;
  const Int t = (rem << 32) / b;
  return t.convert_to<std::uint64_t>();
}

double round_binary(const Exact& x, int mant_bits, int emin, int emax, bool* inexact) {
  if (inexact) *inexact = false;
  if (x.mag.is_zero()) return x.negative ? -0.0 : 0.0;
  // The quantum of the binade of |x| (of the subnormal range below 2^emin).
  const int e = ilog2(x.mag);
  const int q = std::max(e, emin) - mant_bits;
  const Split sp = split(x.mag, -q);
  auto n = sp.n.convert_to<std::uint64_t>();  // < 2^(mant_bits + 1)
  if (sp.half > 0 || (sp.half == 0 && (n & 1U) != 0)) ++n;
  if (inexact) *inexact = sp.frac;
  // Overflow: the rounded value exceeds (2^(mant_bits+1) - 1) * 2^(emax - mant_bits).
  const int qmax = emax - mant_bits;
  if (q > qmax || (q == qmax && n > (std::uint64_t{2} << mant_bits) - 1)) {
    if (inexact) *inexact = true;
    return x.negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  const double v = std::ldexp(static_cast<double>(n), q);
  return x.negative ? -v : v;
}

}  // namespace detail

using detail::Exact;

Rational::Rational() : impl_(std::make_unique<Impl>()) {}
Rational::Rational(const Rational& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Rational::Rational(Rational&& other) noexcept = default;
Rational& Rational::operator=(const Rational& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Rational& Rational::operator=(Rational&& other) noexcept = default;
Rational::~Rational() = default;
Rational::Rational(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {
Rational make(Rat v, bool negative_zero = false) {
  auto impl = std::make_unique<Rational::Impl>();
  impl->negative_zero = v.is_zero() && negative_zero;
  impl->v = std::move(v);
  return Rational(std::move(impl));
}
}  // namespace

Rational Rational::from_double(double x) { return detail::to_rational(detail::exact_from_double(x)); }
Rational Rational::from_int(std::int64_t k) { return make(Rat(k)); }
Rational Rational::pow2(int e) {
  if (e >= 0) return make(Rat(Int(1) << e));
  return make(Rat(Int(1), Int(1) << -e));
}

bool Rational::is_zero() const { return impl_->v.is_zero(); }
bool Rational::negative() const { return impl_->v < 0 || (impl_->v.is_zero() && impl_->negative_zero); }
int Rational::compare(const Rational& other) const {
  const Rat& a = impl_->v;
  const Rat& b = other.impl_->v;
  return a < b ? -1 : (a > b ? 1 : 0);
}

Rational Rational::operator+(const Rational& o) const {
  Rat v = impl_->v + o.impl_->v;
  // IEEE 754 6.3: an exact zero sum is +0 unless both addends are -0.
  return make(std::move(v), negative() && o.negative() && is_zero() && o.is_zero());
}
Rational Rational::operator-(const Rational& o) const { return *this + (-o); }
Rational Rational::operator*(const Rational& o) const {
  Rat v = impl_->v * o.impl_->v;
  return make(std::move(v), negative() != o.negative());
}
Rational Rational::operator/(const Rational& o) const {
  if (o.is_zero()) throw std::domain_error("exact division by zero");
  Rat v = impl_->v / o.impl_->v;
  return make(std::move(v), negative() != o.negative());
}
Rational Rational::operator-() const { return make(Rat(-impl_->v), !negative()); }
Rational Rational::abs() const { return make(Rat(mp::abs(impl_->v)), false); }
Rational Rational::ldexp(int e) const {
  Rat v = impl_->v;
  if (e >= 0) {
    v *= Rat(Int(1) << e);
  } else {
    v /= Rat(Int(1) << -e);
  }
  return make(std::move(v), negative());
}
int Rational::ilog2() const {
  if (is_zero()) throw std::domain_error("log2 of zero");
  return detail::ilog2(detail::exact_of(*this).mag);
}

bool Rational::is_dyadic() const {
  const Int& d = mp::denominator(impl_->v);
  return Int(d & (d - 1)).is_zero();
}

std::string Rational::to_decimal() const {
  const Rat& v = impl_->v;
  if (v.is_zero()) return negative() ? "-0" : "0";
  const std::string sign = v < 0 ? "-" : "";
  const Int n = mp::abs(mp::numerator(v));
  const Int& d = mp::denominator(v);
  if (!is_dyadic()) return sign + n.str() + "/" + d.str();
  // n / 2^k = n * 5^k / 10^k: the digits of n * 5^k with the point k places from the right.
  const auto k = static_cast<unsigned>(mp::msb(d));
  if (k == 0) return sign + n.str();
  std::string digits = Int(n * mp::pow(Int(5), k)).str();
  if (digits.size() <= k) digits.insert(0, k + 1 - digits.size(), '0');
  digits.insert(digits.size() - k, 1, '.');
  return sign + digits;
}

double Rational::to_double() const { return detail::round_binary(detail::exact_of(*this), 52, -1022, 1023, nullptr); }

double round_to_source(const Rational& x, SourceType t, bool* inexact) {
  const Exact e = detail::exact_of(x);
  // (stored mantissa bits, smallest normal exponent, largest exponent) of IEEE 754 binary64,
  // binary32, binary16 and of bfloat16 (binary32's exponent range with 7 mantissa bits).
  switch (t) {
    case SourceType::F64: return detail::round_binary(e, 52, -1022, 1023, inexact);
    case SourceType::F32: return detail::round_binary(e, 23, -126, 127, inexact);
    case SourceType::F16: return detail::round_binary(e, 10, -14, 15, inexact);
    case SourceType::BF16: return detail::round_binary(e, 7, -126, 127, inexact);
  }
  throw std::invalid_argument("unknown source type");
}

Rational error(const Format& f, std::uint32_t code, const Rational& x) { return code_value(f, code) - x; }

Rational from_parts(const ExactSum::Parts& parts) {
  Int mag = 0;
  for (auto it = parts.limbs.rbegin(); it != parts.limbs.rend(); ++it) mag = (mag << 32) | Int(*it);
  Rat v = parts.exponent >= 0 ? Rat(mag << parts.exponent) : Rat(mag, Int(1) << -parts.exponent);
  auto impl = std::make_unique<Rational::Impl>();
  impl->negative_zero = parts.negative && v.is_zero();
  impl->v = parts.negative ? Rat(-v) : v;
  return Rational(std::move(impl));
}

}  // namespace mxlab::exact
