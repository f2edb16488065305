// The jobs an experiment point runs (analyze, profiles, bounds, catalogue), all through the engine's entry
// points, and the expansion of a sweep into points.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <system_error>

#include "mxlab/core/quote.hpp"
#include "mxlab/core/small_file.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/core/text.hpp"
#include "mxlab/exact/bounds.hpp"
#include "mxlab/experiment/results.hpp"
#include "mxlab/formats/codepoints.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/io/distributions.hpp"
#include "mxlab/io/training_data.hpp"
#include "mxlab/io/weights.hpp"
#include "mxlab/ops/catalogue.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/requests.hpp"
#include "mxlab/ops/weight_tensors.hpp"
#include "file_kind.hpp"
#include "mxlab/train/data.hpp"
#include "mxlab/train/direct_cast.hpp"
#include "mxlab/train/recipe.hpp"
#include "mxlab/train/run_record.hpp"
#include "mxlab/train/trainer.hpp"

namespace mxlab::experiment {

namespace fs = std::filesystem;

namespace {

/// Most code points the catalogue lists values of (larger formats get their properties only).
constexpr std::uint64_t kMaxCatalogueCodes = std::uint64_t{1} << 16;

const InputDef* find_input(const Experiment& e, const std::string& name) {
  for (const auto& in : e.inputs)
    if (in.name == name) return &in;
  return nullptr;
}

/// A path of the experiment file resolved against the file's folder.
std::string resolve(const Experiment& e, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(e.path).parent_path() / path).lexically_normal().string();
}

/// The weight file of an input: a registered model's file in the data folder, or a path.
Result<std::string> weights_path(const Experiment& e, const InputDef& in) {
  if (auto src = find_data_source(in.weights)) {
    for (const auto& f : (*src)->files) {
      const std::string name(f.file);
      if (name.ends_with(".json") || name.ends_with(".safetensors") || name.ends_with(".wd"))
        return data_file(in.weights, name, resolve(e, in.data_dir));
    }
    return make_error("data set '" + in.weights + "' holds no weight file");
  }
  const std::string p = resolve(e, in.weights);
  std::error_code ec;
  const bool found = fs::exists(p, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    return make_error("weights " + quote_input(in.weights) + ": " + ec.message());
  if (!found)
    return make_error("weights " + quote_input(in.weights) +
                      " is neither a registered model (mxlab data list) nor an existing file");
  return p;
}

/// The layers of a weights input: readable tensors matching the pattern with enough elements.
Result<std::vector<WeightInfo>> input_layers(const Experiment& e, const InputDef& in) {
  auto path = weights_path(e, in);
  if (!path) return make_error("input '" + in.name + "': " + path.error().message);
  auto wf = WeightFile::open(*path);
  if (!wf) return make_error("input '" + in.name + "': " + wf.error().message);
  auto pattern = NamePattern::parse(in.select);
  if (!pattern) return make_error("input '" + in.name + "': " + pattern.error().message);
  std::vector<WeightInfo> out;
  for (const auto& w : select_weights(wf->weights(), *pattern))
    if (w.readable() && static_cast<std::int64_t>(w.elements) >= in.min_elements &&
        (!in.kernels || w.layout != WeightLayout::Other))
      out.push_back(w);
  if (out.empty())
    return make_error("input '" + in.name + "': no readable tensor of " + *path + " matches '" + in.select + "'");
  return out;
}

/// Why `path` is not a regular file to read (" does not exist", ": is a directory, not a file", the file
/// system's reason), or nullopt when it is one.
std::optional<std::string> not_a_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return ": " + ec.message();
  if (st.type() == fs::file_type::not_found) return std::string(" does not exist");
  if (st.type() == fs::file_type::regular) return std::nullopt;
  return ": is " + file_kind(st) + ", not a file";
}

bool is_format_option(const std::string& name) {
  for (const auto& o : ops::format_options())
    if (o.name == name) return true;
  return false;
}

/// The block format of a point: format (and a, b for bounds) with @block and every format option.
Result<BlockFormat> point_format(const Point& p, const std::string& which, const Pairs& extra = {}) {
  auto spec = p.param(which);
  if (!spec) return make_error("point " + p.key() + ": no " + which);
  std::string text = *spec;
  if (auto b = p.param("block")) text += "@" + *b;
  Pairs options;
  for (const auto& [k, v] : p.params)
    if (is_format_option(k)) options.emplace_back(k, v);
  for (const auto& kv : extra) {
    std::erase_if(options, [&](const auto& o) { return o.first == kv.first; });
    options.push_back(kv);
  }
  auto f = ops::block_format(text, options, [](std::string_view name) { return "sweep key '" + std::string(name) + "'"; });
  if (!f) return make_error("format '" + text + "': " + f.error().message);
  return f;
}

struct LoadedInput {
  ops::TensorSource source;
  std::string shape;   ///< of the tensor as stored
  std::string layout;  ///< how blocks run ("last axis", "conv HWIO: blocks along I", ...)
};

/// "data:NAME[:SPLIT]": the images of a registered data set as a tensor [images, pixels].
Result<Tensor> dataset_tensor(const Experiment& e, const InputDef& in) {
  const std::string spec = in.source.substr(5);
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon), split = colon == std::string::npos ? "train" : spec.substr(colon + 1);
  auto s = load_image_set(name, split, resolve(e, in.data_dir));
  if (!s) return make_error("input '" + in.name + "': " + s.error().message);
  std::vector<float> values(s->pixels.begin(), s->pixels.end());
  return Tensor::from_f32({s->count, s->rows * s->cols}, std::move(values));
}

/// The tensor of a point's input (and layer), with the weight's reduction axes moved last.
Result<LoadedInput> load_input(const Experiment& e, const Point& p) {
  const auto name = p.param("input");
  const InputDef* in = name ? find_input(e, *name) : nullptr;
  if (!in) return make_error("point " + p.key() + ": no input");
  if (in->source.rfind("data:", 0) == 0) {
    // A data set's images as rows: [images, pixels], pixel values as stored (0..255, digits 0..16).
    auto t = dataset_tensor(e, *in);
    if (!t) return t.error();
    const std::string shape = format_shape(t->shape());
    return LoadedInput{ops::TensorSource::of(std::move(*t)), shape, "last axis (pixels of an image)"};
  }
  if (in->weights.empty()) {
    ops::InputRequest r;
    r.input = in->source.rfind("gen:", 0) == 0 ? in->source : resolve(e, in->source);
    r.shape = in->shape;
    r.seed = in->seed;
    r.bf16 = in->bf16;
    auto t = ops::open_tensor(r);
    if (!t) return make_error("input '" + in->name + "': " + t.error().message);
    return LoadedInput{*t, format_shape(t->shape()), "last axis"};
  }
  auto path = weights_path(e, *in);
  if (!path) return path.error();
  auto wf = WeightFile::open(*path);
  if (!wf) return make_error("input '" + in->name + "': " + wf.error().message);
  const std::string layer = p.param("layer").value_or("");
  auto index = wf->find(layer);
  if (!index) return make_error("input '" + in->name + "': " + index.error().message);
  auto t = ops::read_weight_tensor(*wf, *index, in->layout != "last");
  if (!t) return make_error("input '" + in->name + "': " + t.error().message);
  return LoadedInput{t->source, format_shape(wf->weights()[*index].shape), t->layout};
}

/// Every parameter of the point as the first cells of a row.
Row param_row(const Point& p) {
  Row r;
  for (const auto& [k, v] : p.params) {
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (!v.empty() && end == v.c_str() + v.size() && std::isfinite(d) && k != "format" && k != "a" && k != "b" &&
        k != "input" && k != "layer" && k != "recipe" && k != "set" && k != "group")
      r.add(k, d);
    else
      r.add(k, v);
  }
  return r;
}

double ratio(std::int64_t a, std::int64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }

