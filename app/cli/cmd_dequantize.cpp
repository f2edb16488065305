// `mxlab dequantize`: reads the packed files of `mxlab quantize --packed` and writes the exact values.
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/quant_options.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/quantize/pack.hpp"

namespace mxlab::cli {
namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The bytes of a one-byte-per-element .npy ('|u1') and its shape.
Result<std::vector<std::uint8_t>> read_u1(const std::string& path, std::vector<std::int64_t>* shape) {
  auto h = read_npy_header(path);
  if (!h) return h.error();
  if (h->descr != "|u1" && h->descr != "<u1") return make_error("npy '" + path + "': expected uint8 data, found " + h->descr);
  auto bytes = read_file(path);
  if (!bytes) return bytes.error();
  std::int64_t n = 1;
  for (auto d : h->shape) n *= d;
  if (bytes->size() != h->data_offset + static_cast<std::size_t>(n))
    return make_error("npy '" + path + "': data size does not match its shape");
  if (shape) *shape = h->shape;
  return std::vector<std::uint8_t>(bytes->begin() + static_cast<std::ptrdiff_t>(h->data_offset), bytes->end());
}

/// Integers of a JSON array field, e.g. "shape": [4, 32].
Result<std::vector<std::int64_t>> json_ints(const std::string& json, const std::string& key, const std::string& path) {
  const auto k = json.find("\"" + key + "\": [");
  if (k == std::string::npos) return make_error("'" + path + "': no \"" + key + "\" array");
  std::vector<std::int64_t> v;
  std::size_t i = json.find('[', k) + 1;
  while (i < json.size() && json[i] != ']') {
    if (std::isdigit(static_cast<unsigned char>(json[i]))) {
      std::size_t end = i;
      while (end < json.size() && std::isdigit(static_cast<unsigned char>(json[end]))) ++end;
      v.push_back(std::stoll(json.substr(i, end - i)));
      i = end;
    } else {
      ++i;
    }
  }
  return v;
}

}  // namespace

int cmd_dequantize(const std::vector<std::string>& argv, Io io) {
  std::vector<OptionSpec> specs = {{"out", true, "FILE", "output .npy of the dequantized values (float64, exact)"},
                                   threads_option()};
  // Only the options that change how codes decode (the rest decide how values round, which the codes record).
  for (auto& o : quant_options())
    for (const char* used : {"profile", "int-encoding", "nibble-order", "block-axis", "subtile-bits"})
      if (o.name == used) specs.push_back(o);
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "dequantize", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab dequantize SPEC BASE --out FILE.npy [--profile P] [options]\n\n"
              "Reads BASE.elements.npy, BASE.scales.npy, BASE.tensor_scale.npy and BASE.json written by\n"
              "`mxlab quantize SPEC INPUT --out BASE --packed` (block scale layout), unpacks the codes and\n"
              "writes the dequantized values, exactly, as float64. SPEC and the packing options (nibble order,\n"
              "integer encoding) must be the ones used to quantize.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (args->positional.size() != 2) return bad_input(io, "dequantize", "expected SPEC and BASE");
  const auto out = args->value("out");
  if (!out || out->empty()) return bad_input(io, "dequantize", "missing --out FILE");
  auto f = block_format_from_args(args->positional[0], *args);
  if (!f) return bad_input(io, "dequantize", f.error().message);
  const std::string base = args->positional[1];
  auto json = read_file(base + ".json");
  if (!json) return bad_input(io, "dequantize", json.error().message);
  if (json->find("cuBLAS") != std::string::npos)
    return bad_input(io, "dequantize", "'" + base + ".json': scales are in the cuBLAS layout; quantize with the block layout");
  if (json->find("\"element\": \"" + f->element.name() + "\"") == std::string::npos)
    return bad_input(io, "dequantize", "'" + base + ".json' was not written for the element format " + f->element.name());
  auto shape = json_ints(*json, "shape", base + ".json");
  if (!shape) return bad_input(io, "dequantize", shape.error().message);
  auto grid = json_ints(*json, "scale_grid", base + ".json");
  if (!grid) return bad_input(io, "dequantize", grid.error().message);
  const std::string scale_name = f->layout.scale ? "\"" + f->layout.scale->name() + "\"" : "null";
  if (json->find("\"scale\": " + scale_name) == std::string::npos ||
      BlockIndexer(*shape, f->layout).grid() != *grid)
    return bad_input(io, "dequantize", "'" + base + ".json' was not written for the block format " + f->name +
                                           " (scale format or block grid differ)");
  PackedTensor p;
  p.shape = *shape;
  p.scale_grid = *grid;
  auto elements = read_u1(base + ".elements.npy", nullptr);
  if (!elements) return bad_input(io, "dequantize", elements.error().message);
  p.elements = std::move(*elements);
  if (f->layout.scale) {
    auto scales = read_u1(base + ".scales.npy", nullptr);
    if (!scales) return bad_input(io, "dequantize", scales.error().message);
    p.scales = std::move(*scales);
  }
  if (f->layout.tensor_scale) {
    auto ts = read_u1(base + ".tensor_scale.npy", nullptr);
    if (!ts) return bad_input(io, "dequantize", ts.error().message);
    p.tensor_scale = std::move(*ts);
  }
  auto sub = json_ints(*json, "subtile_grid", base + ".json");
  if (sub && !sub->empty()) {
    p.subtile_grid = *sub;
    auto offsets = read_u1(base + ".subtiles.npy", nullptr);
    if (!offsets) return bad_input(io, "dequantize", offsets.error().message);
    p.subtile_offsets = std::move(*offsets);
  }
  auto threads = threads_from_args(*args);
  if (!threads) return bad_input(io, "dequantize", threads.error().message);
  ops::Run run;
  run.threads = *threads;
  auto values = ops::dequantize(*f, p, run);
  if (!values) return bad_input(io, "dequantize", "'" + base + "': " + values.error().message);
  auto written = write_npy(*out, std::span<const double>(*values), *shape);
  if (!written) return bad_input(io, "dequantize", written.error().message);
  return kExitOk;
}

}  // namespace mxlab::cli
