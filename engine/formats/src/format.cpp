// Format validation, decoding of codes, canonical codes and the sorted value table.
#include "mxlab/formats/format.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mxlab {
namespace {

std::uint32_t low_mask(int bits) {
  return bits >= 32 ? 0xFFFFFFFFU : ((std::uint32_t{1} << bits) - 1);
}

Result<Format> fail(const std::string& name, const std::string& what) {
  return make_error("format '" + name + "': " + what);
}

/// Sorts entries listed in code order, as std::stable_sort would. Code order is value order in pieces: sign and
/// magnitude floats rise over the positive codes and fall over the negative ones, two's complement integers rise
/// in two runs. Two such runs are merged in linear time (a 16-bit table in a tenth of a full sort); anything
/// else (codebooks, re-read exponent fields) is sorted.
template <class T, class Less>
void sort_code_runs(std::vector<T>& v, Less less) {
  const auto first = v.begin(), last = v.end();
  const auto mid = std::is_sorted_until(first, last, less);
  if (mid == last) return;
  // A strictly falling run has no ties whose order reversing could change.
  const bool falling = std::adjacent_find(mid, last, [&](const T& a, const T& b) { return !less(b, a); }) == last;
  if (falling) std::reverse(mid, last);
  if (falling || std::is_sorted(mid, last, less)) {
    std::inplace_merge(first, mid, last, less);
    return;
  }
  std::stable_sort(first, last, less);
}

}  // namespace