void add_stats(Row& r, const ErrorStats& s) {
  r.add("elements", static_cast<double>(s.count));
  r.add("mse", s.mse());
  r.add("sse", s.sse.to_double());  // summed over layers (aggregate = "sum") for a whole model's MSE
  r.add("rmse", s.rmse());
  r.add("sqnr_db", s.sqnr_db());
  r.add("bias", s.count ? s.error_sum.to_double() / static_cast<double>(s.count) : 0.0);
  r.add("max_abs_error", s.max_abs_error);
  r.add("max_rel_error", s.max_rel_error);
  r.add("underflow_ratio", s.underflow_ratio());
  r.add("saturation_ratio", s.saturation_ratio());
  r.add("nan_outputs", static_cast<double>(s.nan_outputs));
}

/// The analytic bound of max relative error at each gap, where the format's options admit one.
std::map<int, double> rel_bounds(const BlockFormat& f, int max_gap) {
  std::map<int, double> out;
  if (exact::check_bounds_support(f) || f.layout.tensor_scale) return out;
  auto b = exact::analytic_bounds(f, std::min(max_gap, exact::kMaxBoundGap));
  if (!b) return out;
  for (const auto& g : *b) out[g.gap] = g.max_rel_f64;
  return out;
}

/// Histograms of the input and of its quantized values over the input's range, and errors by binade of |x|
/// (the GUI's views of one tensor); the values come from ops::fake_quantize.
std::optional<Error> add_histograms(const Experiment& e, const Point& p, const BlockFormat& f, const ops::TensorSource& src,
                                    const PointRun& run, PointResult& out) {
  auto t = src.load();
  if (!t) return t.error();
  const std::span<const float> x = t->data();
  std::vector<float> q(x.size());
  ops::Run r;
  r.threads = run.threads;
  r.reporter = run.reporter;
  if (auto n = ops::fake_quantize(f, x, src.shape(), q, r); !n) return n.error();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (float v : x)
    if (std::isfinite(v)) lo = std::min(lo, static_cast<double>(v)), hi = std::max(hi, static_cast<double>(v));
  if (!(lo <= hi)) return std::nullopt;
  if (hi == lo) hi = lo + 1;
  const auto bins = static_cast<std::size_t>(e.histogram_bins);
  const double width = (hi - lo) / static_cast<double>(bins);
  std::vector<std::int64_t> in_count(bins), q_count(bins);
  auto bin = [&](double v) {
    const double k = std::floor((v - lo) / width);
    return static_cast<std::size_t>(std::clamp(k, 0.0, static_cast<double>(bins - 1)));
  };
  struct Binade {
    std::int64_t count = 0, underflows = 0;
    double max_rel = 0, sum_abs = 0;
  };
  std::map<int, Binade> binades;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i], qi = q[i];
    if (!std::isfinite(xi)) continue;
    ++in_count[bin(xi)];
    if (std::isfinite(qi) && qi >= lo && qi <= hi) ++q_count[bin(qi)];
    if (xi == 0 || !std::isfinite(qi)) continue;
    Binade& b = binades[std::ilogb(xi)];
    const double err = std::fabs(qi - xi);  // of two float32 values: exact in double unless far apart in magnitude
    ++b.count;
    b.underflows += qi == 0;
    b.max_rel = std::max(b.max_rel, err / std::fabs(xi));
    b.sum_abs += err;
  }
  // Two rows per bin: the input's count ("of" = input) and the quantized values' (of = the format).
  for (const bool quantized : {false, true})
    for (std::size_t k = 0; k < bins; ++k) {
      Row row = param_row(p);
      row.add("of", quantized ? *p.param("format") : std::string("input"));
      row.add("bin_start", lo + width * static_cast<double>(k));
      row.add("bin_width", width);
      row.add("count", static_cast<double>(quantized ? q_count[k] : in_count[k]));
      out["histogram"].push_back(std::move(row));
    }
  for (const auto& [k, b] : binades) {
    Row row = param_row(p);
    row.add("binade", static_cast<double>(k));
    row.add("magnitude", std::ldexp(1.0, k));
    row.add("count", static_cast<double>(b.count));
    row.add("max_rel_error", b.max_rel);
    row.add("mean_abs_error", b.sum_abs / static_cast<double>(b.count));
    row.add("underflow_ratio", ratio(b.underflows, b.count));
    out["error_by_value"].push_back(std::move(row));
  }
  return std::nullopt;
}

Result<PointResult> run_analyze(const Experiment& e, const Point& p, const PointRun& run) {
  auto f = point_format(p, "format");
  if (!f) return f.error();
  auto in = load_input(e, p);
  if (!in) return in.error();
  ops::AnalyzeOptions options;
  options.gaps = e.gaps;
  ops::Run r;
  r.threads = run.threads;
  r.reporter = run.reporter;
  auto a = ops::analyze({*f}, in->source, options, r);
  if (!a) return a.error();
  const ops::FormatAnalysis& fa = a->front();
  PointResult out;
  Row m = param_row(p);
  m.add("shape", in->shape);
  m.add("blocks", in->layout);
  add_stats(m, fa.total);
  m.add("bits_per_element", fa.bits_per_element);
  m.add("engine", fa.engine);
  out["metrics"].push_back(std::move(m));
  if (e.histogram_bins > 0)
    if (auto err = add_histograms(e, p, *f, in->source, run, out)) return *err;
  if (e.gaps) {
    const int last = fa.gap_histogram.empty() ? 0 : fa.gap_histogram.rbegin()->first;
    const auto bounds = rel_bounds(*f, last);
    std::int64_t total = 0;
    for (const auto& [g, n] : fa.gap_histogram) total += n;
    for (const auto& [g, n] : fa.gap_histogram) {
      Row row = param_row(p);
      row.add("gap", static_cast<double>(g));
      row.add("count", static_cast<double>(n));
      row.add("fraction", ratio(n, total));
      auto s = fa.by_gap.find(g);
      const ErrorStats stats = s == fa.by_gap.end() ? ErrorStats{} : s->second;
      row.add("mse", stats.mse());
      row.add("sse", stats.sse.to_double());
      row.add("max_abs_error", stats.max_abs_error);
      row.add("max_rel_error", stats.max_rel_error);
      row.add("underflow_ratio", stats.underflow_ratio());
      auto b = bounds.find(g);
      row.add("bound_max_rel", b == bounds.end() ? Cell(std::string("")) : Cell(b->second));
      out["gaps"].push_back(std::move(row));
    }
  }
  return out;
}

/// Same bits, or both NaN.
bool same_value(float a, float b) {
  std::uint32_t x = 0, y = 0;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (std::isnan(a) && std::isnan(b));
}

Result<PointResult> run_profiles(const Experiment& e, const Point& p, const PointRun& run) {
  auto f = point_format(p, "format");
  if (!f) return f.error();
  auto base = point_format(p, "format", {{"profile", e.baseline_profile}});
  if (!base) return base.error();
  auto in = load_input(e, p);
  if (!in) return in.error();
  auto t = in->source.load();
  if (!t) return t.error();
  if (!in->source.float32_exact()) return make_error("input '" + *p.param("input") + "': values not exact in float32");
  const std::span<const float> x = t->data();
  std::vector<float> q(x.size()), qb(x.size());
  ops::Run r;
  r.threads = run.threads;
  r.reporter = run.reporter;
  ops::QuantizeResult res, res_base;
  if (auto n = ops::fake_quantize(*f, x, t->shape(), q, r, &res); !n) return n.error();
  if (auto n = ops::fake_quantize(*base, x, t->shape(), qb, r, &res_base); !n) return n.error();
  std::int64_t differ = 0;
  double max_abs = 0, max_rel = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (same_value(q[i], qb[i])) continue;
    ++differ;
    const double d = std::fabs(static_cast<double>(q[i]) - static_cast<double>(qb[i]));
    if (std::isnan(d)) {
      max_abs = max_rel = std::numeric_limits<double>::infinity();
      continue;
    }
    max_abs = std::max(max_abs, d);
    if (x[i] != 0) max_rel = std::max(max_rel, d / std::fabs(static_cast<double>(x[i])));
  }
  PointResult out;
  Row m = param_row(p);
  m.add("shape", in->shape);
  m.add("blocks", in->layout);
  m.add("baseline", e.baseline_profile);
  add_stats(m, res.stats);
  m.add("differ", static_cast<double>(differ));
  m.add("differ_ratio", ratio(differ, static_cast<std::int64_t>(x.size())));
  m.add("max_abs_diff", max_abs);
  m.add("max_rel_diff", max_rel);
  m.add("engine", res.engine);
  out["metrics"].push_back(std::move(m));
  return out;
}

