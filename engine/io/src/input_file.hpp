// Internal: a sequential byte source over a plain file, a gzip-compressed file (name ending in ".gz")
// or bytes in memory, with error messages that name the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"

struct gzFile_s;  // zlib's gzFile points to this

namespace mxlab::io_detail {

class InputFile {
 public:
  /// Opens `path`; names ending in ".gz" are decompressed while reading. `label` names the kind of
  /// input in messages ("npy", "csv", "raw").
  static Result<InputFile> open(const std::string& path, std::string label);
  /// A source over bytes in memory (which must outlive it); `name` stands for the path in messages.
  static InputFile from_memory(std::string_view bytes, std::string name, std::string label);

  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  /// Reads up to n bytes; fewer only at the end of the input. An I/O or decompression error is an Error.
  Result<std::size_t> read(void* dest, std::size_t n);
  /// Bytes not yet read, when known without reading (plain regular files and memory; not gzip).
  std::optional<std::uint64_t> remaining() const;
  /// Bytes of the input as stored (the compressed size for gzip files; 0 if unknown, e.g. a pipe).
  std::uint64_t stored_size() const { return stored_size_; }
  /// Reads everything not yet read.
  Result<std::string> read_rest();
  /// Reads and counts everything not yet read, discarding it.
  Result<std::uint64_t> skip_rest();
  /// Bytes read so far.
  std::uint64_t position() const { return position_; }
  /// "<label> '<name>': <problem>".
  Error fail(std::string_view problem) const;
  /// The input's name (its path) as given.
  const std::string& name() const { return name_; }

 private:
  InputFile() = default;
  void close();

  std::string name_;
  std::string label_;
  std::FILE* file_ = nullptr;  // plain files
  gzFile_s* gz_ = nullptr;     // compressed files
  std::string_view memory_;
  bool in_memory_ = false;
  std::optional<std::uint64_t> size_;
  std::uint64_t position_ = 0;
  std::uint64_t stored_size_ = 0;
};

/// Message text of an errno value.
std::string errno_message(int err);

}  // namespace mxlab::io_detail
