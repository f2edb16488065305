// Runs the mxlab CLI in-process and checks rows of bad input against the contract: exit code 2, nothing on
// standard output, one line naming the problem, and no file written or left behind.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.hpp"

namespace mxlab_test {

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

/// `mxlab ARGS...` in this process, with `input` as its standard input.
inline CliRun run_cli(std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), "mxlab");
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = mxlab::cli::run(args, {in, out, err});
  return {code, out.str(), err.str()};
}

inline std::vector<std::string> text_lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l)) v.push_back(l);
  return v;
}

/// Every file and folder name under `dir`, sorted.
inline std::vector<std::string> listing(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// One row of a bad-input table: the command line and words its message must contain.
struct BadInput {
  std::vector<std::string> args;
  std::string needle;
};

/// Runs every row and checks exit code 2, empty standard output, the words, exactly one line shorter than
/// 1,000 bytes, and the listing of `dir` (which holds the rows' fixtures and outputs) unchanged.
inline void check_bad_inputs(const std::filesystem::path& dir, std::span<const BadInput> cases) {
  const auto fixtures = listing(dir);
  for (const auto& c : cases) {
    std::string line;
    for (const auto& a : c.args) line += (a.size() > 80 ? a.substr(0, 20) + "..." : a) + " ";
    INFO(line);
    const CliRun r = run_cli(c.args);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains(c.needle));
    CHECK(text_lines(r.err).size() == 1);
    CHECK(r.err.size() < 1000);  // the message names the input, it does not repeat it whole
    CHECK(listing(dir) == fixtures);  // no output, no temporary file
  }
}

}  // namespace mxlab_test
