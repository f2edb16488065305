// The mxlab command-line tool as a library: every command runs in-process with its own streams.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "mxlab/core/atomic_file.hpp"
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

/// How a command's table appears on a terminal (text on standard output).
struct TerminalView {
  /// The compact default set, in order (names the table lacks are skipped; empty: every column).
  std::vector<std::string> columns;
  std::string heading;               ///< a line printed above the table
};

/// A paragraph for --help: the columns a terminal shows by default, one line per (when, columns) set ("" for the
/// default, else the option or subcommand that shows that set; no columns: every column), and how --columns
/// chooses others.
std::string terminal_columns_help(const std::vector<std::pair<std::string, std::vector<std::string>>>& sets);

/// The SIMD target of an engine name for provenance: "simd:AVX2" gives "AVX2", anything else (the scalar
/// reference, with or without its reason) "reference".
std::string simd_target_of(const std::string& engine);

/// Writes a table in the format chosen by --csv/--json/--md (text otherwise) to stdout or --out FILE
/// (atomically; a CSV file gets its provenance beside it, FILE.provenance.json, a Markdown file a provenance
/// line). --columns chooses the columns of every format. Files and --csv/--json/--md have every column (unless
/// --columns) at full precision; text on standard output shows the view's columns in engineering notation,
/// fitted to the terminal's width (terminal_table.hpp), and says on standard error which columns it left out.
/// Returns an exit code.
/// The table options' problems that need no results: several of --csv/--json/--md, a --columns name the table
/// (here: its header) lacks, an --out path that names no regular file. Commands that compute for long check
/// them first.
std::optional<Error> check_table_options(const Args& args, const Table& header);

int emit_table(Io io, const std::string& command, const Args& args, const Table& table, Provenance provenance,
               const TerminalView& view = {});

/// A CSV table written row by row as its rows are made (to --out atomically, or standard output), with the
/// columns --columns selects, byte for byte what emit_table writes for the same rows; memory stays that of a
/// few thousand rows however many there are. Rows are added to `header`'s columns.
class CsvStream {
 public:
  /// Checks the options and opens --out; the error is the message for bad_input.
  static Result<CsvStream> open(Io io, const Args& args, const Table& header);
  /// Adds a row; false once writing has failed (finish() then says why).
  bool add(std::vector<std::string> row);
  /// Writes what is left and, for --out, the provenance beside the file, then renames it into place.
  std::optional<Error> finish(const Provenance& provenance);
  /// Leaves no file behind (standard output keeps what was written).
  void discard() {
    if (file_) file_->discard();
  }

 private:
  CsvStream(Io io, Table header) : io_(io), pending_(std::move(header)) {}
  bool flush();

  Io io_;
  std::optional<AtomicFile> file_;
  std::string out_path_;
  std::vector<std::size_t> columns_;
  Table pending_;  ///< the header's columns and the rows not yet written
  bool wrote_header_ = false;
  bool ok_ = true;
};

// Commands.
int cmd_formats(const std::vector<std::string>& argv, Io io);
int cmd_codepoints(const std::vector<std::string>& argv, Io io);
int cmd_cast(const std::vector<std::string>& argv, Io io);
int cmd_golden(const std::vector<std::string>& argv, Io io);
int cmd_quantize(const std::vector<std::string>& argv, Io io);
int cmd_analyze(const std::vector<std::string>& argv, Io io);
int cmd_gemm(const std::vector<std::string>& argv, Io io);
int cmd_bounds(const std::vector<std::string>& argv, Io io);
int cmd_dequantize(const std::vector<std::string>& argv, Io io);
int cmd_verify_cast(const std::vector<std::string>& argv, Io io);
int cmd_bench(const std::vector<std::string>& argv, Io io);
int cmd_data(const std::vector<std::string>& argv, Io io);
int cmd_run(const std::vector<std::string>& argv, Io io);
int cmd_check(const std::vector<std::string>& argv, Io io);
int cmd_merge(const std::vector<std::string>& argv, Io io);
int cmd_render(const std::vector<std::string>& argv, Io io);
int cmd_train(const std::vector<std::string>& argv, Io io);
int cmd_direct_cast(const std::vector<std::string>& argv, Io io);
int cmd_gradients(const std::vector<std::string>& argv, Io io);

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
