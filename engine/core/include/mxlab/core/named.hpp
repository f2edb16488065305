// Text names of enumerations: one table per enum serves parsing (with an error listing the choices)
// and printing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"

namespace mxlab {

template <typename E>
struct Named {
  std::string_view name;
  E value;
};

/// The value named `text`; the error lists the first `canonical` names (the rest are synonyms). A table is of
/// Named<E> or of any row with the members `name` and `value` (such as a traits row).
template <typename Row, std::size_t N, typename E = decltype(Row::value)>
Result<E> parse_named(std::string_view text, const Row (&names)[N], std::string_view what, std::size_t canonical = N) {
  for (const auto& n : names)
    if (n.name == text) return n.value;
  std::string msg = "unknown " + std::string(what) + " '" + std::string(text) + "' (expected one of:";
  for (std::size_t i = 0; i < canonical && i < N; ++i) msg += std::string(i ? ", " : " ") + std::string(names[i].name);
  return make_error(msg + ")");
}

/// The first name of a value ("?" if the table lacks it).
template <typename Row, std::size_t N, typename E = decltype(Row::value)>
std::string_view name_of(E value, const Row (&names)[N]) {
  for (const auto& n : names)
    if (n.value == value) return n.name;
  return "?";
}

}  // namespace mxlab
