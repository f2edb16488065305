// Result tables on a terminal: a chosen set of columns, numbers in engineering notation with the same number
// of significant digits throughout a column, and as many columns as the terminal's width holds. Files and
// --csv/--json/--md output never pass through here: they keep every digit.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/core/table.hpp"

namespace mxlab::cli {

/// Significant digits of the numbers in terminal tables.
inline constexpr int kTerminalDigits = 4;

/// Width assumed when standard output is not a terminal and COLUMNS is not set.
inline constexpr std::size_t kDefaultTerminalWidth = 100;

/// x with `digits` significant digits and an exponent that is a multiple of 3, left out when it is 0:
/// "12.35e-6", "-1.500e3", "448.0", "0"; infinities and NaN as "inf", "-inf", "nan".
std::string engineering(double x, int digits);

/// The columns a --columns value names: names separated by commas, in the order given, or "all". An unknown
/// name is an error that lists every column of the table.
Result<std::vector<std::size_t>> parse_columns(const std::string& list, const Table& table);

/// The indices of `names` present in the table, in that order (every column when `names` is empty).
std::vector<std::size_t> present_columns(const std::vector<std::string>& names, const Table& table);

/// The table with only these columns, in this order.
Table select_columns(const Table& table, const std::vector<std::size_t>& columns);

/// The width of the terminal: the COLUMNS environment variable, else the window of standard output when
/// `is_stdout` and it is a terminal, else kDefaultTerminalWidth.
std::size_t terminal_width(bool is_stdout);

/// A table laid out for a terminal.
struct TerminalText {
  std::string text;
  std::vector<std::string> left_out;  ///< trailing columns that did not fit
};

/// Aligned text for a terminal. Numeric columns whose numbers are all integers stay as they are; the others are
/// written in engineering notation with `digits` significant digits (cells that are not numbers, such as "-"
/// or "nan", stay). With `width` > 0: column names are broken after an underscore onto a second header line
/// where that makes the table narrower, and trailing columns that still do not fit are left out (the first
/// column always stays).
TerminalText terminal_table(const Table& table, std::size_t width, int digits = kTerminalDigits);

}  // namespace mxlab::cli
