// The kinds of models as data: names, what they take, which size options they read.
#include "mxlab/train/model_config.hpp"

namespace mxlab::train {

const ModelKindTraits& model_kind_traits(ModelKind kind) {
  for (const auto& t : kModelKinds)
    if (t.value == kind) return t;
  return kModelKinds[0];  // every enumerator has its row (static_assert in the header)
}

std::string model_kind_list() {
  std::string list;
  const std::size_t n = std::size(kModelKinds);
  for (std::size_t i = 0; i < n; ++i)
    list += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::string(kModelKinds[i].name);
  return list;
}

std::string model_kinds_reading(ModelOption option) {
  std::string takers;
  for (const auto& t : kModelKinds)
    if ((t.options & option) != 0) takers += (takers.empty() ? "" : " or ") + std::string(t.name);
  return takers;
}

Result<ModelKind> parse_model_kind(std::string_view name) {
  for (const auto& t : kModelKinds)
    if (t.name == name) return t.value;
  std::string known;
  for (const auto& t : kModelKinds) known += (known.empty() ? "" : ", ") + std::string(t.name);
  return make_error("unknown model '" + std::string(name) + "' (known: " + known + ")");
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
