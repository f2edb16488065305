// Terminal tables: column choice, engineering notation and fitting to the terminal's width.
#include "cli/terminal_table.hpp"

#include <sys/ioctl.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace mxlab::cli {
namespace {

bool is_integer(const std::string& s) {
  const std::size_t start = !s.empty() && s[0] == '-' ? 1 : 0;
  return s.size() > start && s.find_first_not_of("0123456789", start) == std::string::npos;
}

/// A finite decimal number written in full ("0.25", "-1.5e-07"); not "inf", "nan", hex or partial text.
bool parse_number(const std::string& s, double* out) {
  const std::size_t start = !s.empty() && s[0] == '-' ? 1 : 0;
  if (s.size() <= start || !(std::isdigit(static_cast<unsigned char>(s[start])) || s[start] == '.')) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, std::chars_format::general);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(*out);
}

/// Where a name breaks onto two lines: after the underscore that makes the longer line shortest (0: no break).
std::size_t header_break(const std::string& name) {
  std::size_t best = 0, best_width = name.size();
  for (std::size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] != '_') continue;
    const std::size_t w = std::max(i + 1, name.size() - i - 1);
    if (w < best_width) best = i + 1, best_width = w;
  }
  return best;
}

struct Layout {
  std::vector<std::string> top, bottom;  ///< header lines (top empty for one-line names)
  std::vector<std::size_t> width;
  std::size_t total(std::size_t columns) const {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < columns; ++i) sum += width[i] + (i ? 2 : 0);
    return sum;
  }
};

}  // namespace

std::string engineering(double x, int digits) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0" : "0";
  digits = std::clamp(digits, 1, 17);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", digits - 1, std::fabs(x));  // d.ddde±XX, rounded to `digits`
  std::string mantissa;
  const char* p = buf;
  for (; *p != 0 && *p != 'e'; ++p)
    if (std::isdigit(static_cast<unsigned char>(*p))) mantissa += *p;
  const int exponent = std::atoi(p + 1);
  const int exponent3 = exponent >= 0 ? exponent / 3 * 3 : -((2 - exponent) / 3) * 3;
  const auto lead = static_cast<std::size_t>(exponent - exponent3 + 1);  // digits before the point: 1..3
  if (mantissa.size() < lead) mantissa.append(lead - mantissa.size(), '0');
  std::string out = (x < 0 ? "-" : "") + mantissa.substr(0, lead);
  if (mantissa.size() > lead) out += "." + mantissa.substr(lead);
  if (exponent3 != 0) out += "e" + std::to_string(exponent3);
  return out;
}

Result<std::vector<std::size_t>> parse_columns(const std::string& list, const Table& table) {
  std::vector<std::size_t> chosen;
  if (list == "all") {
    for (std::size_t i = 0; i < table.columns.size(); ++i) chosen.push_back(i);
    return chosen;
  }
  std::string valid;
  for (const auto& c : table.columns) valid += (valid.empty() ? "" : ", ") + c;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t end = std::min(list.find(',', pos), list.size());
    const std::string name = list.substr(pos, end - pos);
    const auto it = std::find(table.columns.begin(), table.columns.end(), name);
    if (it == table.columns.end())
      return make_error("option '--columns " + list +
                        "': " + (name.empty() ? std::string("an empty column name") : "unknown column '" + name + "'") +
                        " (columns: " + valid + ", or all)");
    chosen.push_back(static_cast<std::size_t>(it - table.columns.begin()));
    pos = end + 1;
  }
  return chosen;
}

std::vector<std::size_t> present_columns(const std::vector<std::string>& names, const Table& table) {
  std::vector<std::size_t> chosen;
  if (names.empty()) {
    for (std::size_t i = 0; i < table.columns.size(); ++i) chosen.push_back(i);
    return chosen;
  }
  for (const auto& n : names) {
    const auto it = std::find(table.columns.begin(), table.columns.end(), n);
    if (it != table.columns.end()) chosen.push_back(static_cast<std::size_t>(it - table.columns.begin()));
  }
  return chosen;
}

Table select_columns(const Table& table, const std::vector<std::size_t>& columns) {
  Table out;
  for (std::size_t c : columns) out.add_column(table.columns[c], c < table.numeric.size() && table.numeric[c]);
  out.rows.reserve(table.rows.size());
  for (const auto& row : table.rows) {
    std::vector<std::string> r;
    r.reserve(columns.size());
    for (std::size_t c : columns) r.push_back(c < row.size() ? row[c] : std::string());
    out.rows.push_back(std::move(r));
  }
  return out;
}

std::size_t terminal_width(bool is_stdout) {
  if (const char* env = std::getenv("COLUMNS")) {
    std::size_t w = 0;
    const std::string s = env;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), w);
    if (ec == std::errc() && p == s.data() + s.size() && w > 0) return w;
  }
  winsize ws{};
  if (is_stdout && ::isatty(STDOUT_FILENO) != 0 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return kDefaultTerminalWidth;
}

TerminalText terminal_table(const Table& table, std::size_t width, int digits) {
  const std::size_t n = table.columns.size();
  auto numeric = [&](std::size_t c) { return c < table.numeric.size() && table.numeric[c]; };
  std::vector<std::vector<std::string>> rows = table.rows;
  for (auto& r : rows) r.resize(n);
  for (std::size_t c = 0; c < n; ++c) {
    if (!numeric(c)) continue;
    bool integers = true;
    double v = 0;
    for (const auto& r : rows) integers = integers && (!parse_number(r[c], &v) || is_integer(r[c]));
    if (integers) continue;  // counts, codes, sizes: as they are
    for (auto& r : rows)
      if (parse_number(r[c], &v)) r[c] = engineering(v, digits);
  }
  std::vector<std::size_t> cell_width(n, 0);
  for (const auto& r : rows)
    for (std::size_t c = 0; c < n; ++c) cell_width[c] = std::max(cell_width[c], r[c].size());

  auto layout = [&](bool wrap) {
    Layout l;
    for (std::size_t c = 0; c < n; ++c) {
      const std::string& name = table.columns[c];
      const std::size_t at = wrap && name.size() > cell_width[c] ? header_break(name) : 0;
      l.top.push_back(at ? name.substr(0, at) : std::string());
      l.bottom.push_back(at ? name.substr(at) : name);
      l.width.push_back(std::max({cell_width[c], l.top.back().size(), l.bottom.back().size()}));
    }
    return l;
  };
  Layout l = layout(false);
  std::size_t keep = n;
  if (width > 0 && l.total(n) > width) {
    l = layout(true);
    while (keep > 1 && l.total(keep) > width) --keep;
  }

  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < keep; ++c) {
      const std::size_t pad = l.width[c] - std::min(l.width[c], cells[c].size());
      if (c) out += "  ";
      if (numeric(c)) out += std::string(pad, ' ');
      out += cells[c];
      if (!numeric(c)) out += std::string(pad, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  TerminalText result;
  if (std::any_of(l.top.begin(), l.top.begin() + static_cast<std::ptrdiff_t>(keep),
                  [](const auto& s) { return !s.empty(); }))
    result.text += line(l.top);
  result.text += line(l.bottom);
  for (const auto& r : rows) result.text += line(r);
  result.left_out.assign(table.columns.begin() + static_cast<std::ptrdiff_t>(keep), table.columns.end());
  return result;
}

}  // namespace mxlab::cli
