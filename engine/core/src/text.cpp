// Small text helpers (text.hpp).
#include "mxlab/core/text.hpp"

#include <cctype>

namespace mxlab {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string lower_trim(std::string_view s) { return lower(trim(s)); }

std::vector<std::string> split_trimmed(std::string_view text, char sep) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  for (std::size_t from = 0;;) {
    const std::size_t at = text.find(sep, from);
    out.emplace_back(trim(text.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from)));
    if (at == std::string_view::npos) return out;
    from = at + 1;
  }
}

std::optional<std::uint64_t> parse_code(std::string_view text, bool binary) {
  int base = 10;
  if (text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0) {
    base = 16;
    text.remove_prefix(2);
  } else if (binary && text.rfind("0b", 0) == 0) {
    base = 2;
    text.remove_prefix(2);
  }
  return parse_whole<std::uint64_t>(text, base);
}

std::optional<double> parse_double(std::string_view text) {
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.front() == '+' || text.front() == '-') return std::nullopt;
  auto format = std::chars_format::general;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    format = std::chars_format::hex;
    text.remove_prefix(2);
  }
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, format);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return negative ? -v : v;
}

std::string shortest_decimal(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace mxlab
