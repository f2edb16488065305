// Enumeration of code points: every code of a format with its fields, class and value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxlab/formats/format.hpp"

namespace mxlab {

struct CodePoint {
  std::uint32_t code = 0;
  std::string bits;  ///< bit string grouped by field, e.g. "0.1111.110"
  Format::Fields fields;
  CodeClass cls = CodeClass::Normal;
  double value = 0;  ///< decoded value (exact: every format value is a double); NaN for NaN codes
  /// Distance to the next larger value of the format (exact in double); NaN for the largest finite
  /// value and for non-finite codes.
  double gap_up = 0;
};

/// Code points first..last inclusive (last < code_count()).
std::vector<CodePoint> enumerate_codes(const Format& f, std::uint64_t first, std::uint64_t last);

/// The next larger finite value after the finite value of `code`, if any (false for the maximum).
bool next_larger_value(const Format& f, std::uint32_t code, double* next);

}  // namespace mxlab
