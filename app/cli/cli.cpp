// Command dispatch, help, and shared table output.
#include "cli/cli.hpp"
#include "cli/terminal_table.hpp"

#include "mxlab/formats/parse.hpp"
#include "mxlab/quantize/block_format.hpp"

#include <cctype>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace mxlab::cli {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>&, Io);
};

constexpr Command kCommands[] = {
    {"run", "run experiment files: sweeps, tables, plots, resumable (docs/experiments.md)", cmd_run},
    {"check", "run experiment files and check their expectations (exit 1 if any fails)", cmd_check},
    {"merge", "join the results folders of a sharded run", cmd_merge},
    {"render", "redraw the tables, plots and checks of a results folder from its stored results", cmd_render},
    {"train", "train a model with quantized GEMMs and report loss, accuracy and gradient underflow", cmd_train},
    {"direct-cast", "a trained model's accuracy with its weights (and activations) cast to each format", cmd_direct_cast},
    {"gradients", "each recipe's training gradient against FP32's and the batch noise, on a trained model", cmd_gradients},
    {"formats", "list every named format with its derived properties", cmd_formats},
    {"codepoints", "enumerate every code of a format with its exact value", cmd_codepoints},
    {"cast", "cast values to a format with explicit rounding, overflow and subnormal handling", cmd_cast},
    {"quantize", "quantize a tensor to a block format (fake-quant or packed .npy)", cmd_quantize},
    {"dequantize", "unpack the files of quantize --packed and write the exact values", cmd_dequantize},
    {"analyze", "exact error metrics of block formats on a tensor", cmd_analyze},
    {"gemm", "C = A B of block-quantized operands under accumulation models, against the exact product", cmd_gemm},
    {"bounds", "exact max error of two block formats at each exponent gap (analytic = enumerated)", cmd_bounds},
    {"verify-cast", "every float32 input through the SIMD cast and the scalar reference", cmd_verify_cast},
    {"bench", "throughput of the kernels against a memory copy and the scalar reference", cmd_bench},
    {"data", "list, fetch and inspect the packaged data sets and weight files (docs/data.md)", cmd_data},
    {"golden", "regenerate the golden code point tables (data/golden/codepoints)", cmd_golden},
};

std::string main_help() {
  std::string s =
      "mxlab: exact workbench for low-precision number formats\n\n"
      "usage: mxlab COMMAND [ARGS...]   (mxlab COMMAND --help for details)\n\ncommands:\n";
  for (const auto& c : kCommands) {
    std::string name = std::string("  ") + c.name;
    name += std::string(name.size() < 16 ? 16 - name.size() : 1, ' ');
    s += name + c.summary + "\n";
  }
  s += "\nexit codes: 0 success, 2 bad input (with one message naming it), 1 internal failure\n";
  return s;
}

}  // namespace

std::string fixed_digits(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

std::string hex_code(std::uint32_t code, int bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*X", (bits + 3) / 4, code);
  return buf;
}

Result<Format> element_format_arg(const std::string& text, Io io, const std::string& command) {
  std::string lowered = text;
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& name : block_format_names()) {
    if (lowered != name) continue;
    auto b = parse_block_format(name);
    if (!b) break;
    io.err << "mxlab " << command << ": note: '" << text << "' is a block format; using its element format "
           << b->element.name() << "\n";
    return b->element;
  }
  return parse_format(text);
}

int bad_input(Io io, const std::string& command, const std::string& message) {
  io.err << "mxlab " << command << ": " << message << "\n";
  return kExitBadInput;
}