/// A number cell where the text is a number, else text.
Cell table_cell(const std::string& s, bool numeric) {
  if (numeric) {
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return d;
  }
  return s;
}

Result<PointResult> run_bounds(const Experiment& e, const Point& p) {
  PointResult out;
  if (p.param("a")) {
    auto a = point_format(p, "a");
    if (!a) return a.error();
    auto b = point_format(p, "b");
    if (!b) return b.error();
    for (const BlockFormat* f : {&*a, &*b})
      if (auto err = exact::check_bounds_support(*f)) return make_error("format '" + f->name + "': " + err->message);
    auto t = exact::bounds_table(*a, *b, e.max_gap);
    if (!t) return t.error();
    std::string crossovers, previous;
    int agree = 0, gaps = 0;
    for (const auto& cells : t->rows) {
      Row row = param_row(p);
      for (std::size_t c = 0; c < t->columns.size(); ++c)
        row.add(t->columns[c], table_cell(cells[c], t->numeric.empty() || t->numeric[c]));
      const std::string smaller = cells[6];  // rel_smaller
      if (!previous.empty() && smaller != previous && smaller != "equal" && previous != "equal")
        crossovers += (crossovers.empty() ? "" : " ") + cells[0];
      if (smaller != "equal") previous = smaller;
      agree += cells.back() == "yes";
      row.add("agree", cells.back() == "yes" ? 1.0 : 0.0);
      ++gaps;
      out["bounds"].push_back(std::move(row));
    }
    Row s = param_row(p);
    s.add("gaps", static_cast<double>(gaps));
    s.add("crossover_gaps", crossovers.empty() ? std::string("none") : crossovers);
    auto ua = exact::full_underflow_gap(*a);
    auto ub = exact::full_underflow_gap(*b);
    s.add("full_underflow_gap_a", ua ? Cell(double(*ua)) : Cell(std::string("")));
    s.add("full_underflow_gap_b", ub ? Cell(double(*ub)) : Cell(std::string("")));
    s.add("analytic_eq_enumerated", agree == gaps ? std::string("yes") : std::string("no"));
    s.add("agree", agree == gaps ? 1.0 : 0.0);
    out["pairs"].push_back(std::move(s));
    return out;
  }
  auto f = point_format(p, "format");
  if (!f) return f.error();
  if (auto err = exact::check_bounds_support(*f)) return make_error("format '" + f->name + "': " + err->message);
  int last = e.max_gap;
  if (last < 0) {
    auto u = exact::full_underflow_gap(*f);
    if (!u) return u.error();
    last = std::min(*u, exact::kMaxBoundGap);
  }
  auto an = exact::analytic_bounds(*f, last);
  if (!an) return an.error();
  auto en = exact::enumerated_bounds(*f, last);
  if (!en) return en.error();
  for (std::size_t i = 0; i < an->size(); ++i) {
    const exact::GapBound& g = (*an)[i];
    Row row = param_row(p);
    row.add("gap", static_cast<double>(g.gap));
    row.add("max_abs", g.max_abs_f64);
    row.add("max_rel", g.max_rel_f64);
    row.add("max_abs_exact", exact::exact_text(g.max_abs));
    row.add("max_rel_exact", exact::exact_text(g.max_rel));
    row.add("attained", std::string(g.abs_attained ? "abs" : "") + (g.rel_attained ? (g.abs_attained ? ",rel" : "rel") : ""));
    row.add("full_underflow", std::string(g.full_underflow ? "yes" : "no"));
    const bool same = i < en->size() && exact::same_bound(g, (*en)[i]);
    row.add("analytic_eq_enumerated", std::string(same ? "yes" : "no"));
    row.add("agree", same ? 1.0 : 0.0);
    out["bounds"].push_back(std::move(row));
  }
  return out;
}

/// A code written in decimal, 0x hex or 0b binary.
bool parse_code_number(std::string_view t, std::uint64_t* out) {
  int base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X' || t[1] == 'b' || t[1] == 'B')) {
    base = t[1] == 'x' || t[1] == 'X' ? 16 : 2;
    t.remove_prefix(2);
  }
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *out, base);
  return !t.empty() && ec == std::errc() && end == t.data() + t.size();
}

/// The catalogue's `codes = "FIRST:LAST"` of a format: at most kMaxCatalogueCodes codes.
Result<std::pair<std::uint64_t, std::uint64_t>> code_range(const Format& f, const std::string& text) {
  const auto colon = text.find(':');
  std::uint64_t first = 0, last = 0;
  if (colon == std::string::npos || !parse_code_number(std::string_view(text).substr(0, colon), &first) ||
      !parse_code_number(std::string_view(text).substr(colon + 1), &last))
    return make_error("sweep key 'codes' = " + quote_input(text) + ": expected FIRST:LAST, e.g. 0x3F800000:0x3F8000FF");
  if (first > last || last >= f.code_count())
    return make_error("sweep key 'codes' = " + quote_input(text) + ": codes must satisfy FIRST <= LAST < " +
                      std::to_string(f.code_count()) + " (" + f.name() + ")");
  if (last - first >= kMaxCatalogueCodes)
    return make_error("sweep key 'codes' = " + quote_input(text) + ": " + std::to_string(last - first + 1) +
                      " codes, more than the " + std::to_string(kMaxCatalogueCodes) + " a catalogue lists");
  return std::pair{first, last};
}

/// The element format a catalogue point names (a block format's name stands for its element format,
/// docs/format-strings.md), and its range of codes: `codes`, else every code of formats of at most 2^16 codes.
Result<std::pair<Format, std::optional<std::pair<std::uint64_t, std::uint64_t>>>> catalogue_format(const Point& p) {
  const std::string name = p.param("format").value_or("");
  auto f = parse_format(name);
  if (!f) {
    auto b = parse_block_format(name);
    if (!b) return make_error("format '" + name + "': " + f.error().message);
    f = b->element;
  }
  std::optional<std::pair<std::uint64_t, std::uint64_t>> range;
  if (auto codes = p.param("codes")) {
    auto r = code_range(*f, *codes);
    if (!r) return r.error();
    range = *r;
  } else if (f->code_count() <= kMaxCatalogueCodes) {
    range = std::pair{std::uint64_t{0}, f->code_count() - 1};
  }
  return std::pair{*f, range};
}

