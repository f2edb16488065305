// Strict JSON parsing for file headers (nlohmann::json) with fixed limits on size, nesting
// and value count, and duplicate object keys rejected, so that a hostile header costs bounded memory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// Longest JSON text a header may have (tfjs model.json, safetensors header). Real headers are below
/// 1 MiB.
inline constexpr std::size_t kMaxJsonBytes = std::size_t{16} << 20;
/// Deepest nesting of arrays and objects (real tfjs model.json files nest 11 levels, safetensors 4).
inline constexpr int kMaxJsonDepth = 64;
/// Most values (scalars, arrays, objects) a header may hold (the largest tfjs model.json seen holds
/// ~40,000; a safetensors header ~8 per tensor). With the text limit this keeps a parsed header below
/// about 16 MiB of strings plus ~100 bytes per value, some 40 MiB at worst.
inline constexpr std::size_t kMaxJsonValues = std::size_t{1} << 18;

/// Parses `text` as one JSON value under the limits above; an error says "<what>: <problem>".
Result<nlohmann::json> parse_json_limited(std::string_view text, std::string_view what);

/// Short description of a JSON value's type for messages ("a string", "an array", ...).
std::string json_kind(const nlohmann::json& v);

}  // namespace mxlab
