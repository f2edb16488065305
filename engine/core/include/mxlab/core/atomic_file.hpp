// Files written all at once or not at all: bytes go to a temporary file in the target's directory,
// which is renamed over the target only after every byte has been written and flushed to disk.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// An output file that appears under its name only when commit() succeeds. Until then the data lives
/// in a hidden temporary file ".<name>.tmp-<pid>-<n>" in the same directory (so the final rename(2)
/// stays within one file system and is atomic); if the AtomicFile is destroyed or discarded before
/// commit, or commit fails, the temporary file is removed and any existing target is left untouched; SIGINT
/// or SIGTERM removes it too (unless the program installed its own handler for them).
class AtomicFile {
 public:
  /// Creates the temporary file for `path`; `label` names the kind of file in messages ("npy").
  static Result<AtomicFile> create(std::string path, std::string label);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  /// Appends n bytes; returns false once any write has failed (commit() then reports why).
  bool write(const void* data, std::size_t n);
  /// Appends text.
  bool write(std::string_view text) { return write(text.data(), text.size()); }
  /// Flushes, closes and renames the temporary file over the target; returns the bytes written.
  Result<std::size_t> commit();
  /// Removes the temporary file and leaves the target as it was.
  void discard();

  /// The target path.
  const std::string& path() const { return path_; }
  /// The temporary path (empty once committed or discarded).
  const std::string& temp_path() const { return temp_; }

 private:
  AtomicFile() = default;
  Error fail(const std::string& problem) const;

  std::string path_;
  std::string temp_;
  std::string label_;
  int fd_ = -1;
  int signal_slot_ = -1;  ///< registration of temp_ for removal on SIGINT/SIGTERM (-1: none)
  std::size_t written_ = 0;
  std::string write_error_;
};

/// Writes `bytes` to `path` atomically (see AtomicFile); returns the number of bytes written.
Result<std::size_t> write_file_atomic(const std::string& path, std::string_view bytes, std::string_view label);

}  // namespace mxlab