Result<PointResult> run_catalogue(const Point& p) {
  auto chosen = catalogue_format(p);
  if (!chosen) return chosen.error();
  const Format* f = &chosen->first;
  const auto range = chosen->second;
  PointResult out;
  const Format formats[] = {*f};
  const Table t = ops::format_table(formats);
  Row row = param_row(p);
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c] == "name") continue;
    row.add(t.columns[c], table_cell(t.rows[0][c], !t.numeric.empty() && t.numeric[c]));
  }
  out["formats"].push_back(std::move(row));
  if (range) {
    // Every code with its class, exact value and the distance to the next larger value.
    const std::vector<CodePoint> codes = enumerate_codes(*f, range->first, range->second);
    for (const CodePoint& c : codes) {
      Row v = param_row(p);
      v.add("code", static_cast<double>(c.code));
      v.add("bits", c.bits);
      v.add("class", std::string(to_string(c.cls)));
      v.add("value", c.value);
      v.add("gap_up", c.gap_up);
      out["codes"].push_back(std::move(v));
    }
    // Every distinct positive finite value, once (the number line).
    std::set<double> seen;
    for (const CodePoint& c : codes) {
      if (!(c.value > 0) || !std::isfinite(c.value) || !seen.insert(c.value).second) continue;
      Row v = param_row(p);
      v.add("code", static_cast<double>(c.code));
      v.add("bits", c.bits);
      v.add("class", std::string(to_string(c.cls)));
      v.add("value", c.value);
      v.add("log2_value", std::log2(c.value));
      v.add("binade", std::floor(std::log2(c.value)));
      v.add("gap_up", c.gap_up);
      out["values"].push_back(std::move(v));
    }
  }
  return out;
}

// ---- gemm: C = A B of quantized operands under an accumulation model (docs/gemm.md, gemm::run)

/// The point's accumulation model: `model` (default exact) followed by each model setting the point sweeps.
Result<gemm::Model> point_model(const Point& p) {
  std::string text = p.param("model").value_or("exact");
  for (const char* key : {"product", "group", "order", "sum", "scale", "acc", "promote", "model_round"})
    if (auto v = p.param(key)) text += "," + (std::string(key) == "model_round" ? std::string("round") : std::string(key)) + "=" + *v;
  auto m = gemm::parse_model(text);
  if (!m) return make_error("point " + p.key() + ": " + m.error().message);
  return m;
}

/// A size axis of the point (m, k or n): a positive integer of at most 2^20, or none.
Result<std::optional<std::int64_t>> point_size(const Point& p, const char* axis) {
  auto v = p.param(axis);
  if (!v) return std::optional<std::int64_t>();
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || end != v->data() + v->size() || n < 1 || n > (std::int64_t{1} << 20))
    return make_error("point " + p.key() + ": " + axis + " = '" + *v + "': expected an integer from 1 to 1048576");
  return std::optional<std::int64_t>(n);
}

/// An operand of rows x cols values: the input named by the point's `axis` (generated with that shape, or a file
/// of that shape), or normal(0,1) values of the given seed when the point names none.
Result<std::vector<double>> gemm_operand(const Experiment& e, const Point& p, const std::string& axis, std::int64_t rows,
                                         std::int64_t cols, std::uint64_t seed) {
  ops::InputRequest r;
  r.input = "gen:normal:0,1";
  r.seed = seed;
  std::string what = "generated operand";
  if (auto name = p.param(axis)) {
    const InputDef* in = find_input(e, *name);
    if (!in) return make_error("point " + p.key() + ": " + axis + " = '" + *name + "' names no input");
    if (!in->weights.empty() || in->source.rfind("data:", 0) == 0)
      return make_error("input '" + in->name + "': a GEMM's " + (axis == "input" ? "B" : "A") +
                        " from a model's layers or a data set is input = NAME of a weights input (B)");
    r.input = in->source.rfind("gen:", 0) == 0 ? in->source : resolve(e, in->source);
    r.seed = in->seed;
    r.bf16 = in->bf16;
    r.csv_table = true;
    what = "input '" + in->name + "'";
  }
  if (r.input.rfind("gen:", 0) == 0) r.shape = std::to_string(rows) + "x" + std::to_string(cols);
  auto t = ops::load_tensor(r);
  if (!t) return make_error(what + ": " + t.error().message);
  if (t->shape() != std::vector<std::int64_t>{rows, cols})
    return make_error(what + ": shape " + format_shape(t->shape()) + ", expected " + std::to_string(rows) + "x" +
                      std::to_string(cols));
  return t->exact_values();
}

void add_gemm_errors(Row& r, const std::string& prefix, const gemm::ErrorSummary& s) {
  r.add(prefix + "max_rel_error", s.max_rel_error);
  r.add(prefix + "mean_rel_error", s.mean_rel_error);
  r.add(prefix + "p50_rel_error", s.p50_rel_error);
  r.add(prefix + "p90_rel_error", s.p90_rel_error);
  r.add(prefix + "p99_rel_error", s.p99_rel_error);
  r.add(prefix + "max_abs_error", s.max_abs_error);
  r.add(prefix + "sqnr_db", s.sqnr_db);
  // ||C - R|| / ||R|| over every entry: 10^(-SQNR/20).
  r.add(prefix + "normwise_rel_error", std::isfinite(s.sqnr_db) ? std::pow(10.0, -s.sqnr_db / 20) : 0.0);
}

Result<PointResult> run_gemm(const Experiment& e, const Point& p, const PointRun& run) {
  gemm::GemmRequest r;
  const bool both = p.param("format").has_value();
  auto fa = point_format(p, both ? "format" : "a");
  if (!fa) return fa.error();
  auto fb = point_format(p, both ? "format" : "b");
  if (!fb) return fb.error();
  r.format_a = *fa;
  r.format_b = *fb;
  auto model = point_model(p);
  if (!model) return model.error();
  r.models = {*model};
  if (auto out = p.param("output")) {
    auto f = parse_format(*out);
    if (!f) return make_error("point " + p.key() + ": output = '" + *out + "': " + f.error().message);
    r.out = *f;
  }
  std::uint64_t seed = 0;
  if (auto s = p.param("data_seed")) {
    const auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), seed);
    if (ec != std::errc() || end != s->data() + s->size())
      return make_error("point " + p.key() + ": data_seed = '" + *s + "': expected a non-negative integer");
  }
  auto m = point_size(p, "m");
  auto k = point_size(p, "k");
  auto n = point_size(p, "n");
  for (const auto* s : {&m, &k, &n})
    if (!*s) return s->error();
  if (!*m) return make_error("point " + p.key() + ": a GEMM needs m (the rows of A)");
  r.m = **m;
  r.threads = run.threads;
  const InputDef* weights = nullptr;
  if (auto name = p.param("input")) {
    weights = find_input(e, *name);
    if (weights && weights->weights.empty()) weights = nullptr;
  }
  std::string shape_b;
  if (weights) {
    // A model's layer is B's transpose (a Linear weight [out, in]): its rows are N, its blocks' axis is K.
    auto in = load_input(e, p);
    if (!in) return in.error();
    auto t = in->source.load();
    if (!t) return t.error();
    const std::int64_t depth = t->shape().empty() ? 1 : t->shape().back();
    const auto rows = static_cast<std::int64_t>(t->size()) / std::max<std::int64_t>(depth, 1);
    if ((*k && **k != depth) || (*n && **n != rows))
      return make_error("point " + p.key() + ": layer '" + p.param("layer").value_or("") + "' is " +
                        std::to_string(rows) + " x " + std::to_string(depth) + " (N x K), not the point's n x k");
    r.k = depth;
    r.n = rows;
    r.b = gemm::transpose(t->exact_values(), rows, depth);
    shape_b = in->shape;
  } else {
    if (!*k || !*n) return make_error("point " + p.key() + ": a GEMM needs k and n (or input = a model's layers for B)");
    r.k = **k;
    r.n = **n;
    auto b = gemm_operand(e, p, "input", r.k, r.n, seed + 1);
    if (!b) return b.error();
    r.b = std::move(*b);
  }
  auto a = gemm_operand(e, p, "a_input", r.m, r.k, seed);
  if (!a) return a.error();
  r.a = std::move(*a);
  if (run.reporter.cancelled()) return make_error(ops::kCancelled);
  r.reporter.cancel = run.reporter.cancel;  // the runner's progress counts points
  auto rep = gemm::run(r);
  if (!rep && run.reporter.cancelled()) return make_error(ops::kCancelled);
  if (!rep) return make_error("point " + p.key() + ": " + rep.error().message);
  const gemm::ModelResult& mr = rep->models.front();
  Row row = param_row(p);
  row.add("shape", std::to_string(r.m) + "x" + std::to_string(r.k) + "x" + std::to_string(r.n));
  row.add("definition", gemm::describe(mr.model));
  row.add("count", static_cast<double>(mr.vs_exact.count));
  row.add("nan_count", static_cast<double>(mr.vs_exact.nan_count));
  row.add("zero_reference", static_cast<double>(mr.vs_exact.zero_reference));
  add_gemm_errors(row, "acc_", mr.vs_exact);
  add_gemm_errors(row, "total_", mr.vs_fp32);
  add_gemm_errors(row, "format_", rep->exact_vs_fp32);
  // C - C_fp32 = (C - C_exact) + (C_exact - C_fp32): the accumulation's part of the two error powers.
  const double powers = mr.vs_exact.noise + rep->exact_vs_fp32.noise;
  row.add("acc_share", powers > 0 ? mr.vs_exact.noise / powers : 0.0);
  PointResult out;
  out["gemm"].push_back(std::move(row));
  return out;
}

}  // namespace