Result<Format> Format::make(std::string name, const FormatSpec& spec_in, std::vector<double> codebook) {
  FormatSpec spec = spec_in;
  Format f;
  if (spec.kind == FormatKind::Codebook && !codebook.empty()) {
    auto owned = std::make_shared<const std::vector<double>>(std::move(codebook));
    spec.codebook = std::span<const double>(owned->data(), owned->size());
    f.codebook_ = owned;
  }
  switch (spec.kind) {
    case FormatKind::Float: {
      if (spec.exponent_bits < 1) return fail(name, "a float format needs at least 1 exponent bit");
      if (spec.mantissa_bits < 0) return fail(name, "negative mantissa width");
      if (format_bits(spec) > 32) return fail(name, "more than 32 bits (" + std::to_string(format_bits(spec)) + ")");
      if (spec.exponent_bits > 11) return fail(name, "more than 11 exponent bits exceeds the double range");
      if (spec.specials == Specials::Ieee && spec.exponent_bits < 2)
        return fail(name, "IEEE-style specials need at least 2 exponent bits");
      if (spec.specials == Specials::NegZeroNan && (!spec.is_signed || !spec.subnormals))
        return fail(name, "fnuz (NaN at the negative-zero code) needs a sign bit and a zero");
      if (spec.specials == Specials::AllOnesNan && spec.exponent_bits + spec.mantissa_bits < 2)
        return fail(name, "fn (NaN at the all-ones code) leaves no finite nonzero value");
      const int lowest_exp = spec.subnormals ? 1 - spec.bias - spec.mantissa_bits : -spec.bias;
      if (lowest_exp < -1074) return fail(name, "smallest value below 2^-1074 (outside double)");
      if (max_finite_exponent_field(spec) - spec.bias > 1023)
        return fail(name, "largest value at or above 2^1024 (outside double)");
      if (spec.sub_exponent_bits > 0) {
        if (!spec.subnormals) return fail(name, "a re-read exponent field 0 needs subnormals on");
        if (spec.sub_exponent_bits + spec.sub_mantissa_bits != spec.mantissa_bits)
          return fail(name, "the re-read fields must fill the mantissa bits");
        if (1 - spec.sub_bias - spec.sub_mantissa_bits < -1074)
          return fail(name, "re-read smallest value outside double");
        const double sub_max = (2.0 - pow2(-spec.sub_mantissa_bits)) *
                               pow2(((1 << spec.sub_exponent_bits) - 1) - spec.sub_bias);
        if (!(sub_max < pow2(1 - spec.bias)))
          return fail(name, "re-read values must lie below the smallest normal value");
      }
      break;
    }
    case FormatKind::Integer: {
      if (spec.int_bits < (spec.is_signed ? 2 : 1) || spec.int_bits > 32)
        return fail(name, "integer width must be 2..32 bits (1..32 unsigned)");
      if (spec.symmetric && !spec.is_signed) return fail(name, "an unsigned integer cannot be symmetric");
      if (spec.frac_bits < -900 || spec.frac_bits > 1000) return fail(name, "fraction bits out of range");
      break;
    }
    case FormatKind::Codebook: {
      const std::size_t n = spec.codebook.size();
      if (n < 2 || n > 65536 || (n & (n - 1)) != 0)
        return fail(name, "a codebook needs a power-of-two number of values, 2..65536 (got " +
                              std::to_string(n) + ")");
      std::vector<double> sorted(spec.codebook.begin(), spec.codebook.end());
      for (double v : sorted)
        if (!std::isfinite(v)) return fail(name, "codebook values must be finite");
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 1; i < n; ++i) {
        if (sorted[i] == sorted[i - 1] &&
            !(sorted[i] == 0 && std::signbit(sorted[i]) != std::signbit(sorted[i - 1])))
          return fail(name, "codebook value " + g17(sorted[i]) + " appears twice");
        // Ties are decided by comparing x with (lo + hi) / 2, which must be exact.
        const double s = sorted[i] + sorted[i - 1];
        const double bb = s - sorted[i];
        const double err = (sorted[i - 1] - bb) + (sorted[i] - (s - bb));
        if (err != 0 || !std::isfinite(s))
          return fail(name, "neighbouring codebook values " + g17(sorted[i - 1]) + " and " +
                                g17(sorted[i]) + " are too far apart in exponent for exact midpoints");
      }
      spec.is_signed = sorted.front() < 0 || std::signbit(sorted.front());
      break;
    }
  }
  f.name_ = std::move(name);
  f.spec_ = spec;
  f.max_finite_ = mxlab::max_finite(spec);
  f.lowest_ = mxlab::lowest(spec);
  f.min_normal_ = mxlab::min_normal(spec);
  f.min_positive_ = mxlab::min_positive(spec);
  if (format_bits(spec) <= 16) {
    auto table = std::make_shared<std::vector<Entry>>();
    const std::uint64_t n = mxlab::code_count(spec);
    table->reserve(n);
    for (std::uint64_t c = 0; c < n; ++c) {
      const auto code = static_cast<std::uint32_t>(c);
      const CodeClass k = f.classify(code);
      if (k == CodeClass::Nan || k == CodeClass::Inf || k == CodeClass::Unused) continue;
      table->push_back({f.decode(code), code});
    }
    sort_code_runs(*table, [](const Entry& a, const Entry& b) {
      if (a.value != b.value) return a.value < b.value;
      return std::signbit(a.value) && !std::signbit(b.value);
    });
    f.sorted_ = std::move(table);
  }
  return f;
}

Format::Fields Format::fields(std::uint32_t code) const {
  Fields r;
  const FormatSpec& s = spec_;
  switch (s.kind) {
    case FormatKind::Float: {
      const int em = s.exponent_bits + s.mantissa_bits;
      r.sign = s.is_signed && ((code >> em) & 1U) != 0;
      r.exponent = (code >> s.mantissa_bits) & low_mask(s.exponent_bits);
      r.mantissa = code & low_mask(s.mantissa_bits);
      if (s.sub_exponent_bits > 0 && r.exponent == 0) {
        r.sub = true;
        r.exponent = r.mantissa >> s.sub_mantissa_bits;
        r.mantissa &= low_mask(s.sub_mantissa_bits);
      }
      break;
    }
    case FormatKind::Integer:
      r.sign = s.is_signed && ((code >> (s.int_bits - 1)) & 1U) != 0;
      break;
    case FormatKind::Codebook:
      r.sign = std::signbit(s.codebook[code]);
      break;
  }
  return r;
}

