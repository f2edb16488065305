// Result tables and their writers (CSV, JSON, Markdown, aligned text), plus atomic file output.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/provenance.hpp"

namespace mxlab {

/// A table of text cells. Numeric columns are written unquoted in JSON where the cell is a JSON
/// number ("nan", "inf" and exact decimals that JSON cannot hold stay strings).
struct Table {
  std::vector<std::string> columns;
  std::vector<bool> numeric;  ///< per column; empty means all text
  std::vector<std::vector<std::string>> rows;

  /// Adds a column; returns its index.
  std::size_t add_column(std::string name, bool is_numeric = false);
};

enum class TableFormat { Text, Csv, Json, Markdown };

/// Parses "text", "csv", "json", "md"/"markdown".
Result<TableFormat> parse_table_format(std::string_view text);

/// CSV (RFC 4180 quoting) with a header row; `comments` become leading "# " lines.
std::string to_csv(const Table& t, const std::vector<std::string>& comments = {});
/// JSON: {"provenance": {...}, "columns": [...], "rows": [{col: value, ...}, ...]}; provenance optional.
std::string to_json(const Table& t, const Provenance* provenance = nullptr);
/// GitHub Markdown table; `comments` become leading lines.
std::string to_markdown(const Table& t, const std::vector<std::string>& comments = {});
/// LaTeX tabular with booktabs rules (\toprule, \midrule, \bottomrule); numeric columns right-aligned, numbers
/// in e-notation written as $m \times 10^{e}$, text escaped; a caption as a leading comment line.
std::string to_latex(const Table& t, const std::string& caption = "");
/// Text with LaTeX's special characters escaped (& % $ # _ { } ~ ^ \).
std::string latex_escape(const std::string& s);
/// Aligned plain text for terminals.
std::string to_text(const Table& t);

/// Why `path` cannot name an output file, or nothing. An output may only create or replace a regular file:
/// a directory, device, FIFO, socket or symbolic link at `path` is refused, never renamed over, and so is "-"
/// (a front end that can write to standard output handles "-" itself).
std::optional<std::string> output_path_problem(const std::string& path);

/// Writes `content` to `path` atomically: a temporary file in the same directory, then rename.
/// On failure nothing is left at `path` (an existing file is untouched) and an Error names the path.
std::optional<Error> write_file_atomic(const std::string& path, std::string_view content);

/// JSON string literal with escapes.
std::string json_quote(std::string_view s);

}  // namespace mxlab
