// Training recipes as data: the block format of every GEMM operand per tensor role, per-layer overrides,
// and loss scaling; named presets and TOML recipe files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/io/weights.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::train {

/// The operand roles of a layer's GEMMs (microxcaling's w / a / g knobs, forward and backward apart).
/// Forward Y = X W quantizes X as `a` and W as `w`; backward dX = dY W^T quantizes dY as `g` and W as `w_bp`;
/// dW = X^T dY quantizes X as `a_bp` and dY as `g`. Attention's Q K^T and A V take both operands as
/// activations (`a` forward, `a_bp` backward) and their output gradients as `g`.
enum class Role : std::uint8_t { W, A, G, WBp, ABp };
inline constexpr int kRoleCount = 5;

/// "w", "a", "g", "w_bp", "a_bp".
std::string_view role_name(Role r);
/// The role with this name, or an error listing the names.
Result<Role> parse_role(std::string_view text);

/// The format of a role: its text as written ("mxfp8_e4m3", "fp16"; empty or "fp32" for none), parsed once when
/// it is set (role_format); copies share the parsed format.
class RoleFormat {
 public:
  RoleFormat() = default;
  RoleFormat(std::string text);  // NOLINT(google-explicit-constructor): a recipe's formats are set from text
  RoleFormat(const char* text) : RoleFormat(std::string(text)) {}  // NOLINT(google-explicit-constructor)

  const std::string& text() const { return text_; }
  bool empty() const { return text_.empty(); }
  /// The parsed format (nothing: FP32), or why the text is not a format.
  const Result<std::optional<BlockFormat>>& format() const;

  bool operator==(const RoleFormat& o) const { return text_ == o.text_; }
  bool operator==(const std::string& t) const { return text_ == t; }
  bool operator==(const char* t) const { return text_ == t; }
  bool operator==(std::string_view t) const { return text_ == t; }

 private:
  std::string text_;
  std::shared_ptr<const Result<std::optional<BlockFormat>>> parsed_;
};

/// The format of each role; an empty one means FP32 (no quantization).
struct RoleFormats {
  RoleFormat w, a, g, w_bp, a_bp;
  RoleFormat& at(Role r);
  const RoleFormat& at(Role r) const;
};

/// The format of one role in the layers whose names match `pattern` (a glob such as "blocks.*.attn.*", or
/// "re:REGEX"), replacing the recipe's.
struct LayerOverride {
  std::string pattern;
  Role role = Role::W;
  RoleFormat format;  ///< "fp32" for no quantization
};

/// Loss scaling (mixed-precision training, Micikevicius et al. 2018, section 3.2).
struct LossScaling {
  enum class Mode : std::uint8_t { None, Static, Dynamic };
  Mode mode = Mode::None;
  double initial = 65536.0;       ///< the first scale (static: the scale)
  std::int64_t growth_interval = 2000;  ///< dynamic: steps without overflow before the scale grows
  double growth = 2.0;            ///< dynamic: factor of a growth
  double backoff = 0.5;           ///< dynamic: factor after an overflow
  double min_scale = 1.0;         ///< dynamic: the scale never goes below this
};

/// Per-tensor delayed scaling (Transformer Engine's DelayedScaling recipe) of the operands whose format is a
/// plain element format without block scales ("e4m3", "e5m2"): each (layer, role) keeps a history of the
/// amax of its last `history_len` steps, and step t multiplies the operand by the scale computed from the
/// history up to step t-1, scale = fp8_max / amax / 2^margin, before the saturating element cast.
struct DelayedScaling {
  enum class Algo : std::uint8_t { Max, MostRecent };
  bool enabled = false;
  std::int64_t history_len = 1024;  ///< amax_history_len (Transformer Engine's default)
  Algo algo = Algo::Max;            ///< amax_compute_algo: max over the history, or the most recent amax
  int margin = 0;                   ///< the scale is divided by 2^margin
};

/// A training recipe: formats per role, overrides per layer, loss scaling. Master weights, optimizer state and
/// every non-GEMM operation stay in FP32.
struct Recipe {
  std::string name = "fp32";
  RoleFormats formats;
  std::vector<LayerOverride> overrides;  ///< later entries win
  LossScaling loss_scaling;
  DelayedScaling delayed;  ///< off: element-format operands are cast without a scale
  /// Format the outputs of the non-GEMM layers are rounded to, forward and backward (activations, pooling,
  /// layer norm, attention softmax; not the loss, the residual sums or the optimizer): "" or "fp32" keeps
  /// FP32, "bf16" simulates BF16 elementwise arithmetic.
  std::string nongemm;
  /// The accumulation model of every GEMM, forward and backward (a model string of docs/gemm.md such as
  /// "tensorcore-trunc14"): the products of the quantized operands are computed under it by the gemm module.
  /// "" keeps float32 products (Eigen).
  std::string accumulate;
};

