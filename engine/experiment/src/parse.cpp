// Reading experiment files with toml++: every key checked, every error with the file, line and key.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include <toml++/toml.h>

#include "mxlab/core/small_file.hpp"
#include "mxlab/core/toml_nodes.hpp"
#include "mxlab/experiment/experiment.hpp"
#include "mxlab/experiment/figure.hpp"
#include "mxlab/ops/requests.hpp"

namespace mxlab::experiment {

namespace {

/// Largest experiment file read (a real one is a few KiB; this keeps a hostile one from costing much).
constexpr std::size_t kMaxFileBytes = std::size_t{1} << 20;
/// Deepest nesting of tables and arrays (toml++ itself limits nesting while parsing).
constexpr int kMaxDepth = 8;

struct Fail {
  std::string message;
};

/// The entries of a table in the order they are written.
auto ordered(const toml::table& t) { return ordered_entries(t); }

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const toml::node* at, const std::string& key, const std::string& problem) const {
    std::string where = path_;
    if (at && at->source().begin.line > 0) where += ":" + std::to_string(at->source().begin.line);
    throw Fail{printable(where + ": " + (key.empty() ? "" : "key '" + key + "': ") + problem)};
  }

  static std::string type_name(const toml::node& n) { return node_kind(n); }

  /// Refuses keys of `t` outside `known`, naming the first.
  void only(const toml::table& t, const std::string& prefix, std::initializer_list<const char*> known) const {
    only(t, prefix, std::vector<std::string>(known.begin(), known.end()));
  }

