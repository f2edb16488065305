// `mxlab golden`: writes data/golden/codepoints/<format>.csv for every named format up to 16 bits.
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/cli.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/core/small_file.hpp"
#include "mxlab/formats/catalogue.hpp"

namespace mxlab::cli {

/// The largest golden table --check reads (the largest, bfloat16's, is under 9 MB).
constexpr std::uint64_t kMaxGoldenFileBytes = std::uint64_t{64} << 20;

int cmd_golden(const std::vector<std::string>& argv, Io io) {
  const std::vector<OptionSpec> specs = {
      {"out", true, "DIR", "golden directory to write (default data/golden); files go to DIR/codepoints/"},
      {"check", false, "", "compare with the files instead of writing; exit 1 listing any that differ"},
      {"dir", true, "DIR", "golden directory to check (default: ./data/golden, else the source tree's)"},
  };
  auto args = parse_args(argv, 1, specs);
  if (!args) return bad_input(io, "golden", args.error().message);
  if (args->help) {
    io.out << "usage: mxlab golden [--out DIR] | --check [--dir DIR]\n\n"
              "Regenerates the golden code point tables: DIR/codepoints/<format>.csv for every named format\n"
              "up to 16 bits (the table of `mxlab codepoints FORMAT --csv` under a header line).\n\n"
           << options_help(specs);
    return kExitOk;
  }
  if (!args->positional.empty()) return bad_input(io, "golden", "unexpected argument '" + args->positional[0] + "'");
  const bool check = args->flag("check");
  if (!check && args->value("dir")) return bad_input(io, "golden", "--dir goes with --check; write with --out DIR");
  std::string dir = args->value("out").value_or("data/golden");
  if (check) {
    // The directory to check: --dir, else ./data/golden, else the source tree this build came from.
    std::vector<std::string> looked;
    if (auto d = args->value("dir") ? args->value("dir") : args->value("out")) {  // --out DIR: the same, read only
      looked = {*d};
    } else {
      looked = {"data/golden", std::string(MXLAB_SOURCE_DIR) + "/data/golden"};
    }
    dir.clear();
    for (const auto& d : looked)
      if (std::error_code ec; std::filesystem::is_directory(std::filesystem::path(d) / "codepoints", ec)) {
        dir = d;
        break;
      }
    if (dir.empty()) {
      std::string where;
      for (const auto& d : looked) where += (where.empty() ? "" : ", ") + quote_input(d + "/codepoints");
      return bad_input(io, "golden", "no golden tables found (looked in " + where + "); give --dir DIR");
    }
  }
  const std::filesystem::path cp_dir = std::filesystem::path(dir) / "codepoints";
  if (!check) {
    std::error_code ec;
    std::filesystem::create_directories(cp_dir, ec);
    if (ec) return bad_input(io, "golden", "cannot create '" + cp_dir.string() + "': " + ec.message());
  }
  int differing = 0, written = 0;
  std::string report;  // --check's lines, printed once every file has been read (bad input prints nothing)
  for (const Format& f : catalogue_formats()) {
    if (f.bits() > 16) continue;
    const std::string content = golden_header_line() + "\n" + to_csv(codepoint_table(f, 0, f.code_count() - 1));
    const std::filesystem::path file = cp_dir / (f.name() + ".csv");
    if (check) {
      std::error_code ec;
      if (std::filesystem::symlink_status(file, ec).type() == std::filesystem::file_type::not_found) {
        report += "missing: " + file.string() + "\n";
        ++differing;
        continue;
      }
      // A regular file of bounded size: a device, a FIFO or a folder in its place is refused, not read.
      auto text = read_small_file(file.string(), kMaxGoldenFileBytes, "golden table");
      if (!text) return bad_input(io, "golden", text.error().message);
      if (*text != content) {
        report += "differs: " + file.string() + "\n";
        ++differing;
      }
    } else {
      if (auto e = write_file_atomic(file.string(), content)) return bad_input(io, "golden", e->message);
      ++written;
    }
  }
  if (check) {
    io.out << report << (differing ? "golden tables in " + dir + " differ from the engine\n"
                         : "golden tables in " + dir + " match the engine\n");
    return differing ? kExitFailure : kExitOk;
  }
  io.out << "wrote " << written << " tables to " << cp_dir.string() << "\n";
  return kExitOk;
}

}  // namespace mxlab::cli