std::string terminal_columns_help(const std::vector<std::pair<std::string, std::vector<std::string>>>& sets) {
  std::string out;
  for (const auto& [when, columns] : sets) {
    std::string line = "Terminal columns" + (when.empty() ? std::string() : " (" + when + ")") + ":";
    if (columns.empty()) line += " every column";
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const std::string word = " " + columns[i] + (i + 1 < columns.size() ? "," : "");
      if (line.size() + word.size() > 100) out += line + "\n", line = "   ";
      line += word;
    }
    out += line + "\n";
  }
  return out +
         "Numbers there have 4 significant digits in engineering notation; trailing columns that do not fit\n"
         "the width (COLUMNS, else the terminal's) are left out with a note. --columns A,B,... chooses the\n"
         "columns (--columns all: every one); --csv, --json, --md and --out files have every column at full\n"
         "precision.\n";
}

std::string simd_target_of(const std::string& engine) {
  return engine.rfind("simd:", 0) == 0 ? engine.substr(5) : std::string("reference");
}

std::vector<OptionSpec> table_output_options() {
  return {{"csv", false, "", "CSV with a header row"},
          {"json", false, "", "JSON (provenance, columns, rows)"},
          {"md", false, "", "Markdown table"},
          {"out", true, "FILE", "write to FILE (atomically) instead of standard output ('-': standard output)"},
          {"columns", true, "A,B,...", "only these columns, in this order, or all"}};
}

std::optional<Error> check_table_options(const Args& args, const Table& header) {
  const int chosen = int{args.flag("csv")} + int{args.flag("json")} + int{args.flag("md")};
  if (chosen > 1) return make_error("choose one of --csv, --json, --md");
  if (const auto columns = args.value("columns")) {
    auto c = parse_columns(*columns, header);
    if (!c) return c.error();
  }
  if (const auto out = args.value("out"); out && *out != "-") {
    if (auto problem = output_path_problem(*out)) return make_error("cannot write '" + *out + "': " + *problem);
  }
  return std::nullopt;
}

Result<CsvStream> CsvStream::open(Io io, const Args& args, const Table& header) {
  if (auto e = check_table_options(args, header)) return *e;
  CsvStream s(io, header);
  s.pending_.rows.clear();
  if (auto list = args.value("columns")) {
    auto c = parse_columns(*list, header);
    if (!c) return c.error();
    s.columns_ = std::move(*c);
  } else {
    s.columns_ = present_columns({}, header);
  }
  if (auto out = args.value("out"); out && *out != "-") {
    if (out->empty()) return make_error("option '--out' needs a file name");
    auto created = AtomicFile::create(*out, "csv");
    if (!created) return created.error();
    s.file_.emplace(std::move(*created));
    s.out_path_ = *out;
  }
  return s;
}

bool CsvStream::flush() {
  std::string text = to_csv(select_columns(pending_, columns_));
  if (wrote_header_) text.erase(0, text.find('\n') + 1);  // the header line once
  wrote_header_ = true;
  pending_.rows.clear();
  if (file_) return ok_ = ok_ && file_->write(text);
  io_.out << text;
  return ok_ = ok_ && static_cast<bool>(io_.out);
}

bool CsvStream::add(std::vector<std::string> row) {
  pending_.rows.push_back(std::move(row));
  return pending_.rows.size() < 4096 || flush();
}

std::optional<Error> CsvStream::finish(const Provenance& provenance) {
  if (!pending_.rows.empty() || !wrote_header_) flush();
  if (!file_) return ok_ ? std::nullopt : std::optional(make_error("cannot write to standard output"));
  if (!ok_) {
    auto failed = file_->commit();  // says why the writes failed, and removes the temporary file
    return failed ? make_error("cannot write '" + out_path_ + "'") : failed.error();
  }
  const std::string side = out_path_ + ".provenance.json";
  if (auto e = write_file_atomic(side, provenance_json(provenance) + "\n")) return e;
  auto done = file_->commit();
  if (!done) {
    std::remove(side.c_str());
    return done.error();
  }
  return std::nullopt;
}