  void only(const toml::table& t, const std::string& prefix, const std::vector<std::string>& known) const {
    for (auto&& [k, v] : t) {
      const std::string key(k.str());
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        std::string list;
        for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
        fail(&v, prefix + key, "unknown key (expected one of: " + list + ")");
      }
    }
  }

  std::string string(const toml::node& n, const std::string& key) const {
    if (auto s = n.value<std::string>(); s && n.is_string()) return *s;
    fail(&n, key, "expected a string, found " + type_name(n));
  }

  /// A scalar as text: strings as they are, integers in decimal, numbers as the shortest exact decimal.
  std::string scalar_text(const toml::node& n, const std::string& key) const {
    if (n.is_string()) return *n.value<std::string>();
    if (n.is_integer()) return std::to_string(*n.value<std::int64_t>());
    if (n.is_floating_point()) {
      const double d = *n.value<double>();
      char buf[32];
      for (int p = 1; p <= 17; ++p) {
        std::snprintf(buf, sizeof buf, "%.*g", p, d);
        if (std::strtod(buf, nullptr) == d) break;
      }
      return buf;
    }
    if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
    fail(&n, key, "expected a string or a number, found " + type_name(n));
  }

  double number(const toml::node& n, const std::string& key) const {
    if (n.is_integer()) return static_cast<double>(*n.value<std::int64_t>());
    if (n.is_floating_point()) return *n.value<double>();
    fail(&n, key, "expected a number, found " + type_name(n));
  }

  /// A number that is neither infinite nor NaN (bounds and axis limits, where those mean nothing).
  double finite_number(const toml::node& n, const std::string& key) const {
    const double v = number(n, key);
    if (!std::isfinite(v)) fail(&n, key, "expected a finite number, found " + scalar_text(n, key));
    return v;
  }

  std::int64_t integer(const toml::node& n, const std::string& key, std::int64_t lo, std::int64_t hi) const {
    if (!n.is_integer()) fail(&n, key, "expected an integer, found " + type_name(n));
    const std::int64_t v = *n.value<std::int64_t>();
    if (v < lo || v > hi) fail(&n, key, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    return v;
  }

  bool boolean(const toml::node& n, const std::string& key) const {
    if (!n.is_boolean()) fail(&n, key, "expected true or false, found " + type_name(n));
    return *n.value<bool>();
  }

  /// A string or an array of strings.
  std::vector<std::string> strings(const toml::node& n, const std::string& key) const {
    std::vector<std::string> out;
    if (n.is_string()) return {*n.value<std::string>()};
    const toml::array* a = n.as_array();
    if (!a) fail(&n, key, "expected a string or an array of strings, found " + type_name(n));
    for (const toml::node& e : *a) out.push_back(string(e, key));
    return out;
  }

  /// A scalar or an array of scalars, as text.
  std::vector<std::string> values(const toml::node& n, const std::string& key) const {
    if (const toml::array* a = n.as_array()) {
      if (a->empty()) fail(&n, key, "an empty list gives no points");
      std::vector<std::string> out;
      for (const toml::node& e : *a) out.push_back(scalar_text(e, key));
      return out;
    }
    return {scalar_text(n, key)};
  }

  /// where = { column = value, ... }
  Pairs pairs(const toml::node& n, const std::string& key) const {
    const toml::table* t = n.as_table();
    if (!t) fail(&n, key, "expected a table such as { format = \"mxfp4\" }, found " + type_name(n));
    Pairs out;
    for (const auto& [k, v] : ordered(*t)) out.emplace_back(k, scalar_text(*v, key + "." + k));
    return out;
  }

  /// where = { column = value, column = [value, ...] }: a list keeps rows with any of its values (one pair each).
  Pairs where(const toml::node& n, const std::string& key) const {
    const toml::table* t = n.as_table();
    if (!t) fail(&n, key, "expected a table such as { format = \"mxfp4\" }, found " + type_name(n));
    Pairs out;
    for (const auto& [k, v] : ordered(*t)) {
      if (const toml::array* a = v->as_array(); a && a->empty()) fail(v, key + "." + k, "an empty list selects no rows");
      for (const auto& value : values(*v, key + "." + k)) out.emplace_back(k, value);
    }
    return out;
  }

  const toml::table& table(const toml::node& n, const std::string& key) const {
    if (const toml::table* t = n.as_table()) return *t;
    fail(&n, key, "expected a table, found " + type_name(n));
  }

  /// [[name]] entries (an array of tables).
  std::vector<const toml::table*> tables(const toml::node& n, const std::string& key) const {
    std::vector<const toml::table*> out;
    if (const toml::array* a = n.as_array()) {
      for (const toml::node& e : *a) out.push_back(&table(e, key));
      return out;
    }
    fail(&n, key, "expected [[" + key + "]] entries, found " + type_name(n));
  }

  void check_depth(const toml::node& n, int depth) const {
    if (depth > kMaxDepth) fail(&n, "", "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (const toml::table* t = n.as_table())
      for (auto&& [k, v] : *t) check_depth(v, depth + 1);
    if (const toml::array* a = n.as_array())
      for (const toml::node& e : *a) check_depth(e, depth + 1);
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The jobs, in the order the message for an unknown one lists them.
constexpr const char* kJobs[] = {"analyze", "catalogue", "bounds", "profiles", "train", "gemm", "direct_cast", "gradients"};

/// The type of a job's own top-level key, as JobValue holds it.
enum class JobKeyType { Text, Integer, Number, Flag, Texts };

/// A top-level key that one job reads (through Experiment's typed getters): its type, its checks and its value
/// when it is not written. A key that several jobs read has a row per job.
struct JobKeySpec {
  const char* job;
  const char* name;
  JobKeyType type;
  JobValue fallback{};           ///< the value when the key is not written (unused when `needed`)
  const char* needed = nullptr;  ///< the key must be written: the message when it is not
  const char* empty = nullptr;   ///< Texts: an empty list is refused with this message (nullptr = allowed)
  bool distinct = false;         ///< Texts: a value listed twice is refused
  std::int64_t lo = INT64_MIN, hi = INT64_MAX;  ///< Integer: its range
  /// A further check of the value read: the problem, or "" (nullptr = none).
  std::string (*check)(const JobValue&) = nullptr;
};

/// Every job's own top-level keys, a job's in the order parse_experiment fills Experiment::job_keys and
/// computation_difference names the first that differs. The other top-level keys (gaps, histogram_bins,
/// baseline_profile, max_gap) are still fields of Experiment.
const std::vector<JobKeySpec>& job_key_specs() {
  static const std::vector<JobKeySpec> specs = {
      {.job = "direct_cast", .name = "formats", .type = JobKeyType::Texts, .fallback = std::vector<std::string>{},
       .needed = "job 'direct_cast' needs formats = [...], the formats to cast the models to",
       .empty = "an empty list casts nothing", .distinct = true},
      {.job = "direct_cast", .name = "cast", .type = JobKeyType::Texts, .fallback = std::vector<std::string>{"weights"},
       .empty = "an empty list casts nothing", .distinct = true},
      {.job = "gradients", .name = "recipes", .type = JobKeyType::Texts, .fallback = std::vector<std::string>{},
       .needed = "job 'gradients' needs recipes = [...], the recipes whose gradients are set against FP32's",
       .empty = "an empty list compares nothing", .distinct = true},
      {.job = "gradients", .name = "batches", .type = JobKeyType::Integer, .fallback = std::int64_t{20}, .lo = 1,
       .hi = 100000},
  };
  return specs;
}

/// The value of a job's key as written, checked as its row says.
JobValue read_job_value(const Reader& r, const toml::node& n, const JobKeySpec& s) {
  const std::string key = s.name;
  JobValue v;
  switch (s.type) {
    case JobKeyType::Text: v = r.string(n, key); break;
    case JobKeyType::Integer: v = r.integer(n, key, s.lo, s.hi); break;
    case JobKeyType::Number: v = r.finite_number(n, key); break;
    case JobKeyType::Flag: v = r.boolean(n, key); break;
    case JobKeyType::Texts: {
      auto list = r.strings(n, key);
      if (list.empty() && s.empty) r.fail(&n, key, s.empty);
      if (s.distinct)
        for (const auto& x : list)
          if (std::count(list.begin(), list.end(), x) > 1) r.fail(&n, key, "'" + x + "' is listed twice");
      v = std::move(list);
      break;
    }
  }
  if (s.check)
    if (std::string problem = s.check(v); !problem.empty()) r.fail(&n, key, problem);
  return v;
}

/// Reads the job's own keys into e.job_keys (every one of the job's rows, written or not); a key of another job is
/// refused naming the jobs that read it.
void read_job_keys(const Reader& r, const toml::table& root, Experiment& e) {
  const auto& specs = job_key_specs();
  for (const JobKeySpec& s : specs) {
    const toml::node* n = root.get(s.name);
    if (s.job == e.job) {
      e.job_keys.emplace_back(s.name, n ? read_job_value(r, *n, s) : s.fallback);
      continue;
    }
    auto same_key = [&](const JobKeySpec& o) { return std::string_view(o.name) == s.name; };
    if (!n || std::any_of(specs.begin(), specs.end(), [&](const JobKeySpec& o) { return same_key(o) && o.job == e.job; }))
      continue;  // not written, or the experiment's job reads it too (its own row)
    std::vector<std::string> jobs;
    for (const JobKeySpec& o : specs)
      if (same_key(o) && std::find(jobs.begin(), jobs.end(), o.job) == jobs.end()) jobs.emplace_back(o.job);
    std::string list;
    for (std::size_t i = 0; i < jobs.size(); ++i)
      list += (i == 0 ? "" : i + 1 == jobs.size() ? " and " : ", ") + ("'" + jobs[i] + "'");
    r.fail(n, s.name, std::string("applies to job") + (jobs.size() > 1 ? "s " : " ") + list + " only");
  }
}

/// What is_name accepts, for messages.
constexpr const char* kNameRule = "letters, digits, '_', '-' and '.', at most 64, not '.' or '..'";

/// A name that becomes a file or folder name: letters, digits, '_', '-' and '.', at most 64 of them, and not
/// "." or ".." (which name the folder itself or its parent).
bool is_name(const std::string& s) {
  return !s.empty() && s.size() <= 64 && s != "." && s != ".." &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; });
}

/// Axes every job understands, besides the format options.
bool known_axis(const std::string& job, const std::string& axis) {
  if (job == "catalogue") return axis == "format" || axis == "codes";
  if (job == "train" || job == "direct_cast" || job == "gradients") {
    static const std::set<std::string> kTrain = {"recipe", "set", "seed", "model", "data", "steps", "batch", "lr",
                                                 "optimizer", "warmup", "weight_decay", "eval_every", "eval_limit",
                                                 "metrics_every", "hidden", "width", "init_gain"};
    return kTrain.count(axis) > 0 || (job != "train" && axis == "checkpoint");
  }
  if (axis == "format" || axis == "block") return true;
  if (job == "bounds") {
    if (axis == "a" || axis == "b") return true;
  }
  if (job == "gemm") {
    static const std::set<std::string> kGemm = {"a", "b", "input", "a_input", "m", "k", "n", "data_seed", "output",
                                                "model", "product", "group", "order", "sum", "scale", "acc", "promote",
                                                "model_round"};
    if (kGemm.count(axis) > 0) return true;
  }
  if (job == "analyze" || job == "profiles") {
    if (axis == "input") return true;
  }
  for (const auto& o : ops::format_options())
    if (o.name == axis) return true;
  return false;
}

void read_input(const Reader& r, const std::string& name, const toml::table& t, Experiment& e) {
  const std::string p = "inputs." + name + ".";
  r.only(t, p, {"source", "shape", "seed", "bf16", "weights", "select", "layout", "min_elements", "kernels", "data_dir"});
  InputDef in;
  in.name = name;
  if (!is_name(name)) r.fail(&t, "inputs." + name, std::string("an input name is ") + kNameRule);
  if (auto n = t.get("source")) in.source = r.string(*n, p + "source");
  if (auto n = t.get("shape")) in.shape = r.scalar_text(*n, p + "shape");
  if (auto n = t.get("seed")) in.seed = static_cast<std::uint64_t>(r.integer(*n, p + "seed", 0, INT64_MAX));
  if (auto n = t.get("bf16")) in.bf16 = r.boolean(*n, p + "bf16");
  if (auto n = t.get("weights")) in.weights = r.string(*n, p + "weights");
  if (auto n = t.get("select")) in.select = r.string(*n, p + "select");
  if (auto n = t.get("layout")) {
    in.layout = r.string(*n, p + "layout");
    if (in.layout != "auto" && in.layout != "last") r.fail(n, p + "layout", "expected auto (blocks along each kernel's reduction axes) or last");
  }
  if (auto n = t.get("min_elements")) in.min_elements = r.integer(*n, p + "min_elements", 1, INT64_MAX);
  if (auto n = t.get("kernels")) in.kernels = r.boolean(*n, p + "kernels");
  if (auto n = t.get("data_dir")) in.data_dir = r.string(*n, p + "data_dir");
  if (in.source.empty() == in.weights.empty())
    r.fail(&t, "inputs." + name, "give either source = \"gen:...\" or a file, or weights = MODEL");
  if (!in.data_dir.empty() && in.weights.empty() && in.source.rfind("data:", 0) != 0)
    r.fail(&t, "inputs." + name, "data_dir applies to weights and data: sources only");
  if (!in.source.empty() && (t.get("select") || t.get("layout") || t.get("min_elements") || t.get("kernels")))
    r.fail(&t, "inputs." + name, "select, layout, kernels and min_elements apply to weights only");
  e.inputs.push_back(std::move(in));
}

/// aggregate = "median" | "mean" | "min" | "max" | "sum" | "count" (tables and plots).
void read_aggregate(const Reader& r, const toml::table& t, const std::string& p, std::string& field) {
  if (auto n = t.get("aggregate")) {
    field = r.string(*n, p + "aggregate");
    static const std::set<std::string> kAggregates = {"median", "mean", "min", "max", "sum", "count"};
    if (!kAggregates.count(field)) r.fail(n, p + "aggregate", "expected median, mean, min, max, sum or count");
  }
}

template <class Def>
void read_common_filters(const Reader& r, const toml::table& t, const std::string& p, Def& d) {
  if (auto n = t.get("from")) d.from = r.string(*n, p + "from");
  if (auto n = t.get("where")) d.where = r.where(*n, p + "where");
}

std::string entry_name(const Reader& r, const toml::table& t, const std::string& what, std::size_t i) {
  if (auto n = t.get("name")) {
    std::string name = r.string(*n, what + ".name");
    if (!is_name(name)) r.fail(n, what + ".name", std::string("a name is ") + kNameRule + " (it names files)");
    return name;
  }
  return what + std::to_string(i + 1);
}

void read_table(const Reader& r, const toml::table& t, std::size_t i, Experiment& e) {
  const std::string p = "table.";
  r.only(t, p, {"name", "from", "rows", "pivot", "values", "aggregate", "where", "digits", "decimals", "caption", "label", "header"});
  TableDef d;
  d.line = static_cast<int>(t.source().begin.line);
  d.name = entry_name(r, t, "table", i);
  read_common_filters(r, t, p, d);
  if (auto n = t.get("rows")) d.rows = r.strings(*n, p + "rows");
  if (auto n = t.get("pivot")) d.pivot = r.string(*n, p + "pivot");
  if (auto n = t.get("values")) d.values = r.strings(*n, p + "values");
  read_aggregate(r, t, p, d.aggregate);
  if (auto n = t.get("digits")) d.digits = static_cast<int>(r.integer(*n, p + "digits", 1, 17));
  if (auto n = t.get("decimals")) {
    // decimals = 2 (every value column) or { sqnr_db = 1, mse = 6 }
    if (const toml::table* by = n->as_table()) {
      for (const auto& [k, v] : ordered(*by)) d.decimals.emplace_back(k, static_cast<int>(r.integer(*v, p + "decimals." + k, 0, 17)));
    } else {
      d.decimals.emplace_back("", static_cast<int>(r.integer(*n, p + "decimals", 0, 17)));
    }
  }
  if (auto n = t.get("caption")) d.caption = r.string(*n, p + "caption");
  if (auto n = t.get("label")) d.label = r.string(*n, p + "label");
  if (auto n = t.get("header")) d.header = r.pairs(*n, p + "header");
  if (d.rows.empty()) r.fail(&t, "table " + d.name, "needs rows = [COLUMN, ...]");
  if (d.values.empty()) r.fail(&t, "table " + d.name, "needs values = [COLUMN, ...]");
  e.tables.push_back(std::move(d));
}

void read_plot(const Reader& r, const toml::table& t, std::size_t i, Experiment& e) {
  const std::string p = "plot.";
  r.only(t, p, {"name", "from", "kind", "x", "y", "series", "value", "where", "x_scale", "y_scale", "log_values", "x_min",
                "x_max", "y_min", "y_max", "title", "x_label", "y_label", "legend_title", "aggregate", "markers", "marker_label",
                "value_label", "labels", "smooth", "spread", "facet", "width", "height", "font_size"});
  PlotDef d;
  d.line = static_cast<int>(t.source().begin.line);
  d.name = entry_name(r, t, "plot", i);
  read_common_filters(r, t, p, d);
  if (auto n = t.get("kind")) {
    d.kind = r.string(*n, p + "kind");
    if (!parse_plot_kind(d.kind)) r.fail(n, p + "kind", "expected line, scatter, histogram, heatmap or bar");
  }
  auto text = [&](const char* key, std::string& field) {
    if (auto n = t.get(key)) field = r.string(*n, p + key);
  };
  text("x", d.x);
  text("y", d.y);
  text("series", d.series);
  text("value", d.value);
  text("title", d.title);
  text("x_label", d.x_label);
  text("y_label", d.y_label);
  text("legend_title", d.legend_title);
  text("value_label", d.value_label);
  text("facet", d.facet);
  if (auto n = t.get("labels")) d.labels = r.pairs(*n, p + "labels");
  if (auto n = t.get("smooth")) d.smooth = static_cast<int>(r.integer(*n, p + "smooth", 0, 100000));
  if (auto n = t.get("spread")) {
    d.spread = r.string(*n, p + "spread");
    if (d.spread != "std" && d.spread != "minmax") r.fail(n, p + "spread", "expected std (mean +- standard deviation) or minmax");
  }
  for (auto [key, field, lo, hi] : {std::tuple{"width", &d.width, 1.0, 20.0}, std::tuple{"height", &d.height, 1.0, 20.0},
                                    std::tuple{"font_size", &d.font_size, 4.0, 24.0}})
    if (auto n = t.get(key)) {
      *field = r.finite_number(*n, p + key);
      if (*field < lo || *field > hi)
        r.fail(n, p + key, "expected a number from " + std::to_string(static_cast<int>(lo)) + " to " +
                               std::to_string(static_cast<int>(hi)));
    }
  for (auto [key, field] : {std::pair{"x_scale", &d.x_scale}, std::pair{"y_scale", &d.y_scale}}) {
    if (auto n = t.get(key)) {
      *field = r.string(*n, p + key);
      if (!parse_axis_scale(*field)) r.fail(n, p + key, "expected linear, log2 or log10");
    }
  }
  if (auto n = t.get("log_values")) d.log_values = r.boolean(*n, p + "log_values");
  read_aggregate(r, t, p, d.aggregate);
  text("markers", d.markers);
  text("marker_label", d.marker_label);
  for (auto [key, field] : {std::pair{"x_min", &d.x_min}, std::pair{"x_max", &d.x_max}, std::pair{"y_min", &d.y_min},
                            std::pair{"y_max", &d.y_max}})
    if (auto n = t.get(key)) *field = r.finite_number(*n, p + key);
  if (d.x.empty() || d.y.empty()) r.fail(&t, "plot " + d.name, "needs x = COLUMN and y = COLUMN");
  if (d.kind == "heatmap" && d.value.empty()) r.fail(&t, "plot " + d.name, "a heatmap needs value = COLUMN");
  if (d.smooth > 0 && d.kind != "line") r.fail(t.get("smooth"), p + "smooth", "smooths lines only (kind = \"line\")");
  if (!d.facet.empty() && d.kind == "heatmap") r.fail(t.get("facet"), p + "facet", "a heatmap is one panel");
  e.plots.push_back(std::move(d));
}

void read_expect(const Reader& r, const toml::table& t, std::size_t i, Experiment& e) {
  const std::string p = "expect.";
  r.only(t, p, {"name", "from", "where", "metric", "at_most", "at_least", "equals", "at_most_column", "tolerance", "reason",
                "golden", "table"});
  ExpectDef d;
  d.line = static_cast<int>(t.source().begin.line);
  d.name = entry_name(r, t, "expect", i);
  read_common_filters(r, t, p, d);
  if (auto n = t.get("metric")) d.metric = r.string(*n, p + "metric");
  if (auto n = t.get("at_most")) d.at_most = r.finite_number(*n, p + "at_most");
  if (auto n = t.get("at_least")) d.at_least = r.finite_number(*n, p + "at_least");
  if (auto n = t.get("equals")) d.equals = r.finite_number(*n, p + "equals");
  if (auto n = t.get("at_most_column")) d.at_most_column = r.string(*n, p + "at_most_column");
  if (auto n = t.get("tolerance")) {
    d.tolerance = r.finite_number(*n, p + "tolerance");
    if (!(d.tolerance >= 0)) r.fail(n, p + "tolerance", "expected a number >= 0");
  }
  if (auto n = t.get("reason")) d.reason = r.string(*n, p + "reason");
  if (auto n = t.get("golden")) d.golden = r.string(*n, p + "golden");
  if (auto n = t.get("table")) d.table = r.string(*n, p + "table");
  const int kinds = (d.at_most ? 1 : 0) + (d.at_least ? 1 : 0) + (d.equals ? 1 : 0) + (d.at_most_column.empty() ? 0 : 1) +
                    (d.golden.empty() ? 0 : 1);
  if (kinds == 0)
    r.fail(&t, "expect " + d.name, "needs one of at_most, at_least, equals, at_most_column, golden");
  if (d.golden.empty() == d.metric.empty() && !(d.golden.empty() && !d.metric.empty()))
    r.fail(&t, "expect " + d.name, "a golden expectation names a table (table = NAME), the others a metric");
  if (!d.golden.empty() && d.table.empty()) r.fail(&t, "expect " + d.name, "golden = FILE needs table = NAME");
  if (d.golden.empty() && d.metric.empty()) r.fail(&t, "expect " + d.name, "needs metric = COLUMN");
  if (d.tolerance > 0 && d.reason.empty())
    r.fail(&t, "expect " + d.name, "a tolerance other than zero needs reason = \"why\"");
  e.expects.push_back(std::move(d));
}

}  // namespace

