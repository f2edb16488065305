// A number format as data: the columns of one catalogue row, the quantities derived from them, and
// scalar decoding of codes. Rounding and overflow are parameters of a cast (cast.hpp), not of a format.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/bits.hpp"
#include "mxlab/core/error.hpp"

namespace mxlab {

/// How the code bits are read.
enum class FormatKind : std::uint8_t {
  Float,     ///< sign, exponent, mantissa (optionally a second reading of exponent field 0, see FormatSpec)
  Integer,   ///< two's complement or unsigned integer k, value k * 2^-frac_bits
  Codebook,  ///< code i means codebook[i]
};

/// Where a float format keeps its special values.
enum class Specials : std::uint8_t {
  None,        ///< every code is a finite number (FP6, FP4, BOOST E2M5)
  Ieee,        ///< all-ones exponent: mantissa 0 is +-inf, any other mantissa NaN (FP16, E5M2)
  AllOnesNan,  ///< no inf; only the code with all exponent and mantissa bits set is NaN (e4m3fn, e8m0fnu)
  NegZeroNan,  ///< no inf and no -0; the negative-zero code is the single NaN ("fnuz")
};

/// What a code means, for tables and tests.
enum class CodeClass : std::uint8_t { Zero, Subnormal, Normal, Inf, Nan, Unused };

/// What a format is for: element formats hold tensor values; scale formats hold block scales.
enum class FormatRole : std::uint8_t { Element, Scale, Both };

/// The columns of a catalogue row. Everything else about a format is derived from these.
struct FormatSpec {
  FormatKind kind = FormatKind::Float;
  bool is_signed = true;
  // Float: stored exponent and mantissa bits (no implicit bit), exponent bias.
  int exponent_bits = 0;
  int mantissa_bits = 0;
  int bias = 0;
  Specials specials = Specials::None;
  /// Float: exponent field 0 holds zero and subnormals (IEEE); false: it is one more normal binade and
  /// the format has no zero (E8M0).
  bool subnormals = true;
  /// Float: if > 0, a code whose exponent field is 0 is read again as a float with these exponent and
  /// mantissa widths and bias over its low mantissa_bits bits (sub_exponent_bits + sub_mantissa_bits ==
  /// mantissa_bits); that reading has IEEE subnormals. MX-SAFE: E2M5 whose field 00 is E3M2, bias 10.
  int sub_exponent_bits = 0;
  int sub_mantissa_bits = 0;
  int sub_bias = 0;
  // Integer: total bits (with sign for signed), fixed-point fraction bits, symmetric range.
  int int_bits = 0;
  int frac_bits = 0;
  bool symmetric = false;  ///< the most negative two's-complement code is unused
  // Codebook: value of each code; size must be a power of two.
  std::span<const double> codebook{};
  FormatRole role = FormatRole::Element;
};

// ---- Derived quantities, constexpr so the catalogue can static_assert them. ----

/// Number of bits of one code.
constexpr int format_bits(const FormatSpec& s) {
  switch (s.kind) {
    case FormatKind::Float: return (s.is_signed ? 1 : 0) + s.exponent_bits + s.mantissa_bits;
    case FormatKind::Integer: return s.int_bits;
    case FormatKind::Codebook: {
      int b = 0;
      while ((std::size_t{1} << b) < s.codebook.size()) ++b;
      return b;
    }
  }
  return 0;
}

/// Number of codes, 2^bits.
constexpr std::uint64_t code_count(const FormatSpec& s) { return std::uint64_t{1} << format_bits(s); }

/// Largest exponent field value that encodes finite numbers, and the largest mantissa with it.
constexpr int max_finite_exponent_field(const FormatSpec& s) {
  const int all_ones = (1 << s.exponent_bits) - 1;
  if (s.specials == Specials::Ieee) return all_ones - 1;
  if (s.specials == Specials::AllOnesNan && s.mantissa_bits == 0) return all_ones - 1;
  return all_ones;
}
constexpr std::uint64_t max_finite_mantissa_field(const FormatSpec& s) {
  const std::uint64_t all_ones = (std::uint64_t{1} << s.mantissa_bits) - 1;
  if (s.specials == Specials::AllOnesNan && s.mantissa_bits > 0) return all_ones - 1;
  return all_ones;
}

/// Exponent of the smallest normal binade: 1 - bias with subnormals, -bias without.
constexpr int min_normal_exponent(const FormatSpec& s) { return s.subnormals ? 1 - s.bias : -s.bias; }

/// Exponent of the largest binade holding finite values (formats.md "emax").
constexpr int emax(const FormatSpec& s) {
  switch (s.kind) {
    case FormatKind::Float: return max_finite_exponent_field(s) - s.bias;
    case FormatKind::Integer: {
      const std::uint64_t kmax = s.is_signed ? (std::uint64_t{1} << (s.int_bits - 1)) - 1
                                              : (std::uint64_t{1} << s.int_bits) - 1;
      int e = 0;
      while ((std::uint64_t{2} << e) <= kmax) ++e;
      return e - s.frac_bits;
    }
    case FormatKind::Codebook: {
      double m = 0;
      for (double v : s.codebook) m = (v < 0 ? -v : v) > m ? (v < 0 ? -v : v) : m;
      return m > 0 ? floor_log2(m) : 0;
    }
  }
  return 0;
}

/// Largest finite value.
constexpr double max_finite(const FormatSpec& s) {
  switch (s.kind) {
    case FormatKind::Float: {
      const double mant = 1.0 + static_cast<double>(max_finite_mantissa_field(s)) * pow2(-s.mantissa_bits);
      return mant * pow2(max_finite_exponent_field(s) - s.bias);
    }
    case FormatKind::Integer: {
      const std::uint64_t kmax = s.is_signed ? (std::uint64_t{1} << (s.int_bits - 1)) - 1
                                              : (std::uint64_t{1} << s.int_bits) - 1;
      return static_cast<double>(kmax) * pow2(-s.frac_bits);
    }
    case FormatKind::Codebook: {
      double m = s.codebook.empty() ? 0.0 : s.codebook[0];
      for (double v : s.codebook) m = v > m ? v : m;
      return m;
    }
  }
  return 0;
}

/// Most negative finite value (0 or the smallest value for unsigned formats).
constexpr double lowest(const FormatSpec& s) {
  switch (s.kind) {
    case FormatKind::Float:
      if (s.is_signed) return -max_finite(s);
      return s.subnormals ? 0.0 : pow2(-s.bias);
    case FormatKind::Integer: {
      if (!s.is_signed) return 0.0;
      const auto half = static_cast<double>(std::uint64_t{1} << (s.int_bits - 1));
      return (s.symmetric ? -(half - 1) : -half) * pow2(-s.frac_bits);
    }
    case FormatKind::Codebook: {
      double m = s.codebook.empty() ? 0.0 : s.codebook[0];
      for (double v : s.codebook) m = v < m ? v : m;
      return m;
    }
  }
  return 0;
}

/// Smallest positive normal value (Float); for Integer and Codebook the smallest positive value.
constexpr double min_normal(const FormatSpec& s);
/// Smallest positive value.
constexpr double min_positive(const FormatSpec& s) {
  switch (s.kind) {
    case FormatKind::Float:
      if (!s.subnormals) return pow2(-s.bias);
      if (s.sub_exponent_bits > 0) return pow2(1 - s.sub_bias - s.sub_mantissa_bits);
      if (s.mantissa_bits == 0) return pow2(1 - s.bias);
      return pow2(1 - s.bias - s.mantissa_bits);
    case FormatKind::Integer: return pow2(-s.frac_bits);
    case FormatKind::Codebook: {
      double m = 0;
      for (double v : s.codebook)
        if (v > 0 && (m == 0 || v < m)) m = v;
      return m;
    }
  }
  return 0;
}
constexpr double min_normal(const FormatSpec& s) {
  if (s.kind != FormatKind::Float) return min_positive(s);
  if (s.sub_exponent_bits > 0) return pow2(1 - s.sub_bias);
  return pow2(min_normal_exponent(s));
}

constexpr bool has_inf(const FormatSpec& s) { return s.kind == FormatKind::Float && s.specials == Specials::Ieee; }
constexpr bool has_nan(const FormatSpec& s) {
  // An IEEE-style format without mantissa bits has only infinities in its all-ones exponent.
  return s.kind == FormatKind::Float && s.specials != Specials::None &&
         !(s.specials == Specials::Ieee && s.mantissa_bits == 0);
}
/// Whether some code means zero.
constexpr bool has_zero(const FormatSpec& s) {
  if (s.kind == FormatKind::Float) return s.subnormals;
  if (s.kind == FormatKind::Integer) return true;
  for (double v : s.codebook)
    if (v == 0) return true;
  return false;
}
constexpr bool has_negative_zero(const FormatSpec& s) {
  if (s.kind == FormatKind::Float) return s.is_signed && s.subnormals && s.specials != Specials::NegZeroNan;
  if (s.kind == FormatKind::Codebook)
    for (double v : s.codebook)
      if (v == 0 && std::bit_cast<std::uint64_t>(v) != 0) return true;
  return false;
}

/// Number of codes that decode to finite numbers (both zeros count; NaN, inf and unused codes do not).
constexpr std::uint64_t finite_count(const FormatSpec& s) {
  const std::uint64_t n = code_count(s);
  switch (s.kind) {
    case FormatKind::Float: {
      const std::uint64_t signs = s.is_signed ? 2 : 1;
      const std::uint64_t mants = std::uint64_t{1} << s.mantissa_bits;
      switch (s.specials) {
        case Specials::None: return n;
        case Specials::Ieee: return n - signs * mants;
        case Specials::AllOnesNan: return n - signs;
        case Specials::NegZeroNan: return n - 1;
      }
      return n;
    }
    case FormatKind::Integer: return (s.is_signed && s.symmetric) ? n - 1 : n;
    case FormatKind::Codebook: return n;
  }
  return n;
}

/// A validated format with a name; cheap to copy. Built from a catalogue row or a parsed string.
class Format {
 public:
  /// Validates the spec (field widths, double range, codebook shape) and builds the format.
  static Result<Format> make(std::string name, const FormatSpec& spec, std::vector<double> codebook = {});

