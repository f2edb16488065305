// Reading a run's folder back (metrics.csv, summary.json, recipe.txt): the reader of what run_record.cpp writes.
#include <filesystem>
#include <string_view>

#include "mxlab/core/small_file.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/io/json_limits.hpp"
#include "mxlab/train/recipe.hpp"
#include "mxlab/train/run_record.hpp"

namespace mxlab::train {

namespace {

/// The columns every metrics.csv begins with, in order (RunRecord's header; operand columns follow).
constexpr std::string_view kMetricsColumns[] = {"step",    "loss",          "accuracy", "bpc",      "lr",
                                                "loss_scale", "skipped",    "skipped_total", "seconds", "val_loss",
                                                "val_accuracy", "val_bpc"};
constexpr std::size_t kStep = 0, kLoss = 1, kAccuracy = 2, kBpc = 3, kValLoss = 9;

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  while (true) {
    const auto comma = line.find(',', at);
    out.push_back(line.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
    if (comma == std::string_view::npos) return out;
    at = comma + 1;
  }
}

/// summary.json's figures; errors name the key.
std::optional<std::string> read_summary(const nlohmann::json& j, SavedRun& run) {
  if (!j.is_object()) return "is " + json_kind(j) + ", not an object";
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"model", &run.model}, {"data", &run.data}, {"recipe", &run.recipe}}) {
    const auto it = j.find(key);
    if (it == j.end()) return std::string("has no \"") + key + "\"";
    if (!it->is_string()) return std::string("\"") + key + "\" is " + json_kind(*it) + ", not a string";
    *out = it->get<std::string>();
  }
  for (const char* key : {"steps", "skipped_steps"}) {
    const auto it = j.find(key);
    if (it == j.end()) return std::string("has no \"") + key + "\"";
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
      return std::string("\"") + key + "\" is " + json_kind(*it) + ", not a whole number of at least 0";
  }
  run.skipped_steps = j["skipped_steps"].get<std::int64_t>();
  const auto cancelled = j.find("cancelled");
  if (cancelled == j.end() || !cancelled->is_boolean()) return "has no \"cancelled\" true or false";
  run.cancelled = cancelled->get<bool>();
  // Validation and test: {"loss": X, "accuracy" or "bpc": Y, ...}, absent when the run did not evaluate.
  for (const auto& [key, loss, metric] : {std::tuple<const char*, std::optional<double>*, std::optional<double>*>{
                                              "validation", &run.validation_loss, &run.validation_metric},
                                          {"test", &run.test_loss, &run.test_metric}}) {
    const auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_object()) return std::string("\"") + key + "\" is " + json_kind(*it) + ", not an object";
    for (const auto& [name, out] : {std::pair<const char*, std::optional<double>*>{"loss", loss}, {run.text ? "bpc" : "accuracy", metric}}) {
      const auto v = it->find(name);
      if (v == it->end() || v->is_null()) continue;  // null: not a finite number when written
      if (!v->is_number()) return std::string("\"") + key + "\"." + name + " is " + json_kind(*v) + ", not a number";
      *out = v->get<double>();
    }
  }
  return std::nullopt;
}

}  // namespace

Result<SavedRun> read_run(const std::string& dir) {
  const std::string where = "run folder '" + dir + "'";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return make_error(where + ": not a folder");
  SavedRun run;
  run.dir = dir;

  // metrics.csv first: whether the run is of text (bits per character) or images (accuracy) decides summary.json's keys.
  auto csv = read_small_file(dir + "/metrics.csv", kMaxSavedMetricsBytes, "metrics.csv");
  if (!csv) return make_error(where + ": " + csv.error().message);
  std::string_view text = *csv;
  std::size_t line_no = 0;
  auto next_line = [&]() -> std::optional<std::string_view> {
    if (text.empty()) return std::nullopt;
    const auto eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    return line;
  };
  const auto header = next_line();
  const auto names = header ? split_fields(*header) : std::vector<std::string_view>{};
  if (names.size() < std::size(kMetricsColumns) || !std::equal(std::begin(kMetricsColumns), std::end(kMetricsColumns), names.begin()))
    return make_error(where + ": metrics.csv does not begin with a run's header (step,loss,accuracy,bpc,...)");
  while (const auto line = next_line()) {
    const std::string at = where + ": metrics.csv line " + std::to_string(line_no) + ": ";
    if (line->empty() && text.empty()) break;
    const auto fields = split_fields(*line);
    if (fields.size() != names.size())
      return make_error(at + std::to_string(fields.size()) + " fields, the header has " + std::to_string(names.size()));
    const auto step = parse_double(fields[kStep]);
    if (!step || *step != static_cast<double>(run.step.size() + 1))
      return make_error(at + "step '" + std::string(fields[kStep]) + "', expected " + std::to_string(run.step.size() + 1));
    if (run.step.empty()) run.text = fields[kAccuracy].empty() && !fields[kBpc].empty();
    const std::size_t metric = run.text ? kBpc : kAccuracy;
    const auto loss = parse_double(fields[kLoss]);
    const auto acc = parse_double(fields[metric]);
    if (!loss) return make_error(at + "loss '" + std::string(fields[kLoss]) + "' is not a number");
    if (!acc) return make_error(at + std::string(kMetricsColumns[metric]) + " '" + std::string(fields[metric]) + "' is not a number");
    run.step.push_back(*step);
    run.loss.push_back(*loss);
    run.accuracy.push_back(*acc);
    if (!fields[kValLoss].empty()) {
      const auto v = parse_double(fields[kValLoss]);
      if (!v) return make_error(at + "val_loss '" + std::string(fields[kValLoss]) + "' is not a number");
      run.val_step.push_back(*step);
      run.val_loss.push_back(*v);
    }
  }

  auto summary = read_small_file(dir + "/summary.json", kMaxJsonBytes, "summary.json");
  if (!summary) return make_error(where + ": " + summary.error().message);
  auto j = parse_json_limited(*summary, "summary.json");
  if (!j) return make_error(where + ": " + j.error().message);
  if (auto why = read_summary(*j, run)) return make_error(where + ": summary.json " + *why);
  if (const auto steps = (*j)["steps"].get<std::int64_t>(); steps != static_cast<std::int64_t>(run.step.size()))
    return make_error(where + ": summary.json says " + std::to_string(steps) + " steps, metrics.csv has " +
                      std::to_string(run.step.size()) + " rows");

  auto recipe = read_small_file(dir + "/recipe.txt", kMaxRecipeFileBytes, "recipe.txt");
  if (!recipe) return make_error(where + ": " + recipe.error().message);
  run.recipe_text = std::move(*recipe);
  return run;
}

}  // namespace mxlab::train
