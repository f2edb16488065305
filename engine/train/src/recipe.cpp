// Recipes: presets, the recipe file format, and the block format of each role of each layer.
#include "mxlab/train/recipe.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "mxlab/core/quote.hpp"
#include "mxlab/core/small_file.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/model.hpp"
#include "mxlab/io/weights.hpp"
#include "recipe_detail.hpp"

namespace mxlab::train {
namespace {

constexpr Role kRoles[] = {Role::W, Role::A, Role::G, Role::WBp, Role::ABp};

RoleFormats all_roles(const std::string& f) { return RoleFormats{f, f, f, f, f}; }

}  // namespace

std::string_view role_name(Role r) {
  switch (r) {
    case Role::W: return "w";
    case Role::A: return "a";
    case Role::G: return "g";
    case Role::WBp: return "w_bp";
    case Role::ABp: return "a_bp";
  }
  return "?";
}

Result<Role> parse_role(std::string_view text) {
  for (Role r : kRoles)
    if (role_name(r) == text) return r;
  return make_error("unknown tensor role '" + std::string(text) + "' (known: w, a, g, w_bp, a_bp)");
}

RoleFormat::RoleFormat(std::string text)
    : text_(std::move(text)), parsed_(std::make_shared<const Result<std::optional<BlockFormat>>>(role_format(text_))) {}

const Result<std::optional<BlockFormat>>& RoleFormat::format() const {
  static const Result<std::optional<BlockFormat>> kNone{std::optional<BlockFormat>{}};
  return parsed_ ? *parsed_ : kNone;
}

RoleFormat& RoleFormats::at(Role r) {
  switch (r) {
    case Role::W: return w;
    case Role::A: return a;
    case Role::G: return g;
    case Role::WBp: return w_bp;
    case Role::ABp: return a_bp;
  }
  return w;
}
const RoleFormat& RoleFormats::at(Role r) const { return const_cast<RoleFormats*>(this)->at(r); }

std::vector<std::string> recipe_presets() {
  return {"fp32", "fp16", "fp16-static", "fp16-noscale", "bf16", "fp8_current", "fp8_delayed", "mxfp8", "mxfp8_e4m3", "mxfp6", "mxfp4",
          "mxint8", "mxsf", "boost_e2m5", "nvfp4"};
}

Result<Recipe> recipe_preset(std::string_view name) {
  Recipe r;
  r.name = std::string(name);
  if (name == "fp32") return r;
  if (name == "fp16" || name == "fp16-static" || name == "fp16-noscale") {
    r.formats = all_roles("fp16");
    if (name == "fp16") r.loss_scaling.mode = LossScaling::Mode::Dynamic;
    if (name == "fp16-static") {
      r.loss_scaling.mode = LossScaling::Mode::Static;
      r.loss_scaling.initial = 1024.0;
    }
    return r;
  }
  if (name == "bf16") {
    r.formats = all_roles("bf16");
    return r;
  }
  if (name == "fp8_current") {
    // FP8 hybrid with per-tensor current scaling: one FP32 scale per operand from its own amax (rule amax).
    r.formats = RoleFormats{"e4m3:float32", "e4m3:float32", "e5m2:float32", "e4m3:float32", "e4m3:float32"};
    return r;
  }
  if (name == "fp8_delayed") {
    // FP8 hybrid with Transformer Engine's DelayedScaling defaults (history 1024, max, margin 0).
    r.formats = RoleFormats{"e4m3", "e4m3", "e5m2", "e4m3", "e4m3"};
    r.delayed.enabled = true;
    return r;
  }
  if (name == "mxfp8") {
    // The FP8 training convention: E4M3 for weights and activations, E5M2 (more range) for gradients.
    r.formats = RoleFormats{"mxfp8_e4m3", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp8_e4m3", "mxfp8_e4m3"};
    return r;
  }
  if (name == "mxfp6") {
    r.formats = RoleFormats{"mxfp6_e2m3", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp6_e2m3"};
    return r;
  }
  for (const char* single : {"mxfp8_e4m3", "mxfp4", "mxint8", "mxsf", "boost_e2m5", "nvfp4"}) {
    if (name == single) {
      r.formats = all_roles(single);
      return r;
    }
  }
  std::string msg = "unknown recipe '" + std::string(name) + "' (presets:";
  for (const auto& p : recipe_presets()) msg += " " + p;
  return make_error(msg + ")");
}

Result<std::optional<BlockFormat>> role_format(const std::string& text) {
  if (text.empty() || text == "fp32" || text == "float32") return std::optional<BlockFormat>{};
  auto block = parse_block_format(text);
  if (block) return std::optional<BlockFormat>{*block};
  std::string alias = text;
  if (alias == "fp16") alias = "float16";
  if (alias == "bf16") alias = "bfloat16";
  auto element = parse_format(alias);
  if (!element) return make_error("format '" + text + "': neither a block format (" + block.error().message +
                                  ") nor an element format (" + element.error().message + ")");
  BlockFormat f;
  f.name = text;
  f.element = *element;
  f.layout = ScaleLayout{};  // no scale: a plain elementwise cast of the whole tensor
  f.options.element.overflow = element->has_inf() ? Overflow::Inf : Overflow::Saturate;
  return std::optional<BlockFormat>{f};
}

Result<std::vector<std::optional<BlockFormat>>> layer_formats(const Recipe& recipe, const std::string& layer) {
  auto table = LayerFormatTable::make(recipe);
  if (!table) return table.error();
  return table->formats(layer);
}

Result<LayerFormatTable> LayerFormatTable::make(const Recipe& recipe) {
  LayerFormatTable t;
  t.recipe_name_ = recipe.name;
  t.base_ = recipe.formats;
  for (const auto& o : recipe.overrides) {
    auto pattern = NamePattern::parse(o.pattern);
    if (!pattern) return pattern.error();
    t.overrides_.push_back({std::move(*pattern), o.role, o.format});
  }
  return t;
}

Result<std::vector<std::optional<BlockFormat>>> LayerFormatTable::formats(const std::string& layer) {
  if (const auto row = rows_.find(layer); row != rows_.end()) return row->second;
  RoleFormats chosen = base_;
  for (const auto& o : overrides_)
    if (o.pattern.matches(layer)) chosen.at(o.role) = o.format;
  std::vector<std::optional<BlockFormat>> out;
  for (Role r : kRoles) {
    const auto& f = chosen.at(r).format();  // parsed when the recipe was set
    if (!f) return make_error("recipe '" + recipe_name_ + "', layer '" + layer + "', role " +
                              std::string(role_name(r)) + ": " + f.error().message);
    out.push_back(*f);
  }
  rows_.emplace(layer, out);
  return out;
}

namespace {

/// The keys of a recipe, for the message of an unknown one.
constexpr const char* kKnownKeys =
    "preset, name, all, fwd, bwd, w, a, g, w_bp, a_bp, nongemm, loss_scaling, loss_scale, growth_interval, growth, "
    "backoff, min_scale, scaling, amax_history_len, amax_compute_algo, margin, accumulate";

/// The format of `text`, parsed once, or why it is not one.
Result<RoleFormat> checked_format(const std::string& text) {
  RoleFormat f(text);
  if (!f.format()) return f.format().error();
  return f;
}

/// Sets one key (not an override) from its value's text; `named`: a name was set, which a later preset keeps.
std::optional<Error> apply_setting(Recipe& r, bool& named, const std::string& key, const std::string& value) {
  if (key == "preset") {
    auto p = recipe_preset(value);
    if (!p) return p.error();
    const auto name = r.name;
    r = *p;
    if (named) r.name = name;
    return std::nullopt;
  }
  if (key == "name") {
    r.name = value;
    named = true;
    return std::nullopt;
  }
  if (key == "all" || key == "fwd" || key == "bwd" || key == "w" || key == "a" || key == "g" || key == "w_bp" ||
      key == "a_bp") {
    auto f = checked_format(value);
    if (!f) return f.error();
    if (key == "all" || key == "fwd") r.formats.w = r.formats.a = *f;
    if (key == "all" || key == "bwd") r.formats.g = r.formats.w_bp = r.formats.a_bp = *f;
    if (key != "all" && key != "fwd" && key != "bwd") r.formats.at(*parse_role(key)) = *f;
    return std::nullopt;
  }
  if (key == "nongemm") {
    if (auto f = checked_format(value); !f) return f.error();
    r.nongemm = value == "fp32" ? "" : value;
    return std::nullopt;
  }
  if (key == "accumulate") {
    if (auto m = gemm::parse_model(value); !m) return make_error("accumulate: " + m.error().message);
    r.accumulate = value;
    return std::nullopt;
  }
  if (key == "loss_scaling") {
    if (value == "none") r.loss_scaling.mode = LossScaling::Mode::None;
    else if (value == "static") r.loss_scaling.mode = LossScaling::Mode::Static;
    else if (value == "dynamic") r.loss_scaling.mode = LossScaling::Mode::Dynamic;
    else return make_error("loss_scaling must be none, static or dynamic, got '" + value + "'");
    return std::nullopt;
  }
  if (key == "scaling") {
    if (value != "none" && value != "delayed") return make_error("scaling must be none or delayed, got '" + value + "'");
    r.delayed.enabled = value == "delayed";
    return std::nullopt;
  }
  if (key == "amax_compute_algo") {
    if (value == "max") r.delayed.algo = DelayedScaling::Algo::Max;
    else if (value == "most_recent") r.delayed.algo = DelayedScaling::Algo::MostRecent;
    else return make_error("amax_compute_algo must be max or most_recent, got '" + value + "'");
    return std::nullopt;
  }
  const auto parsed = parse_double(value);
  const bool is_number = parsed.has_value();
  const double number = parsed.value_or(0.0);
  const bool whole = is_number && std::fabs(number) < 1e15 && number == std::trunc(number);
  if (key == "amax_history_len") {
    if (!whole || number < 1 || number > 1000000)
      return make_error("'amax_history_len' needs a whole number 1..1000000, got '" + value + "'");
    r.delayed.history_len = static_cast<std::int64_t>(number);
    return std::nullopt;
  }
  if (key == "margin") {
    if (!whole || number < -64 || number > 64) return make_error("'margin' needs a whole number -64..64, got '" + value + "'");
    r.delayed.margin = static_cast<int>(number);
    return std::nullopt;
  }
  if (key == "loss_scale" || key == "growth" || key == "backoff" || key == "min_scale" || key == "growth_interval") {
    if (!is_number || !(number > 0) || number > 1e30)
      return make_error("'" + key + "' needs a positive number, got '" + value + "'");
    if (key == "loss_scale") r.loss_scaling.initial = number;
    if (key == "growth") r.loss_scaling.growth = number;
    if (key == "backoff") r.loss_scaling.backoff = number;
    if (key == "min_scale") r.loss_scaling.min_scale = number;
    if (key == "growth_interval") {
      if (!whole) return make_error("'growth_interval' needs a whole number, got '" + value + "'");
      r.loss_scaling.growth_interval = static_cast<std::int64_t>(number);
    }
    return std::nullopt;
  }
  return make_error("unknown key '" + key + "' (known: " + kKnownKeys + ", layer PATTERN ROLE)");
}

/// Applies settings in order; errors start with "ORIGIN:LINE: ". A recipe without any setting is an error.
Result<Recipe> apply_settings(const std::vector<detail::RecipeSetting>& settings, const std::string& origin) {
  Recipe r;
  r.name = origin;
  bool named = false;
  for (const auto& s : settings) {
    const auto where = origin + ":" + std::to_string(s.line) + ": ";
    std::optional<Error> e;
    if (s.is_override) e = add_recipe_override(r, s.pattern, s.key, s.value);
    else e = apply_setting(r, named, s.key, s.value);
    if (e) return make_error(where + e->message);
  }
  // An empty file (or comments only) is not FP32 by accident: FP32 is 'preset = "fp32"'.
  if (settings.empty()) return make_error("recipe '" + origin + "' holds no settings (for FP32 write 'preset = \"fp32\"')");
  return r;
}

/// The settings of a recipe in the old "key = value" lines ('#' comments, "layer PATTERN ROLE = FORMAT").
Result<std::vector<detail::RecipeSetting>> key_value_settings(std::string_view text, const std::string& origin) {
  std::vector<detail::RecipeSetting> out;
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    const std::string t(trim(line));
    if (t.empty()) continue;
    const auto where = origin + ":" + std::to_string(line_no) + ": ";
    const auto eq = t.find('=');
    if (eq == std::string::npos) return make_error(where + "expected 'key = value', got '" + t + "'");
    detail::RecipeSetting s;
    s.line = line_no;
    s.key = trim(std::string_view(t).substr(0, eq));
    s.value = trim(std::string_view(t).substr(eq + 1));
    if (s.value.empty()) return make_error(where + "'" + s.key + "' needs a value");
    if (s.key.rfind("layer ", 0) == 0) {
      std::istringstream words(s.key.substr(6));
      std::string pattern, role, extra;
      words >> pattern >> role;
      if (pattern.empty() || role.empty() || (words >> extra)) return make_error(where + "expected 'layer PATTERN ROLE = FORMAT'");
      s.pattern = pattern;
      s.key = role;
      s.is_override = true;
    }
    out.push_back(std::move(s));
  }
  return out;
}

/// Whether text was meant as TOML: a table header, or a quoted value (the old lines have neither).
bool looks_like_toml(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view t = trim(line);
    if (t.starts_with('[')) return true;
    if (const auto eq = t.find('='); eq != std::string_view::npos) {
      const std::string_view v = trim(t.substr(eq + 1));
      if (v.starts_with('"') || v.starts_with('\'')) return true;
    }
  }
  return false;
}

}  // namespace

std::optional<Error> add_recipe_override(Recipe& r, const std::string& pattern, const std::string& role_text,
                                         const std::string& format) {
  auto role = parse_role(role_text);
  if (!role) return role.error();
  auto p = NamePattern::parse(pattern);
  if (!p) return p.error();
  auto f = checked_format(format);
  if (!f) return f.error();
  r.overrides.push_back({pattern, *role, *f});
  return std::nullopt;
}

std::optional<Error> apply_recipe_setting(Recipe& r, const std::string& key, const std::string& value) {
  bool named = true;  // the recipe has its name: a preset keeps it
  return apply_setting(r, named, key, value);
}

Result<Recipe> parse_recipe(std::string_view text, const std::string& origin, RecipeSyntax* syntax) {
  auto toml = detail::toml_recipe_settings(text, origin);
  std::optional<Error> toml_error;
  if (toml) {
    auto r = apply_settings(*toml, origin);
    if (r) {
      if (syntax) *syntax = RecipeSyntax::Toml;
      return r;
    }
    toml_error = r.error();
  } else {
    toml_error = toml.error();
  }
  // Text meant as TOML gets TOML's message; other text may be the "key = value" lines of earlier releases, read
  // until the next one.
  if (looks_like_toml(text)) return *toml_error;
  auto lines = key_value_settings(text, origin);
  auto old = lines ? apply_settings(*lines, origin) : Result<Recipe>(lines.error());
  if (old && syntax) *syntax = RecipeSyntax::KeyValue;
  return old;
}

std::string recipe_syntax_warning(const std::string& path) {
  return "recipe file " + quote_input(path) +
         " is written in the old 'key = value' lines, which the next release will not read; write it in TOML "
         "(docs/training.md, \"Recipe files\")";
}

Result<Recipe> load_recipe(const std::string& name_or_path, RecipeSyntax* syntax) {
  if (auto p = recipe_preset(name_or_path)) return p;
  // Whatever exists under the name is the recipe file: a directory, a device or a FIFO is refused, not read
  // as an empty recipe or forever.
  if (std::error_code ec; std::filesystem::symlink_status(name_or_path, ec).type() != std::filesystem::file_type::not_found &&
                          !ec) {
    auto text = read_small_file(name_or_path, kMaxRecipeFileBytes, "recipe");
    if (!text) return text.error();
    return parse_recipe(*text, name_or_path, syntax);
  }
  if (auto f = role_format(name_or_path); f && f->has_value()) {
    Recipe r;
    r.name = name_or_path;
    r.formats = all_roles(name_or_path);
    return r;
  }
  std::string msg = "recipe '" + name_or_path + "' is neither a preset (";
  const auto names = recipe_presets();
  for (std::size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
  return make_error(msg + "), a recipe file, nor a format name for every role");
}

std::string recipe_text(const Recipe& r) {
  using detail::toml_quote;
  std::ostringstream s;
  s << "name = " << toml_quote(r.name) << "\n";
  for (Role role : kRoles) {
    const auto& f = r.formats.at(role);
    s << role_name(role) << " = " << toml_quote(f.empty() ? "fp32" : f.text()) << "\n";
  }
  if (!r.nongemm.empty()) s << "nongemm = " << toml_quote(r.nongemm) << "\n";
  const char* modes[] = {"none", "static", "dynamic"};
  s << "loss_scaling = \"" << modes[static_cast<int>(r.loss_scaling.mode)] << "\"\n";
  if (r.loss_scaling.mode != LossScaling::Mode::None) {
    s << "loss_scale = " << shortest_decimal(r.loss_scaling.initial) << "\n";
    if (r.loss_scaling.mode == LossScaling::Mode::Dynamic)
      s << "growth_interval = " << r.loss_scaling.growth_interval << "\ngrowth = " << shortest_decimal(r.loss_scaling.growth)
        << "\nbackoff = " << shortest_decimal(r.loss_scaling.backoff)
        << "\nmin_scale = " << shortest_decimal(r.loss_scaling.min_scale) << "\n";
  }
  if (r.delayed.enabled)
    s << "scaling = \"delayed\"\namax_history_len = " << r.delayed.history_len << "\namax_compute_algo = \""
      << (r.delayed.algo == DelayedScaling::Algo::Max ? "max" : "most_recent") << "\"\nmargin = " << r.delayed.margin
      << "\n";
  if (!r.accumulate.empty()) s << "accumulate = " << toml_quote(r.accumulate) << "\n";
  for (const auto& o : r.overrides)
    s << "\n[[layer]]\npattern = " << toml_quote(o.pattern) << "\n" << role_name(o.role) << " = " << toml_quote(o.format.text())
      << "\n";
  return s.str();
}

}  // namespace mxlab::train
