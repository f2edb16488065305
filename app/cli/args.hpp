// Command-line argument parsing shared by every mxlab command.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab::cli {

/// One option a command accepts.
struct OptionSpec {
  std::string name;        ///< without dashes, e.g. "round"
  bool takes_value = true;
  std::string value_name;  ///< for help, e.g. "MODE"
  std::string help;
};

/// Parsed arguments of one command.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  ///< options with values (last one wins)
  std::map<std::string, bool> flags;
  bool help = false;

  bool flag(const std::string& name) const { return flags.count(name) != 0; }
  std::optional<std::string> value(const std::string& name) const {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};

/// Parses argv[first..]; "--name value", "--name=value", flags, "--" ends options. Numbers such as
/// "-1.5" or "-inf" are positional, not options.
Result<Args> parse_args(const std::vector<std::string>& argv, std::size_t first, const std::vector<OptionSpec>& specs);

/// Help text for a command's options.
std::string options_help(const std::vector<OptionSpec>& specs);

}  // namespace mxlab::cli
