// What the experiment tests share: a scratch folder removed afterwards, reading a file whole and running the
// command line in-process.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.hpp"

namespace mxlab_test {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir;
  Scratch() {
    static int n = 0;
    dir = fs::temp_directory_path() / ("mxlab_experiment_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string put(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
};

inline std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline int run_cli(const std::vector<std::string>& args, std::string* out = nullptr, std::string* err = nullptr) {
  std::istringstream in;
  std::ostringstream o, e;
  std::vector<std::string> argv = {"mxlab"};
  argv.insert(argv.end(), args.begin(), args.end());
  const int rc = mxlab::cli::run(argv, {in, o, e});
  if (out) *out = o.str();
  if (err) *err = e.str();
  return rc;
}

}  // namespace mxlab_test
