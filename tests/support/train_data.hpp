// Fixtures for the tests that run `mxlab train`: a small digits data set in a data folder, and reading a file
// whole.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mxlab/core/random.hpp"

namespace mxlab_test {

/// DATA/digits/digits.csv.gz with 400 plain-text rows (the reader takes a ".gz" that is not gzip data as it is)
/// of 8x8 images: ten seeded class patterns plus noise. `--data digits --data-dir DATA` reads it.
inline void write_digits(const std::filesystem::path& data) {
  std::filesystem::create_directories(data / "digits");
  mxlab::Rng rng(77);
  std::vector<int> pattern(10 * 64);
  for (auto& p : pattern) p = static_cast<int>(rng.next_u64() % 12);
  std::ofstream f(data / "digits" / "digits.csv.gz");
  for (int i = 0; i < 400; ++i) {
    const int label = i % 10;
    for (int j = 0; j < 64; ++j) f << pattern[static_cast<std::size_t>(label * 64 + j)] + static_cast<int>(rng.next_u64() % 5) << ",";
    f << label << "\n";
  }
}

/// A file's bytes ("" when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace mxlab_test
