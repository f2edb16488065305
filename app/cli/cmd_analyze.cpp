// `mxlab analyze`: one row of exact error metrics per block format (or per block, or per exponent gap), of a
// tensor or of every tensor of a weight file or capture folder.
#include <filesystem>
#include <iostream>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/progress_bar.hpp"
#include "cli/quant_options.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/ops/weight_tensors.hpp"
#include "mxlab/quantize/analysis.hpp"

namespace mxlab::cli {
namespace {

/// The columns of analyze a terminal shows first (--columns chooses others; files have every column).
const std::vector<std::string> kAnalyzeColumns = {"format", "mse", "sqnr_db", "max_abs_error", "underflow_ratio",
                                                  "saturation_ratio", "bits_per_element", "engine"};
/// Per block: which block, its amax and scale first.
const std::vector<std::string> kAnalyzeBlockColumns = {"format", "block", "amax", "scale", "mse", "sqnr_db",
                                                       "max_abs_error", "underflow_ratio", "saturation_ratio"};
/// Per exponent gap: the gap and how many elements have it first.
const std::vector<std::string> kAnalyzeGapColumns = {"format", "gap", "elements", "mse", "sqnr_db", "max_abs_error",
                                                     "max_rel_error", "underflow_ratio", "engine"};

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

/// One analysis row: its leading cells (format, and block, gap or tensor), then elements ... sse_exact, then the
/// engine.
std::vector<std::string> analysis_row(std::vector<std::string> lead, const ErrorStats& s, double bits,
                                      bool saturation, const std::string& engine) {
  const double bias = s.count ? s.error_sum.to_double() / static_cast<double>(s.count) : 0.0;
  for (auto c : {std::to_string(s.count + s.nan_outputs), g17(bits), g17(s.mse()), g17(s.rmse()), g17(s.sqnr_db()),
                 g17(bias), g17(s.max_abs_error), g17(s.max_rel_error), g17(s.underflow_ratio()),
                 saturation ? g17(s.saturation_ratio()) : std::string("-"), std::to_string(s.nan_outputs),
                 exact::from_parts(s.sse.parts()).to_decimal(), engine})
    lead.push_back(std::move(c));
  return lead;
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

/// The provenance of analyze's rows: the SIMD target they ran on ("reference" when no row ran on the kernels)
/// and the formats with their options.
Provenance analyze_provenance(const std::vector<BlockFormat>& formats, const std::vector<std::string>& engines) {
  Provenance prov = build_provenance();
  prov.simd_target = "reference";
  for (const auto& engine : engines)
    if (simd_target_of(engine) != "reference") prov.simd_target = simd_target_of(engine);
  prov.inputs = describe_options(formats.front());
  prov.inputs.front().second.clear();
  for (const auto& f : formats) prov.inputs.front().second += (prov.inputs.front().second.empty() ? "" : " ") + f.name;
  return prov;
}

/// The rows of one tensor's formats after the leading cells `lead`: one per format, or one per exponent gap.
void add_weight_rows(Table& table, const std::vector<std::string>& lead, const std::vector<ops::FormatAnalysis>& formats,
                     bool gaps) {
  for (const auto& a : formats) {
    auto with = [&](std::vector<std::string> cells) {
      std::vector<std::string> r = lead;
      for (auto& c : cells) r.push_back(std::move(c));
      return r;
    };
    if (!gaps) {
      table.rows.push_back(analysis_row(with({a.format.name}), a.total, a.bits_per_element, true, a.engine));
      continue;
    }
    const bool exact_saturation = a.engine.rfind("reference", 0) == 0;
    for (const auto& [g, s] : a.by_gap)
      table.rows.push_back(
          analysis_row(with({a.format.name, std::to_string(g)}), s, a.bits_per_element, exact_saturation, a.engine));
  }
}

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
  std::vector<std::string> engines;
  for (const auto& w : *results) {
    add_weight_rows(table, {w.info.name, format_shape(w.info.shape), w.layout}, w.formats, gaps);
    for (const auto& a : w.formats) engines.push_back(a.engine);
  }
  Provenance prov = analyze_provenance(formats, engines);
  prov.inputs.emplace_back("input", input + " (" + std::string(weight_file_kind_name(file->kind())) + ", " +
                                        std::to_string(results->size()) + " tensors)");
  prov.inputs.emplace_back("select", pattern->text());
  return emit_table(io, "analyze", args, table, prov, {gaps ? kAnalyzeWeightGapColumns : kAnalyzeWeightColumns, ""});
}

std::vector<OptionSpec> analyze_options() {
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
  return specs;
}

void print_analyze_help(std::ostream& out, const std::vector<OptionSpec>& specs) {
  out << "usage: mxlab analyze SPEC... --input INPUT [--per-block|--gaps] [--columns A,B,...]\n"
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
}

/// What `mxlab analyze` is asked: the block formats, the input and the worker threads.
struct AnalyzeRequest {
  std::vector<BlockFormat> formats;
  std::string input;
  unsigned threads = 0;
};

/// The request of the parsed arguments: the SPECs, and INPUT from --input or after the SPECs.
Result<AnalyzeRequest> analyze_request(const Args& args) {
  if (args.positional.empty()) return make_error("missing SPEC (e.g. mxlab analyze mxfp4 nvfp4 --input x.npy)");
  AnalyzeRequest request;
  std::vector<std::string> spec_args = args.positional;
  if (auto in = args.value("input")) {
    request.input = *in;
  } else if (spec_args.size() >= 2 && !block_format_from_args(spec_args.back(), args)) {
    request.input = spec_args.back();  // mxlab analyze SPEC... INPUT
    spec_args.pop_back();
  } else {
    return make_error("missing --input INPUT (or give the INPUT after the SPECs)");
  }
  if (args.flag("per-block") && args.flag("gaps")) return make_error("choose one of --per-block, --gaps");
  auto threads = threads_from_args(args);
  if (!threads) return threads.error();
  request.threads = *threads;
  for (const auto& s : spec_args) {
    auto f = block_format_from_args(s, args);
    if (!f) return f.error();
    request.formats.push_back(*f);
  }
  return request;
}

/// The tensor INPUT names, its blocks along the axes of --layout or --reduction-axes (said on standard error).
Result<ops::TensorSource> open_blocked_input(Io io, const Args& args, const std::string& input) {
  auto t = open_input(input, args);
  if (!t) return t.error();
  auto axes = reduction_axes(args, t->shape());
  if (!axes) return t;
  if (!axes->ok()) return axes->error();
  auto moved = ops::block_axes_last(*t, **axes);
  if (!moved) return moved.error();
  std::string list;
  for (int a : **axes) list += (list.empty() ? "" : ",") + std::to_string(a);
  io.err << "mxlab analyze: blocks along axes " << list << " of " << format_shape(t->shape()) << " (rows of "
         << moved->shape().back() << ")\n";
  return moved;
}

/// The leading cells of a block's row: the format, which block, its amax and scale.
std::vector<std::string> block_lead(const std::string& format, std::size_t b, const ops::BlockSummary& s) {
  return {format, std::to_string(b), g17(s.amax), g17(s.scale)};
}

/// Per-block rows of large tensors stream as CSV (memory that does not grow with the blocks): the stream and
/// what its rows need of each format.
struct BlockStream {
  std::optional<CsvStream> csv;
  std::vector<double> bits;
  std::vector<std::string> engines;
};

/// With --per-block: opens the CSV stream of --csv and points the analysis' block sink at it; without --csv,
/// refuses more rows than kMaxPerBlockRows (other tables are made whole, so they are limited to as many rows as
/// a person reads).
std::optional<Error> stream_blocks(Io io, const Args& args, const std::vector<BlockFormat>& formats,
                                   const std::vector<std::int64_t>& shape, BlockStream& stream,
                                   ops::AnalyzeOptions& options) {
  std::int64_t blocks = 0;
  for (const auto& f : formats) blocks += ops::block_count(f, shape);
  if (args.flag("csv")) {
    auto opened = CsvStream::open(io, args, analyze_header(true, false));
    if (!opened) return opened.error();
    stream.csv.emplace(std::move(*opened));
    for (const auto& f : formats) stream.bits.push_back(f.stored_bits_per_element(shape)), stream.engines.push_back(ops::engine_for(f));
    options.block_sink = [&stream, &formats](std::size_t fi, std::size_t b, const ops::BlockSummary& s) -> std::optional<Error> {
      if (!stream.csv->add(analysis_row(block_lead(formats[fi].name, b, s), s.stats, stream.bits[fi], true, stream.engines[fi])))
        return make_error("cannot write the rows");
      return std::nullopt;
    };
  } else if (blocks > kMaxPerBlockRows) {
    return make_error("--per-block gives " + std::to_string(blocks) + " rows here; more than " +
                      std::to_string(kMaxPerBlockRows) + " are written as CSV only: add --csv");
  }
  return std::nullopt;
}

/// The table of a tensor's analyses: a row per format, per block or per exponent gap.
Table analysis_table(const std::vector<ops::FormatAnalysis>& results, bool per_block, bool gaps) {
  Table table = analyze_header(per_block, gaps);
  for (const auto& a : results) {
    if (per_block) {
      for (std::size_t b = 0; b < a.blocks.size(); ++b)
        table.rows.push_back(analysis_row(block_lead(a.format.name, b, a.blocks[b]), a.blocks[b].stats,
                                          a.bits_per_element, true, a.engine));
    } else if (gaps) {
      const bool exact_sat = a.engine.rfind("reference", 0) == 0;
      for (const auto& [g, s] : a.by_gap)
        table.rows.push_back(analysis_row({a.format.name, std::to_string(g)}, s, a.bits_per_element, exact_sat, a.engine));
    } else {
      table.rows.push_back(analysis_row({a.format.name}, a.total, a.bits_per_element, true, a.engine));
    }
  }
  return table;
}

/// `mxlab analyze SPEC... --input TENSOR`: the analysis of one tensor (ops::analyze), written as a table or
/// streamed as CSV.
int analyze_tensor(Io io, const Args& args, const AnalyzeRequest& request, const ops::TensorSource& t) {
  const bool per_block = args.flag("per-block"), gaps = args.flag("gaps");
  // Options that need no results are checked before the (possibly long) analysis.
  if (auto e = check_table_options(args, analyze_header(per_block, gaps))) return bad_input(io, "analyze", e->message);
  ops::AnalyzeOptions options;
  options.gaps = gaps;
  options.per_block = per_block;
  ops::Run run;
  run.threads = request.threads;
  ProgressBar bar(io.err, "elements", true);
  if (t.size() >= kProgressElements && ProgressBar::stderr_is_tty()) run.reporter = bar.reporter();
  BlockStream stream;
  if (per_block)
    if (auto e = stream_blocks(io, args, request.formats, t.shape(), stream, options)) return bad_input(io, "analyze", e->message);
  auto results = ops::analyze(request.formats, t, options, run);
  bar.finish();
  if (!results) {
    if (stream.csv) stream.csv->discard();
    return bad_input(io, "analyze", results.error().message);
  }
  std::vector<std::string> engines;
  for (const auto& a : *results) engines.push_back(a.engine);
  Provenance prov = analyze_provenance(request.formats, engines);
  prov.inputs.emplace_back("input", describe_source(request.input, args, t));
  if (stream.csv) {
    if (auto e = stream.csv->finish(prov)) return bad_input(io, "analyze", e->message);
    return kExitOk;
  }
  return emit_table(io, "analyze", args, analysis_table(*results, per_block, gaps), prov,
                    {gaps ? kAnalyzeGapColumns : per_block ? kAnalyzeBlockColumns : kAnalyzeColumns, ""});
}

}  // namespace

int cmd_analyze(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = analyze_options();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "analyze", args.error().message);
  if (args->help) {
    print_analyze_help(io.out, specs);
    return kExitOk;
  }
  auto request = analyze_request(*args);
  if (!request) return bad_input(io, "analyze", request.error().message);
  if (is_weight_input(request->input))
    return analyze_weight_input(io, *args, request->input, request->formats, request->threads);
  if (args->value("select"))
    return bad_input(io, "analyze", "option '--select' takes a weight file or capture folder input, not '" +
                                        request->input + "'");
  auto t = open_blocked_input(io, *args, request->input);
  if (!t) return bad_input(io, "analyze", t.error().message);
  return analyze_tensor(io, *args, *request, *t);
}

}  // namespace mxlab::cli
