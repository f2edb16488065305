// Parsing CSV files of numbers with strict, locale-independent number validation.
#include "mxlab/io/csv.hpp"

#include <locale.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "input_file.hpp"
#include "mxlab/core/quote.hpp"

namespace mxlab {
namespace {

// strtod_l with the C locale: a Qt application calls setlocale(LC_ALL, "") at start-up, after which
// plain strtod would expect "1,5" in a German locale.
locale_t c_locale() {
  static const locale_t loc = ::newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  return loc;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

class CsvParser {
 public:
  CsvParser(std::string_view name, const CsvOptions& options) : name_(name), options_(options) {}

  Result<Tensor> parse(std::string_view text) {
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    std::size_t line_no = 0;
    try {
      while (!text.empty()) {
        ++line_no;
        const auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        if (auto e = parse_line(line, line_no)) return *e;
      }
    } catch (const std::bad_alloc&) {
      return fail("not enough memory for the values");
    }
    if (values_.empty()) return fail("holds no numbers");
    std::vector<std::int64_t> shape;
    if (options_.layout == CsvLayout::Table)
      shape = {static_cast<std::int64_t>(rows_), static_cast<std::int64_t>(columns_)};
    else
      shape = {static_cast<std::int64_t>(values_.size())};
    auto t = Tensor::from_f64(std::move(shape), std::move(values_));
    if (!t) return fail(t.error().message);
    return t;
  }

 private:
  Error fail(const std::string& problem) const { return make_error("csv '" + name_ + "': " + problem); }
  Error fail_at(std::size_t line_no, const std::string& problem) const {
    return make_error("csv '" + name_ + "' line " + std::to_string(line_no) + ": " + problem);
  }

  std::optional<Error> parse_line(std::string_view line, std::size_t line_no) {
    // '#' opens a comment where a field could start; inside a token ("1.#INF", "2#x") it is part of the token.
    for (std::size_t h = line.find('#'); h != std::string_view::npos; h = line.find('#', h + 1)) {
      if (h == 0 || is_space(line[h - 1]) || line[h - 1] == ',') {
        line = line.substr(0, h);
        break;
      }
    }
    std::size_t count = 0;
    bool after_comma = false;
    std::size_t i = 0;
    for (;;) {
      while (i < line.size() && is_space(line[i])) ++i;
      if (i == line.size()) {
        if (after_comma) return fail_at(line_no, "empty field after the last comma");
        break;
      }
      if (line[i] == ',') {
        if (count == 0) return fail_at(line_no, "empty field before the first comma");
        if (after_comma) return fail_at(line_no, "empty field after value " + std::to_string(count));
        after_comma = true;
        ++i;
        continue;
      }
      const std::size_t start = i;
      while (i < line.size() && line[i] != ',' && !is_space(line[i])) ++i;
      const std::string token(line.substr(start, i - start));
      ++count;
      char* end = nullptr;
      errno = 0;
      const double v = ::strtod_l(token.c_str(), &end, c_locale());
      if (end != token.c_str() + token.size())
        return fail_at(line_no, "value " + std::to_string(count) + " " + quote_input(token) + " is not a number");
      if (errno == ERANGE && std::isinf(v))
        return fail_at(line_no, "value " + std::to_string(count) + " " + quote_input(token) + " is beyond the double range");
      values_.push_back(v);
      after_comma = false;
    }
    if (count == 0 || options_.layout != CsvLayout::Table) return std::nullopt;
    if (rows_ == 0) {
      columns_ = count;
      first_row_line_ = line_no;
    } else if (count != columns_) {
      return fail_at(line_no, std::to_string(count) + " values, but line " + std::to_string(first_row_line_) + " has " +
                                  std::to_string(columns_) + " (a table needs the same count on every line)");
    }
    ++rows_;
    return std::nullopt;
  }

  std::string name_;
  CsvOptions options_;
  std::vector<double> values_;
  std::size_t rows_ = 0;
  std::size_t columns_ = 0;
  std::size_t first_row_line_ = 0;
};

}  // namespace

Result<Tensor> read_csv(const std::string& path, const CsvOptions& options) {
  auto in = io_detail::InputFile::open(path, "csv");
  if (!in) return in.error();
  auto text = in->read_rest();
  if (!text) return text.error();
  return CsvParser(path, options).parse(*text);
}

Result<Tensor> parse_csv(std::string_view text, std::string_view name, const CsvOptions& options) {
  return CsvParser(name, options).parse(text);
}

}  // namespace mxlab