Result<Experiment> parse_experiment(const std::string& text, const std::string& path) {
  if (text.size() > kMaxFileBytes) return make_error(path + ": larger than 1 MiB; not an experiment file");
  Reader r(path);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& err) {
    return make_error(printable(path + ":" + std::to_string(err.source().begin.line) + ": " + std::string(err.description())));
  }
  try {
    r.check_depth(root, 0);
    if (auto n = root.get("batch")) {
      r.only(root, "", {"name", "description", "batch"});
      Experiment e;
      e.path = path;
      e.text = text;
      if (auto m = root.get("name")) e.name = r.string(*m, "name");
      if (e.name.empty() || !is_name(e.name))
        r.fail(root.get("name"), "name", std::string("a batch needs name = \"...\" of ") + kNameRule + " (it names the results folder)");
      if (auto m = root.get("description")) e.description = r.string(*m, "description");
      e.batch = r.strings(*n, "batch");
      if (e.batch.empty()) r.fail(n, "batch", "lists no experiment files");
      return e;
    }
    std::vector<std::string> known = {"name", "description", "job", "inputs", "sweep", "points", "metrics", "gaps",
                                      "histogram_bins", "baseline_profile", "max_gap"};
    for (const JobKeySpec& s : job_key_specs())
      if (std::find(known.begin(), known.end(), s.name) == known.end()) known.emplace_back(s.name);
    for (const char* k : {"table", "plot", "expect", "batch"}) known.emplace_back(k);
    r.only(root, "", known);
    Experiment e;
    e.path = path;
    e.text = text;
    if (auto n = root.get("name")) e.name = r.string(*n, "name");
    if (e.name.empty() || !is_name(e.name))
      r.fail(root.get("name"), "name", std::string("an experiment needs name = \"...\" of ") + kNameRule + " (it names the results folder)");
    if (auto n = root.get("description")) e.description = r.string(*n, "description");
    if (auto n = root.get("job")) {
      e.job = r.string(*n, "job");
      if (std::find(std::begin(kJobs), std::end(kJobs), e.job) == std::end(kJobs)) {
        std::string list;
        for (std::size_t i = 0; i < std::size(kJobs); ++i)
          list += std::string(i == 0 ? "" : i + 1 == std::size(kJobs) ? " or " : ", ") + kJobs[i];
        r.fail(n, "job", "expected " + list);
      }
    }
    if (auto n = root.get("inputs")) {
      for (const auto& [k, v] : ordered(r.table(*n, "inputs"))) read_input(r, k, r.table(*v, "inputs." + k), e);
    }
    if (auto n = root.get("sweep")) {
      for (const auto& [axis, v] : ordered(r.table(*n, "sweep"))) {
        if (!known_axis(e.job, axis)) r.fail(v, "sweep." + axis, "not an axis of job '" + e.job + "'");
        e.axes.emplace_back(axis, r.values(*v, "sweep." + axis));
      }
    }
    if (auto n = root.get("points")) {
      for (const toml::table* t : r.tables(*n, "points")) {
        Pairs point = r.pairs(*t, "points");
        for (const auto& [axis, value] : point)
          if (!known_axis(e.job, axis)) r.fail(t, "points." + axis, "not an axis of job '" + e.job + "'");
        e.points.push_back(std::move(point));
      }
    }
    if (auto n = root.get("metrics")) e.metrics = r.strings(*n, "metrics");
    if (auto n = root.get("gaps")) e.gaps = r.boolean(*n, "gaps");
    if (auto n = root.get("histogram_bins")) e.histogram_bins = static_cast<int>(r.integer(*n, "histogram_bins", 0, 4096));
    if (auto n = root.get("baseline_profile")) e.baseline_profile = r.string(*n, "baseline_profile");
    if (auto n = root.get("max_gap")) e.max_gap = static_cast<int>(r.integer(*n, "max_gap", 0, 512));
    read_job_keys(r, root, e);
    if (auto n = root.get("table")) {
      auto ts = r.tables(*n, "table");
      for (std::size_t i = 0; i < ts.size(); ++i) read_table(r, *ts[i], i, e);
    }
    if (auto n = root.get("plot")) {
      auto ts = r.tables(*n, "plot");
      for (std::size_t i = 0; i < ts.size(); ++i) read_plot(r, *ts[i], i, e);
    }
    if (auto n = root.get("expect")) {
      auto ts = r.tables(*n, "expect");
      for (std::size_t i = 0; i < ts.size(); ++i) read_expect(r, *ts[i], i, e);
    }
    // Names of inputs used by the sweep must exist; names of outputs must be unique (they name files).
    std::set<std::string> inputs;
    for (const auto& in : e.inputs) inputs.insert(in.name);
    auto check_inputs = [&](const std::string& value, const toml::node* at, const std::string& key) {
      if (!inputs.count(value)) r.fail(at, key, "no input named '" + value + "' (define it under [inputs." + value + "])");
    };
    for (const auto& [axis, vals] : e.axes)
      if (axis == "input")
        for (const auto& v : vals) check_inputs(v, root.at_path("sweep.input").node(), "sweep.input");
    for (const auto& pt : e.points)
      for (const auto& [axis, v] : pt)
        if (axis == "input") check_inputs(v, root.get("points"), "points.input");
    std::set<std::string> names;
    for (const auto& t : e.tables)
      if (!names.insert("table:" + t.name).second) r.fail(nullptr, "table.name", "two tables named '" + t.name + "'");
    for (const auto& p : e.plots)
      if (!names.insert("plot:" + p.name).second) r.fail(nullptr, "plot.name", "two plots named '" + p.name + "'");
    for (const auto& x : e.expects)
      if (!x.table.empty() && !names.count("table:" + x.table))
        r.fail(nullptr, "expect.table", "no table named '" + x.table + "'");
    for (const JobKeySpec& s : job_key_specs())
      if (s.needed && s.job == e.job && !root.get(s.name)) r.fail(nullptr, s.name, s.needed);
    const bool model_points = e.job == "direct_cast" || e.job == "gradients";  // a model per point, trained or read
    const std::string needed = e.job == "train" ? "recipe" : model_points ? "model" : "format";
    const bool has = model_points || [&] {
      for (const auto& [a, v] : e.axes) if (a == needed || a == "a") return true;
      for (const auto& pt : e.points) for (const auto& [a, v] : pt) if (a == needed || a == "a") return true;
      return false;
    }();
    if (!has) r.fail(root.get("sweep"), "sweep." + needed, "the sweep names no " + needed + " (sweep." + needed + " = [...])");
    if ((e.job == "analyze" || e.job == "profiles")) {
      bool input = false;
      for (const auto& [a, v] : e.axes) input |= a == "input";
      for (const auto& pt : e.points) for (const auto& [a, v] : pt) input |= a == "input";
      if (!input) r.fail(root.get("sweep"), "sweep.input", "job '" + e.job + "' needs inputs (sweep.input = [...])");
    }
    // The points are counted (not expanded) here: a sweep too large is refused with the file.
    if (auto count = count_points(e); !count) return count.error();
    return e;
  } catch (const Fail& f) {
    return make_error(f.message);
  }
}

