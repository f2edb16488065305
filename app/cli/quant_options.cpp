// Command-line options of block quantization: the engine's format options as --NAME VALUE.
#include "cli/quant_options.hpp"

#include "mxlab/ops/requests.hpp"

namespace mxlab::cli {

std::vector<OptionSpec> quant_options() {
  std::vector<OptionSpec> specs;
  for (const auto& o : ops::format_options()) specs.push_back({o.name, true, o.value_name, o.help});
  return specs;
}

Result<BlockFormat> block_format_from_args(const std::string& spec, const Args& args) {
  std::vector<std::pair<std::string, std::string>> options;
  for (const auto& o : ops::format_options())
    if (auto v = args.value(o.name)) options.emplace_back(o.name, *v);
  return ops::block_format(spec, options, [](std::string_view name) { return "option '--" + std::string(name) + "'"; });
}

std::vector<std::pair<std::string, std::string>> describe_options(const BlockFormat& f) {
  return ops::describe_options(f);
}

}  // namespace mxlab::cli
