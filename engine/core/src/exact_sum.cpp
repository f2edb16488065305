// Superaccumulator: each double is split into 32-bit digits added to signed 64-bit limbs; carries are
// propagated every 2^20 additions, so no limb can overflow (each addition adds less than 2^32 per limb).
#include "mxlab/core/exact_sum.hpp"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace mxlab {

void ExactSum::add_scaled(double x, int e) {
  if (x == 0) return;
  int ex = 0;
  const double fr = std::frexp(x, &ex);  // x = fr * 2^ex, 0.5 <= |fr| < 1
  const auto mant = static_cast<std::int64_t>(std::ldexp(fr, 53));  // exact 53-bit integer
  const bool neg = mant < 0;
  auto m = static_cast<std::uint64_t>(neg ? -mant : mant);
  int pos = ex - 53 + e - kLowestExponent;  // bit position of m's bit 0
  if (pos < 0 || pos + 53 > kLimbs * 32) std::abort();  // outside the documented range
  int limb = pos / 32;
  const int shift = pos % 32;
  // m << shift spans at most 85 bits: three 32-bit digits.
  const std::uint64_t low = m << shift;
  const std::uint64_t high = shift == 0 ? 0 : m >> (64 - shift);
  const std::uint64_t digits[3] = {low & 0xFFFFFFFFU, low >> 32, high};
  for (int k = 0; k < 3 && limb + k < kLimbs; ++k) {
    const auto digit = static_cast<std::int64_t>(digits[k]);
    limbs_[static_cast<std::size_t>(limb + k)] += neg ? -digit : digit;
  }
  if (++pending_ >= (1 << 20)) normalize();
}

void ExactSum::add_product(double a, double b) {
  if (a == 0 || b == 0) return;
  // Scale both factors near 1 so the error-free product neither overflows nor underflows.
  int ea = 0, eb = 0;
  const double fa = std::frexp(a, &ea);
  const double fb = std::frexp(b, &eb);
  const double hi = fa * fb;
  const double lo = std::fma(fa, fb, -hi);  // exact: fa*fb = hi + lo
  add_scaled(hi, ea + eb);
  add_scaled(lo, ea + eb);
}

void ExactSum::add(const ExactSum& other) {
  other.normalize();
  normalize();
  for (int i = 0; i < kLimbs; ++i) limbs_[static_cast<std::size_t>(i)] += other.limbs_[static_cast<std::size_t>(i)];
  normalize();
}

void ExactSum::subtract(const ExactSum& other) {
  other.normalize();
  normalize();
  for (int i = 0; i < kLimbs; ++i) limbs_[static_cast<std::size_t>(i)] -= other.limbs_[static_cast<std::size_t>(i)];
  normalize();
}

int ExactSum::sign() const {
  const Parts p = parts();
  if (p.limbs.empty()) return 0;
  return p.negative ? -1 : 1;
}

void ExactSum::normalize() const {
  std::int64_t carry = 0;
  for (auto& l : limbs_) {
    const std::int64_t v = l + carry;
    // Floor division by 2^32 keeps every limb in [0, 2^32); the sign ends up in the top carry.
    carry = v >> 32;
    l = v - (carry << 32);
  }
  // A negative total leaves carry = -1 with all limbs in [0, 2^32): fold it into the top limb.
  limbs_[kLimbs - 1] += carry << 32;
  pending_ = 0;
}

bool ExactSum::is_zero() const {
  normalize();
  for (auto l : limbs_)
    if (l != 0) return false;
  return true;
}

ExactSum::Parts ExactSum::parts() const {
  normalize();
  Parts p;
  p.exponent = kLowestExponent;
  const bool neg = limbs_[kLimbs - 1] < 0;
  p.negative = neg;
  // Two's-complement style negation over the limb vector when the total is negative.
  std::vector<std::uint32_t> mag(kLimbs);
  if (!neg) {
    for (int i = 0; i < kLimbs; ++i) mag[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(limbs_[static_cast<std::size_t>(i)]);
  } else {
    std::int64_t borrow = 0;
    for (int i = 0; i < kLimbs; ++i) {
      std::int64_t v = -limbs_[static_cast<std::size_t>(i)] - borrow;
      borrow = 0;
      if (i + 1 < kLimbs) {
        if (v < 0) {
          v += std::int64_t{1} << 32;
          borrow = 1;
        }
      }
      mag[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(v);
    }
  }
  while (!mag.empty() && mag.back() == 0) mag.pop_back();
  p.limbs = std::move(mag);
  if (p.limbs.empty()) p.negative = false;
  return p;
}

double ExactSum::to_double() const {
  const Parts p = parts();
  if (p.limbs.empty()) return 0.0;
  // Take the top 64 bits plus a sticky bit, then round to 53 bits (ties to even) with ldexp.
  const int n = static_cast<int>(p.limbs.size());
  const int top_bits = 32 * (n - 1) + (32 - std::countl_zero(p.limbs.back()));  // bit length
  // Collect bits [top_bits-64, top_bits) into a 64-bit window.
  auto bit = [&](int i) -> std::uint64_t {
    if (i < 0) return 0;
    return (p.limbs[static_cast<std::size_t>(i / 32)] >> (i % 32)) & 1U;
  };
  std::uint64_t window = 0;
  for (int i = top_bits - 1; i >= top_bits - 64; --i) window = (window << 1) | bit(i);
  bool sticky = false;
  for (int i = top_bits - 65; i >= 0 && !sticky; --i) sticky = bit(i) != 0;
  const int low = top_bits - 64;  // exponent (relative to the limbs) of the window's bit 0
  // Double precision may be less than 53 bits for subnormal results: compute the kept width.
  const int value_exp = p.exponent + top_bits - 1;  // exponent of the leading bit
  int keep = 53;
  if (value_exp < -1022) keep = 53 - (-1022 - value_exp);
  if (keep <= 0) {
    // Below half the smallest subnormal, or exactly there (ties to even rounds to 0 then).
    const bool above_half = keep == 0 && (window << 1 != 0 || sticky);
    const double r = above_half ? std::numeric_limits<double>::denorm_min() : 0.0;
    return p.negative ? -r : r;
  }
  const int drop = 64 - keep;
  std::uint64_t kept = window >> drop;
  const std::uint64_t rest = window & ((std::uint64_t{1} << drop) - 1);
  const std::uint64_t half = std::uint64_t{1} << (drop - 1);
  if (rest > half || (rest == half && (sticky || (kept & 1U)))) ++kept;
  const double r = std::ldexp(static_cast<double>(kept), p.exponent + low + drop);
  return p.negative ? -r : r;
}

}  // namespace mxlab