int emit_table(Io io, const std::string& command, const Args& args, const Table& table, Provenance provenance,
               const TerminalView& view) {
  TableFormat fmt = TableFormat::Text;
  if (args.flag("csv")) fmt = TableFormat::Csv;
  if (args.flag("json")) fmt = TableFormat::Json;
  if (args.flag("md")) fmt = TableFormat::Markdown;
  if (auto e = check_table_options(args, table)) return bad_input(io, command, e->message);
  const auto out_path = args.value("out");
  const bool terminal = fmt == TableFormat::Text && !out_path;
  const auto columns_arg = args.value("columns");
  std::vector<std::size_t> columns;
  if (columns_arg) {
    auto c = parse_columns(*columns_arg, table);
    if (!c) return bad_input(io, command, c.error().message);
    columns = std::move(*c);
  } else {
    columns = present_columns(terminal ? view.columns : std::vector<std::string>{}, table);
  }
  const Table selected = select_columns(table, columns);
  if (terminal) {
    // Columns the user named are all shown; the default set gives up trailing columns the width cannot hold.
    const std::size_t width = terminal_width(&io.out == &std::cout);
    const TerminalText t = terminal_table(selected, columns_arg ? 0 : width);
    if (!view.heading.empty()) io.out << view.heading << "\n";
    io.out << t.text;
    if (!t.left_out.empty()) {
      std::string names;
      for (const auto& c : t.left_out) names += (names.empty() ? "" : ",") + c;
      io.err << "mxlab " << command << ": left out column" << (t.left_out.size() > 1 ? "s " : " ") << names
             << " to fit " << width << " characters (COLUMNS); --columns all or --csv shows every column\n";
    }
    return io.out ? kExitOk : kExitFailure;
  }
  // CSV files stay plain (every CSV reader reads them); their provenance goes beside them, FILE.provenance.json.
  const std::vector<std::string> comments =
      out_path && fmt == TableFormat::Markdown ? std::vector<std::string>{provenance_line(provenance)}
                                               : std::vector<std::string>{};
  std::string text;
  switch (fmt) {
    case TableFormat::Text: text = to_text(selected); break;
    case TableFormat::Csv: text = to_csv(selected, comments); break;
    case TableFormat::Json: text = to_json(selected, &provenance); break;
    case TableFormat::Markdown: text = to_markdown(selected, comments); break;
  }
  if (out_path && *out_path != "-") {  // "--out -" is standard output
    if (out_path->empty()) return bad_input(io, command, "option '--out' needs a file name");
    if (fmt == TableFormat::Csv) {
      const std::string side = *out_path + ".provenance.json";
      if (auto e = write_file_atomic(side, provenance_json(provenance) + "\n")) return bad_input(io, command, e->message);
      if (auto e = write_file_atomic(*out_path, text)) {
        std::remove(side.c_str());
        return bad_input(io, command, e->message);
      }
      return kExitOk;
    }
    if (auto e = write_file_atomic(*out_path, text)) return bad_input(io, command, e->message);
    return kExitOk;
  }
  io.out << text;
  return io.out ? kExitOk : kExitFailure;
}

int run(const std::vector<std::string>& argv, Io io) {
  if (argv.size() < 2 || argv[1] == "--help" || argv[1] == "-h" || argv[1] == "help") {
    if (argv.size() >= 3 && argv[1] == "help") {
      std::vector<std::string> sub = {argv[0], argv[2], "--help"};
      return run(sub, io);
    }
    (argv.size() < 2 ? io.err : io.out) << main_help();
    return argv.size() < 2 ? kExitBadInput : kExitOk;
  }
  if (argv[1] == "--version") {
    const Provenance p = build_provenance();
    io.out << "mxlab " << p.version << " (commit " << p.commit << ", " << p.compiler << ")\n";
    return kExitOk;
  }
  for (const auto& c : kCommands) {
    if (argv[1] == c.name) {
      std::vector<std::string> rest(argv.begin() + 1, argv.end());
      return c.run(rest, io);
    }
  }
  return bad_input(io, argv[1], "unknown command (see mxlab --help for the commands)");
}

}  // namespace mxlab::cli
