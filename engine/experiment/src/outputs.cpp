// Tables, figures and expectations built from experiment results.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
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

bool matches(const Row& r, const Pairs& where) {
  for (const auto& [k, v] : where) {
    const Cell* c = r.find(k);
    if (!c || cell_text(*c) != v) return false;
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
  std::vector<bool> all_numbers(t.columns.size(), true);
  for (const Row& r : rows) {
    std::vector<std::string> cells(t.columns.size());
    for (const auto& [k, v] : r.cells) {
      cells[index[k]] = cell_text(v);
      if (!std::holds_alternative<double>(v)) all_numbers[index[k]] = false;
    }
    t.rows.push_back(std::move(cells));
  }
  t.numeric = all_numbers;
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
  for (std::size_t p = 0; p < pivots.size(); ++p)
    for (const auto& v : def.values) {
      std::string name = def.pivot.empty() ? v : def.values.size() == 1 ? pivots[p] : v + " " + pivots[p];
      t.add_column(name, true);
    }
  for (std::size_t k = 0; k < keys.size(); ++k) {
    std::vector<std::string> row = keys[k];
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
          row.push_back(std::holds_alternative<double>(got[0]) ? format_number(std::get<double>(got[0]), def.digits)
                                                                : std::get<std::string>(got[0]));
          continue;
        }
        std::vector<double> nums;
        for (const Cell& c : got)
          if (const double* d = std::get_if<double>(&c)) nums.push_back(*d);
        if (nums.size() != got.size() && def.aggregate != "count")
          return make_error(at(e, def.line, what + ": aggregate " + def.aggregate + " of the text column '" + def.values[v] + "'"));
        row.push_back(format_number(aggregate(nums, def.aggregate), def.digits));
      }
    t.rows.push_back(std::move(row));
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
  return t;
}

