// Small text helpers every module uses: trimming, lower case, whole-text numbers, shortest decimals.
#pragma once

#include <charconv>
#include <concepts>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mxlab {

/// `s` without leading and trailing white space.
std::string_view trim(std::string_view s);

/// The pieces of `text` between `sep`s, each trimmed ("a, b" gives "a" and "b"; "" gives none).
std::vector<std::string> split_trimmed(std::string_view text, char sep = ',');

/// `s` in ASCII lower case.
std::string lower(std::string_view s);

/// `s` trimmed and in ASCII lower case (names compared without regard to case or spacing).
std::string lower_trim(std::string_view s);

/// The whole of `text` as an integer of type T in base 10 (a leading '-' only for signed T); nothing when any
/// character is left over, the text is empty or the value does not fit T.
template <std::integral T>
std::optional<T> parse_whole(std::string_view text, int base = 10) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

/// parse_whole's value when it lies in lo..hi.
template <std::integral T>
std::optional<T> parse_whole_in(std::string_view text, T lo, T hi) {
  const auto v = parse_whole<T>(text);
  if (!v || *v < lo || *v > hi) return std::nullopt;
  return v;
}

/// A non-negative integer written in decimal, or in hexadecimal after "0x"/"0X" (and in binary after "0b" when
/// `binary`): code points, seeds, counts.
std::optional<std::uint64_t> parse_code(std::string_view text, bool binary = false);

/// The whole of `text` as a double: decimal or hexadecimal floating point, "inf" and "nan", with an optional sign;
/// nothing when any character is left over.
std::optional<double> parse_double(std::string_view text);

/// The shortest decimal that reads back to v exactly ("0.1", "1e-05", "inf", "nan").
std::string shortest_decimal(double v);

}  // namespace mxlab
