// Command-line argument parsing.
#include "cli/args.hpp"

#include <cctype>
#include <cmath>
#include <cstdint>

#include "mxlab/core/quote.hpp"
#include "mxlab/core/text.hpp"

namespace mxlab::cli {
namespace {
bool looks_like_number(const std::string& s) {
  if (s.size() < 2 || s[0] != '-') return false;
  const char c = s[1];
  return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || s == "-inf" || s == "-nan" || s == "-INF";
}
}  // namespace

Result<Args> parse_args(const std::vector<std::string>& argv, std::size_t first, const std::vector<OptionSpec>& specs) {
  Args a;
  bool options_done = false;
  for (std::size_t i = first; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (options_done || s.size() < 2 || s[0] != '-' || looks_like_number(s)) {
      a.positional.push_back(s);
      continue;
    }
    if (s == "--") {
      options_done = true;
      continue;
    }
    if (s == "-h" || s == "--help") {
      a.help = true;
      continue;
    }
    if (s.rfind("--", 0) != 0) return make_error("unknown option '" + s + "' (options start with --; see --help)");
    std::string name = s.substr(2);
    std::optional<std::string> inline_value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* spec = nullptr;
    for (const auto& o : specs)
      if (o.name == name) spec = &o;
    if (!spec) return make_error("unknown option '--" + name + "' (see --help)");
    if (!spec->takes_value) {
      if (inline_value) return make_error("option '--" + name + "' takes no value");
      if (a.flags.count(name)) return make_error("option '--" + name + "' given twice");
      a.flags[name] = true;
      continue;
    }
    if (!inline_value && i + 1 >= argv.size())
      return make_error("option '--" + name + "' needs a value (" + spec->value_name + ")");
    const std::string value = inline_value ? *inline_value : argv[++i];
    if (const auto it = a.values.find(name); it != a.values.end())
      return make_error("option '--" + name + "' given twice (" + quote_input("--" + name + " " + it->second) + ", then " +
                        quote_input("--" + name + " " + value) + ")");
    a.values[name] = value;
  }
  return a;
}

Error option_error(const std::string& name, const std::string& value, const std::string& needs) {
  return make_error("option '--" + name + "' needs " + needs + ", got " + quote_input("--" + name + " " + value));
}

Result<std::int64_t> Args::integer(const std::string& name, std::int64_t lo, std::int64_t hi, std::int64_t fallback) const {
  const auto v = value(name);
  if (!v) return fallback;
  std::optional<std::int64_t> n;
  if (const auto code = parse_code(*v); code && *code <= static_cast<std::uint64_t>(INT64_MAX))
    n = static_cast<std::int64_t>(*code);
  else n = parse_whole<std::int64_t>(*v);
  if (!n || *n < lo || *n > hi)
    return option_error(name, *v, "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
  return *n;
}

Result<std::uint64_t> Args::unsigned_integer(const std::string& name, std::uint64_t fallback) const {
  const auto v = value(name);
  if (!v) return fallback;
  const auto n = parse_code(*v);
  if (!n) return option_error(name, *v, "a whole number from 0 to 18446744073709551615");
  return *n;
}

Result<std::size_t> Args::size(const std::string& name, std::size_t lo, std::size_t hi, std::size_t fallback) const {
  const auto v = value(name);
  if (!v) return fallback;
  const auto n = parse_code(*v);
  if (!n || *n < lo || *n > hi)
    return option_error(name, *v, "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<std::size_t>(*n);
}

Result<double> Args::real(const std::string& name, bool positive, double fallback) const {
  const auto v = value(name);
  if (!v) return fallback;
  const auto x = parse_double(*v);
  if (!x || !std::isfinite(*x) || *x < 0 || (positive && *x == 0))
    return option_error(name, *v, positive ? "a finite number above 0" : "a finite number of at least 0");
  return *x;
}

std::string options_help(const std::vector<OptionSpec>& specs) {
  std::string out;
  for (const auto& o : specs) {
    std::string left = "  --" + o.name + (o.takes_value ? " " + o.value_name : "");
    if (left.size() < 30) left += std::string(30 - left.size(), ' ');
    else left += "  ";
    out += left + o.help + "\n";
  }
  out += "  -h, --help                  this help\n";
  return out;
}

}  // namespace mxlab::cli