Result<Figure> build_figure(const Experiment& e, const PlotDef& def, const AllResults& results) {
  const std::string what = "plot '" + def.name + "'";
  auto rows = select(e, def.line, what, def.from, def.where, results);
  if (!rows) return rows.error();
  for (const auto* c : {&def.x, &def.y, &def.series, &def.value})
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

  if (f.kind == PlotKind::Heatmap) {
    Heatmap& h = f.heatmap;
    h.x_labels = distinct(*rows, def.x);
    h.y_labels = distinct(*rows, def.y);
    h.values.assign(h.x_labels.size() * h.y_labels.size(), std::nan(""));
    h.value_label = def.value;
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
    return f;
  }

  // x as numbers, or as categories when any x is text (bars always use categories).
  bool categorical = f.kind == PlotKind::Bar;
  for (const Row* r : *rows) categorical |= r->find(def.x) && !number(r->find(def.x));
  if (categorical) f.categories = distinct(*rows, def.x);
  bool y_categorical = false;
  for (const Row* r : *rows) y_categorical |= r->find(def.y) && !number(r->find(def.y));
  if (y_categorical) {
    f.y.tick_labels = distinct(*rows, def.y);
    f.y.scale = AxisScale::Linear;
  }
  if (categorical && f.kind != PlotKind::Bar) f.x.tick_labels = f.categories;
  const std::vector<std::string> names = def.series.empty() ? std::vector<std::string>{""} : distinct(*rows, def.series);
  std::map<std::string, std::map<std::size_t, std::vector<double>>> stacks;  // series -> point -> every y there
  for (const auto& name : names) {
    Series s;
    s.name = name.empty() && def.series.empty() ? def.y : name;
    for (const Row* r : *rows) {
      if (!def.series.empty() && (!r->find(def.series) || cell_text(*r->find(def.series)) != name)) continue;
      const Cell* xc = r->find(def.x);
      const Cell* yc = r->find(def.y);
      if (!xc || !yc) continue;
      const double x = categorical ? static_cast<double>(std::find(f.categories.begin(), f.categories.end(), cell_text(*xc)) -
                                                         f.categories.begin())
                                   : *number(xc);
      const auto at = std::find(s.x.begin(), s.x.end(), x);
      if (at != s.x.end() && !y_categorical) {
        // Several results at this x: gathered, then aggregated below.
        stacks[name][static_cast<std::size_t>(at - s.x.begin())].push_back(number(yc).value_or(std::nan("")));
        continue;
      }
      if (!y_categorical) stacks[name][s.x.size()].push_back(number(yc).value_or(std::nan("")));
      s.x.push_back(x);
      s.y.push_back(y_categorical ? static_cast<double>(std::find(f.y.tick_labels.begin(), f.y.tick_labels.end(), cell_text(*yc)) -
                                                         f.y.tick_labels.begin())
                                  : number(yc).value_or(std::nan("")));
    }
    const std::string how = def.aggregate.empty() && f.kind == PlotKind::Histogram ? "sum" : def.aggregate;
    for (const auto& [i, ys] : stacks[name]) {
      if (ys.size() > 1 && how.empty())
        return make_error(at(e, def.line, what + ": " + std::to_string(ys.size()) + " results at " + def.x + " = " + cell_text(s.x[i]) +
                                             (def.series.empty() ? "" : " of " + def.series + " = " + name) +
                                             "; narrow them with where = {...}, plot them as series, or aggregate = \"max\""));
      if (ys.size() > 1 || how == "count") s.y[i] = aggregate(ys, how);
    }
    if (f.kind == PlotKind::Histogram) {
      std::vector<double> xs = s.x;
      std::sort(xs.begin(), xs.end());
      double w = 0;
      for (std::size_t i = 1; i < xs.size(); ++i)
        if (xs[i] > xs[i - 1] && (w == 0 || xs[i] - xs[i - 1] < w)) w = xs[i] - xs[i - 1];
      s.bin_width = w > 0 ? w : 1;
    }
    f.series.push_back(std::move(s));
  }
  if (categorical && f.kind != PlotKind::Bar) f.x.scale = AxisScale::Linear;
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
      std::istringstream is(cell_text(*c));
      std::string word;
      while (is >> word) {
        char* end = nullptr;
        const double v = std::strtod(word.c_str(), &end);
        if (end != word.c_str() && *end == 0 && std::isfinite(v) &&
            std::none_of(f.markers.begin(), f.markers.end(), [&](const Marker& m) { return m.x == v; }))
          f.markers.push_back(Marker{v, def.marker_label.empty() ? column : def.marker_label});
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
      else if (!text) fail(printable(text.error().message));
      else {
        // Compare cell by cell: text equal, numbers within the tolerance.
        auto split = [](const std::string& text) {
          std::vector<std::vector<std::string>> rows;
          std::istringstream is(text);
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
        if (want.size() != got.size()) fail("table has " + std::to_string(got.size()) + " lines, golden " + std::to_string(want.size()));
        for (std::size_t i = 0; i < std::min(want.size(), got.size()); ++i) {
          if (want[i].size() != got[i].size()) { fail("line " + std::to_string(i + 1) + ": different number of cells"); continue; }
          for (std::size_t c = 0; c < want[i].size(); ++c) {
            ++o.rows_checked;
            if (want[i][c] == got[i][c]) continue;
            char* e1 = nullptr; char* e2 = nullptr;
            const double a = std::strtod(want[i][c].c_str(), &e1), b = std::strtod(got[i][c].c_str(), &e2);
            const bool nums = !want[i][c].empty() && !got[i][c].empty() && *e1 == 0 && *e2 == 0;
            if (!nums || !(std::fabs(a - b) <= x.tolerance))
              fail("line " + std::to_string(i + 1) + ", column '" + (c < got[0].size() ? got[0][c] : "") + "': " + got[i][c] +
                   ", golden " + want[i][c]);
          }
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
    if (rows->empty()) fail("selects no result rows");
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
