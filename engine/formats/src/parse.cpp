// Parsing of format strings (grammar in docs/formats-strings.md).
#include "mxlab/formats/parse.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "mxlab/core/quote.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/formats/catalogue.hpp"

namespace mxlab {
namespace {

Error format_error(std::string_view text, const std::string& what, bool suggest) {
  std::string msg = "format " + quote_input(text) + ": " + what;
  if (suggest && text.size() <= 64) {  // no name is longer; a longer text has no near name
    const auto near = suggest_format_names(text);
    if (!near.empty()) {
      msg += " (did you mean ";
      for (std::size_t i = 0; i < near.size(); ++i) msg += (i ? ", " : "") + ("'" + near[i] + "'");
      msg += "?)";
    }
  }
  return make_error(msg);
}

/// Reads a decimal integer at the start of s; advances s.
bool read_int(std::string_view& s, int& out) {
  std::size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  if (n == 0 || n > 6) return false;
  std::from_chars(s.data(), s.data() + n, out);
  s.remove_prefix(n);
  return true;
}

bool same_columns(const FormatSpec& a, const FormatSpec& b) {
  return a.kind == b.kind && a.is_signed == b.is_signed && a.exponent_bits == b.exponent_bits &&
         a.mantissa_bits == b.mantissa_bits && a.bias == b.bias && a.specials == b.specials &&
         a.subnormals == b.subnormals && a.sub_exponent_bits == b.sub_exponent_bits &&
         a.sub_mantissa_bits == b.sub_mantissa_bits && a.sub_bias == b.sub_bias && a.int_bits == b.int_bits &&
         a.frac_bits == b.frac_bits && a.symmetric == b.symmetric;
}

Result<Format> finish(std::string_view text, const std::string& name, const FormatSpec& spec) {
  if (spec.kind != FormatKind::Codebook) {
    for (const Format& f : catalogue_formats())
      if (f.kind() != FormatKind::Codebook && same_columns(f.spec(), spec)) return f;
  }
  auto f = Format::make(name, spec);
  if (!f) return format_error(text, f.error().message.substr(f.error().message.find(": ") + 2), false);
  return f;
}

Result<Format> parse_integer(std::string_view text, const std::string& key) {
  std::string_view s = key;
  FormatSpec spec;
  spec.kind = FormatKind::Integer;
  bool mx = false;
  if (s.rfind("mxint", 0) == 0) {
    mx = true;
    s.remove_prefix(5);
  } else if (s.rfind("uint", 0) == 0) {
    spec.is_signed = false;
    s.remove_prefix(4);
  } else {
    s.remove_prefix(3);
  }
  int bits = 0;
  if (!read_int(s, bits) || !s.empty())
    return format_error(text, "expected a bit width after '" + key.substr(0, key.size() - s.size()) + "'", true);
  const int lo = spec.is_signed ? 2 : 1;
  if (bits < lo || bits > 32)
    return format_error(text, "integer width " + std::to_string(bits) + " is outside " + std::to_string(lo) + "..32",
                        false);
  spec.int_bits = bits;
  if (mx) {
    spec.frac_bits = bits - 2;  // MX fixed point: k * 2^-(bits-2), emax 0 (OCP MX v1.0 5.3)
    spec.symmetric = true;
  }
  return finish(text, key, spec);
}

Result<Format> parse_codebook(std::string_view text, std::string_view list) {
  std::vector<double> values;
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string item(list.substr(0, comma));
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(0, 1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size())
      return format_error(text, "codebook value '" + item + "' is not a number", false);
    values.push_back(v);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  FormatSpec spec;
  spec.kind = FormatKind::Codebook;
  auto f = Format::make(std::string(text), spec, std::move(values));
  if (!f) return format_error(text, f.error().message.substr(f.error().message.find(": ") + 2), false);
  return f;
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> suggest_format_names(std::string_view text, std::size_t n) {
  const std::string key = lower_trim(text);
  std::vector<std::pair<std::size_t, std::string>> scored;
  auto consider = [&](std::string_view name) {
    const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
    // The lengths' difference bounds the distance from below: long text is no near miss of a short name.
    if (key.size() > name.size() + limit || name.size() > key.size() + limit) return;
    const std::size_t d = edit_distance(key, name);
    if (d <= limit) scored.emplace_back(d, std::string(name));
  };
  for (const auto& r : catalogue_rows()) {
    consider(r.name);
    std::string_view rest = r.aliases;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      consider(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, name] : scored) {
    if (out.size() >= n) break;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

Result<Format> parse_format(std::string_view text) {
  const std::string key = lower_trim(text);
  if (key.empty()) return make_error("format '': empty format string");
  if (const Format* f = find_catalogue_format(key)) return *f;
  if (key.rfind("codebook:", 0) == 0) return parse_codebook(text, std::string_view(text).substr(text.find(':') + 1));
  if (key.rfind("int", 0) == 0 || key.rfind("uint", 0) == 0 || key.rfind("mxint", 0) == 0)
    return parse_integer(text, key);

  std::string_view s = key;
  int prefix_bits = -1;
  for (std::string_view p : {"float", "fp"}) {
    if (s.rfind(p, 0) == 0 && s.size() > p.size() && std::isdigit(static_cast<unsigned char>(s[p.size()]))) {
      std::string_view t = s.substr(p.size());
      int b = 0;
      if (read_int(t, b) && !t.empty() && t.front() == '_') {
        prefix_bits = b;
        s = t.substr(1);
      }
      break;
    }
  }
  FormatSpec spec;
  spec.kind = FormatKind::Float;
  if (!s.empty() && s.front() == 'u') {
    spec.is_signed = false;
    s.remove_prefix(1);
  }
  if (s.empty() || s.front() != 'e')
    return format_error(text, "not a known format name, and not of the form eXmY, intN, uintN or mxintN", true);
  s.remove_prefix(1);
  int e = 0, m = 0;
  if (!read_int(s, e)) return format_error(text, "expected the exponent width after 'e'", true);
  if (s.empty() || s.front() != 'm') return format_error(text, "expected 'm' and the mantissa width after 'e" + std::to_string(e) + "'", true);
  s.remove_prefix(1);
  if (!read_int(s, m)) return format_error(text, "expected the mantissa width after 'm'", true);
  bool has_bias = false;
  int bias = 0;
  if (!s.empty() && s.front() == 'b') {
    s.remove_prefix(1);
    bool minus = false;
    if (!s.empty() && s.front() == '-') {
      minus = true;
      s.remove_prefix(1);
    }
    if (!read_int(s, bias)) return format_error(text, "expected the bias after 'b'", false);
    if (minus) bias = -bias;
    has_bias = true;
  }
  // Special-value suffix: none = every code finite (MX element convention); fn = no inf, NaN at the
  // all-ones code (OFP8 E4M3); fnuz = no inf, no -0, NaN at the negative-zero code; fnu = unsigned fn;
  // ieee = inf and NaN in the all-ones exponent.
  if (s == "" ) {
    spec.specials = Specials::None;
  } else if (s == "fn") {
    spec.specials = Specials::AllOnesNan;
  } else if (s == "fnuz") {
    spec.specials = Specials::NegZeroNan;
    if (!spec.is_signed) return format_error(text, "'fnuz' puts NaN at the negative-zero code, which an unsigned format lacks", false);
  } else if (s == "fnu") {
    if (!spec.is_signed) return format_error(text, "both the 'u' prefix and the 'fnu' suffix say unsigned; write one", false);
    spec.specials = Specials::AllOnesNan;
    spec.is_signed = false;
  } else if (s == "ieee") {
    spec.specials = Specials::Ieee;
  } else {
    return format_error(text, "unknown suffix '" + std::string(s) + "' (expected fn, fnuz, fnu or ieee)", true);
  }
  if (e < 1) return format_error(text, "a float format needs at least one exponent bit (use intN or mxintN for fixed point)", false);
  spec.exponent_bits = e;
  spec.mantissa_bits = m;
  // Widths beyond 32 bits are refused below; the shift must not run first for them (e99m99).
  const int default_bias = e > 30 ? 0 : spec.specials == Specials::NegZeroNan ? (1 << (e - 1)) : (1 << (e - 1)) - 1;
  spec.bias = has_bias ? bias : default_bias;
  const int bits = format_bits(spec);
  if (prefix_bits >= 0 && prefix_bits != bits)
    return format_error(text, "the prefix says " + std::to_string(prefix_bits) + " bits but " +
                                  (spec.is_signed ? std::string("sign + ") : std::string()) + "e" + std::to_string(e) +
                                  "m" + std::to_string(m) + " has " + std::to_string(bits),
                        false);
  if (bits > 32) return format_error(text, "more than 32 bits (" + std::to_string(bits) + ")", false);
  return finish(text, key, spec);
}

}  // namespace mxlab
