// Point results as exact JSON (the results database stores them) and cells as text.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "mxlab/core/table.hpp"
#include "mxlab/experiment/results.hpp"

namespace mxlab::experiment {

std::string cell_text(const Cell& c) {
  if (const std::string* s = std::get_if<std::string>(&c)) return *s;
  const double v = std::get<double>(c);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);  // whole numbers as integers (30, not 3e+01)
    return std::string(buf) == "-0" ? "-0" : buf;
  }
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::optional<std::string> repeated_column(const PointResult& r) {
  for (const auto& [set, rows] : r)
    for (const Row& row : rows)
      for (std::size_t i = 0; i < row.cells.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
          if (row.cells[i].first == row.cells[j].first) return set + "." + row.cells[i].first;
  return std::nullopt;
}

// Layout: {"SET": [[["column", value], ...], ...], ...}; a number is a JSON number, or {"f": "inf"} when not
// finite; text is a JSON string.
std::string result_json(const PointResult& r) {
  std::string s = "{";
  bool first_set = true;
  for (const auto& [set, rows] : r) {
    s += std::string(first_set ? "" : ",") + json_quote(set) + ":[";
    first_set = false;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      s += i ? ",[" : "[";
      for (std::size_t c = 0; c < rows[i].cells.size(); ++c) {
        const auto& [k, v] = rows[i].cells[c];
        s += std::string(c ? ",[" : "[") + json_quote(k) + ",";
        if (const std::string* t = std::get_if<std::string>(&v)) s += json_quote(*t);
        else if (std::isfinite(std::get<double>(v))) s += cell_text(v);
        else s += "{\"f\":\"" + cell_text(v) + "\"}";
        s += "]";
      }
      s += "]";
    }
    s += "]";
  }
  return s + "}";
}

Result<PointResult> parse_result_json(const std::string& text) {
  PointResult r;
  try {
    const auto j = nlohmann::json::parse(text);
    for (const auto& [set, rows] : j.items()) {
      auto& out = r[set];
      for (const auto& row : rows) {
        Row rr;
        for (const auto& cell : row) {
          const auto& v = cell.at(1);
          if (v.is_string()) rr.add(cell.at(0).get<std::string>(), v.get<std::string>());
          else if (v.is_number()) rr.add(cell.at(0).get<std::string>(), v.get<double>());
          else rr.add(cell.at(0).get<std::string>(), std::strtod(v.at("f").get<std::string>().c_str(), nullptr));
        }
        out.push_back(std::move(rr));
      }
    }
  } catch (const std::exception& ex) {
    return make_error(std::string("stored result unreadable: ") + ex.what());
  }
  return r;
}

}  // namespace mxlab::experiment
