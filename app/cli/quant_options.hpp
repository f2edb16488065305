// Command-line options of block quantization (every option of docs/quantization.md).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cli/args.hpp"
#include "mxlab/core/error.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::cli {

std::vector<OptionSpec> quant_options();

/// Parses SPEC, applies --profile, then every explicit option; errors name the option.
Result<BlockFormat> block_format_from_args(const std::string& spec, const Args& args);

/// The options of a block format as provenance pairs.
std::vector<std::pair<std::string, std::string>> describe_options(const BlockFormat& f);

/// The axes --layout or --reduction-axes name for blocks (none: the format's own axis).
std::optional<Result<std::vector<int>>> reduction_axes(const Args& args, const std::vector<std::int64_t>& shape);

}  // namespace mxlab::cli
