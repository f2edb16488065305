// Table writers and atomic file output.
#include "mxlab/core/table.hpp"

#include "mxlab/core/atomic_file.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cctype>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace mxlab {

std::size_t Table::add_column(std::string name, bool is_numeric) {
  columns.push_back(std::move(name));
  numeric.resize(columns.size() - 1, false);
  numeric.push_back(is_numeric);
  return columns.size() - 1;
}

Result<TableFormat> parse_table_format(std::string_view text) {
  if (text == "text") return TableFormat::Text;
  if (text == "csv") return TableFormat::Csv;
  if (text == "json") return TableFormat::Json;
  if (text == "md" || text == "markdown") return TableFormat::Markdown;
  return make_error("unknown table format '" + std::string(text) + "' (expected text, csv, json or md)");
}

namespace {

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

/// True when s is a JSON number literal.
bool is_json_number(const std::string& s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  if (i < n && s[i] == '-') ++i;
  if (i >= n) return false;
  if (s[i] == '0') {
    ++i;
  } else if (s[i] >= '1' && s[i] <= '9') {
    while (i < n && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  } else {
    return false;
  }
  if (i < n && s[i] == '.') {
    ++i;
    if (i >= n || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    while (i < n && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (i >= n || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    while (i < n && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  }
  return i == n && n <= 40;  // long exact decimals stay strings so no reader rounds them silently
}

}  // namespace

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string to_csv(const Table& t, const std::vector<std::string>& comments) {
  std::string out;
  for (const auto& c : comments) out += "# " + c + "\n";
  for (std::size_t i = 0; i < t.columns.size(); ++i) out += (i ? "," : "") + csv_cell(t.columns[i]);
  out += "\n";
  for (const auto& row : t.rows) {
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + csv_cell(row[i]);
    out += "\n";
  }
  return out;
}

std::string provenance_json(const Provenance& p) {
  std::string out = "{\"version\": " + json_quote(p.version) + ", \"commit\": " + json_quote(p.commit) +
                    ", \"compiler\": " + json_quote(p.compiler) + ", \"build_type\": " + json_quote(p.build_type) +
                    ", \"simd_target\": " + json_quote(p.simd_target) + ", \"inputs\": {";
  for (std::size_t i = 0; i < p.inputs.size(); ++i)
    out += (i ? ", " : "") + json_quote(p.inputs[i].first) + ": " + json_quote(p.inputs[i].second);
  return out + "}}";
}

std::string to_json(const Table& t, const Provenance* p) {
  std::string out = "{";
  if (p) {
    out += "\n  \"provenance\": " + provenance_json(*p) + ",";
  }
  out += "\n  \"columns\": [";
  for (std::size_t i = 0; i < t.columns.size(); ++i) out += (i ? ", " : "") + json_quote(t.columns[i]);
  out += "],\n  \"rows\": [";
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    out += r ? ",\n    {" : "\n    {";
    const auto& row = t.rows[r];
    for (std::size_t i = 0; i < row.size() && i < t.columns.size(); ++i) {
      out += (i ? ", " : "") + json_quote(t.columns[i]) + ": ";
      const bool num = i < t.numeric.size() && t.numeric[i] && is_json_number(row[i]);
      out += num ? row[i] : json_quote(row[i]);
    }
    out += "}";
  }
  out += t.rows.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::string to_markdown(const Table& t, const std::vector<std::string>& comments) {
  std::string out;
  for (const auto& c : comments) out += c + "\n\n";
  auto cell = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '|') o += '\\';
      o += c;
    }
    return o;
  };
  out += "|";
  for (const auto& c : t.columns) out += " " + cell(c) + " |";
  out += "\n|";
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    out += (i < t.numeric.size() && t.numeric[i]) ? "---:|" : "---|";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "|";
    for (const auto& c : row) out += " " + cell(c) + " |";
    out += "\n";
  }
  return out;
}

std::string latex_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': case '%': case '$': case '#': case '_': case '{': case '}': o += '\\'; o += c; break;
      case '~': o += "\\textasciitilde{}"; break;
      case '^': o += "\\textasciicircum{}"; break;
      case '\\': o += "\\textbackslash{}"; break;
      default: o += c;
    }
  }
  return o;
}

namespace {

/// "1.5e-05" -> "$1.5 \times 10^{-5}$"; other text escaped.
std::string latex_number(const std::string& s) {
  const auto e = s.find_first_of("eE");
  if (e == std::string::npos || e == 0 || s.find_first_not_of("0123456789.-+eE") != std::string::npos) return latex_escape(s);
  std::string mant = s.substr(0, e), ex = s.substr(e + 1);
  if (!ex.empty() && ex[0] == '+') ex.erase(0, 1);
  const bool neg = !ex.empty() && ex[0] == '-';
  std::size_t i = neg ? 1 : 0;
  while (i + 1 < ex.size() && ex[i] == '0') ++i;
  ex = (neg ? "-" : "") + ex.substr(i);
  return "$" + mant + " \\times 10^{" + ex + "}$";
}

}  // namespace

std::string to_latex(const Table& t, const std::string& caption) {
  std::string out;
  if (!caption.empty()) out += "% " + caption + "\n";
  out += "\\begin{tabular}{";
  for (std::size_t i = 0; i < t.columns.size(); ++i) out += (i < t.numeric.size() && t.numeric[i]) ? "r" : "l";
  out += "}\n\\toprule\n";
  for (std::size_t i = 0; i < t.columns.size(); ++i) out += (i ? " & " : "") + latex_escape(t.columns[i]);
  out += " \\\\\n\\midrule\n";
  for (const auto& row : t.rows) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool numeric = i < t.numeric.size() && t.numeric[i];
      out += (i ? " & " : "") + (numeric ? latex_number(row[i]) : latex_escape(row[i]));
    }
    out += " \\\\\n";
  }
  out += "\\bottomrule\n\\end{tabular}\n";
  return out;
}

std::string to_text(const Table& t) {
  std::vector<std::size_t> width(t.columns.size(), 0);
  for (std::size_t i = 0; i < t.columns.size(); ++i) width[i] = t.columns[i].size();
  for (const auto& row : t.rows)
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t i = 0; i < cells.size() && i < width.size(); ++i) {
      const bool right = i < t.numeric.size() && t.numeric[i];
      const std::size_t pad = width[i] - cells[i].size();
      if (i) out += "  ";
      if (right) out += std::string(pad, ' ');
      out += cells[i];
      if (!right && i + 1 < cells.size()) out += std::string(pad, ' ');
    }
    return out + "\n";
  };
  std::string out = line(t.columns);
  for (const auto& row : t.rows) out += line(row);
  return out;
}

std::optional<std::string> output_path_problem(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (path == "-") return "'-' (standard output) is not a file; this output needs a file name";
  if (base.empty() || base == "." || base == "..") return "the path names a directory, not a file";
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;  // a new file
  if (S_ISREG(st.st_mode)) return std::nullopt;
  if (S_ISDIR(st.st_mode)) return "is a directory";
  if (S_ISLNK(st.st_mode)) return "is a symbolic link; name the file itself (outputs replace only regular files)";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "is a device, not a regular file (outputs replace only regular files)";
  return "is not a regular file (a FIFO or socket); outputs replace only regular files";
}

std::optional<Error> write_file_atomic(const std::string& path, std::string_view content) {
  // A hidden temporary next to the target, removed on failure and on SIGINT/SIGTERM (core/atomic_file.hpp).
  auto w = write_file_atomic(path, content, "cannot write");
  if (!w) return w.error();
  return std::nullopt;
}

}  // namespace mxlab
