// Text forms of doubles: exact hexadecimal and round-trip decimal.
#include "mxlab/core/bits.hpp"

#include <cstdio>
#include <limits>

namespace mxlab {

std::string hex_double(double x) {
  if (x != x) return "nan";
  if (x == std::numeric_limits<double>::infinity()) return "inf";
  if (x == -std::numeric_limits<double>::infinity()) return "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

std::string g17(double x) {
  if (x != x) return "nan";
  if (x == std::numeric_limits<double>::infinity()) return "inf";
  if (x == -std::numeric_limits<double>::infinity()) return "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

}  // namespace mxlab
