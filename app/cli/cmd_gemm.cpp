// mxlab gemm: C = A B of two block-quantized operands under accumulation models, against the exact product of
// the quantized operands and against the product of the float32 operands (docs/gemm.md).
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.hpp"
#include "cli/inputs.hpp"
#include "cli/interrupt.hpp"
#include "cli/progress_bar.hpp"
#include "cli/quant_options.hpp"
#include "mxlab/core/bits.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/io/distributions.hpp"
#include "mxlab/io/weights.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/ops/requests.hpp"
#include "mxlab/ops/weight_tensors.hpp"

namespace mxlab::cli {
namespace {

const std::vector<std::string> kGemmColumns = {"model", "reference", "max_rel_error", "mean_rel_error", "p99_rel_error",
                                               "sqnr_db"};

/// The models of --accumulate: one model string, or several separated by ';'.
Result<std::vector<gemm::Model>> models_from(const std::string& text) {
  auto models = gemm::parse_models(text);
  if (!models) return make_error("option '--accumulate': " + models.error().message);
  return models;
}

/// An operand: a generated input of the given shape, or a 2-D file whose shape must be it.
Result<Tensor> operand(const std::string& input, const std::string& which, std::int64_t rows, std::int64_t cols,
                       std::uint64_t seed, const Args& args) {
  ops::InputRequest req;
  req.input = input;
  const bool has_shape = input.find(".npy") != std::string::npos || input.find(".csv") != std::string::npos;
  if (!has_shape) req.shape = std::to_string(rows) + "x" + std::to_string(cols);
  req.csv_table = true;
  req.seed = seed;
  req.bf16 = args.flag("bf16");
  auto t = ops::load_tensor(req);
  if (!t) return make_error("option '--" + which + " " + input + "': " + t.error().message);
  if (t->shape() != std::vector<std::int64_t>{rows, cols})
    return make_error("option '--" + which + " " + input + "': shape " + format_shape(t->shape()) + ", expected " +
                      std::to_string(rows) + "x" + std::to_string(cols) + " from --shape MxKxN");
  return t;
}

/// Layer `name` of the weight file `path` as a matrix [N, K]: its reduction axes last (a Linear weight [out, in]
/// as stored, a convolution's input channels last), the rest flattened into N.
Result<Tensor> layer_operand(const std::string& path, const std::string& name) {
  const std::string what = "option '--b-layer " + name + "' of --b " + path;
  auto wf = WeightFile::open(path);
  if (!wf) return make_error(what + ": " + wf.error().message);
  auto index = wf->find(name);
  if (!index) return make_error(what + ": " + index.error().message);
  auto w = ops::read_weight_tensor(*wf, *index, true);
  if (!w) return make_error(what + ": " + w.error().message);
  auto t = w->source.load();
  if (!t) return make_error(what + ": " + t.error().message);
  const std::int64_t depth = t->shape().empty() ? 1 : t->shape().back();
  if (depth <= 0 || t->size() == 0) return make_error(what + ": the layer is empty");
  return t->reshaped({static_cast<std::int64_t>(t->size()) / depth, depth});
}

std::vector<OptionSpec> gemm_option_specs() {
  std::vector<OptionSpec> specs = {
      {"accumulate", true, "MODEL", "accumulation model: a preset or key=value settings (docs/gemm.md); several separated by ';'"},
      {"shape", true, "MxKxN", "A is M x K, B is K x N (required)"},
      {"a", true, "INPUT", "A: gen:DIST (default gen:normal:0,1) or an M x K FILE.npy"},
      {"b", true, "INPUT", "B: gen:DIST (default gen:normal:0,1) or a K x N FILE.npy"},
      {"b-layer", true, "NAME", "B's transpose is layer NAME of the weight file --b (safetensors, tfjs, GGUF, capture "
                                "folder): [N, K] with blocks along its reduction axes; --shape M or MxKxN"},
      {"data-seed", true, "N", "seed of generated inputs: A uses N, B uses N + 1 (default 0)"},
      {"bf16", false, "", "read a uint16 .npy as bfloat16 bit patterns"},
      {"output", true, "FORMAT", "the format C is rounded to (default float32)"},
      threads_option(),
  };
  for (auto& o : quant_options()) specs.push_back(o);
  for (auto& o : table_output_options()) specs.push_back(o);
  return specs;
}

void print_gemm_help(std::ostream& out, const std::vector<OptionSpec>& specs) {
  out << "usage: mxlab gemm SPEC_A SPEC_B --accumulate MODEL --shape MxKxN [--a INPUT] [--b INPUT]\n"
         "                  [--csv|--json|--md] [--out FILE] [options]\n\n"
         "Quantizes A (M x K) with SPEC_A and B (K x N) with SPEC_B, blocks along K, and computes C = A B under\n"
         "each accumulation MODEL. Rows compare C with the exact product of the quantized operands (reference\n"
         "exact: the accumulation's error) and with the exact product of the float32 operands (reference fp32:\n"
         "quantization and accumulation together); the row of model 'exact product' is the quantized operands'\n"
         "exact product against fp32 (the element formats' error alone). Relative errors are over the entries\n"
         "whose reference is nonzero (percentiles by nearest rank); SQNR over all entries.\n\n"
         "Models (docs/gemm.md): ";
  for (const auto& p : gemm::model_presets()) out << p.name << (&p == &gemm::model_presets().back() ? "" : ", ");
  out << "; or key=value settings product, group, order, sum, scale, acc, promote, round.\n\n"
      << terminal_columns_help({{"", kGemmColumns}}) << "\n" << options_help(specs);
}

/// What `mxlab gemm` is asked: the engine's request and the options as given (for the provenance).
struct GemmCommand {
  gemm::GemmRequest request;
  std::string accumulate, shape;
  std::optional<std::string> b_layer;
  std::optional<Tensor> layer;  // B's transpose, [N, K]
  std::uint64_t seed = 0;
  std::string in_a, in_b;
};

/// The two block formats and the accumulation models.
Result<GemmCommand> gemm_formats(const Args& args) {
  if (args.positional.size() != 2)
    return make_error("expected two block formats SPEC_A SPEC_B (e.g. mxlab gemm mxfp8_e4m3 mxfp8_e4m3 ...), got " +
                      std::to_string(args.positional.size()) + " arguments");
  GemmCommand c;
  auto fa = block_format_from_args(args.positional[0], args);
  if (!fa) return fa.error();
  auto fb = block_format_from_args(args.positional[1], args);
  if (!fb) return fb.error();
  c.request.format_a = *fa;
  c.request.format_b = *fb;
  const auto accumulate = args.value("accumulate");
  if (!accumulate) return make_error("missing --accumulate MODEL (e.g. ocp-dot-fp32)");
  c.accumulate = *accumulate;
  auto models = models_from(*accumulate);
  if (!models) return models.error();
  c.request.models = *models;
  return c;
}

/// M, K and N of --shape (M alone with --b-layer, whose layer gives K and N), and the layer of --b-layer.
std::optional<Error> gemm_shape(const Args& args, GemmCommand& c) {
  const auto shape_text = args.value("shape");
  if (!shape_text) return make_error("missing --shape MxKxN (e.g. --shape 64x4096x64)");
  c.shape = *shape_text;
  auto shape = parse_shape(*shape_text);
  c.b_layer = args.value("b-layer");
  if (c.b_layer) {
    if (!args.value("b")) return make_error("option '--b-layer " + *c.b_layer + "' needs --b WEIGHT_FILE");
    auto t = layer_operand(*args.value("b"), *c.b_layer);
    if (!t) return t.error();
    c.layer = std::move(*t);
    if (shape && shape->size() == 1) shape->insert(shape->end(), {c.layer->shape()[1], c.layer->shape()[0]});
  }
  if (!shape || shape->size() != 3 || (*shape)[0] <= 0 || (*shape)[1] <= 0 || (*shape)[2] <= 0)
    return make_error("option '--shape " + *shape_text + "': expected MxKxN with three positive sizes" +
                      (c.b_layer ? " (or M with --b-layer)" : ""));
  gemm::GemmRequest& r = c.request;
  r.m = (*shape)[0], r.k = (*shape)[1], r.n = (*shape)[2];
  if (c.layer && (c.layer->shape()[1] != r.k || c.layer->shape()[0] != r.n))
    return make_error("option '--b-layer " + *c.b_layer + "': the layer is N x K = " + format_shape(c.layer->shape()) +
                      ", not the K = " + std::to_string(r.k) + " and N = " + std::to_string(r.n) + " of --shape " +
                      *shape_text);
  if (r.m * r.k > (std::int64_t{1} << 28) || r.k * r.n > (std::int64_t{1} << 28) || r.m * r.n > (std::int64_t{1} << 24))
    return make_error("option '--shape " + *shape_text + "': at most 2^28 elements per operand and 2^24 in C");
  return std::nullopt;
}

/// --output, --threads and --data-seed.
std::optional<Error> gemm_settings(const Args& args, GemmCommand& c) {
  if (auto out = args.value("output")) {
    auto f = parse_format(*out);
    if (!f) return make_error("option '--output " + *out + "': " + f.error().message);
    c.request.out = *f;
  }
  auto threads = threads_from_args(args);
  if (!threads) return threads.error();
  c.request.threads = *threads;
  const auto seed = args.unsigned_integer("data-seed", 0);
  if (!seed) return seed.error();
  c.seed = *seed;
  if (c.seed == UINT64_MAX) return make_error("option '--data-seed': B uses N + 1, so N must be below 2^64 - 1");
  return std::nullopt;
}

/// A and B: the inputs of --a and --b (or the transpose of --b-layer's layer).
std::optional<Error> load_operands(const Args& args, GemmCommand& c) {
  gemm::GemmRequest& r = c.request;
  c.in_a = args.value("a").value_or("gen:normal:0,1"), c.in_b = args.value("b").value_or("gen:normal:0,1");
  auto ta = operand(c.in_a, "a", r.m, r.k, c.seed, args);
  if (!ta) return ta.error();
  r.a = ta->exact_values();
  if (c.layer) {
    r.b = gemm::transpose(c.layer->exact_values(), r.n, r.k);
    return std::nullopt;
  }
  auto tb = operand(c.in_b, "b", r.k, r.n, c.seed + 1, args);
  if (!tb) return tb.error();
  r.b = tb->exact_values();
  return std::nullopt;
}


Provenance gemm_provenance(const GemmCommand& c) {
  const gemm::GemmRequest& r = c.request;
  const std::string seed = std::to_string(c.seed), seed_b = std::to_string(c.seed + 1);
  Provenance prov = build_provenance();
  prov.simd_target = active_simd_target();
  prov.inputs = {{"format_a", r.format_a.name}, {"format_b", r.format_b.name}, {"accumulate", c.accumulate},
                 {"shape", c.shape}, {"a", c.in_a + (c.in_a.rfind("gen:", 0) == 0 ? " data-seed " + seed : "")},
                 {"b", c.in_b + (c.b_layer ? " layer " + *c.b_layer + " (B's transpose)"
                                 : c.in_b.rfind("gen:", 0) == 0 ? " data-seed " + seed_b : "")},
                 {"output", r.out ? r.out->name() : "float32"}};
  for (auto& o : describe_options(r.format_a)) prov.inputs.emplace_back("a." + o.first, o.second);
  for (auto& o : describe_options(r.format_b)) prov.inputs.emplace_back("b." + o.first, o.second);
  return prov;
}

}  // namespace

int cmd_gemm(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = gemm_option_specs();
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "gemm", args.error().message);
  if (args->help) {
    print_gemm_help(io.out, specs);
    return kExitOk;
  }
  auto c = gemm_formats(*args);
  if (!c) return bad_input(io, "gemm", c.error().message);
  if (auto e = gemm_shape(*args, *c)) return bad_input(io, "gemm", e->message);
  if (auto e = gemm_settings(*args, *c)) return bad_input(io, "gemm", e->message);
  if (auto e = check_table_options(*args, gemm::report_header())) return bad_input(io, "gemm", e->message);
  if (auto e = load_operands(*args, *c)) return bad_input(io, "gemm", e->message);
  gemm::GemmRequest& r = c->request;

  // Long GEMMs show each product's progress (a bar on a terminal, otherwise a line every few seconds). Ctrl-C
  // stops the command after the running panels of C: nothing is written.
  const bool tty = ProgressBar::stderr_is_tty();
  ProgressBar bar(io.err, "entries of C", tty);
  InterruptGuard guard;
  r.reporter.cancel = InterruptGuard::flag();
  if (r.m * r.k * r.n >= (std::int64_t{1} << 30)) r.reporter = bar.reporter(InterruptGuard::flag());
  auto report = gemm::run(r);
  bar.finish();
  if (!report && r.reporter.cancelled()) {
    io.err << "mxlab gemm: cancelled; nothing written\n";
    return kExitInterrupted;
  }
  if (!report) return bad_input(io, "gemm", report.error().message);
  return emit_table(io, "gemm", *args, gemm::report_table(r, *report), gemm_provenance(*c), {kGemmColumns, ""});
}

}  // namespace mxlab::cli