/// Names of the presets.
std::vector<std::string> recipe_presets();

/// A preset by name: fp32, fp16 (dynamic loss scaling), fp16-static, fp16-noscale, bf16, fp8_current and
/// fp8_delayed (FP8 hybrid: E4M3 forward, E5M2 gradients, one scale per tensor from the current amax or from
/// the amax history), mxfp8 (E4M3 forward, E5M2 gradients), mxfp8_e4m3, mxfp6, mxfp4, mxint8, mxsf,
/// boost_e2m5, nvfp4.
Result<Recipe> recipe_preset(std::string_view name);

/// How a recipe file is written: TOML, or the "key = value" lines of earlier releases (read until the next
/// release; whoever reads one should say so and point to the TOML form).
enum class RecipeSyntax : std::uint8_t { Toml, KeyValue };

/// Parses a recipe file's text: TOML (docs/training.md) with the keys preset (start from a preset), name, all /
/// fwd / bwd / w / a / g / w_bp / a_bp (formats), nongemm (format), loss_scaling (none|static|dynamic), loss_scale,
/// growth_interval, growth, backoff, min_scale (numbers), scaling (none|delayed), amax_history_len (number),
/// amax_compute_algo (max|most_recent), margin (number), accumulate (an accumulation model, docs/gemm.md), and
/// [[layer]] tables of a pattern and role = format overrides; or, text TOML does not read, the old "key = value" lines ('#' comments, "layer PATTERN ROLE =
/// FORMAT"), which `syntax` reports. `origin` names the file in messages. Text without any setting (empty, or
/// comments only) is an error.
Result<Recipe> parse_recipe(std::string_view text, const std::string& origin, RecipeSyntax* syntax = nullptr);

/// Applies one setting to a recipe as a recipe file writes it (key "g", value "mxfp8_e5m2"; "margin", "2"); a
/// preset keeps the recipe's name. Errors say what is wrong with the value.
std::optional<Error> apply_recipe_setting(Recipe& recipe, const std::string& key, const std::string& value);

/// Adds an override: `format` for the role named `role` in the layers matching `pattern`.
std::optional<Error> add_recipe_override(Recipe& recipe, const std::string& pattern, const std::string& role,
                                         const std::string& format);

/// The largest recipe file load_recipe reads (1 MB: thousands of override lines).
inline constexpr std::uint64_t kMaxRecipeFileBytes = std::uint64_t{1} << 20;

/// A preset name, a recipe file, or a block format name for every role ("mxfp8_e4m3@32x32"). Whatever exists
/// under the name is read as the recipe file: it must be a regular file of at most kMaxRecipeFileBytes with at
/// least one setting (an empty recipe is refused, not taken as FP32).
Result<Recipe> load_recipe(const std::string& name_or_path, RecipeSyntax* syntax = nullptr);

/// What whoever reads a recipe file in the old "key = value" lines says: "recipe file 'PATH' is written in the
/// old 'key = value' lines, which the next release will not read; write it in TOML (docs/training.md, \"Recipe
/// files\")" (mxlab train's warning, Python's DeprecationWarning).
std::string recipe_syntax_warning(const std::string& path);

/// The block format of a role's format text: a block spec (parse_block_format), or an element format for a
/// per-tensor cast without scale ("fp16", "bf16", "e4m3"; overflow to Inf where the format has one, so loss
/// scaling sees it). Empty or "fp32" gives no format (FP32, no quantization).
Result<std::optional<BlockFormat>> role_format(const std::string& text);

/// The formats a layer's GEMM operands use under the recipe (overrides applied), in Role order.
Result<std::vector<std::optional<BlockFormat>>> layer_formats(const Recipe& recipe, const std::string& layer);

/// The formats of every layer of a run under one recipe, resolved once: the override patterns are parsed when
/// the table is made, and a layer's formats (every pattern matched against its name, later overrides winning)
/// when it is first asked for; a layer asked for again reads its row. The same formats as layer_formats.
class LayerFormatTable {
 public:
  /// The table of a recipe, or the error of its first override pattern that does not parse.
  static Result<LayerFormatTable> make(const Recipe& recipe);
  /// The formats of the layer's GEMM operands, in Role order.
  Result<std::vector<std::optional<BlockFormat>>> formats(const std::string& layer);

 private:
  struct Override {
    NamePattern pattern;
    Role role;
    RoleFormat format;
  };
  std::string recipe_name_;
  RoleFormats base_;
  std::vector<Override> overrides_;
  std::map<std::string, std::vector<std::optional<BlockFormat>>, std::less<>> rows_;
};

/// The recipe as the TOML recipe file that parse_recipe reads back.
std::string recipe_text(const Recipe& recipe);

}  // namespace mxlab::train
