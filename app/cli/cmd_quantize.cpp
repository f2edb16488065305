// `mxlab quantize` (fake-quantized or packed .npy outputs) and `mxlab analyze` (one row of metrics per
// block format).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/progress_bar.hpp"
#include "cli/quant_options.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/core/atomic_file.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/ops/packed_file.hpp"
#include "mxlab/ops/weight_tensors.hpp"
#include "mxlab/quantize/analysis.hpp"
#include "mxlab/quantize/pack.hpp"

namespace mxlab::cli {
namespace {

/// Inputs from this size on show a progress bar on a terminal (counts, rate, ETA).
constexpr std::size_t kProgressElements = std::size_t{1} << 24;

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

/// The axes --layout or --reduction-axes name for blocks (none: the format's own axis).
std::optional<Result<std::vector<int>>> reduction_axes(const Args& args, const std::vector<std::int64_t>& shape) {
  const auto layout = args.value("layout");
  const auto list = args.value("reduction-axes");
  if (layout && list) return Result<std::vector<int>>(make_error("choose one of --layout, --reduction-axes"));
  if (list) {
    std::vector<int> axes;
    std::size_t pos = 0;
    while (pos <= list->size()) {
      const std::size_t end = std::min(list->find(',', pos), list->size());
      int a = 0;
      auto [p, ec] = std::from_chars(list->data() + pos, list->data() + end, a);
      if (ec != std::errc() || p != list->data() + end)
        return Result<std::vector<int>>(make_error("option '--reduction-axes " + *list + "': expected axes such as 2 or 0,1"));
      axes.push_back(a);
      pos = end + 1;
    }
    return Result<std::vector<int>>(axes);
  }
  if (!layout) return std::nullopt;
  struct Layout {
    const char* name;
    std::size_t rank;
    std::vector<int> axes;
  };
  const Layout layouts[] = {{"hwio", 4, {2}}, {"hwio-depthwise", 4, {0, 1}}, {"io", 2, {0}}, {"oi", 2, {1}}, {"oihw", 4, {1}}};
  for (const auto& l : layouts) {
    if (*layout != l.name) continue;
    if (shape.size() != l.rank)
      return Result<std::vector<int>>(make_error("option '--layout " + *layout + "' needs a " + std::to_string(l.rank) +
                                                 "-D tensor; the input has shape " + format_shape(shape)));
    return Result<std::vector<int>>(l.axes);
  }
  return Result<std::vector<int>>(
      make_error("option '--layout " + *layout + "': expected hwio, hwio-depthwise, io, oi or oihw"));
}

/// The columns of analyze a terminal shows first (--columns chooses others; files have every column).
const std::vector<std::string> kAnalyzeColumns = {"format", "mse", "sqnr_db", "max_abs_error", "underflow_ratio",
                                                  "saturation_ratio", "bits_per_element", "engine"};
/// Per block: which block, its amax and scale first.
const std::vector<std::string> kAnalyzeBlockColumns = {"format", "block", "amax", "scale", "mse", "sqnr_db",
                                                       "max_abs_error", "underflow_ratio", "saturation_ratio"};
/// Per exponent gap: the gap and how many elements have it first.
const std::vector<std::string> kAnalyzeGapColumns = {"format", "gap", "elements", "mse", "sqnr_db", "max_abs_error",
                                                     "max_rel_error", "underflow_ratio", "engine"};

}  // namespace

int cmd_quantize(const std::vector<std::string>& argv, Io io) {
  std::vector<OptionSpec> specs = {
      {"out", true, "FILE", "output .npy (fake quantization), or base name of the packed files"},
      {"packed", false, "", "write the packed form: FILE.elements.npy, FILE.scales.npy, FILE.tensor_scale.npy, FILE.subtiles.npy, FILE.json"},
      {"scale-layout", true, "L", "packed scale layout: blocks (default, row-major) or cublas (NVFP4 128x4 swizzle)"},
      {"input", true, "INPUT", "the input, instead of the positional INPUT"},
      threads_option(),
  };
  for (auto& o : quant_options()) specs.push_back(o);
  for (auto& o : input_options()) specs.push_back(o);
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "quantize", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab quantize SPEC INPUT --out FILE [--packed] [--profile P] [options]\n\n"
              "Quantizes INPUT with the block format SPEC (mxfp8_e4m3, mxfp4@16, nvfp4, mxsf@8x8,\n"
              "e2m1:e8m0_t32, ...; docs/quantization.md). INPUT is FILE.npy, FILE.csv, FILE.f32 or gen:DIST.\n"
              "Without --packed, FILE receives the dequantized values with the input's shape and dtype, and\n"
              "FILE.provenance.json the provenance (version, commit, SIMD target used, options, input).\n"
              "With --packed, FILE.elements.npy holds the bit-packed element codes (uint8), FILE.scales.npy\n"
              "the scale codes (uint8, block grid order, or the cuBLAS layout), FILE.tensor_scale.npy the tensor\n"
              "scale code bytes, and FILE.json the format, shape, options and provenance. All files appear\n"
              "together.\n\n"
           << options_help(specs);
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
  OutputSet outputs;
  Provenance prov = build_provenance();
  prov.inputs = describe_options(*f);
  prov.inputs.emplace_back("input", describe_source(*input, *args, *t));
  if (!args->flag("packed")) {
    auto writer = FakeQuantWriter::create(*out, *t);
    if (!writer) return bad_input(io, "quantize", writer.error().message);
    ops::QuantizeSink sink;
    sink.fake = [&](std::size_t, std::span<const float> v) { return writer->write(v); };
    auto q = ops::quantize_fake(*f, *t, sink, run);
    bar.finish();
    if (!q) return bad_input(io, "quantize", q.error().message);
    // The provenance beside the .npy (FILE.provenance.json), as beside every CSV; both appear or neither.
    prov.simd_target = simd_target_of(q->engine);
    const std::string side = *out + ".provenance.json";
    if (auto e = write_file_atomic(side, provenance_json(prov) + "\n")) return bad_input(io, "quantize", e->message);
    auto written = writer->commit();
    if (!written) {
      std::remove(side.c_str());
      return bad_input(io, "quantize", written.error().message);
    }
    if (writer->rounded())
      io.err << "mxlab quantize: note: " << writer->rounded() << " dequantized values are not representable in "
             << dtype_name(t->dtype()) << " and were rounded to nearest-even (use a float64 input to keep them exact)\n";
    return kExitOk;
  }
  const std::string base = strip_npy(*out);
  ops::QuantizeResult engine;  // which engine ran, for the provenance
  auto packed = ops::quantize_packed(*f, *t, run, &engine);
  bar.finish();
  if (!packed) return bad_input(io, "quantize", packed.error().message);
  prov.simd_target = simd_target_of(engine.engine);
  const auto files = ops::packed_file_bytes(*f, *packed, layout == "cublas" ? ops::PackedScaleLayout::Cublas
                                                                            : ops::PackedScaleLayout::Blocks,
                                           provenance_line(prov));
  if (!files) return bad_input(io, "quantize", "option '--scale-layout " + layout + "': " + files.error().message);
  outputs.add(base + ".elements.npy", files->elements);
  if (!files->scales.empty()) outputs.add(base + ".scales.npy", files->scales);
  if (!files->subtiles.empty()) outputs.add(base + ".subtiles.npy", files->subtiles);
  if (!files->tensor_scale.empty()) outputs.add(base + ".tensor_scale.npy", files->tensor_scale);
  outputs.add(base + ".json", files->json);
  if (auto e = outputs.commit()) return bad_input(io, "quantize", e->message);
  return kExitOk;
}

/// Most per-block rows analyze makes as a whole table (terminal, JSON, Markdown); more stream as CSV.
constexpr std::int64_t kMaxPerBlockRows = std::int64_t{1} << 16;

/// The columns a terminal shows first for a weight file's or capture folder's tensors.
const std::vector<std::string> kAnalyzeWeightColumns = {"tensor", "format", "mse", "sqnr_db", "max_abs_error",
                                                        "underflow_ratio", "saturation_ratio", "engine"};
const std::vector<std::string> kAnalyzeWeightGapColumns = {"tensor", "format", "gap", "elements", "mse", "sqnr_db",
                                                           "max_abs_error", "underflow_ratio", "engine"};

/// Whether INPUT names a weight file or a capture folder (analyzed tensor by tensor) rather than one tensor.
bool is_weight_input(const std::string& input) {
  std::error_code ec;
  if (input.rfind("gen:", 0) == 0) return false;
  if (std::filesystem::is_directory(input, ec)) return true;
  for (const char* suffix : {".safetensors", ".gguf", ".wd", ".json"})
    if (input.ends_with(suffix)) return true;
  return false;
}

/// The cells of one analysis row after its leading columns: elements ... sse_exact.
std::vector<std::string> stats_cells(const ErrorStats& s, double bits, bool saturation) {
  const double bias = s.count ? s.error_sum.to_double() / static_cast<double>(s.count) : 0.0;
  return {std::to_string(s.count + s.nan_outputs), g17(bits), g17(s.mse()), g17(s.rmse()), g17(s.sqnr_db()),
          g17(bias), g17(s.max_abs_error), g17(s.max_rel_error), g17(s.underflow_ratio()),
          saturation ? g17(s.saturation_ratio()) : std::string("-"), std::to_string(s.nan_outputs),
          exact::from_parts(s.sse.parts()).to_decimal()};
}

/// The columns of analyze's table (led by tensor, shape and layout for a weight file's tensors).
Table analyze_header(bool per_block, bool gaps, bool weights = false) {
  Table table;
  if (weights) table.add_column("tensor"), table.add_column("shape"), table.add_column("layout");
  table.add_column("format");
  if (per_block) table.add_column("block", true), table.add_column("amax", true), table.add_column("scale", true);
  if (gaps) table.add_column("gap", true);
  for (const char* c : {"elements", "bits_per_element", "mse", "rmse", "sqnr_db", "bias", "max_abs_error",
                        "max_rel_error", "underflow_ratio", "saturation_ratio", "nan_count"})
    table.add_column(c, true);
  table.add_column("sse_exact");
  table.add_column("engine");
  return table;
}

namespace {

/// `mxlab analyze SPEC... --input WEIGHTS [--select PATTERN] [--gaps]`: every readable tensor of a weight file
/// or capture folder whose name matches, blocks along its reduction axes (ops::analyze_weights), a row per
/// tensor and format (and gap), led by the tensor's name, shape and layout.
int analyze_weight_input(Io io, const Args& args, const std::string& input, const std::vector<BlockFormat>& formats,
                         unsigned threads) {
  for (const char* o : {"per-block", "layout", "reduction-axes", "shape", "data-seed", "bf16", "csv-table"})
    if (args.flag(o) || args.value(o))
      return bad_input(io, "analyze", "option '--" + std::string(o) + "' does not apply to the weight file or capture folder '" +
                                          input + "' (each tensor's layout comes from the file)");
  const bool gaps = args.flag("gaps");
  const Table header = analyze_header(false, gaps, true);
  if (auto e = check_table_options(args, header)) return bad_input(io, "analyze", e->message);
  auto file = WeightFile::open(input);
  if (!file) return bad_input(io, "analyze", file.error().message);
  auto pattern = NamePattern::parse(args.value("select").value_or("*"));
  if (!pattern) return bad_input(io, "analyze", pattern.error().message);
  ops::AnalyzeOptions options;
  options.gaps = gaps;
  ops::Run run;
  run.threads = threads;
  std::uint64_t elements = 0;
  for (const auto& w : file->weights())
    if (w.readable() && pattern->matches(w.name)) elements += w.elements;
  ProgressBar bar(io.err, "elements", true);
  if (elements >= kProgressElements && ProgressBar::stderr_is_tty()) run.reporter = bar.reporter();
  auto results = ops::analyze_weights(formats, *file, *pattern, options, run);
  bar.finish();
  if (!results) return bad_input(io, "analyze", results.error().message);
  Table table = header;
  for (const auto& w : *results) {
    const std::vector<std::string> lead = {w.info.name, format_shape(w.info.shape), w.layout};
    for (const auto& a : w.formats) {
      auto add = [&](const ErrorStats& s, const std::string* gap, bool saturation) {
        std::vector<std::string> r = lead;
        r.push_back(a.format.name);
        if (gap) r.push_back(*gap);
        for (auto& c : stats_cells(s, a.bits_per_element, saturation)) r.push_back(std::move(c));
        r.push_back(a.engine);
        table.rows.push_back(std::move(r));
      };
      if (!gaps) {
        add(a.total, nullptr, true);
        continue;
      }
      const bool exact_saturation = a.engine.rfind("reference", 0) == 0;
      for (const auto& [g, s] : a.by_gap) {
        const std::string gap = std::to_string(g);
        add(s, &gap, exact_saturation);
      }
    }
  }
  Provenance prov = build_provenance();
  prov.simd_target = "reference";
  for (const auto& w : *results)
    for (const auto& a : w.formats)
      if (simd_target_of(a.engine) != "reference") prov.simd_target = simd_target_of(a.engine);
  prov.inputs = describe_options(formats.front());
  prov.inputs.front().second.clear();
  for (const auto& f : formats) prov.inputs.front().second += (prov.inputs.front().second.empty() ? "" : " ") + f.name;
  prov.inputs.emplace_back("input", input + " (" + std::string(weight_file_kind_name(file->kind())) + ", " +
                                        std::to_string(results->size()) + " tensors)");
  prov.inputs.emplace_back("select", pattern->text());
  return emit_table(io, "analyze", args, table, prov, {gaps ? kAnalyzeWeightGapColumns : kAnalyzeWeightColumns, ""});
}

}  // namespace

int cmd_analyze(const std::vector<std::string>& argv, Io io) {
  std::vector<OptionSpec> specs = {
      {"input", true, "INPUT", "FILE.npy, FILE.csv, FILE.f32, gen:DIST (with --shape, --data-seed), or WEIGHTS (a capture folder or weight file)"},
      {"per-block", false, "", "one row per block instead of per format"},
      {"gaps", false, "", "one row per exponent gap g = floor(log2 amax_block) - floor(log2 |x|)"},
      {"layout", true, "L", "weight layout, blocks along its reduction axes: hwio (I), hwio-depthwise (H x W), io (I), oi (I), oihw (I)"},
      {"reduction-axes", true, "A[,B]", "block along these axes (moved last and flattened), e.g. 2 or 0,1"},
      {"select", true, "PATTERN", "a weight file's or capture folder's tensors to analyze: a glob ('*/activation/*') or 're:' and a regular expression (default every float tensor)"},
      threads_option(),
  };
  for (auto& o : quant_options()) specs.push_back(o);
  for (auto& o : input_options()) specs.push_back(o);
  for (auto& o : table_output_options()) specs.push_back(o);
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "analyze", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab analyze SPEC... --input INPUT [--per-block|--gaps] [--columns A,B,...]\n"
              "                     [--csv|--json|--md] [options]\n"
              "       mxlab analyze SPEC... INPUT [options]   (the input last, when it is not a block format)\n"
              "       mxlab analyze SPEC... --input WEIGHTS [--select PATTERN] [--gaps] [options]\n\n"
              "Quantizes INPUT with each block format SPEC and reports, per format (or per block / per gap):\n"
              "MSE, RMSE, SQNR (dB), bias (mean signed error), max absolute and relative error, underflow ratio\n"
              "(nonzero inputs that became zero), saturation ratio, NaN outputs, bits per element including\n"
              "scales, the exact sum of squared errors (sse_exact, exact decimal) and the engine that computed\n"
              "the row. Sums are exact. Per-gap rows leave saturation out (the kernels count saturations per\n"
              "tensor and per block range, not per element).\n"
              "WEIGHTS (a capture folder of mxlab.torch.capture, a .safetensors file or index, a tfjs model.json,\n"
              "a .gguf or gnubg .wd file) gives a row per float tensor and format, led by tensor, shape and layout,\n"
              "blocks along each tensor's reduction axes (activations and gradients: hidden, the last axis).\n"
           << terminal_columns_help({{"", kAnalyzeColumns},
                                     {"--per-block", kAnalyzeBlockColumns},
                                     {"--gaps", kAnalyzeGapColumns},
                                     {"WEIGHTS", kAnalyzeWeightColumns},
                                     {"WEIGHTS --gaps", kAnalyzeWeightGapColumns}})
           << "\n" << options_help(specs);
    return kExitOk;
  }
  if (args->positional.empty()) return bad_input(io, "analyze", "missing SPEC (e.g. mxlab analyze mxfp4 nvfp4 --input x.npy)");
  std::vector<std::string> spec_args = args->positional;
  std::string input;
  if (auto in = args->value("input")) {
    input = *in;
  } else if (spec_args.size() >= 2 && !block_format_from_args(spec_args.back(), *args)) {
    input = spec_args.back();  // mxlab analyze SPEC... INPUT
    spec_args.pop_back();
  } else {
    return bad_input(io, "analyze", "missing --input INPUT (or give the INPUT after the SPECs)");
  }
  if (args->flag("per-block") && args->flag("gaps")) return bad_input(io, "analyze", "choose one of --per-block, --gaps");
  auto threads = threads_from_args(*args);
  if (!threads) return bad_input(io, "analyze", threads.error().message);
  std::vector<BlockFormat> formats;
  for (const auto& s : spec_args) {
    auto f = block_format_from_args(s, *args);
    if (!f) return bad_input(io, "analyze", f.error().message);
    formats.push_back(*f);
  }
  if (is_weight_input(input)) return analyze_weight_input(io, *args, input, formats, *threads);
  if (args->value("select"))
    return bad_input(io, "analyze", "option '--select' takes a weight file or capture folder input, not '" + input + "'");
  auto t = open_input(input, *args);
  if (!t) return bad_input(io, "analyze", t.error().message);
  if (auto axes = reduction_axes(*args, t->shape())) {
    if (!axes->ok()) return bad_input(io, "analyze", axes->error().message);
    auto moved = ops::block_axes_last(*t, **axes);
    if (!moved) return bad_input(io, "analyze", moved.error().message);
    std::string list;
    for (int a : **axes) list += (list.empty() ? "" : ",") + std::to_string(a);
    io.err << "mxlab analyze: blocks along axes " << list << " of " << format_shape(t->shape()) << " (rows of "
           << moved->shape().back() << ")\n";
    t = std::move(*moved);
  }

