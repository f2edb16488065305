// The mxlab command-line tool as a library: every command runs in-process with its own streams.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "mxlab/core/provenance.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab::cli {

/// Exit codes: 0 success, 2 bad input (format string, option, value, file), 1 internal failure.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

/// Streams of one invocation.
struct Io {
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
};

/// Runs `mxlab ARGS...` (argv[0] is the program name).
int run(const std::vector<std::string>& argv, Io io);

/// Reports a bad-input error as one line "mxlab COMMAND: message" and returns kExitBadInput.
int bad_input(Io io, const std::string& command, const std::string& message);

/// Options every table-printing command accepts.
std::vector<OptionSpec> table_output_options();

/// Writes a table in the format chosen by --csv/--json/--md (text otherwise) to stdout or --out FILE
/// (atomically; CSV and Markdown files get a provenance comment line). Returns an exit code.
int emit_table(Io io, const std::string& command, const Args& args, const Table& table, Provenance provenance);

// Commands.
int cmd_formats(const std::vector<std::string>& argv, Io io);
int cmd_codepoints(const std::vector<std::string>& argv, Io io);
int cmd_cast(const std::vector<std::string>& argv, Io io);
int cmd_golden(const std::vector<std::string>& argv, Io io);
int cmd_quantize(const std::vector<std::string>& argv, Io io);
int cmd_analyze(const std::vector<std::string>& argv, Io io);
int cmd_bounds(const std::vector<std::string>& argv, Io io);
int cmd_dequantize(const std::vector<std::string>& argv, Io io);
int cmd_verify_cast(const std::vector<std::string>& argv, Io io);
int cmd_bench(const std::vector<std::string>& argv, Io io);
int cmd_data(const std::vector<std::string>& argv, Io io);
int cmd_train(const std::vector<std::string>& argv, Io io);

/// FORMAT where an element format is expected (cast, codepoints): a format string, or the name of a block
/// format (mxfp4, nvfp4, mxint8, ...), which stands for its element format with a note on standard error.
Result<Format> element_format_arg(const std::string& text, Io io, const std::string& command);

/// The code point table of a format (codes first..last), as written by `codepoints` and `golden`.
Table codepoint_table(const Format& f, std::uint64_t first, std::uint64_t last);

/// A code in hexadecimal with as many digits as its bits need ("0x7E").
std::string hex_code(std::uint32_t code, int bits);

/// v with a fixed number of digits after the point (timings, rates).
std::string fixed_digits(double v, int digits);

/// First line of every golden file.
std::string golden_header_line();

}  // namespace mxlab::cli