CodeClass Format::classify(std::uint32_t code) const {
  const FormatSpec& s = spec_;
  switch (s.kind) {
    case FormatKind::Float: {
      const Fields fl = fields(code);
      const std::uint32_t e_all = low_mask(s.exponent_bits);
      const std::uint32_t m_all = low_mask(s.mantissa_bits);
      if (!fl.sub) {
        if (s.specials == Specials::Ieee && fl.exponent == e_all)
          return fl.mantissa == 0 ? CodeClass::Inf : CodeClass::Nan;
        if (s.specials == Specials::AllOnesNan && fl.exponent == e_all && fl.mantissa == m_all)
          return CodeClass::Nan;
        if (s.specials == Specials::NegZeroNan && fl.sign && fl.exponent == 0 && fl.mantissa == 0)
          return CodeClass::Nan;
      }
      if (fl.exponent != 0 || !s.subnormals) return CodeClass::Normal;
      return fl.mantissa == 0 ? CodeClass::Zero : CodeClass::Subnormal;
    }
    case FormatKind::Integer: {
      if (s.is_signed && s.symmetric && code == (std::uint32_t{1} << (s.int_bits - 1)))
        return CodeClass::Unused;
      return code == 0 ? CodeClass::Zero : CodeClass::Normal;
    }
    case FormatKind::Codebook:
      return s.codebook[code] == 0 ? CodeClass::Zero : CodeClass::Normal;
  }
  return CodeClass::Normal;
}

double Format::decode(std::uint32_t code) const {
  const FormatSpec& s = spec_;
  switch (s.kind) {
    case FormatKind::Float: {
      const CodeClass k = classify(code);
      const Fields fl = fields(code);
      if (k == CodeClass::Nan) return fl.sign ? -std::numeric_limits<double>::quiet_NaN()
                                              : std::numeric_limits<double>::quiet_NaN();
      if (k == CodeClass::Inf) return fl.sign ? -std::numeric_limits<double>::infinity()
                                              : std::numeric_limits<double>::infinity();
      double v = 0;
      if (fl.sub) {
        v = fl.exponent == 0
                ? std::ldexp(static_cast<double>(fl.mantissa), 1 - s.sub_bias - s.sub_mantissa_bits)
                : std::ldexp(static_cast<double>((std::uint64_t{1} << s.sub_mantissa_bits) + fl.mantissa),
                             static_cast<int>(fl.exponent) - s.sub_bias - s.sub_mantissa_bits);
      } else if (fl.exponent == 0 && s.subnormals) {
        v = std::ldexp(static_cast<double>(fl.mantissa), 1 - s.bias - s.mantissa_bits);
      } else {
        v = std::ldexp(static_cast<double>((std::uint64_t{1} << s.mantissa_bits) + fl.mantissa),
                       static_cast<int>(fl.exponent) - s.bias - s.mantissa_bits);
      }
      return fl.sign ? -v : v;
    }
    case FormatKind::Integer: {
      std::int64_t k = code;
      if (s.is_signed && ((code >> (s.int_bits - 1)) & 1U) != 0) k -= std::int64_t{1} << s.int_bits;
      return std::ldexp(static_cast<double>(k), -s.frac_bits);
    }
    case FormatKind::Codebook:
      return s.codebook[code];
  }
  return 0;
}

std::uint32_t Format::zero_code(bool negative) const {
  const FormatSpec& s = spec_;
  switch (s.kind) {
    case FormatKind::Float:
      return (negative && has_negative_zero()) ? std::uint32_t{1} << (s.exponent_bits + s.mantissa_bits) : 0;
    case FormatKind::Integer: return 0;
    case FormatKind::Codebook: {
      std::uint32_t found = 0xFFFFFFFFU;
      for (std::uint32_t c = 0; c < s.codebook.size(); ++c) {
        if (s.codebook[c] != 0) continue;
        if (std::signbit(s.codebook[c]) == negative) return c;
        if (found == 0xFFFFFFFFU) found = c;
      }
      return found;
    }
  }
  return 0;
}