  const bool per_block = args->flag("per-block"), gaps = args->flag("gaps");
  // Options that need no results are checked before the (possibly long) analysis.
  if (auto e = check_table_options(*args, analyze_header(per_block, gaps))) return bad_input(io, "analyze", e->message);
  ops::AnalyzeOptions options;
  options.gaps = gaps;
  options.per_block = per_block;
  ops::Run run;
  run.threads = *threads;
  ProgressBar bar(io.err, "elements", true);
  if (t->size() >= kProgressElements && ProgressBar::stderr_is_tty()) run.reporter = bar.reporter();
  auto row = [&](const BlockFormat& f, double bits, const std::string& engine, const ErrorStats& s,
                 std::vector<std::string> lead, bool saturation) {
    std::vector<std::string> r = {f.name};
    for (auto& l : lead) r.push_back(std::move(l));
    for (auto& c : stats_cells(s, bits, saturation)) r.push_back(std::move(c));
    r.push_back(engine);
    return r;
  };
  auto block_lead = [](std::size_t b, const ops::BlockSummary& s) {
    return std::vector<std::string>{std::to_string(b), g17(s.amax), g17(s.scale)};
  };
  // Per-block rows of large tensors stream as CSV (memory that does not grow with the blocks); other tables
  // are made whole, so they are limited to as many rows as a person reads.
  std::optional<CsvStream> stream;
  std::vector<double> bits;
  std::vector<std::string> engines;
  if (per_block) {
    std::int64_t blocks = 0;
    for (const auto& f : formats) blocks += ops::block_count(f, t->shape());
    if (args->flag("csv")) {
      auto opened = CsvStream::open(io, *args, analyze_header(true, false));
      if (!opened) return bad_input(io, "analyze", opened.error().message);
      stream.emplace(std::move(*opened));
      for (const auto& f : formats) bits.push_back(f.stored_bits_per_element(t->shape())), engines.push_back(ops::engine_for(f));
      options.block_sink = [&](std::size_t fi, std::size_t b, const ops::BlockSummary& s) -> std::optional<Error> {
        if (!stream->add(row(formats[fi], bits[fi], engines[fi], s.stats, block_lead(b, s), true)))
          return make_error("cannot write the rows");
        return std::nullopt;
      };
    } else if (blocks > kMaxPerBlockRows) {
      return bad_input(io, "analyze", "--per-block gives " + std::to_string(blocks) + " rows here; more than " +
                                          std::to_string(kMaxPerBlockRows) + " are written as CSV only: add --csv");
    }
  }
  auto results = ops::analyze(formats, *t, options, run);
  bar.finish();
  if (!results) {
    if (stream) stream->discard();
    return bad_input(io, "analyze", results.error().message);
  }

