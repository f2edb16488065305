// Ceiling division of non-negative integers: how many blocks of k hold n items.
#pragma once

#include <concepts>
#include <type_traits>

namespace mxlab {

/// ceil(n / k) for n >= 0 and k > 0, in the common type of n and k; never overflows (no n + k - 1).
template <std::integral A, std::integral B>
constexpr std::common_type_t<A, B> ceil_div(A n, B k) {
  using T = std::common_type_t<A, B>;
  const auto a = static_cast<T>(n);
  const auto b = static_cast<T>(k);
  return static_cast<T>(a / b + (a % b != 0 ? 1 : 0));
}

}  // namespace mxlab
