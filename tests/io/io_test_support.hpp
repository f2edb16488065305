// Helpers for the io tests: a scratch directory, byte-level file access, and a gzip writer that uses
// only stored (uncompressed) deflate blocks, built from RFC 1951 section 3.2.4 and RFC 1952.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace mxlab::test {

/// A fresh directory under the system temporary directory, removed with its contents at the end.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("mxlab_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// Path of a file in the directory.
  std::string file(std::string_view name) const { return (path_ / std::string(name)).string(); }
  /// Names of everything in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

/// Writes bytes to a file (plain, non-atomic: this is the test's own fixture writer).
inline void put_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// All bytes of a file.
inline std::string get_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// Bytes from a list of values 0..255.
inline std::string bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s += static_cast<char>(static_cast<unsigned char>(v));
  return s;
}

/// CRC-32 of RFC 1952 section 8 (reflected polynomial 0xEDB88320), bit by bit.
inline std::uint32_t crc32(std::string_view data) {
  std::uint32_t c = 0xFFFFFFFFU;
  for (unsigned char byte : data) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c & 1U) ? (c >> 1) ^ 0xEDB88320U : c >> 1;
  }
  return c ^ 0xFFFFFFFFU;
}

/// A gzip member (RFC 1952) holding `data` in stored deflate blocks (RFC 1951 3.2.4: header bits
/// BFINAL, BTYPE=00, then LEN and NLEN = ~LEN as little-endian 16-bit words, then LEN raw bytes).
inline std::string gzip_stored(std::string_view data) {
  auto le = [](std::uint32_t v, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFFU);
    return s;
  };
  // ID1 ID2 CM=8 (deflate) FLG=0 MTIME=0 XFL=0 OS=255 (unknown).
  std::string out = bytes({0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 255});
  std::size_t pos = 0;
  do {
    const std::size_t len = std::min<std::size_t>(0xFFFF, data.size() - pos);
    const bool last = pos + len == data.size();
    out += static_cast<char>(last ? 1 : 0);
    out += le(static_cast<std::uint32_t>(len), 2);
    out += le(static_cast<std::uint32_t>(~len & 0xFFFFU), 2);
    out += data.substr(pos, len);
    pos += len;
  } while (pos < data.size());
  out += le(crc32(data), 4);
  out += le(static_cast<std::uint32_t>(data.size()), 4);  // ISIZE: size mod 2^32
  return out;
}

// binary16 value from the definition (IEEE 754-2019 3.4, 3.6): bias 15, 10 mantissa bits.
inline double f16_value(std::uint16_t h) {
  const int sign = h >> 15;
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double v = 0;
  if (e == 0x1F) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(m, -24);  // 0.m * 2^-14
  } else {
    v = std::ldexp(1024 + m, e - 15 - 10);  // 1.m * 2^(e-15)
  }
  return sign ? -v : v;
}

}  // namespace mxlab::test
