// An exclusive lock on an output folder, so two processes never write one folder's results at once.
#pragma once

#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"

namespace mxlab {

/// Holds the lock file FOLDER/.mxlab.lock (an flock(2) lock, released by the kernel when the process ends,
/// however it ends) for as long as the object lives. The file records the holder's PID and command, so a
/// second process is told who holds the folder. The folder must exist.
class FolderLock {
 public:
  /// Takes the lock without waiting; `command` names the holder in the other process's message
  /// ("mxlab run"). Fails with "'FOLDER' is in use by process PID (COMMAND); wait for it to finish".
  static Result<FolderLock> acquire(const std::string& folder, std::string_view command);

  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();

  /// The name of the lock file inside a locked folder (writers and merges skip it).
  static constexpr std::string_view kFileName = ".mxlab.lock";

 private:
  FolderLock() = default;
  int fd_ = -1;
};

}  // namespace mxlab
