// Format strings: catalogue names and aliases, generic [u]eXmY[bB][fn|fnuz|fnu|ieee], intN, uintN,
// mxintN, and codebook:v0,v1,... Errors name the string, say what is wrong and suggest close names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab {

/// Parses a format string. Generic strings whose columns equal a catalogue row return that row.
Result<Format> parse_format(std::string_view text);

/// Up to `n` catalogue names or aliases closest to `text` (edit distance), closest first.
std::vector<std::string> suggest_format_names(std::string_view text, std::size_t n = 3);

/// Levenshtein distance (case-sensitive).
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace mxlab
