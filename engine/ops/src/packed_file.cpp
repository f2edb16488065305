// The packed files of `mxlab quantize --packed`: written and read in one place, strict metadata, every size
// checked first.
#include "mxlab/ops/packed_file.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>

#include "mxlab/core/table.hpp"
#include "mxlab/core/small_file.hpp"
#include "mxlab/io/json_limits.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab::ops {
namespace {

// The metadata is a few hundred bytes; anything far larger is not a file mxlab wrote.
constexpr std::size_t kMaxMetadataBytes = std::size_t{1} << 20;
constexpr std::size_t kMaxRank = 32;

// The scale_layout values the writer produces.
constexpr std::string_view kBlocksNote = "block grid, row-major";
constexpr std::string_view kCublasNote = "cuBLAS 128x4 swizzle, padded";

using Json = nlohmann::json;

std::string npy_u8(const std::vector<std::int64_t>& shape, const std::vector<std::uint8_t>& v) {
  return npy_header("|u1", shape) + std::string(v.begin(), v.end());
}

std::string json_ints(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

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

bool has_subtiles(const BlockFormat& f) { return f.layout.geometry().has_subtiles(); }

/// Size in bytes of the swizzled, zero-padded cuBLAS layout of a rows x cols grid of one-byte scales.
std::uint64_t cublas_bytes(std::int64_t rows, std::int64_t cols) {
  const auto r = static_cast<std::uint64_t>((rows + 127) / 128 * 128), c = static_cast<std::uint64_t>((cols + 3) / 4 * 4);
  return r * c;
}

/// The metadata's fields, each checked for kind; `fail` names BASE.json.
struct Meta {
  std::string json_name;
  const Json& doc;

  Error fail(const std::string& problem) const { return make_error("'" + json_name + "': " + problem); }

  const Json* find(std::string_view key) const {
    const auto it = doc.find(std::string(key));
    return it == doc.end() ? nullptr : &*it;
  }

  /// A string, or nullopt for null (when `nullable`).
  Result<std::optional<std::string>> string_field(std::string_view key, bool nullable = false) const {
    const Json* v = find(key);
    const std::string k = "\"" + std::string(key) + "\"";
    if (!v) return fail("no " + k + " field");
    if (nullable && v->is_null()) return std::optional<std::string>();
    if (!v->is_string()) return fail(k + " is " + json_kind(*v) + ", expected a string");
    return std::optional<std::string>(v->get<std::string>());
  }

  /// A non-negative integer below `limit`.
  Result<std::int64_t> int_field(std::string_view key, std::int64_t lo, std::int64_t hi) const {
    const Json* v = find(key);
    const std::string k = "\"" + std::string(key) + "\"";
    if (!v) return fail("no " + k + " field");
    if (!v->is_number_integer()) return fail(k + " is " + json_kind(*v) + ", expected an integer");
    const bool negative = v->is_number_integer() && !v->is_number_unsigned() && v->get<std::int64_t>() < 0;
    const std::int64_t x = negative ? v->get<std::int64_t>()
                                    : static_cast<std::int64_t>(std::min<std::uint64_t>(v->get<std::uint64_t>(), INT64_MAX));
    if (x < lo || x > hi) return fail(k + " is " + v->dump() + ", expected " + std::to_string(lo) + ".." + std::to_string(hi));
    return x;
  }

  /// An array of non-negative integers, e.g. "shape": [4, 32].
  Result<std::vector<std::int64_t>> ints_field(std::string_view key) const {
    const Json* v = find(key);
    const std::string k = "\"" + std::string(key) + "\"";
    if (!v) return fail("no " + k + " array");
    if (!v->is_array()) return fail(k + " is " + json_kind(*v) + ", expected an array of integers");
    if (v->size() > kMaxRank) return fail(k + " has more than " + std::to_string(kMaxRank) + " entries");
    std::vector<std::int64_t> out;
    for (const Json& d : *v) {
      if (d.is_number_integer() && !d.is_number_unsigned() && d.get<std::int64_t>() < 0)
        return fail(k + " holds a negative number");
      if (!d.is_number_unsigned()) return fail(k + " holds " + json_kind(d) + ", expected non-negative integers");
      const auto u = d.get<std::uint64_t>();
      if (u >= (std::uint64_t{1} << 60)) return fail(k + " holds a number too large for a tensor dimension");
      out.push_back(static_cast<std::int64_t>(u));
    }
    return out;
  }
};

/// What BASE.json says, checked against the block format; the element count bounded by `max_elements`.
struct Metadata {
  BlockFormat format;  ///< the caller's format with the recorded packing options
  std::vector<std::int64_t> shape, grid, sub;
  std::uint64_t elements = 0;
  PackedScaleLayout layout = PackedScaleLayout::Blocks;
};

Result<Metadata> parse_metadata(const BlockFormat& f, const std::string& json, const std::string& base,
                                std::uint64_t max_elements, const std::string& bound_name) {
  const std::string json_name = base + ".json";
  if (json.size() > kMaxMetadataBytes)
    return make_error("'" + json_name + "' is larger than " + byte_size_text(kMaxMetadataBytes) + ": not packed metadata");
  auto doc = parse_json_limited(json, "'" + json_name + "'");
  if (!doc) return doc.error();
  const Meta meta{json_name, *doc};
  if (!doc->is_object()) return meta.fail("the top level is " + json_kind(*doc) + ", expected an object");
  static const std::set<std::string> kKeys = {"format",        "element",      "element_bits", "shape",
                                              "scale",         "scale_grid",   "subtile_grid", "scale_layout",
                                              "tensor_scale",  "nibble_order", "int_encoding", "block_axis",
                                              "subtile_bits",  "provenance"};
  for (const auto& [key, value] : doc->items())
    if (!kKeys.count(key)) return meta.fail("unknown key \"" + key + "\" (not metadata mxlab writes)");
  Metadata m{f, {}, {}, {}, 0, PackedScaleLayout::Blocks};
  if (auto name = meta.string_field("format"); !name) return name.error();
  if (doc->contains("provenance"))
    if (auto p = meta.string_field("provenance"); !p) return p.error();
  auto layout = meta.string_field("scale_layout");
  if (!layout) return layout.error();
  // Files of earlier versions wrote "blocks" for the block layout.
  if (**layout == kCublasNote)
    m.layout = PackedScaleLayout::Cublas;
  else if (**layout != kBlocksNote && **layout != "blocks")
    return meta.fail("\"scale_layout\" is \"" + **layout + "\", expected \"" + std::string(kBlocksNote) + "\" or \"" +
                     std::string(kCublasNote) + "\"");
  auto element = meta.string_field("element");
  if (!element) return element.error();
  if (**element != f.element.name()) return meta.fail("was not written for the element format " + f.element.name());
  if (doc->contains("element_bits")) {
    auto bits = meta.int_field("element_bits", 1, 64);
    if (!bits) return bits.error();
    if (*bits != f.element.bits())
      return meta.fail("\"element_bits\" is " + std::to_string(*bits) + ", but " + f.element.name() + " has " +
                       std::to_string(f.element.bits()) + " bits");
  }
  auto scale = meta.string_field("scale", true);
  if (!scale) return scale.error();
  const std::optional<std::string> want_scale = f.layout.scale ? std::optional(f.layout.scale->name()) : std::nullopt;
  auto tensor_scale = meta.string_field("tensor_scale", true);
  if (!tensor_scale) return tensor_scale.error();
  const std::optional<std::string> want_tensor_scale =
      f.layout.tensor_scale ? std::optional(f.layout.tensor_scale->name()) : std::nullopt;
  if (*tensor_scale != want_tensor_scale)
    return meta.fail("was not written for the block format " + f.name + " (tensor scale " +
                     tensor_scale->value_or("none") + ", the format has " + want_tensor_scale.value_or("none") + ")");
  // The packing the codes were written in: the file's record decides how they decode.
  QuantOptions& o = m.format.options;
  auto nibble = meta.string_field("nibble_order");
  if (!nibble) return nibble.error();
  auto order = parse_nibble_order(**nibble);
  if (!order) return meta.fail("\"nibble_order\": " + order.error().message);
  o.nibble_order = *order;
  auto encoding = meta.string_field("int_encoding");
  if (!encoding) return encoding.error();
  auto enc = parse_int_encoding(**encoding);
  if (!enc) return meta.fail("\"int_encoding\": " + enc.error().message);
  o.int_encoding = *enc;
  if (doc->contains("block_axis")) {
    auto axis = meta.int_field("block_axis", -32, 31);
    if (!axis) return axis.error();
    if (!f.layout.geometry().one_d() && *axis != f.layout.geometry().axis())
      return meta.fail("\"block_axis\" is " + std::to_string(*axis) + ", but " + f.name + " has no 1-D tiles");
    m.format.layout.axis = static_cast<int>(*axis);
  }
  if (doc->contains("subtile_bits")) {
    auto bits = meta.int_field("subtile_bits", 1, 8);
    if (!bits) return bits.error();
    m.format.layout.subtile_bits = static_cast<int>(*bits);
  }
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
  const ScaleLayout& sl = m.format.layout;
  if (const auto rank = static_cast<int>(m.shape.size()); sl.geometry().one_d() && rank > 0) {
    if (const int axis = sl.geometry().axis(); axis < -rank || axis >= rank)
      return meta.fail("\"block_axis\" " + std::to_string(axis) + " is outside the tensor's " + std::to_string(rank) +
                       " axes");
  }
  if (*scale != want_scale || BlockIndexer(m.shape, sl).grid() != m.grid)
    return meta.fail("was not written for the block format " + f.name + " (scale format or block grid differ)");
  if (has_subtiles(f) ? BlockIndexer::subtiles(m.shape, sl).grid() != m.sub : !m.sub.empty())
    return meta.fail("subtile_grid does not match the block format " + f.name);
  if (m.layout == PackedScaleLayout::Cublas && (!f.layout.scale || f.layout.scale->bits() > 8 || m.grid.size() != 2))
    return meta.fail("the cuBLAS scale layout needs one-byte scales over a 2-D grid");
  return m;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> describe_packing(const BlockFormat& f, std::size_t rank) {
  const int axis = f.layout.geometry().axis_in(static_cast<int>(rank));
  return {{"nibble-order", std::string(to_string(f.options.nibble_order))},
          {"int-encoding", std::string(to_string(f.options.int_encoding))},
          {"block-axis", std::to_string(axis)},
          {"subtile-bits", std::to_string(f.layout.subtile_bits)}};
}

Result<PackedFileBytes> packed_file_bytes(const BlockFormat& f, const PackedTensor& p, PackedScaleLayout layout,
                                          std::string_view provenance) {
  PackedFileBytes files;
  files.elements = npy_u8({static_cast<std::int64_t>(p.elements.size())}, p.elements);
  if (f.layout.scale) {
    std::vector<std::int64_t> sshape = p.scale_grid;
    const int sbytes = (f.layout.scale->bits() + 7) / 8;
    if (sbytes > 1) sshape.push_back(sbytes);
    if (layout == PackedScaleLayout::Cublas) {
      if (sbytes != 1 || p.scale_grid.size() != 2)
        return make_error("the cuBLAS scale layout needs one-byte scales over a 2-D tensor");
      const auto swizzled = swizzle_scales_128x4(p.scales, p.scale_grid[0], p.scale_grid[1], true);
      files.scales = npy_u8({static_cast<std::int64_t>(swizzled.size())}, swizzled);
    } else {
      files.scales = npy_u8(sshape, p.scales);
    }
  } else if (layout == PackedScaleLayout::Cublas) {
    return make_error("the cuBLAS scale layout needs block scales");
  }
  if (!p.subtile_offsets.empty()) files.subtiles = npy_u8(p.subtile_grid, p.subtile_offsets);
  if (!p.tensor_scale.empty())
    files.tensor_scale = npy_u8({static_cast<std::int64_t>(p.tensor_scale.size())}, p.tensor_scale);
  auto str = [](std::string_view s) { return json_quote(s); };
  auto name_or_null = [&](const std::optional<Format>& g) { return g ? str(g->name()) : std::string("null"); };
  std::string json = "{\n  \"format\": " + str(f.name) + ",\n  \"element\": " + str(f.element.name()) +
                     ",\n  \"element_bits\": " + std::to_string(f.element.bits()) + ",\n  \"shape\": " + json_ints(p.shape);
  json += ",\n  \"scale\": " + name_or_null(f.layout.scale) + ",\n  \"scale_grid\": " + json_ints(p.scale_grid);
  json += ",\n  \"subtile_grid\": " + json_ints(p.subtile_grid);
  json += ",\n  \"scale_layout\": " + str(layout == PackedScaleLayout::Cublas ? kCublasNote : kBlocksNote);
  json += ",\n  \"tensor_scale\": " + name_or_null(f.layout.tensor_scale);
  json += ",\n  \"nibble_order\": " + str(to_string(f.options.nibble_order));
  json += ",\n  \"int_encoding\": " + str(to_string(f.options.int_encoding));
  json += ",\n  \"block_axis\": " + std::to_string(f.layout.geometry().axis());
  json += ",\n  \"subtile_bits\": " + std::to_string(f.layout.subtile_bits);
  json += ",\n  \"provenance\": " + str(provenance) + "\n}\n";
  files.json = std::move(json);
  return files;
}

Result<PackedFile> parse_packed(const BlockFormat& f, const PackedFileBytes& files, std::string_view base_view) {
  const std::string base(base_view);
  const int bits = f.element.bits();
  const std::uint64_t max_elements = (std::uint64_t{files.elements.size()} * 8) / static_cast<std::uint64_t>(bits);
  auto m = parse_metadata(f, files.json, base, max_elements, "'" + base + ".elements.npy'");
  if (!m) return m.error();
  const BlockFormat& g = m->format;
  PackedFile out{g, {}};
  PackedTensor& p = out.tensor;
  p.shape = m->shape;
  p.scale_grid = m->grid;
  auto elements = array(files.elements, base + ".elements.npy", (m->elements * static_cast<std::uint64_t>(bits) + 7) / 8,
                        "element codes");
  if (!elements) return elements.error();
  p.elements = std::move(*elements);
  auto fail = [&](const std::string& problem) { return make_error("'" + base + ".json': " + problem); };
  const auto blocks = bounded_product(m->grid, std::numeric_limits<std::uint64_t>::max() / 8);
  if (!blocks) return fail("scale_grid is too large");
  if (g.layout.scale) {
    const auto sb = static_cast<std::uint64_t>((g.layout.scale->bits() + 7) / 8);
    if (m->layout == PackedScaleLayout::Cublas) {
      auto swizzled = array(files.scales, base + ".scales.npy", cublas_bytes(m->grid[0], m->grid[1]), "swizzled scale codes");
      if (!swizzled) return swizzled.error();
      p.scales = unswizzle_scales_128x4(*swizzled, m->grid[0], m->grid[1]);
    } else {
      auto scales = array(files.scales, base + ".scales.npy", *blocks * sb, "scale codes");
      if (!scales) return scales.error();
      p.scales = std::move(*scales);
    }
  }
  if (g.layout.tensor_scale) {
    auto ts = array(files.tensor_scale, base + ".tensor_scale.npy",
                    static_cast<std::uint64_t>((g.layout.tensor_scale->bits() + 7) / 8), "tensor scale code");
    if (!ts) return ts.error();
    p.tensor_scale = std::move(*ts);
  }
  if (has_subtiles(g)) {
    const auto count = bounded_product(m->sub, max_elements + 1);
    if (!count) return fail("subtile_grid is too large");
    auto offsets = array(files.subtiles, base + ".subtiles.npy", *count, "subtile offsets");
    if (!offsets) return offsets.error();
    for (std::uint8_t d : *offsets)
      if (g.layout.subtile_bits < 8 && d >> g.layout.subtile_bits != 0)
        return make_error("npy '" + base + ".subtiles.npy': offset " + std::to_string(d) + " does not fit in " +
                          std::to_string(g.layout.subtile_bits) + " bits");
    p.subtile_grid = m->sub;
    p.subtile_offsets = std::move(*offsets);
  }
  return out;
}

Result<PackedFile> read_packed(const BlockFormat& f, const std::string& base) {
  PackedFileBytes files;
  auto json = read_small_file(base + ".json", kMaxMetadataBytes, "packed metadata");
  if (!json) return json.error();
  files.json = std::move(*json);
  // The metadata is checked before any array is read, so a mismatch is named before a missing file.
  auto m = parse_metadata(f, files.json, base, std::numeric_limits<std::uint64_t>::max(), "a file");
  if (!m) return m.error();
  // Each array is bounded by what the metadata asks for plus room for the npy header; the parse checks the
  // exact sizes. (Sizes past what the grids can count are left to the parse to refuse.)
  const BlockFormat& g = m->format;
  auto read = [&](const char* suffix, std::optional<std::uint64_t> payload, std::string& into) -> std::optional<Error> {
    constexpr std::uint64_t kHeader = 1 << 16;
    const std::uint64_t limit = payload && *payload < UINT64_MAX - kHeader ? *payload + kHeader : UINT64_MAX;
    auto bytes = read_small_file(base + suffix, limit, "npy");
    if (!bytes) return bytes.error();
    into = std::move(*bytes);
    return std::nullopt;
  };
  // Elements are bounded by 2^48 (the shape check above), so their bits cannot overflow.
  const std::uint64_t element_bytes = (m->elements * static_cast<std::uint64_t>(g.element.bits()) + 7) / 8;
  if (auto e = read(".elements.npy", element_bytes, files.elements)) return *e;
  if (g.layout.scale) {
    std::optional<std::uint64_t> scale_bytes = bounded_product(m->grid, UINT64_MAX / 8);
    if (scale_bytes && m->layout == PackedScaleLayout::Cublas) scale_bytes = cublas_bytes(m->grid[0], m->grid[1]);
    else if (scale_bytes) *scale_bytes *= static_cast<std::uint64_t>((g.layout.scale->bits() + 7) / 8);
    if (auto e = read(".scales.npy", scale_bytes, files.scales)) return *e;
  }
  if (g.layout.tensor_scale)
    if (auto e = read(".tensor_scale.npy", 8, files.tensor_scale)) return *e;
  if (has_subtiles(g))
    if (auto e = read(".subtiles.npy", bounded_product(m->sub, UINT64_MAX), files.subtiles)) return *e;
  return parse_packed(f, files, base);
}

}  // namespace mxlab::ops
