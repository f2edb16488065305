// Command-line options of block quantization: the engine's format options as --NAME VALUE.
#include "cli/quant_options.hpp"

#include <algorithm>
#include <charconv>

#include "mxlab/io/tensor.hpp"
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

std::optional<Result<std::vector<int>>> reduction_axes(const Args& args, const std::vector<std::int64_t>& shape) {
  const auto layout = args.value("layout");
  const auto list = args.value("reduction-axes");
  if (layout && list) return Result<std::vector<int>>(make_error("choose one of --layout, --reduction-axes"));
  if (list) {
    std::vector<int> axes;
    std::size_t pos = 0;
    while (pos <= list->size()) {
      const std::size_t end = std::min(list->find(',', pos), list->size());
      int a = 0;
      auto [p, ec] = std::from_chars(list->data() + pos, list->data() + end, a);
      if (ec != std::errc() || p != list->data() + end)
        return Result<std::vector<int>>(make_error("option '--reduction-axes " + *list + "': expected axes such as 2 or 0,1"));
      axes.push_back(a);
      pos = end + 1;
    }
    return Result<std::vector<int>>(axes);
  }
  if (!layout) return std::nullopt;
  struct Layout {
    const char* name;
    std::size_t rank;
    std::vector<int> axes;
  };
  const Layout layouts[] = {{"hwio", 4, {2}}, {"hwio-depthwise", 4, {0, 1}}, {"io", 2, {0}}, {"oi", 2, {1}}, {"oihw", 4, {1}}};
  for (const auto& l : layouts) {
    if (*layout != l.name) continue;
    if (shape.size() != l.rank)
      return Result<std::vector<int>>(make_error("option '--layout " + *layout + "' needs a " + std::to_string(l.rank) +
                                                 "-D tensor; the input has shape " + format_shape(shape)));
    return Result<std::vector<int>>(l.axes);
  }
  return Result<std::vector<int>>(
      make_error("option '--layout " + *layout + "': expected hwio, hwio-depthwise, io, oi or oihw"));
}

}  // namespace mxlab::cli
