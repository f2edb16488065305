// `mxlab quantize`: fake-quantized or packed .npy outputs of a block format.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <unistd.h>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/progress_bar.hpp"
#include "cli/quant_options.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/core/atomic_file.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/ops/packed_file.hpp"
#include "mxlab/quantize/pack.hpp"

namespace mxlab::cli {
namespace {

/// Several output files that appear together or not at all: every path is checked, all are written to
/// temporary files, then renamed; on any failure the temporaries and the files already renamed are removed.
class OutputSet {
 public:
  void add(std::string path, std::string bytes) { files_.push_back({std::move(path), std::move(bytes)}); }
  std::optional<Error> commit() {
    std::vector<AtomicFile> temps;
    for (const auto& [path, bytes] : files_) {
      auto f = AtomicFile::create(path, "output");
      if (!f) return f.error();
      temps.push_back(std::move(*f));
    }
    for (std::size_t i = 0; i < files_.size(); ++i) temps[i].write(files_[i].second);
    for (std::size_t i = 0; i < files_.size(); ++i) {
      auto done = temps[i].commit();
      if (!done) {
        for (std::size_t j = 0; j < i; ++j) std::remove(files_[j].first.c_str());
        return done.error();
      }
    }
    return std::nullopt;
  }

 private:
  std::vector<std::pair<std::string, std::string>> files_;
};

std::string strip_npy(const std::string& path) {
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0) return path.substr(0, path.size() - 4);
  return path;
}


/// Streams fake-quant values into an atomic .npy in the input's dtype: f32 stays f32 (exact unless beyond the
/// float32 range); f64 sources are written as f64; f16 / bf16 values are rounded to nearest-even in their
/// format where not representable (counted in *rounded).
class FakeQuantWriter {
 public:
  static Result<FakeQuantWriter> create(const std::string& path, const ops::TensorSource& t) {
    auto file = AtomicFile::create(path, "npy");
    if (!file) return file.error();
    FakeQuantWriter w(std::move(*file), t.dtype());
    const char* descr = w.dtype_ == DType::F64 ? "<f8" : w.dtype_ == DType::F32 ? "<f4" : w.dtype_ == DType::F16 ? "<f2" : "<u2";
    w.file_.write(npy_header(descr, t.shape()));
    return w;
  }
  std::optional<Error> write(std::span<const float> v) {
    switch (dtype_) {
      case DType::F32: file_.write(v.data(), v.size() * sizeof(float)); break;
      case DType::F64: {
        std::vector<double> d(v.begin(), v.end());
        file_.write(d.data(), d.size() * sizeof(double));
        break;
      }
      case DType::F16:
      case DType::BF16: {
        const Format* fmt = find_catalogue_format(dtype_ == DType::F16 ? "float16" : "bfloat16");
        std::vector<std::uint16_t> bits(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) {
          const CastResult r = cast(*fmt, static_cast<double>(v[i]), CastOptions{Rounding::NearestEven, Overflow::Inf});
          bits[i] = static_cast<std::uint16_t>(r.code);
          if (r.inexact) ++rounded_;
        }
        file_.write(bits.data(), bits.size() * 2);
        break;
      }
    }
    return std::nullopt;
  }
  Result<std::size_t> commit() { return file_.commit(); }
  std::size_t rounded() const { return rounded_; }

