// Strict, bounded JSON parsing on top of nlohmann::json's parser callback.
#include "mxlab/io/json_limits.hpp"

#include <new>
#include <optional>
#include <set>
#include <vector>

namespace mxlab {
namespace {

struct LimitExceeded {
  std::string problem;
};

}  // namespace

std::string json_kind(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "an integer";
    case nlohmann::json::value_t::number_float: return "a non-integer number";
    case nlohmann::json::value_t::binary: return "binary data";
    case nlohmann::json::value_t::discarded: return "a discarded value";
  }
  return "an unknown value";
}

Result<nlohmann::json> parse_json_limited(std::string_view text, std::string_view what) {
  if (text.size() > kMaxJsonBytes)
    return make_error(std::string(what) + ": the JSON text has " + std::to_string(text.size()) +
                      " bytes, more than the limit of " + std::to_string(kMaxJsonBytes));
  // One entry per open container: the keys seen so far for objects, nothing for arrays.
  std::vector<std::optional<std::set<std::string>>> open;
  std::size_t values = 0;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) -> bool {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (depth >= kMaxJsonDepth)
          throw LimitExceeded{"nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
        if (++values > kMaxJsonValues)
          throw LimitExceeded{"more than " + std::to_string(kMaxJsonValues) + " values"};
        if (event == E::object_start)
          open.emplace_back(std::set<std::string>{});
        else
          open.emplace_back(std::nullopt);
        break;
      case E::object_end:
      case E::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case E::key:
        if (!open.empty() && open.back()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (!open.back()->insert(key).second) throw LimitExceeded{"the key \"" + key + "\" appears twice in an object"};
        }
        break;
      case E::value:
        if (++values > kMaxJsonValues)
          throw LimitExceeded{"more than " + std::to_string(kMaxJsonValues) + " values"};
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                                 /*ignore_comments=*/false);
  } catch (const LimitExceeded& e) {
    return make_error(std::string(what) + ": JSON with " + e.problem);
  } catch (const nlohmann::json::exception& e) {
    return make_error(std::string(what) + ": invalid JSON (" + e.what() + ")");
  } catch (const std::bad_alloc&) {
    return make_error(std::string(what) + ": not enough memory to parse the JSON text");
  }
}

}  // namespace mxlab