const Cell* Row::find(const std::string& column) const {
  for (const auto& [k, v] : cells)
    if (k == column) return &v;
  return nullptr;
}

std::optional<std::string> Point::param(const std::string& name) const {
  for (const auto& [k, v] : params)
    if (k == name) return v;
  return std::nullopt;
}

std::string Point::key() const {
  std::string s = "{";
  for (std::size_t i = 0; i < params.size(); ++i)
    s += std::string(i ? "," : "") + json_quote(params[i].first) + ":" + json_quote(params[i].second);
  return s + "}";
}

namespace {

/// Whether a job's points are trained models, each read from a checkpoint or trained in FP32 at the point.
bool model_job(const std::string& job) { return job == "direct_cast" || job == "gradients"; }

/// Whether a point that already has parameter `key` keeps it when crossed with `axis`: the axis itself, and a
/// point that names its format (or a bounds pair a, b) keeps it.
bool sets_axis(const std::string& key, const std::string& axis) {
  const auto formatish = [](const std::string& k) { return k == "format" || k == "a" || k == "b"; };
  return key == axis || (formatish(axis) && formatish(key));
}

/// Whether the sweep's own product is a set of points (it names the format), else only explicit points are.
bool sweep_is_product(const Experiment& e) {
  const bool names_format = std::any_of(e.axes.begin(), e.axes.end(), [&](const auto& a) {
    if (model_job(e.job)) return a.first == "model" || a.first == "checkpoint";  // its points are models
    return a.first == "format" || a.first == "a" || a.first == "recipe";
  });
  return names_format || e.points.empty();
}

std::string count_text(std::uint64_t n, bool overflow) { return overflow ? "more than 2^64" : std::to_string(n); }

/// What crossing the sweep with a start (a point's own parameters, or none for the sweep's product) gives.
struct Crossing {
  std::uint64_t points = 1;  ///< how many points
  std::uint64_t bytes = 0;   ///< at most this much parameter text in all
  bool overflow = false;     ///< either passed 2^64
};

/// Mirrors the crossing of expand_points without doing it: every point from `start` gains the same axes, so
/// they are the product of the sizes of the axes it does not set, and their text is at most that count times
/// the longest value of each axis.
Crossing crossing(const Experiment& e, const Pairs& start) {
  Crossing c;
  std::uint64_t per_point = 0;
  std::vector<std::string> keys;
  for (const auto& [k, v] : start) keys.push_back(k), per_point += k.size() + v.size();
  for (const auto& axis_values : e.axes) {
    const std::string& axis = axis_values.first;  // not a structured binding: clang 14 cannot capture one
    const auto& values = axis_values.second;
    if (std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return sets_axis(k, axis); })) continue;
    std::size_t longest = 0;
    for (const auto& v : values) longest = std::max(longest, v.size());
    c.overflow |= __builtin_mul_overflow(c.points, static_cast<std::uint64_t>(values.size()), &c.points);
    per_point += axis.size() + longest;
    keys.push_back(axis);
  }
  c.overflow |= __builtin_mul_overflow(c.points, per_point, &c.bytes);
  return c;
}

}  // namespace

Result<std::size_t> count_points(const Experiment& e) {
  std::uint64_t points = 0, bytes = 0;
  bool overflow = false;
  auto add = [&](const Pairs& start) {
    const Crossing c = crossing(e, start);
    overflow |= c.overflow || __builtin_add_overflow(points, c.points, &points) || __builtin_add_overflow(bytes, c.bytes, &bytes);
  };
  if (sweep_is_product(e)) add({});
  for (const Pairs& p : e.points) add(p);
  if (overflow || points > kMaxPoints)
    return make_error(e.path + ": the sweep gives " + count_text(points, overflow) + " points, more than the " +
                      std::to_string(kMaxPoints) + " (2^20) an experiment can have");
  if (bytes > kMaxPointBytes)
    return make_error(e.path + ": the sweep's " + std::to_string(points) + " points have " + byte_size_text(bytes) +
                      " of parameters, more than the " + byte_size_text(kMaxPointBytes) + " an experiment can have");
  return static_cast<std::size_t>(points);
}

Result<std::vector<Point>> expand_points(const Experiment& e) {
  // Counted first: a sweep too large is refused before anything is expanded.
  auto count = count_points(e);
  if (!count) return count.error();
  // The product of the sweep (when it names the format), then each explicit point crossed with the axes it
  // does not set.
  std::vector<Pairs> base;
  base.reserve(*count);
  auto cross = [&](const Pairs& start) {
    // An axis without values gives no points: nothing is crossed (its partial products could be large).
    if (crossing(e, start).points == 0) return;
    std::vector<Pairs> done = {start};
    for (const auto& entry : e.axes) {
      const std::string& axis = entry.first;  // a plain reference: lambdas below capture it
      const auto& values = entry.second;
      std::vector<Pairs> next;
      for (const Pairs& b : done) {
        if (std::any_of(b.begin(), b.end(), [&](const auto& kv) { return sets_axis(kv.first, axis); })) {
          next.push_back(b);
          continue;
        }
        for (const auto& v : values) {
          Pairs p = b;
          p.emplace_back(axis, v);
          next.push_back(std::move(p));
        }
      }
      done = std::move(next);
    }
    base.insert(base.end(), std::make_move_iterator(done.begin()), std::make_move_iterator(done.end()));
  };
  if (sweep_is_product(e)) cross({});
  for (const Pairs& p : e.points) cross(p);
  // Weight inputs expand into their layers.
  std::map<std::string, std::vector<std::string>> layers;
  std::vector<Point> out;
  for (const Pairs& b : base) {
    auto input = std::find_if(b.begin(), b.end(), [](const auto& kv) { return kv.first == "input"; });
    const InputDef* in = input == b.end() ? nullptr : find_input(e, input->second);
    if (!in || in->weights.empty()) {
      Pairs p = b;
      // Every point with an input names a layer ("" for a tensor that is not a model's), so columns line up.
      if (in) p.insert(p.begin() + (input - b.begin()) + 1, {"layer", ""});
      out.push_back(Point{out.size(), std::move(p)});
      continue;
    }
    if (!layers.count(in->name)) {
      auto l = input_layers(e, *in);
      if (!l) return make_error(e.path + ": " + l.error().message);
      for (const auto& w : *l) layers[in->name].push_back(w.name);
    }
    if (layers[in->name].size() > kMaxPoints - out.size())
      return make_error(e.path + ": the sweep gives more than the " + std::to_string(kMaxPoints) +
                        " (2^20) points an experiment can have with the " + std::to_string(layers[in->name].size()) +
                        " layers of input '" + in->name + "'");
    for (const auto& name : layers[in->name]) {
      Pairs p = b;
      p.insert(p.begin() + (input - b.begin()) + 1, {"layer", name});
      out.push_back(Point{out.size(), std::move(p)});
    }
  }
  return out;
}

