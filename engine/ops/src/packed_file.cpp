// Reading the packed files of `mxlab quantize --packed`: strict metadata, every size checked first.
#include "mxlab/ops/packed_file.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>

#include "mxlab/io/npy.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab::ops {
namespace {

// The metadata is a few hundred bytes; anything far larger is not a file mxlab wrote.
constexpr std::size_t kMaxJsonBytes = std::size_t{1} << 20;
constexpr std::size_t kMaxRank = 32;

struct Meta {
  std::string json_name;
  const std::string& text;

  Error fail(const std::string& problem) const { return make_error("'" + json_name + "': " + problem); }

  /// Position just after `"key":` and any spaces, or nullopt.
  std::optional<std::size_t> value_at(std::string_view key) const {
    const std::string needle = "\"" + std::string(key) + "\":";
    const auto k = text.find(needle);
    if (k == std::string::npos) return std::nullopt;
    std::size_t i = k + needle.size();
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) ++i;
    return i;
  }

  /// A JSON string value (no escapes: mxlab's format names have none), or "null" read as nullopt.
  Result<std::optional<std::string>> string_field(std::string_view key) const {
    const auto at = value_at(key);
    if (!at) return fail("no \"" + std::string(key) + "\" field");
    if (text.compare(*at, 4, "null") == 0) return std::optional<std::string>();
    if (*at >= text.size() || text[*at] != '"') return fail("\"" + std::string(key) + "\" is not a string");
    const auto end = text.find('"', *at + 1);
    if (end == std::string::npos) return fail("\"" + std::string(key) + "\" is an unterminated string");
    return std::optional<std::string>(text.substr(*at + 1, end - *at - 1));
  }

  /// A JSON array of non-negative integers, e.g. "shape": [4, 32].
  Result<std::vector<std::int64_t>> ints_field(std::string_view key) const {
    const std::string k = "\"" + std::string(key) + "\"";
    const auto at = value_at(key);
    if (!at) return fail("no " + k + " array");
    std::size_t i = *at;
    if (i >= text.size() || text[i] != '[') return fail(k + " is not an array");
    ++i;
    std::vector<std::int64_t> v;
    auto skip_space = [&] {
      while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) ++i;
    };
    skip_space();
    if (i < text.size() && text[i] == ']') return v;
    while (true) {
      skip_space();
      if (i < text.size() && text[i] == '-') return fail(k + " holds a negative number");
      std::int64_t n = 0;
      const std::size_t start = i;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
        if (i - start >= 18) return fail(k + " holds a number too large for a tensor dimension");
        n = n * 10 + (text[i] - '0');
        ++i;
      }
      if (i == start) return fail(k + " holds something other than a non-negative integer");
      if (v.size() == kMaxRank) return fail(k + " has more than " + std::to_string(kMaxRank) + " entries");
      v.push_back(n);
      skip_space();
      if (i < text.size() && text[i] == ',') {
        ++i;
        continue;
      }
      if (i < text.size() && text[i] == ']') return v;
      return fail(k + " is not a closed array of integers");
    }
  }
};

/// The product of `dims`, or nullopt when it exceeds `limit`.
std::optional<std::uint64_t> bounded_product(const std::vector<std::int64_t>& dims, std::uint64_t limit) {
  std::uint64_t n = 1;
  for (auto d : dims) {
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > limit / u) return std::nullopt;
    n *= u;
  }
  return n;
}

/// The bytes of a uint8 array file whose length the caller knows in advance.
Result<std::vector<std::uint8_t>> array(std::string_view bytes, const std::string& name, std::uint64_t want,
                                        const std::string& what) {
  auto a = parse_npy_u8(bytes, name);
  if (!a) return a.error();
  if (a->data.size() != want)
    return make_error("npy '" + name + "': " + std::to_string(a->data.size()) + " bytes of " + what + ", the metadata needs " +
                      std::to_string(want));
  return std::move(a->data);
}

bool has_subtiles(const BlockFormat& f) {
  return std::any_of(f.layout.tiles.begin(), f.layout.tiles.end(), [](const TileDim& t) { return t.subtile > 0; });
}

Result<std::string> slurp(const std::string& path, std::size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read '" + path + "'");
  std::string s;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    s.append(buf, static_cast<std::size_t>(in.gcount()));
    if (s.size() > limit) return make_error("'" + path + "' is larger than " + std::to_string(limit) + " bytes");
  }
  if (in.bad()) return make_error("cannot read '" + path + "'");
  return s;
}

/// What BASE.json says, checked against the block format; the element count bounded by `max_elements`.
struct Metadata {
  std::vector<std::int64_t> shape, grid, sub;
  std::uint64_t elements = 0;
};

