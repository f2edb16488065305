// An exclusive flock(2) lock on FOLDER/.mxlab.lock that names its holder.
#include "mxlab/core/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mxlab {

Result<FolderLock> FolderLock::acquire(const std::string& folder, std::string_view command) {
  const std::string path = folder + "/" + std::string(kFileName);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return make_error("cannot lock '" + folder + "': " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[256];
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) holder.assign(buf, static_cast<std::size_t>(n));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd);
    if (err != EWOULDBLOCK) return make_error("cannot lock '" + folder + "': " + std::strerror(err));
    return make_error("'" + folder + "' is in use by " + (holder.empty() ? "another process" : holder) +
                      "; wait for it to finish or choose another folder");
  }
  // The holder's line: "process PID (COMMAND)", written after the lock is ours.
  const std::string who = "process " + std::to_string(::getpid()) + " (" + std::string(command) + ")\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    const int err = errno;
    ::close(fd);
    return make_error("cannot lock '" + folder + "': " + std::strerror(err));
  }
  FolderLock lock;
  lock.fd_ = fd;
  return lock;
}

FolderLock::FolderLock(FolderLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FolderLock::~FolderLock() {
  // Closing releases the lock; the file stays (removing it would race with a process that just opened it).
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace mxlab