/// A training point: the trainer's options and the data spec.
struct TrainJob {
  train::TrainOptions options;
  std::string data;
};

/// The recipe with the point's settings ("ROLE=SPEC" or "PATTERN:ROLE=SPEC", ';'-separated) applied.
Result<train::Recipe> point_recipe(const Point& p) {
  auto r = train::load_recipe(p.param("recipe").value_or("fp32"));
  if (!r) return r.error();
  auto set = p.param("set");
  if (!set) return r;
  train::Recipe recipe = *r;
  std::size_t pos = 0;
  while (pos <= set->size()) {
    const std::size_t end = std::min(set->find(';', pos), set->size());
    const std::string s = set->substr(pos, end - pos);
    pos = end + 1;
    const auto eq = s.find('=');
    if (eq == std::string::npos) return make_error("sweep key 'set' = '" + s + "': expected ROLE=SPEC or PATTERN:ROLE=SPEC");
    const std::string left(trim(std::string_view(s).substr(0, eq))), spec(trim(std::string_view(s).substr(eq + 1)));
    const auto colon = left.rfind(':');
    if (spec.empty()) return make_error("sweep key 'set' = '" + s + "': '" + left + "' needs a value");
    auto e = colon == std::string::npos ? train::apply_recipe_setting(recipe, left, spec)
                                        : train::add_recipe_override(recipe, left.substr(0, colon), left.substr(colon + 1), spec);
    if (e) return make_error("sweep key 'set' = '" + s + "': " + e->message);
  }
  recipe.name = r->name + " (" + *set + ")";
  return recipe;
}

Result<TrainJob> train_config(const Point& p) {
  TrainJob j;
  train::TrainOptions& o = j.options;
  auto r = point_recipe(p);
  if (!r) return r.error();
  o.recipe = *r;
  auto num = [&](const char* key, auto& field, double lo, double hi) -> std::optional<Error> {
    auto v = p.param(key);
    if (!v) return std::nullopt;
    char* end = nullptr;
    const double d = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != 0 || !(d >= lo && d <= hi))
      return make_error("sweep key '" + std::string(key) + "' = '" + *v + "': expected a number from " + cell_text(lo) + " to " + cell_text(hi));
    field = static_cast<std::remove_reference_t<decltype(field)>>(d);
    return std::nullopt;
  };
  std::int64_t hidden = 0;
  const auto hidden_text = p.param("hidden");
  const bool hidden_list = hidden_text && hidden_text->find(',') != std::string::npos;
  for (auto err : {num("seed", o.seed, 0, 9e15), num("steps", o.steps, 1, 1e7), num("batch", o.batch, 1, 65536),
                   num("lr", o.optimizer.lr, 0, 10), num("warmup", o.optimizer.warmup_steps, 0, 1e7),
                   num("weight_decay", o.optimizer.weight_decay, 0, 1), num("eval_every", o.eval_every, 0, 1e7),
                   num("eval_limit", o.eval_limit, 0, 1e9), num("metrics_every", o.metrics_every, 0, 1e7),
                   num("width", o.model.width, 1, 4096), num("init_gain", o.model.init_gain, 1e-6, 100)})
    if (err) return *err;
  if (hidden_list) {  // "256,256,128": the MLP's hidden widths
    o.model.hidden.clear();
    std::stringstream widths(*hidden_text);
    for (std::string w; std::getline(widths, w, ',');) {
      const auto v = parse_whole_in<std::int64_t>(trim(w), 1, 65536);
      if (!v || o.model.hidden.size() >= 64)
        return make_error("sweep key 'hidden' = '" + *hidden_text + "': expected 1 to 64 widths from 1 to 65536, separated by commas");
      o.model.hidden.push_back(*v);
    }
  } else if (auto err = num("hidden", hidden, 0, 65536)) {
    return *err;
  }
  if (hidden > 1) o.model.hidden = {hidden, hidden / 2};
  o.model.kind = p.param("model").value_or("mlp");
  if (!o.model.kind.known())
    return make_error("sweep key 'model' = '" + std::string(o.model.kind.name()) + "': expected " + train::model_kind_list());
  o.optimizer.kind = p.param("optimizer").value_or("adamw");
  if (o.optimizer.kind != "adamw" && o.optimizer.kind != "sgd")
    return make_error("sweep key 'optimizer' = '" + o.optimizer.kind + "': expected adamw or sgd");
  j.data = p.param("data").value_or("fashion-mnist");
  return j;
}

/// The operands of the totals by layer, then role name: ((layer, role), "LAYER.ROLE").
std::map<std::pair<std::string, std::string>, std::string> by_layer_role(const train::MetricTotals& totals) {
  std::map<std::pair<std::string, std::string>, std::string> order;
  for (const auto& c : totals.columns()) order[{c.layer, std::string(train::role_name(c.role))}] = c.key;
  return order;
}

Result<PointResult> run_train(const Point& p, const PointRun& run) {
  auto job = train_config(p);
  if (!job) return job.error();
  job->options.threads = run.threads;
  train::DataOptions dopt;
  dopt.seed = job->options.seed;
  auto data = train::load_train_data(job->data, dopt);
  if (!data) return data.error();
  PointResult out;
  // Per layer and role, over every step: the underflow ratio and MSE of the quantized operands.
  train::MetricTotals totals;
  // Loss-scale changes: a step's scale above (below) the previous step's is a growth (a back-off).
  std::int64_t growths = 0, backoffs = 0;
  double last_scale = 0;
  auto count_scale = [&](double scale) {
    if (last_scale > 0 && scale > last_scale) ++growths;
    if (last_scale > 0 && scale < last_scale) ++backoffs;
    last_scale = scale;
  };
  // Per layer and role, over each stretch of steps that ends at an evaluation (or the last step): the same
  // figures, so underflow is followed through the run (per epoch when eval_every is an epoch's steps).
  train::MetricTotals stretch;
  const double images = data->is_text ? 0.0 : static_cast<double>(data->train.count());
  auto end_stretch = [&](std::int64_t step) {
    for (const auto& [layer_role, key] : by_layer_role(stretch)) {
      const train::OperandTotals& a = stretch.at(key);
      if (a.count == 0) continue;  // no metric step in the stretch
      Row row = param_row(p);
      row.add("step", static_cast<double>(step));
      // Images seen over the training images, to three decimals (a label: 422 steps of 64 of 54,000 is 0.5).
      const double epoch = images > 0 ? static_cast<double>(step) * static_cast<double>(job->options.batch) / images : 0;
      row.add("epoch", images > 0 ? Cell(std::round(epoch * 1000) / 1000) : Cell(std::string("")));
      row.add("layer", layer_role.first);
      row.add("role", layer_role.second);
      row.add("underflow_ratio", a.underflow_ratio());
      row.add("mse", a.weighted_mse());
      out["layer_evals"].push_back(std::move(row));
    }
    stretch = {};
  };
  auto on_step = [&](const train::StepMetrics& s) {
    count_scale(s.loss_scale);
    stretch.add(s);
    if (s.validation || s.step == s.steps) end_stretch(s.step);
    Row row = param_row(p);
    row.add("step", static_cast<double>(s.step));
    row.add("loss", s.loss);
    row.add(data->is_text ? "bpc" : "accuracy", data->is_text ? s.bpc : s.accuracy);
    row.add("step_lr", s.lr);  // the schedule's rate at this step (the point's lr is a parameter)
    row.add("loss_scale", s.loss_scale);
    row.add("skipped", s.skipped ? 1.0 : 0.0);
    row.add("val_loss", s.validation ? Cell(s.validation->loss) : Cell(std::string("")));
    out["steps"].push_back(std::move(row));
    totals.add(s);
  };
  Reporter r;
  r.cancel = run.reporter.cancel;
  r.on_progress = run.reporter.on_progress;  // the steps, shown within the run's points
  auto t = train::run_training(*data, job->options, on_step, r);
  if (!t) return t.error();
  if (t->cancelled) return make_error(ops::kCancelled);
  for (const auto& [layer_role, key] : by_layer_role(totals)) {
    const train::OperandTotals& a = totals.at(key);
    Row row = param_row(p);
    row.add("layer", layer_role.first);
    row.add("role", layer_role.second);
    row.add("underflow_ratio", a.underflow_ratio());
    row.add("mse", a.weighted_mse());
    out["layers"].push_back(std::move(row));
  }
  Row s = param_row(p);
  auto eval = [&](const char* name, const std::optional<train::EvalMetrics>& m) {
    s.add(std::string(name) + "_loss", m ? Cell(m->loss) : Cell(std::string("")));
    s.add(std::string(name) + (data->is_text ? "_bpc" : "_accuracy"), m ? Cell(data->is_text ? m->bpc : m->accuracy) : Cell(std::string("")));
  };
  eval("test", t->test);
  eval("val", t->validation);
  s.add("final_loss", t->losses.empty() ? 0.0 : t->losses.back());
  s.add("skipped_steps", static_cast<double>(t->skipped));
  count_scale(t->final_loss_scale);  // the change after the last step
  s.add("loss_scale_growths", static_cast<double>(growths));
  s.add("loss_scale_backoffs", static_cast<double>(backoffs));
  s.add("final_loss_scale", t->final_loss_scale);
  s.add("grad_underflow_ratio", totals.of_role(train::Role::G).underflow_ratio());
  s.add("parameters", static_cast<double>(t->parameters));
  out["summary"].push_back(std::move(s));
  return out;
}

