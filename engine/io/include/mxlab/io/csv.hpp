// CSV files of numbers: one or more per line, separated by commas and/or whitespace, '#' comments.
//
// Each value is read with strtod in the C locale (so "1.5" means 1.5 whatever LC_NUMERIC says) and
// becomes the double nearest to the decimal text (or exactly the hexadecimal text, e.g. "0x1.8p-3");
// "inf", "-inf" and "nan" are accepted. A value must be the whole field: "1.5x", "1,,2", a leading or
// trailing comma, and magnitudes beyond the double range ("1e400") are errors that name the line.
// Magnitudes below the smallest subnormal round to zero, as the nearest double does. Blank lines and
// everything from a '#' that starts a field (at the start of a line, after a space or a comma) to the end of
// the line is ignored ("1.#INF" and "2#x" are errors, not numbers); a UTF-8 byte order mark is skipped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"
#include "mxlab/io/tensor.hpp"

namespace mxlab {

/// How the numbers of a CSV file become a shape.
enum class CsvLayout : std::uint8_t {
  Flat,   ///< all numbers in file order, 1-D
  Table,  ///< one row per non-empty line, 2-D (rows, columns); every line must have the same count
};

/// Choices for reading CSV files.
struct CsvOptions {
  CsvLayout layout = CsvLayout::Flat;
};

/// Reads a CSV file of numbers as an F64 tensor (names ending in ".gz" are decompressed).
Result<Tensor> read_csv(const std::string& path, const CsvOptions& options = {});

/// Parses CSV text held in memory; `name` stands for the file name in messages.
Result<Tensor> parse_csv(std::string_view text, std::string_view name, const CsvOptions& options = {});

}  // namespace mxlab