std::uint32_t Format::nan_code(bool negative) const {
  const FormatSpec& s = spec_;
  const int em = s.exponent_bits + s.mantissa_bits;
  const std::uint32_t sign = (negative && s.is_signed) ? std::uint32_t{1} << em : 0;
  switch (s.specials) {
    case Specials::Ieee:
      return sign | (low_mask(s.exponent_bits) << s.mantissa_bits) |
             (std::uint32_t{1} << (s.mantissa_bits - 1));
    case Specials::AllOnesNan: return sign | low_mask(em);
    case Specials::NegZeroNan: return std::uint32_t{1} << em;
    case Specials::None: break;
  }
  return 0;
}

std::uint32_t Format::inf_code(bool negative) const {
  const FormatSpec& s = spec_;
  const int em = s.exponent_bits + s.mantissa_bits;
  const std::uint32_t sign = (negative && s.is_signed) ? std::uint32_t{1} << em : 0;
  return sign | (low_mask(s.exponent_bits) << s.mantissa_bits);
}

std::uint32_t Format::max_code(bool negative) const {
  const FormatSpec& s = spec_;
  switch (s.kind) {
    case FormatKind::Float: {
      if (negative && !s.is_signed) return 0;
      const int em = s.exponent_bits + s.mantissa_bits;
      const std::uint32_t sign = negative ? std::uint32_t{1} << em : 0;
      return sign | (static_cast<std::uint32_t>(max_finite_exponent_field(s)) << s.mantissa_bits) |
             static_cast<std::uint32_t>(max_finite_mantissa_field(s));
    }
    case FormatKind::Integer: {
      if (!s.is_signed) return negative ? 0 : low_mask(s.int_bits);
      const std::uint32_t kmax = low_mask(s.int_bits - 1);
      if (!negative) return kmax;
      const std::uint32_t mask = low_mask(s.int_bits);
      return s.symmetric ? ((~kmax + 1) & mask) : ((~kmax) & mask);
    }
    case FormatKind::Codebook: {
      std::uint32_t best = 0;
      for (std::uint32_t c = 1; c < s.codebook.size(); ++c)
        if (negative ? s.codebook[c] < s.codebook[best] : s.codebook[c] > s.codebook[best]) best = c;
      return best;
    }
  }
  return 0;
}

std::span<const Format::Entry> Format::sorted_values() const {
  if (!sorted_) return {};
  return {sorted_->data(), sorted_->size()};
}

std::string_view to_string(CodeClass c) {
  switch (c) {
    case CodeClass::Zero: return "zero";
    case CodeClass::Subnormal: return "subnormal";
    case CodeClass::Normal: return "normal";
    case CodeClass::Inf: return "inf";
    case CodeClass::Nan: return "nan";
    case CodeClass::Unused: return "unused";
  }
  return "?";
}

std::string_view to_string(Specials s) {
  switch (s) {
    case Specials::None: return "none";
    case Specials::Ieee: return "ieee";
    case Specials::AllOnesNan: return "fn";
    case Specials::NegZeroNan: return "fnuz";
  }
  return "?";
}

std::string_view to_string(FormatKind k) {
  switch (k) {
    case FormatKind::Float: return "float";
    case FormatKind::Integer: return "integer";
    case FormatKind::Codebook: return "codebook";
  }
  return "?";
}

std::string_view to_string(FormatRole r) {
  switch (r) {
    case FormatRole::Element: return "element";
    case FormatRole::Scale: return "scale";
    case FormatRole::Both: return "element+scale";
  }
  return "?";
}

std::string bit_string(const Format& f, std::uint32_t code) {
  const FormatSpec& s = f.spec();
  std::string out;
  auto put = [&](int from_bit, int width) {
    for (int b = from_bit + width - 1; b >= from_bit; --b) out += ((code >> b) & 1U) ? '1' : '0';
  };
  if (s.kind == FormatKind::Float) {
    if (s.is_signed) {
      put(s.exponent_bits + s.mantissa_bits, 1);
      out += '.';
    }
    put(s.mantissa_bits, s.exponent_bits);
    if (s.mantissa_bits > 0) {
      out += '.';
      put(0, s.mantissa_bits);
    }
  } else {
    put(0, f.bits());
  }
  return out;
}

}  // namespace mxlab