/// The inference recipes of a direct_cast point and their casts: FP32 first, then every format (but fp32) under
/// every cast.
Result<std::vector<std::pair<std::string, train::Recipe>>> cast_recipes(const Experiment& e, const std::string& nongemm) {
  std::vector<std::pair<std::string, train::Recipe>> out;
  auto fp32 = train::cast_recipe("fp32", train::CastOperands::Weights, nongemm);
  if (!fp32) return fp32.error();
  out.emplace_back("none", *fp32);
  for (const auto& f : e.job_texts("formats")) {
    auto none = train::role_format(f);
    if (!none) return make_error("formats: " + none.error().message);
    if (!*none) continue;  // fp32: the baseline
    for (const auto& c : e.job_texts("cast")) {
      auto operands = train::parse_cast_operands(c);
      if (!operands) return make_error(operands.error().message);
      auto r = train::cast_recipe(f, *operands, nongemm);
      if (!r) return make_error("formats: " + r.error().message);
      out.emplace_back(c, *r);
    }
  }
  return out;
}

/// The model of a direct_cast or gradients point: a checkpoint's (the point's `checkpoint`), or one trained here in
/// FP32 from the point's training keys (its state after the last step, as `mxlab train --keep-checkpoint` keeps
/// it, in options.resume_state, with the trainer's own result).
struct PointModel {
  train::TrainOptions options;
  std::optional<train::TrainData> data;
  std::optional<train::TrainResult> trained;
};

Result<PointModel> point_model_state(const Experiment& e, const Point& p, const PointRun& run, const Reporter& r) {
  PointModel m;
  train::TrainOptions& o = m.options;
  const auto checkpoint = p.param("checkpoint");
  if (checkpoint) {
    auto c = train::load_checkpoint_model(resolve(e, *checkpoint), std::nullopt, run.threads);
    if (!c) return c.error();
    o = std::move(c->options);
    m.data = std::move(c->data);
  } else {
    auto job = train_config(p);
    if (!job) return job.error();
    o = std::move(job->options);
    o.threads = run.threads;
    train::DataOptions dopt;
    dopt.seed = o.seed;
    auto data = train::load_train_data(job->data, dopt);
    if (!data) return data.error();
    if (auto err = train::check_data_fit(*data, o)) return *err;
    m.data = std::move(*data);
  }
  if (!checkpoint) {
    o.metrics_every = 0;
    o.checkpoint_last = true;
    o.on_checkpoint = [&o](std::int64_t, const std::string& state) -> std::optional<Error> {
      o.resume_state = state;
      return std::nullopt;
    };
    auto t = train::run_training(*m.data, o, {}, r);
    if (!t) return t.error();
    if (t->cancelled) return make_error(ops::kCancelled);
    m.trained = std::move(*t);
    o.on_checkpoint = {};
    o.checkpoint_last = false;
  }
  return m;
}

/// A direct_cast point: the point's model evaluated with its GEMM weights (and activations) cast to each format,
/// next to FP32.
Result<PointResult> run_direct_cast(const Experiment& e, const Point& p, const PointRun& run) {
  Reporter r;
  r.cancel = run.reporter.cancel;
  r.on_progress = run.reporter.on_progress;
  auto model = point_model_state(e, p, run, r);
  if (!model) return model.error();
  train::TrainOptions& o = model->options;
  const train::TrainData* data = &*model->data;
  const std::optional<train::TrainResult>& trained = model->trained;
  auto recipes = cast_recipes(e, o.recipe.nongemm);
  if (!recipes) return recipes.error();
  std::vector<train::Recipe> inference;
  for (const auto& [cast, recipe] : *recipes) inference.push_back(recipe);
  auto evals = train::evaluate_casts(*data, o, inference, r);
  if (!evals) return evals.error();
  const bool text = data->is_text;
  const std::string split = text || data->test.count() == 0 ? "val" : "test";
  const std::string metric = split + (text ? "_bpc" : "_accuracy");
  auto score = [&](const train::EvalMetrics& m) { return text ? m.bpc : m.accuracy; };
  PointResult out;
  const double fp32 = score((*evals)[0]);
  auto add_row = [&](const std::string& format, const std::string& cast, const train::EvalMetrics& m) {
    Row row = param_row(p);
    row.add("format", format);
    row.add("cast", cast);
    row.add(split + "_loss", m.loss);
    row.add(metric, score(m));
    row.add("delta", score(m) - fp32);  // against FP32: accuracy (a fraction) or bits per character
    row.add("examples", static_cast<double>(m.examples));
    out["cast"].push_back(std::move(row));
  };
  for (const auto& c : e.job_texts("cast")) add_row("fp32", c, (*evals)[0]);  // FP32 is evaluated once, shown under every cast
  for (std::size_t i = 1; i < evals->size(); ++i) add_row((*recipes)[i].second.formats.w.text(), (*recipes)[i].first, (*evals)[i]);
  Row s = param_row(p);
  if (!p.param("model")) s.add("model", std::string(o.model.kind.name()));  // a checkpoint's, or the default
  if (!p.param("data")) s.add("data", data->name);
  s.add("trained_recipe", o.recipe.name);
  s.add("fp32_" + metric, fp32);
  // The trainer's own evaluation of the model it trained (empty for a checkpoint read from a file): the FP32 cast
  // must give it exactly.
  const auto& own = trained ? (split == "test" ? trained->test : trained->validation) : std::nullopt;
  s.add("trainer_" + metric, own ? Cell(score(*own)) : Cell(std::string("")));
  s.add("fp32_equals_trainer", own ? Cell(score(*own) == fp32 ? 1.0 : 0.0) : Cell(std::string("")));
  s.add("parameters", trained ? Cell(static_cast<double>(trained->parameters)) : Cell(std::string("")));
  out["summary"].push_back(std::move(s));
  return out;
}

/// The recipes of a gradients job: presets, or recipe files (relative to the experiment file when one is there).
Result<std::vector<train::Recipe>> gradient_recipes(const Experiment& e) {
  std::vector<train::Recipe> out;
  for (const auto& name : e.job_texts("recipes")) {
    std::error_code ec;
    const std::string file = resolve(e, name);
    auto r = train::load_recipe(fs::is_regular_file(file, ec) ? file : name);
    if (!r) return make_error("recipes: " + r.error().message);
    out.push_back(std::move(*r));
  }
  return out;
}

