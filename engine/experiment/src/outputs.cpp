// Tables, figures and expectations built from experiment results.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "mxlab/core/small_file.hpp"
#include "mxlab/experiment/outputs.hpp"
#include "mxlab/io/csv.hpp"

namespace mxlab::experiment {

namespace {

/// Largest golden table read.
constexpr std::uint64_t kMaxGoldenBytes = std::uint64_t{64} << 20;

std::string at(const Experiment& e, int line, const std::string& what) {
  std::string s = e.path;
  if (line > 0) s += ":" + std::to_string(line);
  s += ": ";
  s += what;
  return s;
}

/// Whether a row passes `where`: for each column named, its value is one of the values listed for it.
bool matches(const Row& r, const Pairs& where) {
  for (const auto& kv : where) {
    const std::string& k = kv.first;  // not a structured binding: clang 14 cannot capture one
    const Cell* c = r.find(k);
    const std::string text = c ? cell_text(*c) : std::string();
    if (!c || std::none_of(where.begin(), where.end(), [&](const auto& w) { return w.first == k && w.second == text; }))
      return false;
  }
  return true;
}

std::optional<double> number(const Cell* c) {
  if (!c) return std::nullopt;
  if (const double* d = std::get_if<double>(c)) return *d;
  return std::nullopt;
}

std::string format_number(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

/// How the numbers of one table column are written: the same decimals for every cell.
struct ColumnStyle {
  enum { Exact, Whole, Fixed, Scientific } kind = Exact;
  int digits = 4;    ///< Exact: significant digits of each value
  int decimals = 0;  ///< Fixed: after the point; Scientific: of the mantissa
  std::string format(double v) const {
    if (!std::isfinite(v) || kind == Exact || kind == Whole) return format_number(v, digits);
    char buf[64];
    if (kind == Scientific && v != 0) std::snprintf(buf, sizeof buf, "%.*e", decimals, v);
    else std::snprintf(buf, sizeof buf, "%.*f", kind == Scientific ? 0 : decimals, v);
    return buf;
  }
};

/// A column's style: `fixed` decimals when given; else whole numbers stay whole, and the largest value gets
/// `digits` significant digits with every other value at the same decimals (scientific notation when the
/// column spans more than four decades, lies outside [0.001, 10^6) or its smallest value would keep fewer than
/// two significant digits). 15 digits or more keep each value exact.
ColumnStyle column_style(const std::vector<double>& column, int digits, std::optional<int> fixed) {
  ColumnStyle s;
  s.digits = digits;
  if (fixed) {
    s.kind = ColumnStyle::Fixed;
    s.decimals = *fixed;
    return s;
  }
  if (digits >= 15) return s;
  double hi = 0, lo = std::numeric_limits<double>::infinity();
  bool whole = true;
  for (double v : column) {
    if (!std::isfinite(v)) continue;
    whole = whole && v == std::floor(v) && std::fabs(v) < 1e15;
    if (v != 0) hi = std::max(hi, std::fabs(v)), lo = std::min(lo, std::fabs(v));
  }
  if (whole || hi == 0) {
    s.kind = ColumnStyle::Whole;
    return s;
  }
  if (hi >= 1e6 || hi < 1e-3 || hi / lo >= 1e4) {
    s.kind = ColumnStyle::Scientific;
    s.decimals = digits - 1;
    return s;
  }
  s.kind = ColumnStyle::Fixed;
  s.decimals = std::clamp(digits - 1 - static_cast<int>(std::floor(std::log10(hi))), 0, 15);
  // The smallest value keeps two significant digits at these decimals, or the column is scientific.
  if (s.decimals + static_cast<int>(std::floor(std::log10(lo))) + 1 < std::min(2, digits)) {
    s.kind = ColumnStyle::Scientific;
    s.decimals = digits - 1;
  }
  return s;
}

double aggregate(std::vector<double> v, const std::string& how) {
  if (how == "count") return static_cast<double>(v.size());
  if (v.empty()) return std::nan("");
  if (how == "min") return *std::min_element(v.begin(), v.end());
  if (how == "max") return *std::max_element(v.begin(), v.end());
  if (how == "sum" || how == "mean") {
    double s = 0;
    for (double x : v) s += x;
    return how == "sum" ? s : s / static_cast<double>(v.size());
  }
  // median: the middle value, or the mean of the two middle values
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The rows of a set that pass `where`; an error when the set is missing or a where-column is unknown.
Result<std::vector<const Row*>> select(const Experiment& e, int line, const std::string& what, const std::string& from,
                                       const Pairs& where, const AllResults& results) {
  auto it = results.find(from);
  if (it == results.end()) {
    std::string known;
    for (const auto& [k, v] : results) known += (known.empty() ? "" : ", ") + k;
    return make_error(at(e, line, what + ": no result set '" + from + "' (this job gives: " + known + ")"));
  }
  std::vector<const Row*> out;
  for (const auto& r : it->second)
    if (matches(r, where)) out.push_back(&r);
  for (const auto& [k, v] : where) {
    bool seen = false;
    for (const auto& r : it->second) seen |= r.find(k) != nullptr;
    if (!seen) return make_error(at(e, line, what + ": where names an unknown column '" + k + "'"));
  }
  return out;
}

std::optional<Error> check_column(const Experiment& e, int line, const std::string& what, const std::string& column,
                                  const std::vector<const Row*>& rows) {
  if (column.empty()) return std::nullopt;
  for (const Row* r : rows)
    if (r->find(column)) return std::nullopt;
  if (rows.empty()) return std::nullopt;
  std::string known;
  for (const auto& [k, v] : rows.front()->cells) known += (known.empty() ? "" : ", ") + k;
  return make_error(at(e, line, what + ": no column '" + column + "' (columns: " + known + ")"));
}

/// What a column of the selected rows holds. Empty cells (a metric a row does not have, such as val_loss on
/// steps without evaluation) are skipped: a column's type never depends on its emptiest cell.
enum class ColumnType { Empty, Numbers, Text };

/// The type of a column; a column that mixes numbers and text is an error naming it, with one of each.
Result<ColumnType> column_type(const Experiment& e, int line, const std::string& what, const std::string& column,
                               const std::vector<const Row*>& rows) {
  const Cell* a_number = nullptr;
  const Cell* a_text = nullptr;
  for (const Row* r : rows) {
    const Cell* c = r->find(column);
    if (!c) continue;
    if (std::holds_alternative<double>(*c)) a_number = a_number ? a_number : c;
    else if (!std::get<std::string>(*c).empty()) a_text = a_text ? a_text : c;
  }
  if (a_number && a_text)
    return make_error(at(e, line, what + ": column '" + column + "' mixes numbers (" + cell_text(*a_number) + ") and text ('" +
                                      printable(std::get<std::string>(*a_text)) +
                                      "'); select rows of one kind with where = {...}"));
  return a_number ? ColumnType::Numbers : a_text ? ColumnType::Text : ColumnType::Empty;
}

/// Whether a cell is missing or empty text (a value a row does not have).
bool blank(const Cell* c) { return !c || (std::holds_alternative<std::string>(*c) && std::get<std::string>(*c).empty()); }

/// Values in first-seen order.
std::vector<std::string> distinct(const std::vector<const Row*>& rows, const std::string& column) {
  std::vector<std::string> out;
  for (const Row* r : rows) {
    const Cell* c = r->find(column);
    if (!c) continue;
    const std::string v = cell_text(*c);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

}  // namespace

AllResults gather(const std::vector<PointResult>& points) {
  AllResults all;
  for (const auto& p : points)
    for (const auto& [set, rows] : p) all[set].insert(all[set].end(), rows.begin(), rows.end());
  return all;
}

Table result_table(const std::vector<Row>& rows) {
  Table t;
  std::map<std::string, std::size_t> index;
  std::vector<bool> numeric;
  for (const Row& r : rows)
    for (const auto& [k, v] : r.cells)
      if (!index.count(k)) index[k] = t.add_column(k);
  // A column is numeric when its cells are numbers or empty (a metric some rows do not have).
  std::vector<bool> all_numbers(t.columns.size(), true), any_number(t.columns.size(), false);
  for (const Row& r : rows) {
    std::vector<std::string> cells(t.columns.size());
    for (const auto& [k, v] : r.cells) {
      cells[index[k]] = cell_text(v);
      if (std::holds_alternative<double>(v)) any_number[index[k]] = true;
      else if (!std::get<std::string>(v).empty()) all_numbers[index[k]] = false;
    }
    t.rows.push_back(std::move(cells));
  }
  for (std::size_t c = 0; c < t.columns.size(); ++c) t.numeric[c] = all_numbers[c] && any_number[c];
  return t;
}

Result<Table> build_table(const Experiment& e, const TableDef& def, const AllResults& results) {
  const std::string what = "table '" + def.name + "'";
  auto rows = select(e, def.line, what, def.from, def.where, results);
  if (!rows) return rows.error();
  for (const auto& c : def.rows)
    if (auto err = check_column(e, def.line, what, c, *rows)) return *err;
  for (const auto& c : def.values)
    if (auto err = check_column(e, def.line, what, c, *rows)) return *err;
  if (auto err = check_column(e, def.line, what, def.pivot, *rows)) return *err;

  // Row keys and pivot values in first-seen order; cells collect every value that falls in them.
  std::vector<std::vector<std::string>> keys;
  std::map<std::vector<std::string>, std::size_t> key_index;
  const std::vector<std::string> pivots = def.pivot.empty() ? std::vector<std::string>{""} : distinct(*rows, def.pivot);
  std::map<std::tuple<std::size_t, std::size_t, std::size_t>, std::vector<Cell>> cells;  // key, pivot, value
  for (const Row* r : *rows) {
    std::vector<std::string> key;
    for (const auto& c : def.rows) {
      const Cell* x = r->find(c);
      key.push_back(x ? cell_text(*x) : "");
    }
    auto [it, fresh] = key_index.emplace(key, keys.size());
    if (fresh) keys.push_back(key);
    std::size_t pv = 0;
    if (!def.pivot.empty()) {
      const Cell* x = r->find(def.pivot);
      pv = static_cast<std::size_t>(std::find(pivots.begin(), pivots.end(), x ? cell_text(*x) : "") - pivots.begin());
    }
    for (std::size_t v = 0; v < def.values.size(); ++v)
      if (const Cell* x = r->find(def.values[v])) cells[{it->second, pv, v}].push_back(*x);
  }
  Table t;
  for (const auto& c : def.rows) t.add_column(c, false);
  std::vector<std::string> value_of;  // the value column each column shows
  for (std::size_t p = 0; p < pivots.size(); ++p)
    for (const auto& v : def.values) {
      std::string name = def.pivot.empty() ? v : def.values.size() == 1 ? pivots[p] : v + " " + pivots[p];
      t.add_column(name, true);
      value_of.push_back(v);
    }
  // Numbers are written once their column is complete: every cell of a column with the same decimals.
  std::vector<std::vector<std::optional<double>>> nums;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    std::vector<std::string> row = keys[k];
    nums.emplace_back(def.rows.size() + value_of.size());
    auto put_number = [&](double v) {
      nums.back()[row.size()] = v;
      row.push_back(format_number(v, def.digits));
    };
    for (std::size_t p = 0; p < pivots.size(); ++p)
      for (std::size_t v = 0; v < def.values.size(); ++v) {
        auto it = cells.find({k, p, v});
        if (it == cells.end() || it->second.empty()) {
          row.push_back("");
          continue;
        }
        const auto& got = it->second;
        if (def.aggregate.empty()) {
          if (got.size() > 1) {
            std::string key;
            for (std::size_t i = 0; i < def.rows.size(); ++i) key += std::string(i ? ", " : "") + def.rows[i] + "=" + keys[k][i];
            return make_error(at(e, def.line, what + ": " + std::to_string(got.size()) + " results fall in the row (" + key +
                                                 (def.pivot.empty() ? "" : ", " + def.pivot + "=" + pivots[p]) +
                                                 "); add the column that tells them apart to rows, or aggregate = \"median\""));
          }
          if (std::holds_alternative<double>(got[0])) put_number(std::get<double>(got[0]));
          else row.push_back(std::get<std::string>(got[0]));
          continue;
        }
        std::vector<double> values;
        for (const Cell& c : got)
          if (const double* d = std::get_if<double>(&c)) values.push_back(*d);
        if (values.size() != got.size() && def.aggregate != "count")
          return make_error(at(e, def.line, what + ": aggregate " + def.aggregate + " of the text column '" + def.values[v] + "'"));
        put_number(aggregate(values, def.aggregate));
      }
    t.rows.push_back(std::move(row));
  }
  for (std::size_t c = def.rows.size(); c < t.columns.size(); ++c) {
    std::vector<double> column;
    for (const auto& r : nums)
      if (r[c]) column.push_back(*r[c]);
    std::optional<int> fixed;
    for (const auto& [name, n] : def.decimals)
      if (name.empty() || name == value_of[c - def.rows.size()]) fixed = n;
    const ColumnStyle style = column_style(column, def.digits, fixed);
    for (std::size_t k = 0; k < t.rows.size(); ++k)
      if (nums[k][c]) t.rows[k][c] = style.format(*nums[k][c]);
  }
  // Columns that hold only numbers (or nothing) are numeric.
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    bool num = !t.rows.empty();
    for (const auto& r : t.rows) {
      char* end = nullptr;
      std::strtod(r[c].c_str(), &end);
      const bool blank = r[c].empty() && c >= def.rows.size();
      num = num && (blank || (!r[c].empty() && end == r[c].c_str() + r[c].size()) || r[c] == "nan" || r[c] == "inf" ||
                    r[c] == "-inf");
    }
    t.numeric[c] = num;
  }
  for (const auto& [column, shown] : def.header) {
    auto it = std::find(t.columns.begin(), t.columns.end(), column);
    if (it == t.columns.end()) {
      std::string known;
      for (const auto& c : t.columns) known += (known.empty() ? "" : ", ") + c;
      return make_error(at(e, def.line, what + ": header names no column '" + column + "' (columns: " + known + ")"));
    }
    *it = shown;
  }
  return t;
}

std::string table_latex(const Table& t, const TableDef& def) {
  const std::string caption = latex_escape(def.caption);
  std::string out = "\\begin{table}[tbp]\n\\centering\n";
  if (!caption.empty()) out += "\\caption{" + caption + "}\n";
  out += "\\label{" + (def.label.empty() ? "tab:" + def.name : def.label) + "}\n";
  out += to_latex(t, "");
  return out + "\\end{table}\n";
}

Result<Figure> build_figure(const Experiment& e, const PlotDef& def, const AllResults& results) {
  const std::string what = "plot '" + def.name + "'";
  auto rows = select(e, def.line, what, def.from, def.where, results);
  if (!rows) return rows.error();
  for (const auto* c : {&def.x, &def.y, &def.series, &def.value, &def.facet})
    if (auto err = check_column(e, def.line, what, *c, *rows)) return *err;
  if (rows->empty()) return make_error(at(e, def.line, what + ": no result rows match"));
  Figure f;
  f.kind = *parse_plot_kind(def.kind);
  f.title = def.title.empty() ? def.name : def.title;
  f.x.label = def.x_label.empty() ? def.x : def.x_label;
  f.y.label = def.y_label.empty() ? def.y : def.y_label;
  f.x.scale = *parse_axis_scale(def.x_scale);
  f.y.scale = *parse_axis_scale(def.y_scale);
  f.x.min = def.x_min;
  f.x.max = def.x_max;
  f.y.min = def.y_min;
  f.y.max = def.y_max;
  f.legend_title = def.legend_title.empty() ? def.series : def.legend_title;
  f.legend = !def.series.empty();
  f.width_in = def.width;
  f.height_in = def.height;
  f.font_pt = def.font_size;
  f.smooth = def.smooth;
  f.spread = def.spread;
  // Shown names of values (series, categories, facets); the data keep the values themselves.
  auto shown_name = [&](const std::string& v) {
    for (const auto& [k, l] : def.labels)
      if (k == v) return l;
    return v;
  };
  auto relabel = [&](std::vector<std::string>& v) {
    for (auto& s : v) s = shown_name(s);
  };

  if (f.kind == PlotKind::Heatmap) {
    auto vt = column_type(e, def.line, what, def.value, *rows);
    if (!vt) return vt.error();
    if (*vt == ColumnType::Text) return make_error(at(e, def.line, what + ": value column '" + def.value + "' holds text, not numbers"));
    Heatmap& h = f.heatmap;
    h.x_labels = distinct(*rows, def.x);
    h.y_labels = distinct(*rows, def.y);
    h.values.assign(h.x_labels.size() * h.y_labels.size(), std::nan(""));
    h.value_label = def.value_label.empty() ? def.value : def.value_label;
    h.log_values = def.log_values;
    std::vector<bool> filled(h.values.size(), false);
    for (const Row* r : *rows) {
      if (!r->find(def.x) || !r->find(def.y)) continue;
      const auto xi = std::find(h.x_labels.begin(), h.x_labels.end(), cell_text(*r->find(def.x))) - h.x_labels.begin();
      const auto yi = std::find(h.y_labels.begin(), h.y_labels.end(), cell_text(*r->find(def.y))) - h.y_labels.begin();
      const std::size_t i = static_cast<std::size_t>(yi) * h.x_labels.size() + static_cast<std::size_t>(xi);
      if (filled[i]) return make_error(at(e, def.line, what + ": two results fall in the cell (" + h.x_labels[static_cast<std::size_t>(xi)] + ", " +
                                                   h.y_labels[static_cast<std::size_t>(yi)] + "); narrow it with where = {...}"));
      filled[i] = true;
      h.values[i] = number(r->find(def.value)).value_or(std::nan(""));
    }
    relabel(h.x_labels);
    relabel(h.y_labels);
    return f;
  }

  // x as numbers, or as categories when the column holds text (bars always use categories); empty cells are
  // skipped, and a column of numbers and text is an error.
  auto xt = column_type(e, def.line, what, def.x, *rows);
  if (!xt) return xt.error();
  auto yt = column_type(e, def.line, what, def.y, *rows);
  if (!yt) return yt.error();
  const bool categorical = f.kind == PlotKind::Bar || *xt == ColumnType::Text;
  const bool y_categorical = *yt == ColumnType::Text;
  std::vector<const Row*> used;  // rows with both an x and a y
  for (const Row* r : *rows)
    if (!blank(r->find(def.x)) && !blank(r->find(def.y))) used.push_back(r);
  if (used.empty()) return make_error(at(e, def.line, what + ": no result row has both " + def.x + " and " + def.y));
  if (categorical) f.categories = distinct(used, def.x);
  if (y_categorical) {
    f.y.tick_labels = distinct(used, def.y);
    f.y.scale = AxisScale::Linear;
  }
  if (categorical && f.kind != PlotKind::Bar) f.x.tick_labels = f.categories;
  if (!def.spread.empty() && def.aggregate.empty() && f.kind == PlotKind::Scatter)
    return make_error(at(e, def.line, what + ": spread needs aggregate = \"mean\" (or median) for a scatter, which otherwise shows every result"));
  const std::vector<std::string> facets = def.facet.empty() ? std::vector<std::string>{""} : distinct(used, def.facet);
  if (!def.facet.empty()) f.facets = facets;
  const std::vector<std::string> names = def.series.empty() ? std::vector<std::string>{""} : distinct(used, def.series);
  // Several results at one x of a series: a scatter shows each; other kinds aggregate them (histograms sum,
  // a spread means the mean).
  const std::string how = !def.aggregate.empty()                ? def.aggregate
                          : f.kind == PlotKind::Histogram        ? "sum"
                          : !def.spread.empty()                  ? "mean"
                                                                 : "";
  const bool keep_all = f.kind == PlotKind::Scatter && def.aggregate.empty();
  for (std::size_t fi = 0; fi < facets.size(); ++fi)
    for (const auto& name : names) {
      Series s;
      s.name = name.empty() && def.series.empty() ? def.y : name;
      s.facet = fi;
      std::map<std::size_t, std::vector<double>> stacks;  // point -> every y there
      for (const Row* r : used) {
        if (!def.series.empty() && (!r->find(def.series) || cell_text(*r->find(def.series)) != name)) continue;
        if (!def.facet.empty() && (!r->find(def.facet) || cell_text(*r->find(def.facet)) != facets[fi])) continue;
        const Cell* xc = r->find(def.x);
        const Cell* yc = r->find(def.y);
        const double x = categorical ? static_cast<double>(std::find(f.categories.begin(), f.categories.end(), cell_text(*xc)) -
                                                           f.categories.begin())
                                     : *number(xc);
        const double y = y_categorical ? static_cast<double>(std::find(f.y.tick_labels.begin(), f.y.tick_labels.end(), cell_text(*yc)) -
                                                             f.y.tick_labels.begin())
                                       : number(yc).value_or(std::nan(""));
        const auto at_x = keep_all || y_categorical ? s.x.end() : std::find(s.x.begin(), s.x.end(), x);
        if (at_x != s.x.end()) {
          stacks[static_cast<std::size_t>(at_x - s.x.begin())].push_back(y);
          continue;
        }
        if (!keep_all && !y_categorical) stacks[s.x.size()].push_back(y);
        s.x.push_back(x);
        s.y.push_back(y);
      }
      if (s.x.empty()) continue;
      if (!def.spread.empty()) s.lo = s.hi = s.y;
      for (const auto& [i, ys] : stacks) {
        if (ys.size() > 1 && how.empty())
          return make_error(at(e, def.line, what + ": " + std::to_string(ys.size()) + " results at " + def.x + " = " +
                                               (categorical ? f.categories[static_cast<std::size_t>(s.x[i])] : cell_text(s.x[i])) +
                                               (def.series.empty() ? "" : " of " + def.series + " = " + name) +
                                               "; narrow them with where = {...}, plot them as series, aggregate = \"max\", or kind = \"scatter\""));
        if (ys.size() > 1 || how == "count") s.y[i] = aggregate(ys, how);
        if (!def.spread.empty()) {
          if (def.spread == "minmax") {
            s.lo[i] = aggregate(ys, "min");
            s.hi[i] = aggregate(ys, "max");
          } else {
            double mean = aggregate(ys, "mean"), sq = 0;
            for (double v : ys) sq += (v - mean) * (v - mean);
            const double sd = ys.size() > 1 ? std::sqrt(sq / static_cast<double>(ys.size() - 1)) : 0;
            s.lo[i] = s.y[i] - sd;
            s.hi[i] = s.y[i] + sd;
          }
        }
      }
      if (f.kind == PlotKind::Histogram) {
        std::vector<double> xs = s.x;
        std::sort(xs.begin(), xs.end());
        double w = 0;
        for (std::size_t i = 1; i < xs.size(); ++i)
          if (xs[i] > xs[i - 1] && (w == 0 || xs[i] - xs[i - 1] < w)) w = xs[i] - xs[i - 1];
        s.bin_width = w > 0 ? w : 1;
      }
      smooth_series(s, def.smooth);
      s.name = shown_name(s.name);
      f.series.push_back(std::move(s));
    }
  if (categorical && f.kind != PlotKind::Bar) f.x.scale = AxisScale::Linear;
  relabel(f.categories);
  relabel(f.x.tick_labels);
  relabel(f.y.tick_labels);
  relabel(f.facets);
  if (!def.markers.empty()) {
    // Vertical markers at the numbers of a column (space-separated lists such as crossover gaps).
    const auto dot = def.markers.find('.');
    const std::string set = dot == std::string::npos ? def.from : def.markers.substr(0, dot);
    const std::string column = dot == std::string::npos ? def.markers : def.markers.substr(dot + 1);
    auto mrows = select(e, def.line, what + " markers", set, def.where, results);
    if (!mrows) return mrows.error();
    if (auto err = check_column(e, def.line, what + " markers", column, *mrows)) return *err;
    for (const Row* r : *mrows) {
      const Cell* c = r->find(column);
      if (!c) continue;
      // A marker row that names one of the plot's series (a pair's crossover with its `b`) marks that series'
      // point at x; the others are vertical lines.
      const Cell* sc = def.series.empty() ? nullptr : r->find(def.series);
      const Series* on = nullptr;
      if (sc)
        for (const Series& s : f.series)
          if (s.name == shown_name(cell_text(*sc))) on = &s;
      std::istringstream is(cell_text(*c));
      std::string word;
      while (is >> word) {
        char* end = nullptr;
        const double v = std::strtod(word.c_str(), &end);
        if (end == word.c_str() || *end != 0 || !std::isfinite(v)) continue;
        Marker m;
        m.x = v;
        m.label = def.marker_label.empty() ? column : def.marker_label;
        if (on) {
          const auto k = std::find(on->x.begin(), on->x.end(), v);
          if (k == on->x.end()) continue;  // the series has no point there
          m.series = on->name;
          m.y = on->y[static_cast<std::size_t>(k - on->x.begin())];
        }
        if (std::none_of(f.markers.begin(), f.markers.end(), [&](const Marker& o) { return o.x == m.x && o.series == m.series; }))
          f.markers.push_back(std::move(m));
      }
    }
  }
  return f;
}

std::vector<ExpectOutcome> check_expectations(const Experiment& e, const AllResults& results,
                                              const std::map<std::string, Table>& tables) {
  std::vector<ExpectOutcome> out;
  for (const ExpectDef& x : e.expects) {
    ExpectOutcome o;
    o.name = x.name;
    o.line = x.line;
    auto fail = [&](const std::string& msg) {
      if (o.failures.size() < 5) o.failures.push_back(msg);
      else if (o.failures.size() == 5) o.failures.push_back("...");
    };
    if (!x.golden.empty()) {
      auto t = tables.find(x.table);
      const std::filesystem::path golden = std::filesystem::path(e.path).parent_path() / x.golden;
      // A regular file of at most 64 MiB (a FIFO or a device is refused, not read forever).
      auto text = read_small_file(golden.string(), kMaxGoldenBytes, "golden file");
      if (t == tables.end()) fail("no table '" + x.table + "' was built");
      else if (!text) fail(printable(text.error().message) + "; `mxlab check " + e.path + " --update-golden` writes it from the table");
      else {
        // Compare cell by cell: text equal, numbers within the tolerance.
        auto split = [](const std::string& content) {
          std::vector<std::vector<std::string>> rows;
          std::istringstream is(content);
          std::string line;
          while (std::getline(is, line)) {
            std::vector<std::string> cells;
            std::string cell;
            bool quoted = false;
            for (char c : line) {
              if (c == '"') quoted = !quoted;
              else if (c == ',' && !quoted) { cells.push_back(cell); cell.clear(); }
              else cell += c;
            }
            cells.push_back(cell);
            rows.push_back(cells);
          }
          return rows;
        };
        const auto want = split(*text);
        const auto got = split(to_csv(t->second));
        // Rows are named by their key, the table's `rows` columns (the first cells), never by a line number.
        const auto def = std::find_if(e.tables.begin(), e.tables.end(), [&](const TableDef& d) { return d.name == x.table; });
        const std::size_t keys = def == e.tables.end() ? 1 : std::max<std::size_t>(def->rows.size(), 1);
        auto key_of = [&](const std::vector<std::string>& header, const std::vector<std::string>& r) {
          std::string k;
          for (std::size_t c = 0; c < keys && c < r.size(); ++c)
            k += (c ? ", " : "") + (c < header.size() ? header[c] : "?") + "=" + r[c];
          return k;
        };
        if (want.empty() || got.empty() || want[0] != got[0]) {
          auto joined = [](const std::vector<std::vector<std::string>>& rows) {
            std::string h;
            if (!rows.empty())
              for (const auto& c : rows[0]) h += (h.empty() ? "" : ", ") + c;
            return h;
          };
          fail("columns differ: table (" + joined(got) + "), golden (" + joined(want) + ")");
        } else {
          std::map<std::string, std::size_t> golden_rows;
          for (std::size_t i = 1; i < want.size(); ++i) golden_rows.emplace(key_of(want[0], want[i]), i);
          std::set<std::string> matched;
          for (std::size_t i = 1; i < got.size(); ++i) {
            const std::string key = key_of(got[0], got[i]);
            auto g = golden_rows.find(key);
            if (g == golden_rows.end()) {
              fail("row " + key + ": not in the golden file");
              continue;
            }
            matched.insert(key);
            const auto& w = want[g->second];
            if (w.size() != got[i].size()) {
              fail("row " + key + ": " + std::to_string(got[i].size()) + " cells, golden " + std::to_string(w.size()));
              continue;
            }
            for (std::size_t c = keys; c < w.size(); ++c) {
              ++o.rows_checked;
              if (w[c] == got[i][c]) continue;
              char* e1 = nullptr; char* e2 = nullptr;
              const double a = std::strtod(w[c].c_str(), &e1), b = std::strtod(got[i][c].c_str(), &e2);
              const bool nums = !w[c].empty() && !got[i][c].empty() && *e1 == 0 && *e2 == 0;
              if (!nums || !(std::fabs(a - b) <= x.tolerance))
                fail("row " + key + ", column '" + got[0][c] + "': " + got[i][c] + ", golden " + w[c]);
            }
          }
          for (const auto& [key, i] : golden_rows)
            if (!matched.count(key)) fail("row " + key + ": in the golden file, not in the table");
        }
      }
      o.passed = o.failures.empty();
      out.push_back(std::move(o));
      continue;
    }
    auto rows = select(e, x.line, "expect '" + x.name + "'", x.from, x.where, results);
    if (!rows) {
      fail(rows.error().message);
      out.push_back(std::move(o));
      continue;
    }
    if (rows->empty()) {
      // Name what there is: the values each where-column takes in the set.
      std::string have;
      const auto& set = results.at(x.from);
      for (std::size_t i = 0; i < x.where.size(); ++i) {
        const std::string& col = x.where[i].first;
        if (std::any_of(x.where.begin(), x.where.begin() + static_cast<std::ptrdiff_t>(i), [&](const auto& w) { return w.first == col; }))
          continue;
        std::vector<std::string> values;
        for (const Row& r : set)
          if (const Cell* c = r.find(col); c && std::find(values.begin(), values.end(), cell_text(*c)) == values.end()) values.push_back(cell_text(*c));
        std::string list;
        for (std::size_t k = 0; k < values.size() && k < 12; ++k) list += (k ? ", " : "") + values[k];
        if (values.size() > 12) list += ", ... (" + std::to_string(values.size()) + " values)";
        have += "; " + col + " holds " + (list.empty() ? "nothing" : list);
      }
      fail("selects no result rows" + (set.empty() ? std::string(" (set '" + x.from + "' is empty)") : have));
    }
    for (const Row* r : *rows) {
      std::string who;
      for (const auto& [k, v] : r->cells) {
        if (k == x.metric) break;
        if (k == "format" || k == "a" || k == "b" || k == "input" || k == "layer" || k == "block" || k == "gap" ||
            k == "profile" || k == "scale-rule" || k == "round")
          who += (who.empty() ? "" : ", ") + k + "=" + cell_text(v);
      }
      auto v = number(r->find(x.metric));
      if (!v) {
        fail(who + ": no number in column '" + x.metric + "'");
        continue;
      }
      ++o.rows_checked;
      const std::string got = x.metric + " = " + cell_text(*v);
      if (x.at_most && !(*v <= *x.at_most + x.tolerance)) fail(who + ": " + got + " > " + cell_text(*x.at_most));
      if (x.at_least && !(*v >= *x.at_least - x.tolerance)) fail(who + ": " + got + " < " + cell_text(*x.at_least));
      if (x.equals && !(std::fabs(*v - *x.equals) <= x.tolerance))
        fail(who + ": " + got + ", expected " + cell_text(*x.equals) + (x.tolerance > 0 ? " +- " + cell_text(x.tolerance) : ""));
      if (!x.at_most_column.empty()) {
        auto bound = number(r->find(x.at_most_column));
        if (!bound) { --o.rows_checked; continue; }  // no bound defined for this row's format
        if (!(*v <= *bound + x.tolerance)) fail(who + ": " + got + " > " + x.at_most_column + " = " + cell_text(*bound));
      }
    }
    if (o.rows_checked == 0 && o.failures.empty()) fail("no selected row has a value to check");
    o.passed = o.failures.empty();
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace mxlab::experiment
