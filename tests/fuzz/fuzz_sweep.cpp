// Fuzz target: sweeps and explicit points, built from bytes (no TOML), through count_points and
// expand_points: the count made without expanding is the number of points expanded, and a sweep past the
// limit is refused before anything is expanded.
//
// Input: a byte of axes (at most 8); per axis a byte naming it, two bytes (little-endian) of values (2^12 in all
// at most) and a byte of value length (below 128); then a byte of explicit points (at most 64), each a byte whose
// bits name the axes it sets.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "mxlab/experiment/experiment.hpp"
#include "fuzz_support.hpp"

namespace {

[[noreturn]] void broken() { std::abort(); }

/// Axes whose handling differs: the formats (a point that sets one keeps it), the input (its layer), the rest.
const char* const kAxes[] = {"format", "a", "b", "block", "input", "recipe", "round", "seed"};

/// Expanded only up to this many points (more would be slow, not wrong).
constexpr std::size_t kMaxExpanded = 4096;
/// Values of all axes together: eight axes of 2^9 values still give 2^72 points, past every limit and past
/// 64-bit counts, while building the values stays fast enough for thousands of inputs a second.
constexpr std::size_t kMaxValues = std::size_t{1} << 12;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ex = mxlab::experiment;
  mxlab::fuzz::Bytes in(data, size);
  ex::Experiment e;
  e.path = "fuzz.toml";
  e.name = "fuzz";
  e.inputs.push_back(ex::InputDef{});
  e.inputs.back().name = "in";
  e.inputs.back().source = "gen:normal:0,1";
  const unsigned axes = in.byte() % 9;
  std::size_t budget = kMaxValues;
  for (unsigned a = 0; a < axes; ++a) {
    const std::string name = kAxes[in.byte() % 8];
    unsigned count = in.byte() | (unsigned{in.byte()} << 8);
    count = static_cast<unsigned>(std::min<std::size_t>(count, budget));
    budget -= count;
    const std::size_t length = in.byte() % 128;
    std::vector<std::string> values;
    values.reserve(count);
    for (unsigned v = 0; v < count; ++v) {
      // Distinct values of the chosen length; an input axis names the defined input first.
      std::string value = name == "input" && v == 0 ? "in" : std::to_string(v);
      if (value.size() < length) value.append(length - value.size(), 'x');
      values.push_back(std::move(value));
    }
    e.axes.emplace_back(name, std::move(values));
  }
  const unsigned points = in.byte() % 65;
  for (unsigned p = 0; p < points; ++p) {
    const std::uint8_t bits = in.byte();
    ex::Pairs point;
    for (int b = 0; b < 8; ++b)
      if (bits & (1u << b)) point.emplace_back(kAxes[b], kAxes[b] == std::string("input") ? "in" : "p");
    e.points.push_back(std::move(point));
  }
  auto count = ex::count_points(e);
  if (!count) {
    // Refused without expanding: the message names the file, and expansion refuses the same way.
    if (count.error().message.rfind("fuzz.toml: ", 0) != 0) broken();
    auto expanded = ex::expand_points(e);
    if (expanded || expanded.error().message != count.error().message) broken();
    return 0;
  }
  if (*count > ex::kMaxPoints) broken();
  if (*count > kMaxExpanded) return 0;
  auto expanded = ex::expand_points(e);
  if (!expanded || expanded->size() != *count) broken();
  for (std::size_t i = 0; i < expanded->size(); ++i) {
    const ex::Point& p = (*expanded)[i];
    if (p.index != i) broken();
    // Every point has each parameter once.
    std::set<std::string> keys;
    for (const auto& [k, v] : p.params)
      if (!keys.insert(k).second) broken();
  }
  return 0;
}
