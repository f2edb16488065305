// Exact summation of doubles and of exact squares/products (a fixed-point superaccumulator spanning the
// whole double range and its squares). Sums of squared quantization errors are exact, not approximated.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace mxlab {

class ExactSum {
 public:
  /// Adds x (finite) exactly.
  void add(double x) { add_scaled(x, 0); }
  /// Adds x * 2^e exactly (x finite; the result must lie in the accumulator's range 2^-2300..2^2300).
  void add_scaled(double x, int e);
  /// Adds a*b exactly (finite a, b), using an error-free product.
  void add_product(double a, double b);
  /// Adds x*x exactly.
  void add_square(double x) { add_product(x, x); }
  /// Adds another accumulator exactly.
  void add(const ExactSum& other);
  /// Subtracts another accumulator exactly.
  void subtract(const ExactSum& other);
  /// -1, 0 or +1: the sign of the exact sum.
  int sign() const;

  /// The sum rounded to the nearest double (ties to even); +-inf beyond the double range.
  double to_double() const;
  bool is_zero() const;

  /// The exact value as sign, magnitude (little-endian 32-bit limbs) and the exponent of limb 0's bit 0:
  /// value = (-1)^negative * sum(limbs[i] * 2^(32 i)) * 2^exponent.
  struct Parts {
    bool negative = false;
    std::vector<std::uint32_t> limbs;
    int exponent = 0;
  };
  Parts parts() const;

  static constexpr int kLowestExponent = -2400;  ///< weight of bit 0 of limb 0
  static constexpr int kLimbs = 150;             ///< 4800 bits: 2^-2400 .. 2^2400

 private:
  void normalize() const;
  mutable std::array<std::int64_t, kLimbs> limbs_{};  // signed digits in base 2^32, carries deferred
  mutable int pending_ = 0;                           // additions since the last normalisation
};

}  // namespace mxlab