 private:
  FakeQuantWriter(AtomicFile f, DType d) : file_(std::move(f)), dtype_(d) {}
  AtomicFile file_;
  DType dtype_;
  std::size_t rounded_ = 0;
};

std::vector<OptionSpec> quantize_option_specs() {
  std::vector<OptionSpec> specs = {
      {"out", true, "FILE", "output .npy (fake quantization), or base name of the packed files"},
      {"packed", false, "", "write the packed form: FILE.elements.npy, FILE.scales.npy, FILE.tensor_scale.npy, FILE.subtiles.npy, FILE.json"},
      {"scale-layout", true, "L", "packed scale layout: blocks (default, row-major) or cublas (NVFP4 128x4 swizzle)"},
      {"input", true, "INPUT", "the input, instead of the positional INPUT"},
      threads_option(),
  };
  for (auto& o : quant_options()) specs.push_back(o);
  for (auto& o : input_options()) specs.push_back(o);
  return specs;
}

void print_quantize_help(std::ostream& out, const std::vector<OptionSpec>& specs) {
  out << "usage: mxlab quantize SPEC INPUT --out FILE [--packed] [--profile P] [options]\n\n"
         "Quantizes INPUT with the block format SPEC (mxfp8_e4m3, mxfp4@16, nvfp4, mxsf@8x8,\n"
         "e2m1:e8m0_t32, ...; docs/quantization.md). INPUT is FILE.npy, FILE.csv, FILE.f32 or gen:DIST.\n"
         "Without --packed, FILE receives the dequantized values with the input's shape and dtype, and\n"
         "FILE.provenance.json the provenance (version, commit, SIMD target used, options, input).\n"
         "With --packed, FILE.elements.npy holds the bit-packed element codes (uint8), FILE.scales.npy\n"
         "the scale codes (uint8, block grid order, or the cuBLAS layout), FILE.tensor_scale.npy the tensor\n"
         "scale code bytes, and FILE.json the format, shape, options and provenance. All files appear\n"
         "together.\n\n"
      << options_help(specs);
}

/// The fake-quantized values to `out` (ops::quantize_fake) in the input's dtype, with FILE.provenance.json.
int write_fake_quantized(Io io, const std::string& out, const BlockFormat& f, const ops::TensorSource& t,
                         const ops::Run& run, ProgressBar& bar, Provenance prov) {
  auto writer = FakeQuantWriter::create(out, t);
  if (!writer) return bad_input(io, "quantize", writer.error().message);
  ops::QuantizeSink sink;
  sink.fake = [&](std::size_t, std::span<const float> v) { return writer->write(v); };
  auto q = ops::quantize_fake(f, t, sink, run);
  bar.finish();
  if (!q) return bad_input(io, "quantize", q.error().message);
  // The provenance beside the .npy (FILE.provenance.json), as beside every CSV; both appear or neither.
  prov.simd_target = simd_target_of(q->engine);
  const std::string side = out + ".provenance.json";
  if (auto e = write_file_atomic(side, provenance_json(prov) + "\n")) return bad_input(io, "quantize", e->message);
  auto written = writer->commit();
  if (!written) {
    std::remove(side.c_str());
    return bad_input(io, "quantize", written.error().message);
  }
  if (writer->rounded())
    io.err << "mxlab quantize: note: " << writer->rounded() << " dequantized values are not representable in "
           << dtype_name(t.dtype()) << " and were rounded to nearest-even (use a float64 input to keep them exact)\n";
  return kExitOk;
}

/// The packed form (ops::quantize_packed) to the files of `out`'s stem, all or none, scales in `layout`.
int write_packed(Io io, const std::string& out, const std::string& layout, const BlockFormat& f,
                 const ops::TensorSource& t, const ops::Run& run, ProgressBar& bar, Provenance prov) {
  const std::string base = strip_npy(out);
  ops::QuantizeResult engine;  // which engine ran, for the provenance
  auto packed = ops::quantize_packed(f, t, run, &engine);
  bar.finish();
  if (!packed) return bad_input(io, "quantize", packed.error().message);
  prov.simd_target = simd_target_of(engine.engine);
  const auto files = ops::packed_file_bytes(f, *packed, layout == "cublas" ? ops::PackedScaleLayout::Cublas
                                                                           : ops::PackedScaleLayout::Blocks,
                                           provenance_line(prov));
  if (!files) return bad_input(io, "quantize", "option '--scale-layout " + layout + "': " + files.error().message);
  OutputSet outputs;
  outputs.add(base + ".elements.npy", files->elements);
  if (!files->scales.empty()) outputs.add(base + ".scales.npy", files->scales);
  if (!files->subtiles.empty()) outputs.add(base + ".subtiles.npy", files->subtiles);
  if (!files->tensor_scale.empty()) outputs.add(base + ".tensor_scale.npy", files->tensor_scale);
  outputs.add(base + ".json", files->json);
  if (auto e = outputs.commit()) return bad_input(io, "quantize", e->message);
  return kExitOk;
}

}  // namespace

int cmd_quantize(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = quantize_option_specs();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "quantize", args.error().message);
  if (args->help) {
    print_quantize_help(io.out, specs);
    return kExitOk;
  }
  if (args->positional.empty())
    return bad_input(io, "quantize", "expected SPEC and INPUT (e.g. mxlab quantize mxfp4 x.npy --out q.npy)");
  if (args->positional.size() > 2) return bad_input(io, "quantize", "unexpected argument '" + args->positional[2] + "'");
  auto input = input_argument(*args, 1);
  if (!input) return bad_input(io, "quantize", input.error().message);
  const auto out = args->value("out");
  if (!out || out->empty()) return bad_input(io, "quantize", "missing --out FILE");
  auto f = block_format_from_args(args->positional[0], *args);
  if (!f) return bad_input(io, "quantize", f.error().message);
  auto threads = threads_from_args(*args);
  if (!threads) return bad_input(io, "quantize", threads.error().message);
  const std::string layout = args->value("scale-layout").value_or("blocks");
  if (layout != "blocks" && layout != "cublas")
    return bad_input(io, "quantize", "option '--scale-layout " + layout + "': expected blocks or cublas");
  auto t = open_input(*input, *args);
  if (!t) return bad_input(io, "quantize", t.error().message);
  ops::Run run;
  run.threads = *threads;
  ProgressBar bar(io.err, "elements", true);
  if (t->size() >= kProgressElements && ProgressBar::stderr_is_tty()) run.reporter = bar.reporter();
  Provenance prov = build_provenance();
  prov.inputs = describe_options(*f);
  prov.inputs.emplace_back("input", describe_source(*input, *args, *t));
  if (!args->flag("packed")) return write_fake_quantized(io, *out, *f, *t, run, bar, std::move(prov));
  return write_packed(io, *out, layout, *f, *t, run, bar, std::move(prov));
}

}  // namespace mxlab::cli
