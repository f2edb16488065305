// `mxlab quantize` (fake-quantized or packed .npy outputs) and `mxlab analyze` (one row of metrics per
// block format).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <unistd.h>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/quant_options.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/quantize/analysis.hpp"
#include "mxlab/quantize/pack.hpp"

namespace mxlab::cli {
namespace {

/// Several output files that appear together or not at all: all are written to temporary names, then
/// renamed; on any failure the temporaries are removed and no output exists.
class OutputSet {
 public:
  void add(std::string path, std::string bytes) { files_.push_back({std::move(path), std::move(bytes)}); }
  std::optional<Error> commit() {
    std::vector<std::string> temps;
    for (const auto& [path, bytes] : files_) {
      const std::string tmp = path + ".partial." + std::to_string(::getpid());
      if (auto e = write_file_atomic(tmp, bytes)) {
        for (const auto& t : temps) std::remove(t.c_str());
        return make_error(e->message.replace(e->message.find(tmp), tmp.size(), path));
      }
      temps.push_back(tmp);
    }
    for (std::size_t i = 0; i < files_.size(); ++i) {
      if (std::rename(temps[i].c_str(), files_[i].first.c_str()) != 0) {
        for (std::size_t j = i; j < temps.size(); ++j) std::remove(temps[j].c_str());
        return make_error("cannot write '" + files_[i].first + "'");
      }
    }
    return std::nullopt;
  }

 private:
  std::vector<std::pair<std::string, std::string>> files_;
};

template <typename T>
std::string npy_bytes(std::string_view descr, const std::vector<std::int64_t>& shape, const std::vector<T>& v) {
  std::string out = npy_header(descr, shape);
  const std::size_t start = out.size();
  out.resize(start + v.size() * sizeof(T));
  std::memcpy(out.data() + start, v.data(), v.size() * sizeof(T));  // little-endian host (x86-64)
  return out;
}

std::string strip_npy(const std::string& path) {
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0) return path.substr(0, path.size() - 4);
  return path;
}


/// Fake-quant values in the input's dtype: f64 stays f64; f32 values are exact where representable
/// and rounded to nearest-even otherwise (the count is reported); f16 / bf16 likewise in their format.
std::string fake_quant_npy(const Tensor& t, const std::vector<double>& values, std::size_t* rounded) {
  *rounded = 0;
  switch (t.dtype()) {
    case DType::F64: return npy_bytes("<f8", t.shape(), values);
    case DType::F32: {
      std::vector<float> f(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        f[i] = static_cast<float>(values[i]);
        if (static_cast<double>(f[i]) != values[i] && !std::isnan(values[i])) ++*rounded;
      }
      return npy_bytes("<f4", t.shape(), f);
    }
    case DType::F16:
    case DType::BF16: {
      const Format* fmt = find_catalogue_format(t.dtype() == DType::F16 ? "float16" : "bfloat16");
      std::vector<std::uint16_t> bits(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        const CastResult r = cast(*fmt, values[i], CastOptions{Rounding::NearestEven, Overflow::Inf});
        bits[i] = static_cast<std::uint16_t>(r.code);
        if (r.inexact) ++*rounded;
      }
      // FP16 as '<f2'; BF16 as '<u2' bit patterns (NumPy has no bfloat16; read back with --bf16).
      return npy_bytes(t.dtype() == DType::F16 ? "<f2" : "<u2", t.shape(), bits);
    }
  }
  return {};
}

}  // namespace

