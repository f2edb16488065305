// Internal: strict JSON parsing for file headers (nlohmann::json) with fixed limits on size, nesting
// and value count, and duplicate object keys rejected, so that a hostile header costs bounded memory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mxlab/core/error.hpp"

namespace mxlab::io_detail {

/// Longest JSON text a header may have (tfjs model.json, safetensors header). Real headers are below
/// 1 MiB; 16 MiB keeps a hostile one from costing more than a few hundred MiB once parsed.
inline constexpr std::size_t kMaxJsonBytes = std::size_t{16} << 20;
/// Deepest nesting of arrays and objects (real tfjs model.json files nest 11 levels, safetensors 4).
inline constexpr int kMaxJsonDepth = 64;
/// Most values (scalars, arrays, objects) a header may hold (the largest tfjs model.json seen: ~40,000).
inline constexpr std::size_t kMaxJsonValues = std::size_t{1} << 20;

/// Parses `text` as one JSON value under the limits above; an error says "<what>: <problem>".
Result<nlohmann::json> parse_json_limited(std::string_view text, std::string_view what);

/// Short description of a JSON value's type for messages ("a string", "an array", ...).
std::string json_kind(const nlohmann::json& v);

}  // namespace mxlab::io_detail