Result<Experiment> read_experiment(const std::string& path) {
  // Only a regular file of at most 1 MiB is read (a FIFO or /dev/zero is refused, not read forever).
  auto text = read_small_file(path, kMaxFileBytes, "experiment file");
  if (!text) return make_error(printable(text.error().message));
  return parse_experiment(*text, path);
}

namespace {

template <class T>
const T& job_value(const Experiment& e, std::string_view key, const char* type) {
  for (const auto& [k, v] : e.job_keys) {
    if (k != key) continue;
    if (const T* t = std::get_if<T>(&v)) return *t;
    throw std::logic_error("job '" + e.job + "': key '" + k + "' read as " + type + ", which its row in job_key_specs is not");
  }
  throw std::logic_error("job '" + e.job + "' reads key '" + std::string(key) + "', which is not one of its keys");
}

}  // namespace

const std::string& Experiment::job_text(std::string_view key) const { return job_value<std::string>(*this, key, "text"); }
std::int64_t Experiment::job_integer(std::string_view key) const { return job_value<std::int64_t>(*this, key, "an integer"); }
double Experiment::job_number(std::string_view key) const { return job_value<double>(*this, key, "a number"); }
bool Experiment::job_flag(std::string_view key) const { return job_value<bool>(*this, key, "true or false"); }
const std::vector<std::string>& Experiment::job_texts(std::string_view key) const {
  return job_value<std::vector<std::string>>(*this, key, "a list of texts");
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace mxlab::experiment
