// Command-line argument parsing shared by every mxlab command.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/named.hpp"

namespace mxlab::cli {

/// One option a command accepts.
struct OptionSpec {
  std::string name;        ///< without dashes, e.g. "round"
  bool takes_value = true;
  std::string value_name;  ///< for help, e.g. "MODE"
  std::string help;
};

/// The standard message of an option's bad value: "option '--NAME' needs WHAT, got '--NAME VALUE'".
Error option_error(const std::string& name, const std::string& value, const std::string& needs);

/// Parsed arguments of one command. The typed getters return the option's value, `fallback` when it is absent,
/// or option_error naming the option, its value and what it needs.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  ///< options with values (each given at most once)
  std::map<std::string, bool> flags;
  bool help = false;

  bool flag(const std::string& name) const { return flags.count(name) != 0; }
  std::optional<std::string> value(const std::string& name) const {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }

  /// A whole number in lo..hi, written in decimal or in hexadecimal after 0x.
  Result<std::int64_t> integer(const std::string& name, std::int64_t lo, std::int64_t hi, std::int64_t fallback) const;
  /// Any whole number 0..2^64-1 (seeds), decimal or hexadecimal after 0x.
  Result<std::uint64_t> unsigned_integer(const std::string& name, std::uint64_t fallback) const;
  /// A count or size in lo..hi.
  Result<std::size_t> size(const std::string& name, std::size_t lo, std::size_t hi, std::size_t fallback) const;
  /// A finite number above zero (`positive`) or at least zero.
  Result<double> real(const std::string& name, bool positive, double fallback) const;
  /// One of the names of `choices` (Named<E> rows).
  template <typename E>
  Result<E> choice(const std::string& name, std::span<const Named<E>> choices, E fallback) const {
    const auto v = value(name);
    if (!v) return fallback;
    for (const auto& c : choices)
      if (c.name == *v) return c.value;
    std::string list;
    for (std::size_t i = 0; i < choices.size(); ++i)
      list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(choices[i].name);
    return option_error(name, *v, list);
  }
};

/// Parses argv[first..]; "--name value", "--name=value", flags, "--" ends options. Numbers such as
/// "-1.5" or "-inf" are positional, not options. An option given twice is an error.
Result<Args> parse_args(const std::vector<std::string>& argv, std::size_t first, const std::vector<OptionSpec>& specs);

/// Help text for a command's options.
std::string options_help(const std::vector<OptionSpec>& specs);

}  // namespace mxlab::cli
