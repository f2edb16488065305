// What the TOML readers (experiment files, recipe files) ask of toml++'s nodes: the entries of a table in the
// order written, and a node's kind in a message. Templates over the node types, so core needs no toml++.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mxlab {

/// The entries of a table in the order they are written (toml++ keeps them sorted by key).
template <class Table>
auto ordered_entries(const Table& t) {
  using Node = std::remove_reference_t<decltype(t.begin()->second)>;
  std::vector<std::pair<std::string, const Node*>> out;
  for (auto&& [k, v] : t) out.emplace_back(std::string(k.str()), &v);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.second->source().begin;
    const auto& pb = b.second->source().begin;
    return std::pair{pa.line, pa.column} < std::pair{pb.line, pb.column};
  });
  return out;
}

/// A node's kind as a message says it: "a string", "an integer", "a table", ...
template <class Node>
std::string node_kind(const Node& n) {
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  if (n.is_string()) return "a string";
  if (n.is_integer()) return "an integer";
  if (n.is_floating_point()) return "a number";
  if (n.is_boolean()) return "a boolean";
  return "a date or time";
}

}  // namespace mxlab
