// Recipe files in TOML (toml++, the parser of experiment files): their settings in the order written.
#include <algorithm>
#include <cstdio>

#include <toml++/toml.h>

#include "mxlab/core/text.hpp"
#include "mxlab/core/toml_nodes.hpp"
#include "recipe_detail.hpp"

namespace mxlab::train::detail {
namespace {

/// The keys whose values are numbers; the others are strings.
bool numeric_key(std::string_view key) {
  for (const char* k : {"loss_scale", "growth_interval", "growth", "backoff", "min_scale", "amax_history_len", "margin"})
    if (key == k) return true;
  return false;
}

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

/// A value's text as the settings take it: a string as it is, a number with the digits that read back exactly.
Result<std::string> value_text(const std::string& key, const toml::node& n, bool numeric, const std::string& where) {
  if (numeric) {
    if (const auto* i = n.as_integer()) return std::to_string(i->get());
    if (const auto* f = n.as_floating_point()) return shortest_decimal(f->get());
    return make_error(where + "key '" + key + "' is " + node_kind(n) + ", expected a number");
  }
  if (const auto* s = n.as_string()) return s->get();
  return make_error(where + "key '" + key + "' is " + node_kind(n) + ", expected a string");
}

/// The overrides of one [[layer]] table: its pattern, then a role = format per key in the order written.
std::optional<Error> layer_settings(const toml::node& n, const std::string& origin, std::vector<RecipeSetting>& out) {
  const std::string where = origin + ":" + std::to_string(line_of(n)) + ": ";
  const toml::table* t = n.as_table();
  if (!t) return make_error(where + "key 'layer' holds " + node_kind(n) + ", expected [[layer]] tables");
  const toml::node* pattern = t->get("pattern");
  if (!pattern) return make_error(where + "[[layer]] needs a pattern (a glob such as \"blocks.*.attn.*\", or \"re:REGEX\")");
  auto p = value_text("pattern", *pattern, false, where);
  if (!p) return p.error();
  for (const auto& [key, v] : ordered_entries(*t)) {
    if (key == "pattern") continue;
    const std::string at = origin + ":" + std::to_string(line_of(*v)) + ": ";
    auto f = value_text(key, *v, false, at);
    if (!f) return f.error();
    out.push_back({key, *f, line_of(*v), true, *p});
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<RecipeSetting>> toml_recipe_settings(std::string_view text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& err) {
    return make_error(origin + ":" + std::to_string(err.source().begin.line) + ": " + std::string(err.description()));
  }
  std::vector<RecipeSetting> out;
  for (const auto& [key, v] : ordered_entries(root)) {
    const std::string where = origin + ":" + std::to_string(line_of(*v)) + ": ";
    if (key == "layer") {
      const toml::array* layers = v->as_array();
      if (!layers) return make_error(where + "key 'layer' holds " + node_kind(*v) + ", expected [[layer]] tables");
      for (const toml::node& l : *layers)
        if (auto e = layer_settings(l, origin, out)) return *e;
      continue;
    }
    auto value = value_text(key, *v, numeric_key(key), where);
    if (!value) return value.error();
    out.push_back({key, *value, line_of(*v), false, ""});
  }
  return out;
}

std::string toml_quote(std::string_view s) {
  std::string out = "\"";
  std::size_t i = 0;
  auto cont = [&](std::size_t at) { return at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80; };
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '"') out += "\\\"";
      else if (c == '\\') out += "\\\\";
      else if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c < 0x20 || c == 0x7F) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04X", c);
        out += buf;
      } else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence of 2 to 4 bytes (no overlong forms, no surrogates, at most U+10FFFF), else U+FFFD.
    std::size_t n = 0;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3;
    else if (c >= 0xF0 && c <= 0xF4) n = 4;
    bool ok = n > 0;
    for (std::size_t k = 1; ok && k < n; ++k) ok = cont(i + k);
    if (ok && n >= 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
        ok = false;
    }
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out + "\"";
}

}  // namespace mxlab::train::detail