int cmd_quantize(const std::vector<std::string>& argv, Io io) {
  std::vector<OptionSpec> specs = {
      {"out", true, "FILE", "output .npy (fake quantization), or base name of the packed files"},
      {"packed", false, "", "write the packed form: FILE.elements.npy, FILE.scales.npy, FILE.tensor_scale.npy, FILE.subtiles.npy, FILE.json"},
      {"scale-layout", true, "L", "packed scale layout: blocks (default, row-major) or cublas (NVFP4 128x4 swizzle)"},
  };
  for (auto& o : quant_options()) specs.push_back(o);
  for (auto& o : input_options()) specs.push_back(o);
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "quantize", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab quantize SPEC INPUT --out FILE [--packed] [--profile P] [options]\n\n"
              "Quantizes INPUT with the block format SPEC (mxfp8_e4m3, mxfp4@16, nvfp4, mxsf@8x8,\n"
              "e2m1:e8m0_t32, ...; docs/quantization.md). INPUT is FILE.npy, FILE.csv, FILE.f32 or gen:DIST.\n"
              "Without --packed, FILE receives the dequantized values with the input's shape and dtype.\n"
              "With --packed, FILE.elements.npy holds the bit-packed element codes (uint8), FILE.scales.npy\n"
              "the scale codes (uint8, block grid order, or the cuBLAS layout), FILE.tensor_scale.npy the tensor\n"
              "scale code bytes, and FILE.json the format, shape and options. All files appear together.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (args->positional.size() != 2)
    return bad_input(io, "quantize", "expected SPEC and INPUT (e.g. mxlab quantize mxfp4 x.npy --out q.npy)");
  const auto out = args->value("out");
  if (!out || out->empty()) return bad_input(io, "quantize", "missing --out FILE");
  auto f = block_format_from_args(args->positional[0], *args);
  if (!f) return bad_input(io, "quantize", f.error().message);
  const std::string layout = args->value("scale-layout").value_or("blocks");
  if (layout != "blocks" && layout != "cublas")
    return bad_input(io, "quantize", "option '--scale-layout " + layout + "': expected blocks or cublas");
  auto t = load_input(args->positional[1], *args);
  if (!t) return bad_input(io, "quantize", t.error().message);
  const std::vector<double> x = t->exact_values();
  auto q = quantize(*f, x, t->shape());
  if (!q) return bad_input(io, "quantize", q.error().message);

  OutputSet outputs;
  Provenance prov = build_provenance();
  prov.inputs = describe_options(*f);
  prov.inputs.emplace_back("input", describe_input(args->positional[1], *args, *t));
  if (!args->flag("packed")) {
    std::size_t rounded = 0;
    outputs.add(*out, fake_quant_npy(*t, q->values, &rounded));
    if (auto e = outputs.commit()) return bad_input(io, "quantize", e->message);
    if (rounded)
      io.err << "mxlab quantize: note: " << rounded << " dequantized values are not representable in "
             << dtype_name(t->dtype()) << " and were rounded to nearest-even (use a float64 input to keep them exact)\n";
    return kExitOk;
  }
  const std::string base = strip_npy(*out);
  const PackedTensor p = pack(*f, *q);
  outputs.add(base + ".elements.npy", npy_bytes("|u1", {static_cast<std::int64_t>(p.elements.size())}, p.elements));
  std::string scale_note = "block grid, row-major";
  if (f->layout.scale) {
    std::vector<std::uint8_t> scales = p.scales;
    std::vector<std::int64_t> sshape = p.scale_grid;
    const int sbytes = (f->layout.scale->bits() + 7) / 8;
    if (sbytes > 1) sshape.push_back(sbytes);
    if (layout == "cublas") {
      if (sbytes != 1 || p.scale_grid.size() != 2)
        return bad_input(io, "quantize", "option '--scale-layout cublas': needs one-byte scales over a 2-D tensor");
      scales = swizzle_scales_128x4(p.scales, p.scale_grid[0], p.scale_grid[1], true);
      sshape = {static_cast<std::int64_t>(scales.size())};
      scale_note = "cuBLAS 128x4 swizzle, padded";
    }
    outputs.add(base + ".scales.npy", npy_bytes("|u1", sshape, scales));
  }
  if (!p.subtile_offsets.empty())
    outputs.add(base + ".subtiles.npy", npy_bytes("|u1", p.subtile_grid, p.subtile_offsets));
  if (!p.tensor_scale.empty())
    outputs.add(base + ".tensor_scale.npy", npy_bytes("|u1", {static_cast<std::int64_t>(p.tensor_scale.size())}, p.tensor_scale));
  std::string json = "{\n  \"format\": " + json_quote(f->name) + ",\n  \"element\": " + json_quote(f->element.name()) +
                     ",\n  \"element_bits\": " + std::to_string(f->element.bits()) + ",\n  \"shape\": [";
  for (std::size_t i = 0; i < t->shape().size(); ++i) json += (i ? ", " : "") + std::to_string(t->shape()[i]);
  json += "],\n  \"scale\": " + (f->layout.scale ? json_quote(f->layout.scale->name()) : std::string("null"));
  json += ",\n  \"scale_grid\": [";
  for (std::size_t i = 0; i < p.scale_grid.size(); ++i) json += (i ? ", " : "") + std::to_string(p.scale_grid[i]);
  json += "],\n  \"subtile_grid\": [";
  for (std::size_t i = 0; i < p.subtile_grid.size(); ++i) json += (i ? ", " : "") + std::to_string(p.subtile_grid[i]);
  json += "],\n  \"scale_layout\": " + json_quote(scale_note);
  json += ",\n  \"tensor_scale\": " + (f->layout.tensor_scale ? json_quote(f->layout.tensor_scale->name()) : std::string("null"));
  json += ",\n  \"nibble_order\": " + json_quote(std::string(to_string(f->options.nibble_order)));
  json += ",\n  \"int_encoding\": " + json_quote(std::string(to_string(f->options.int_encoding)));
  json += ",\n  \"provenance\": " + json_quote(provenance_line(prov)) + "\n}\n";
  outputs.add(base + ".json", json);
  if (auto e = outputs.commit()) return bad_input(io, "quantize", e->message);
  return kExitOk;
}