  Table table = analyze_header(per_block, gaps);
  for (const auto& a : *results) {
    if (stream) break;
    if (per_block) {
      for (std::size_t b = 0; b < a.blocks.size(); ++b)
        table.rows.push_back(row(a.format, a.bits_per_element, a.engine, a.blocks[b].stats, block_lead(b, a.blocks[b]), true));
    } else if (gaps) {
      const bool exact_sat = a.engine.rfind("reference", 0) == 0;
      for (const auto& [g, s] : a.by_gap)
        table.rows.push_back(row(a.format, a.bits_per_element, a.engine, s, {std::to_string(g)}, exact_sat));
    } else {
      table.rows.push_back(row(a.format, a.bits_per_element, a.engine, a.total, {}, true));
    }
  }
  Provenance prov = build_provenance();
  // The SIMD target the rows ran on ("reference" when no row ran on the kernels).
  prov.simd_target = "reference";
  for (const auto& a : *results)
    if (simd_target_of(a.engine) != "reference") prov.simd_target = simd_target_of(a.engine);
  prov.inputs = describe_options(formats.front());
  prov.inputs.front().second.clear();
  for (const auto& f : formats) prov.inputs.front().second += (prov.inputs.front().second.empty() ? "" : " ") + f.name;
  prov.inputs.emplace_back("input", describe_source(input, *args, *t));
  if (stream) {
    if (auto e = stream->finish(prov)) return bad_input(io, "analyze", e->message);
    return kExitOk;
  }
  return emit_table(io, "analyze", *args, table, prov,
                    {gaps ? kAnalyzeGapColumns : per_block ? kAnalyzeBlockColumns : kAnalyzeColumns, ""});
}

}  // namespace mxlab::cli
