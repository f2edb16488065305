// Command-line argument parsing.
#include "cli/args.hpp"

#include <cctype>

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
      a.flags[name] = true;
      continue;
    }
    if (inline_value) {
      a.values[name] = *inline_value;
    } else {
      if (i + 1 >= argv.size()) return make_error("option '--" + name + "' needs a value (" + spec->value_name + ")");
      a.values[name] = argv[++i];
    }
  }
  return a;
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
