// Shared by the fuzz targets: reading fields from the fuzzer's bytes and a scratch folder for targets whose
// readers take files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

namespace mxlab::fuzz {

/// Takes fields from the front of the input; a field past the end reads as zero.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{byte()} << (8 * i);
    return v;
  }
  std::size_t left() const { return size_ - pos_; }
  /// The next n bytes (fewer at the end).
  std::string_view take(std::size_t n) {
    n = n < left() ? n : left();
    const std::string_view s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string_view rest() { return take(left()); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// A folder of this process's own under the system temporary folder, created once.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("mxlab-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

/// Writes bytes to a file in the scratch folder and returns its path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const auto path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();  // the scratch folder must be writable, or the target tests nothing
  return path;
}

/// A manifest and the files it names, from one input: the text before the first NUL byte is written as
/// `manifest`, the bytes after it split at their middle into `first` and `second`, all in the scratch folder.
struct ManifestFiles {
  std::string manifest_path;
  std::size_t file_bytes = 0;  ///< bytes after the NUL, in both files
};
inline ManifestFiles write_manifest_and_halves(const std::uint8_t* data, std::size_t size, const std::string& manifest,
                                               const std::string& first, const std::string& second) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view files = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  ManifestFiles out{write_scratch(manifest, input.substr(0, nul)), files.size()};
  write_scratch(first, files.substr(0, files.size() / 2));
  write_scratch(second, files.substr(files.size() / 2));
  return out;
}

}  // namespace mxlab::fuzz
