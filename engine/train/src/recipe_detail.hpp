// Recipe files' settings in the order they are written, from either syntax (recipe.cpp applies them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab::train::detail {

/// One setting: a key and its value's text ("g", "mxfp8_e5m2"; "margin", "2"), or an override of a role
/// (key) in the layers matching pattern.
struct RecipeSetting {
  std::string key, value;
  int line = 0;
  bool is_override = false;
  std::string pattern;
};

/// A TOML recipe's settings: top-level keys in the order written, then nothing but [[layer]] tables, each with a
/// pattern and formats of roles. Errors (TOML, a key of the wrong type, anything else) start with "ORIGIN:LINE: ".
Result<std::vector<RecipeSetting>> toml_recipe_settings(std::string_view text, const std::string& origin);

/// `s` as a TOML basic string: quoted, with '"', '\', the control characters and DEL escaped, and bytes that are
/// not UTF-8 replaced by U+FFFD (TOML holds only UTF-8).
std::string toml_quote(std::string_view s);

}  // namespace mxlab::train::detail