/// A gradients point: each recipe's training gradient on the point's model against FP32's and the batch noise
/// (train::gradient_fidelity), a row per recipe and GEMM weight and one for the whole model.
Result<PointResult> run_gradients(const Experiment& e, const Point& p, const PointRun& run) {
  auto recipes = gradient_recipes(e);
  if (!recipes) return recipes.error();
  Reporter r;
  r.cancel = run.reporter.cancel;
  r.on_progress = run.reporter.on_progress;
  auto model = point_model_state(e, p, run, r);
  if (!model) return model.error();
  const train::TrainOptions& o = model->options;
  auto done = train::check_resume_state(*model->data, o);
  if (!done) return done.error();
  auto rows = train::gradient_fidelity(*model->data, o, *recipes, e.job_integer("batches"), r);
  if (!rows) return rows.error();
  PointResult out;
  for (const auto& f : *rows) {
    if (!f.weight && f.param != "(all)") continue;  // biases and normalisation gains
    Row row = param_row(p);
    row.add("compared", f.recipe);
    row.add("param", f.param);
    row.add("fp32_norm", f.fp32_norm);
    row.add("rel_error", f.rel_error);
    row.add("cosine", f.cosine);
    row.add("batch_noise", f.batch_noise);
    row.add("error_to_noise", f.batch_noise > 0 ? f.rel_error / f.batch_noise : 0.0);
    out["gradients"].push_back(std::move(row));
  }
  Row s = param_row(p);
  if (!p.param("model")) s.add("model", std::string(o.model.kind.name()));
  if (!p.param("data")) s.add("data", model->data->name);
  s.add("trained_recipe", o.recipe.name);
  s.add("checkpoint_step", static_cast<double>(*done));
  s.add("batches", static_cast<double>(e.job_integer("batches")));
  if (!p.param("batch")) s.add("batch", static_cast<double>(o.batch));
  out["summary"].push_back(std::move(s));
  return out;
}

Result<PointResult> run_point(const Experiment& e, const Point& p, const PointRun& run) {
  if (e.job == "train") return run_train(p, run);
  if (e.job == "direct_cast") return run_direct_cast(e, p, run);
  if (e.job == "gradients") return run_gradients(e, p, run);
  if (e.job == "analyze") return run_analyze(e, p, run);
  if (e.job == "profiles") return run_profiles(e, p, run);
  if (e.job == "bounds") return run_bounds(e, p);
  if (e.job == "catalogue") return run_catalogue(p);
  if (e.job == "gemm") return run_gemm(e, p, run);
  return make_error("unknown job '" + e.job + "'");
}

std::optional<Error> check_point(const Experiment& e, const Point& p) {
  auto in_point = [&](const Error& err) { return make_error(e.path + ": " + err.message); };
  if (e.job == "train") {
    auto c = train_config(p);
    if (!c) return in_point(make_error("point " + p.key() + ": " + c.error().message));
    return std::nullopt;
  }
  if (model_job(e.job)) {
    if (e.job == "direct_cast")
      if (auto r = cast_recipes(e, ""); !r) return in_point(r.error());
    if (e.job == "gradients")
      if (auto r = gradient_recipes(e); !r) return in_point(r.error());
    if (auto c = p.param("checkpoint")) {
      for (const char* key : {"recipe", "set", "model", "data", "seed", "steps", "batch", "lr", "optimizer", "warmup",
                              "weight_decay", "eval_every", "eval_limit", "metrics_every", "hidden", "width"})
        if (p.param(key))
          return in_point(make_error("point " + p.key() + ": '" + key +
                                     "' trains a model; a checkpoint's model is taken as it was trained"));
      const std::string path = resolve(e, *c);
      std::error_code ec;
      const std::string file = fs::is_directory(path, ec) ? path + "/checkpoint.bin" : path;
      if (auto why = not_a_file(file))
        return in_point(make_error("checkpoint " + quote_input(file) + *why +
                                   " (mxlab train --keep-checkpoint keeps the trained model's)"));
      return std::nullopt;
    }
    auto c = train_config(p);
    if (!c) return in_point(make_error("point " + p.key() + ": " + c.error().message));
    return std::nullopt;
  }
  if (e.job == "catalogue") {
    if (auto c = catalogue_format(p); !c) return in_point(c.error());
    return std::nullopt;
  }
  if (e.job == "gemm")
    if (auto m = point_model(p); !m) return in_point(m.error());
  for (const char* which : {"format", "a", "b"}) {
    if (!p.param(which)) continue;
    auto f = point_format(p, which);
    if (!f) return in_point(f.error());
    if (e.job == "bounds")
      if (auto err = exact::check_bounds_support(*f)) return in_point(make_error("format '" + f->name + "': " + err->message));
  }
  if (e.job == "bounds" && p.param("a").has_value() != p.param("b").has_value())
    return in_point(make_error("point " + p.key() + ": a bounds pair needs both a and b"));
  if (e.job == "bounds" && p.param("a") && p.param("format"))
    return in_point(make_error("point " + p.key() + ": give format, or a and b, not both"));
  if (auto name = p.param("input")) {
    const InputDef* in = find_input(e, *name);
    if (in && in->weights.empty()) {
      if (in->source.rfind("data:", 0) == 0) {
        const std::string spec = in->source.substr(5);
        const std::string set = spec.substr(0, spec.find(':'));
        auto src = find_data_source(set);
        if (!src) return in_point(make_error("input '" + in->name + "': " + src.error().message));
        for (const auto& f : (*src)->files)
          if (auto file = data_file(set, f.file, resolve(e, in->data_dir)); !file)
            return in_point(make_error("input '" + in->name + "': " + file.error().message));
      } else if (in->source.rfind("gen:", 0) == 0) {
        if (auto d = parse_distribution(in->source.substr(4)); !d)
          return in_point(make_error("input '" + in->name + "': " + d.error().message));
        if (auto sh = parse_shape(in->shape.empty() ? "65536" : in->shape); !sh)
          return in_point(make_error("input '" + in->name + "': " + sh.error().message));
      } else if (auto why = not_a_file(resolve(e, in->source))) {
        return in_point(make_error("input '" + in->name + "': file " + quote_input(resolve(e, in->source)) + *why));
      }
    }
  }
  return std::nullopt;
}

std::vector<std::string> input_files(const Experiment& e) {
  std::vector<std::string> files;
  if (model_job(e.job)) {  // the checkpoints the points read
    auto add = [&](const std::string& axis, const std::string& value) {
      if (axis != "checkpoint") return;
      const std::string path = resolve(e, value);
      std::error_code ec;
      const std::string file = fs::is_directory(path, ec) ? path + "/checkpoint.bin" : path;
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
    };
    for (const auto& [axis, values] : e.axes)
      for (const auto& v : values) add(axis, v);
    for (const auto& pt : e.points)
      for (const auto& [axis, v] : pt) add(axis, v);
  }
  for (const auto& in : e.inputs) {
    if (!in.weights.empty()) {
      if (auto src = find_data_source(in.weights)) {
        for (const auto& f : (*src)->files)
          if (auto path = data_file(in.weights, f.file, resolve(e, in.data_dir))) files.push_back(*path);
      } else {
        files.push_back(resolve(e, in.weights));
      }
    } else if (in.source.rfind("data:", 0) == 0) {
      const std::string set = in.source.substr(5, in.source.find(':', 5) - 5);
      if (auto src = find_data_source(set))
        for (const auto& f : (*src)->files)
          if (auto path = data_file(set, f.file, resolve(e, in.data_dir))) files.push_back(*path);
    } else if (in.source.rfind("gen:", 0) != 0) {
      files.push_back(resolve(e, in.source));
    }
  }
  return files;
}

}  // namespace mxlab::experiment
