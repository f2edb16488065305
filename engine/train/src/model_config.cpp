// The kinds of models as data: names, what they take, which size options they read.
#include "mxlab/train/model_config.hpp"

namespace mxlab::train {

const ModelKindTraits& model_kind_traits(ModelKind kind) {
  for (const auto& t : kModelKinds)
    if (t.value == kind) return t;
  return kModelKinds[0];  // every enumerator has its row (static_assert in the header)
}

std::string model_kind_names(const std::function<bool(const ModelKindTraits&)>& keep, std::string_view sep,
                             std::string_view last) {
  std::vector<std::string_view> names;
  for (const auto& t : kModelKinds)
    if (keep(t)) names.push_back(t.name);
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out.append(i == 0 ? std::string_view() : i + 1 == names.size() ? last : sep).append(names[i]);
  return out;
}

std::string model_kind_list() {
  return model_kind_names([](const ModelKindTraits&) { return true; });
}

std::string model_kinds_reading(ModelOption option, std::string_view last) {
  return model_kind_names([option](const ModelKindTraits& t) { return (t.options & option) != 0; }, ", ", last);
}

Result<ModelKind> parse_model_kind(std::string_view name) {
  for (const auto& t : kModelKinds)
    if (t.name == name) return t.value;
  return make_error("unknown model '" + std::string(name) + "' (known: " +
                    model_kind_names([](const ModelKindTraits&) { return true; }, ", ", ", ") + ")");
}

ModelKindField::ModelKindField(std::string_view name) {
  if (auto k = parse_model_kind(name)) kind_ = *k;
  else known_ = false, unknown_ = std::string(name);
}

std::vector<std::string> model_kinds() {
  std::vector<std::string> names;
  for (const auto& t : kModelKinds) names.emplace_back(t.name);
  return names;
}

bool is_model_kind(const std::string& kind) { return parse_model_kind(kind).ok(); }

}  // namespace mxlab::train