int cmd_analyze(const std::vector<std::string>& argv, Io io) {
  std::vector<OptionSpec> specs = {
      {"input", true, "INPUT", "FILE.npy, FILE.csv, FILE.f32, or gen:DIST (with --shape, --data-seed)"},
      {"per-block", false, "", "one row per block instead of per format"},
      {"gaps", false, "", "one row per exponent gap g = floor(log2 amax_block) - floor(log2 |x|)"},
  };
  for (auto& o : quant_options()) specs.push_back(o);
  for (auto& o : input_options()) specs.push_back(o);
  for (auto& o : table_output_options()) specs.push_back(o);
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "analyze", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab analyze SPEC... --input INPUT [--per-block|--gaps] [--csv|--json|--md] [options]\n\n"
              "Quantizes INPUT with each block format SPEC and reports, per format (or per block / per gap):\n"
              "MSE, RMSE, SQNR (dB), max absolute and relative error, underflow ratio (nonzero inputs that\n"
              "became zero), saturation ratio, NaN outputs, bits per element including scales, and the exact\n"
              "sum of squared errors (sse_exact, exact decimal). Per-element errors and sums are exact.\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (args->positional.empty()) return bad_input(io, "analyze", "missing SPEC (e.g. mxlab analyze mxfp4 nvfp4 --input x.npy)");
  const auto input = args->value("input");
  if (!input) return bad_input(io, "analyze", "missing --input INPUT");
  if (args->flag("per-block") && args->flag("gaps")) return bad_input(io, "analyze", "choose one of --per-block, --gaps");
  std::vector<BlockFormat> formats;
  for (const auto& s : args->positional) {
    auto f = block_format_from_args(s, *args);
    if (!f) return bad_input(io, "analyze", f.error().message);
    formats.push_back(*f);
  }
  auto t = load_input(*input, *args);
  if (!t) return bad_input(io, "analyze", t.error().message);
  const std::vector<double> x = t->exact_values();

  Table table;
  const bool per_block = args->flag("per-block"), gaps = args->flag("gaps");
  table.add_column("format");
  if (per_block) table.add_column("block", true), table.add_column("amax", true), table.add_column("scale", true);
  if (gaps) table.add_column("gap", true);
  for (const char* c : {"elements", "bits_per_element", "mse", "rmse", "sqnr_db", "max_abs_error", "max_rel_error",
                        "underflow_ratio", "saturation_ratio", "nan_count"})
    table.add_column(c, true);
  table.add_column("sse_exact");
  auto row = [&](const BlockFormat& f, const Analysis& a, const ErrorStats& s, std::vector<std::string> lead) {
    std::vector<std::string> r = {f.name};
    for (auto& l : lead) r.push_back(std::move(l));
    const std::vector<std::string> rest = {
        std::to_string(s.count + s.nan_outputs), g17(a.bits_per_element), g17(s.mse()), g17(s.rmse()), g17(s.sqnr_db()),
        g17(s.max_abs_error), g17(s.max_rel_error), g17(s.underflow_ratio()), g17(s.saturation_ratio()),
        std::to_string(s.nan_outputs), exact::from_parts(s.sse.parts()).to_decimal()};
    r.insert(r.end(), rest.begin(), rest.end());
    table.rows.push_back(std::move(r));
  };
  for (const auto& f : formats) {
    auto q = quantize(f, x, t->shape());
    if (!q) return bad_input(io, "analyze", "format '" + f.name + "': " + q.error().message);
    const Analysis a = analyze(f, x, *q);
    if (per_block) {
      for (std::size_t b = 0; b < a.blocks.size(); ++b)
        row(f, a, a.blocks[b], {std::to_string(b), g17(q->block_amax[b]), g17(q->scale_values[b] * q->tensor_scale)});
    } else if (gaps) {
      for (const auto& [g, s] : a.by_gap) row(f, a, s, {std::to_string(g)});
    } else {
      row(f, a, a.total, {});
    }
  }
  Provenance prov = build_provenance();
  prov.inputs = describe_options(formats.front());
  prov.inputs.front().second.clear();
  for (const auto& f : formats) prov.inputs.front().second += (prov.inputs.front().second.empty() ? "" : " ") + f.name;
  prov.inputs.emplace_back("input", describe_input(*input, *args, *t));
  return emit_table(io, "analyze", *args, table, prov);
}

}  // namespace mxlab::cli