Result<Metadata> parse_metadata(const BlockFormat& f, const std::string& json, const std::string& base,
                                std::uint64_t max_elements, const std::string& bound_name) {
  if (json.size() > kMaxJsonBytes)
    return make_error("'" + base + ".json' is larger than " + std::to_string(kMaxJsonBytes) + " bytes: not packed metadata");
  const Meta meta{base + ".json", json};
  auto layout = meta.string_field("scale_layout");
  if (layout && *layout && layout->value().find("cuBLAS") != std::string::npos)
    return meta.fail("scales are in the cuBLAS layout; quantize with the block layout");
  auto element = meta.string_field("element");
  if (!element) return element.error();
  if (!*element || **element != f.element.name())
    return meta.fail("was not written for the element format " + f.element.name());
  auto scale = meta.string_field("scale");
  if (!scale) return scale.error();
  const std::optional<std::string> want_scale = f.layout.scale ? std::optional(f.layout.scale->name()) : std::nullopt;
  Metadata m;
  for (auto [key, into] : {std::pair{"shape", &m.shape}, std::pair{"scale_grid", &m.grid}, std::pair{"subtile_grid", &m.sub}}) {
    auto v = meta.ints_field(key);
    if (!v) return v.error();
    *into = std::move(*v);
  }
  // Elements are bounded (by the elements file's size) before any indexer sees the shape.
  const auto n = bounded_product(m.shape, max_elements);
  if (!n) return meta.fail("shape holds more elements than " + bound_name + " can");
  m.elements = *n;
  // Zero-element shapes still give every axis a block: their other dimensions must stay countable.
  std::vector<std::int64_t> extents;
  for (auto d : m.shape) extents.push_back(std::max<std::int64_t>(d, 1));
  if (!bounded_product(extents, std::uint64_t{1} << 48)) return meta.fail("shape is too large");
  if (*scale != want_scale || BlockIndexer(m.shape, f.layout).grid() != m.grid)
    return meta.fail("was not written for the block format " + f.name + " (scale format or block grid differ)");
  if (has_subtiles(f) ? BlockIndexer::subtiles(m.shape, f.layout).grid() != m.sub : !m.sub.empty())
    return meta.fail("subtile_grid does not match the block format " + f.name);
  return m;
}

}  // namespace

Result<PackedTensor> parse_packed(const BlockFormat& f, const PackedFileBytes& files, std::string_view base_view) {
  const std::string base(base_view);
  const int bits = f.element.bits();
  const std::uint64_t max_elements = (std::uint64_t{files.elements.size()} * 8) / static_cast<std::uint64_t>(bits);
  auto m = parse_metadata(f, files.json, base, max_elements, "'" + base + ".elements.npy'");
  if (!m) return m.error();
  const Meta meta{base + ".json", files.json};
  PackedTensor p;
  p.shape = m->shape;
  p.scale_grid = m->grid;
  auto elements = array(files.elements, base + ".elements.npy", (m->elements * static_cast<std::uint64_t>(bits) + 7) / 8,
                        "element codes");
  if (!elements) return elements.error();
  p.elements = std::move(*elements);
  const auto blocks = bounded_product(m->grid, std::numeric_limits<std::uint64_t>::max() / 8);
  if (!blocks) return meta.fail("scale_grid is too large");
  if (f.layout.scale) {
    const auto sb = static_cast<std::uint64_t>((f.layout.scale->bits() + 7) / 8);
    auto scales = array(files.scales, base + ".scales.npy", *blocks * sb, "scale codes");
    if (!scales) return scales.error();
    p.scales = std::move(*scales);
  }
  if (f.layout.tensor_scale) {
    auto ts = array(files.tensor_scale, base + ".tensor_scale.npy",
                    static_cast<std::uint64_t>((f.layout.tensor_scale->bits() + 7) / 8), "tensor scale code");
    if (!ts) return ts.error();
    p.tensor_scale = std::move(*ts);
  }
  if (has_subtiles(f)) {
    const auto count = bounded_product(m->sub, max_elements + 1);
    if (!count) return meta.fail("subtile_grid is too large");
    auto offsets = array(files.subtiles, base + ".subtiles.npy", *count, "subtile offsets");
    if (!offsets) return offsets.error();
    for (std::uint8_t d : *offsets)
      if (f.layout.subtile_bits < 8 && d >> f.layout.subtile_bits != 0)
        return make_error("npy '" + base + ".subtiles.npy': offset " + std::to_string(d) + " does not fit in " +
                          std::to_string(f.layout.subtile_bits) + " bits");
    p.subtile_grid = m->sub;
    p.subtile_offsets = std::move(*offsets);
  }
  return p;
}

Result<PackedTensor> read_packed(const BlockFormat& f, const std::string& base) {
  PackedFileBytes files;
  auto json = slurp(base + ".json", kMaxJsonBytes);
  if (!json) return json.error();
  files.json = std::move(*json);
  // The metadata is checked before any array is read, so a mismatch is named before a missing file.
  if (auto m = parse_metadata(f, files.json, base, std::numeric_limits<std::uint64_t>::max(), "a file"); !m) return m.error();
  // Each array is bounded by what the metadata can ask for; the parse checks the exact sizes.
  constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();
  auto read = [&](const char* suffix, std::string& into) -> std::optional<Error> {
    auto bytes = slurp(base + suffix, kNoLimit);
    if (!bytes) return bytes.error();
    into = std::move(*bytes);
    return std::nullopt;
  };
  if (auto e = read(".elements.npy", files.elements)) return *e;
  if (f.layout.scale)
    if (auto e = read(".scales.npy", files.scales)) return *e;
  if (f.layout.tensor_scale)
    if (auto e = read(".tensor_scale.npy", files.tensor_scale)) return *e;
  if (has_subtiles(f))
    if (auto e = read(".subtiles.npy", files.subtiles)) return *e;
  return parse_packed(f, files, base);
}

}  // namespace mxlab::ops