  const std::string& name() const { return name_; }
  const FormatSpec& spec() const { return spec_; }
  FormatKind kind() const { return spec_.kind; }
  bool is_signed() const { return spec_.is_signed; }
  int bits() const { return format_bits(spec_); }
  std::uint64_t code_count() const { return mxlab::code_count(spec_); }
  std::uint64_t finite_count() const { return mxlab::finite_count(spec_); }
  int emax() const { return mxlab::emax(spec_); }
  double max_finite() const { return max_finite_; }
  double lowest() const { return lowest_; }
  double min_normal() const { return min_normal_; }
  double min_positive() const { return min_positive_; }
  bool has_inf() const { return mxlab::has_inf(spec_); }
  bool has_nan() const { return mxlab::has_nan(spec_); }
  bool has_zero() const { return mxlab::has_zero(spec_); }
  bool has_negative_zero() const { return mxlab::has_negative_zero(spec_); }

  /// Value of a code as a double (exact: every format value is a double). NaN codes give NaN.
  double decode(std::uint32_t code) const;
  /// Class of a code.
  CodeClass classify(std::uint32_t code) const;

  /// Sign, exponent field and mantissa field of a code (Float; for the re-read field 0, the sub
  /// fields). Integer and Codebook formats report the sign bit and zero fields.
  struct Fields {
    bool sign = false;
    std::uint32_t exponent = 0;
    std::uint32_t mantissa = 0;
    bool sub = false;  ///< fields are those of the re-read exponent-field-0 format
  };
  Fields fields(std::uint32_t code) const;

