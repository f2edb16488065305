// Direct-cast inference: a checkpoint's run read back from its settings, and the inference recipes.
#include "mxlab/train/direct_cast.hpp"

#include <filesystem>
#include <iterator>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "mxlab/core/memory.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/train/run_record.hpp"

namespace mxlab::train {

namespace {

/// Sets one of the run's settings ("name=value" of the identity) on the options; settings that do not change
/// the model or its data (the learning rate, evaluation, timing) are not needed and are left.
std::optional<std::string> apply_identity_setting(ModelCheckpoint& m, const std::string& name, const std::string& value) {
  TrainOptions& o = m.options;
  auto whole = [&](std::int64_t lo, std::int64_t hi, auto& field) -> std::optional<std::string> {
    const auto v = parse_whole_in<std::int64_t>(value, lo, hi);
    if (!v) return "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
    field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
    return std::nullopt;
  };
  if (name == "model") {
    o.model.kind = value;
    if (!o.model.kind.known()) return model_kind_list();
    return std::nullopt;
  }
  if (name == "data") {
    m.data = value;
    return std::nullopt;
  }
  if (name == "data-dir") {
    m.data_dir = value;
    return std::nullopt;
  }
  if (name == "optimizer") {
    if (value != "adamw" && value != "sgd") return std::string("adamw or sgd");
    o.optimizer.kind = value;
    return std::nullopt;
  }
  if (name == "hidden") {
    o.model.hidden.clear();
    std::stringstream s(value);
    std::string part;
    while (std::getline(s, part, ',')) {
      const auto w = parse_whole_in<std::int64_t>(part, 1, 65536);
      if (!w) return std::string("widths 1..65536 separated by commas");
      o.model.hidden.push_back(*w);
    }
    if (o.model.hidden.empty()) return std::string("widths 1..65536 separated by commas");
    return std::nullopt;
  }
  if (name == "seed") return whole(0, std::int64_t{1} << 62, o.seed);
  if (name == "steps") return whole(1, 100000000, o.steps);
  if (name == "batch") return whole(1, 1 << 20, o.batch);
  if (name == "d-model") return whole(1, 4096, o.model.d_model);
  if (name == "layers") return whole(1, 64, o.model.layers);
  if (name == "heads") return whole(1, 64, o.model.heads);
  if (name == "context") return whole(2, 4096, o.model.context);
  if (name == "patch") return whole(1, 4096, o.model.patch);
  if (name == "width") return whole(1, 256, o.model.width);
  return std::nullopt;
}

}  // namespace

Result<ModelCheckpoint> read_model_checkpoint(const std::string& path) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec) ? path + "/checkpoint.bin" : path;
  const std::string name = "checkpoint " + quote_input(file);
  if (!std::filesystem::exists(file, ec))
    return make_error(name + " does not exist (mxlab train --keep-checkpoint keeps the trained model's)");
  auto cp = read_checkpoint_file(file, memory_budget());
  if (!cp) return cp.error();
  ModelCheckpoint m;
  m.options.steps = 1;
  std::istringstream lines(cp->identity);
  std::string line;
  bool recipe = false;
  while (std::getline(lines, line)) {
    if (line == "recipe:") {
      recipe = true;
      break;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;  // a flag (--no-cosine, --no-timing): not the model's
    if (auto why = apply_identity_setting(m, line.substr(0, eq), line.substr(eq + 1)))
      return make_error(name + ": its setting " + quote_input(line) + " is not " + *why);
  }
  if (!recipe || m.data.empty() || !m.options.model.kind.known())
    return make_error(name + " does not name its run's model, data and recipe");
  const std::string recipe_text(std::istreambuf_iterator<char>(lines), {});
  auto r = parse_recipe(recipe_text, file);
  if (!r) return make_error(name + ": its recipe: " + r.error().message);
  m.options.recipe = *r;
  m.options.resume_state = std::move(cp->state);
  return m;
}

Result<CheckpointModel> load_checkpoint_model(const std::string& path, const std::optional<std::string>& data_dir,
                                              unsigned threads) {
  auto checkpoint = read_model_checkpoint(path);
  if (!checkpoint) return checkpoint.error();
  DataOptions dopt;
  dopt.dir = data_dir.value_or(checkpoint->data_dir);
  dopt.seed = checkpoint->options.seed;
  auto data = load_train_data(checkpoint->data, dopt);
  if (!data) return make_error("the checkpoint's data: " + data.error().message);
  CheckpointModel m{std::move(checkpoint->options), std::move(*data)};
  m.options.threads = threads;
  if (auto err = check_data_fit(m.data, m.options)) return *err;
  return m;
}

std::string_view cast_operands_name(CastOperands c) {
  return c == CastOperands::Weights ? "weights" : "weights+activations";
}

Result<CastOperands> parse_cast_operands(std::string_view text) {
  if (text == "weights") return CastOperands::Weights;
  if (text == "weights+activations") return CastOperands::WeightsActivations;
  return make_error("cast '" + std::string(text) + "': expected weights or weights+activations");
}

Result<Recipe> cast_recipe(const std::string& format, CastOperands operands, const std::string& nongemm) {
  if (auto f = role_format(format); !f) return f.error();
  Recipe r;
  r.name = format + " " + std::string(cast_operands_name(operands));
  r.formats.w = RoleFormat(format);
  if (operands == CastOperands::WeightsActivations) r.formats.a = RoleFormat(format);
  r.nongemm = nongemm;
  return r;
}

}  // namespace mxlab::train
