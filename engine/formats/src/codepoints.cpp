// Code point enumeration and neighbour distances.
#include "mxlab/formats/codepoints.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mxlab {

bool next_larger_value(const Format& f, std::uint32_t code, double* next) {
  const double v = f.decode(code);
  const auto table = f.sorted_values();
  if (!table.empty()) {
    const auto it = std::upper_bound(table.begin(), table.end(), v,
                                     [](double x, const Format::Entry& e) { return x < e.value; });
    if (it == table.end()) return false;
    *next = it->value;
    return true;
  }
  // Above 16 bits (integers and floats): step along the grid.
  const FormatSpec& s = f.spec();
  if (v >= f.max_finite()) return false;
  if (s.kind == FormatKind::Integer) {
    *next = v + std::ldexp(1.0, -s.frac_bits);
    return true;
  }
  // Floats: magnitudes are monotone in the code within each sign.
  const int em = s.exponent_bits + s.mantissa_bits;
  const std::uint32_t sign_bit = s.is_signed ? std::uint32_t{1} << em : 0;
  const std::uint32_t mag = code & ~sign_bit;
  std::uint32_t n = 0;
  if (v == 0) {
    n = 1;
  } else if (v > 0) {
    n = mag + 1;
  } else {
    n = (mag - 1 == 0) ? 0 : ((mag - 1) | sign_bit);
  }
  *next = f.decode(n);
  return true;
}

std::vector<CodePoint> enumerate_codes(const Format& f, std::uint64_t first, std::uint64_t last) {
  std::vector<CodePoint> out;
  if (last >= f.code_count()) last = f.code_count() - 1;
  if (first > last) return out;
  out.reserve(static_cast<std::size_t>(last - first + 1));
  for (std::uint64_t c = first; c <= last; ++c) {
    CodePoint p;
    p.code = static_cast<std::uint32_t>(c);
    p.bits = bit_string(f, p.code);
    p.fields = f.fields(p.code);
    p.cls = f.classify(p.code);
    p.value = f.decode(p.code);
    p.gap_up = std::numeric_limits<double>::quiet_NaN();
    if (p.cls != CodeClass::Nan && p.cls != CodeClass::Inf && p.cls != CodeClass::Unused) {
      double next = 0;
      if (next_larger_value(f, p.code, &next)) p.gap_up = next - p.value;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace mxlab