  /// Canonical codes.
  std::uint32_t zero_code(bool negative) const;      ///< +0 or -0 (+0 when -0 does not exist)
  std::uint32_t nan_code(bool negative) const;       ///< requires has_nan()
  std::uint32_t inf_code(bool negative) const;       ///< requires has_inf()
  std::uint32_t max_code(bool negative) const;       ///< +-max finite (lowest for negative)

  /// Finite values in ascending order with their codes, for formats up to 16 bits (empty above);
  /// a zero appears once per zero code, -0 before +0. Built once when the format is made.
  struct Entry {
    double value;
    std::uint32_t code;
  };
  std::span<const Entry> sorted_values() const;

  /// True when casts use the sorted-value-table path (codebooks, re-read exponent field 0).
  bool uses_table() const { return spec_.kind == FormatKind::Codebook || spec_.sub_exponent_bits > 0; }

 private:
  std::string name_;
  FormatSpec spec_;
  std::shared_ptr<const std::vector<double>> codebook_;  // owns spec_.codebook's storage when parsed
  std::shared_ptr<const std::vector<Entry>> sorted_;     // formats up to 16 bits
  // Derived once (they are read on every cast).
  double max_finite_ = 0, lowest_ = 0, min_normal_ = 0, min_positive_ = 0;
};

/// Text name of a code class ("zero", "subnormal", "normal", "inf", "nan", "unused").
std::string_view to_string(CodeClass c);
/// Text name of a specials style ("none", "ieee", "fn", "fnuz").
std::string_view to_string(Specials s);
/// Text name of a format kind.
std::string_view to_string(FormatKind k);
/// Text name of a role.
std::string_view to_string(FormatRole r);

/// The code as a bit string, MSB first, grouped by field with '.' (e.g. "0.1111.110").
std::string bit_string(const Format& f, std::uint32_t code);

}  // namespace mxlab
