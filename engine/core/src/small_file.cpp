// Whole small regular files, size checked against a limit before anything is read.
#include "mxlab/core/small_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace mxlab {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "a special file";
}

}  // namespace

std::string byte_size_text(std::uint64_t bytes) {
  char buf[64];
  if (bytes >= (std::uint64_t{1} << 30) && bytes % (std::uint64_t{1} << 30) == 0)
    std::snprintf(buf, sizeof buf, "%llu GB", static_cast<unsigned long long>(bytes >> 30));
  else if (bytes >= (std::uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / static_cast<double>(std::uint64_t{1} << 30));
  else if (bytes >= (std::uint64_t{1} << 20) && bytes % (std::uint64_t{1} << 20) == 0)
    std::snprintf(buf, sizeof buf, "%llu MB", static_cast<unsigned long long>(bytes >> 20));
  else if (bytes >= (std::uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / static_cast<double>(std::uint64_t{1} << 20));
  else if (bytes >= 1024 && bytes % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%llu KB", static_cast<unsigned long long>(bytes >> 10));
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  return buf;
}

Result<std::string> read_small_file(const std::string& path, std::uint64_t max_bytes, std::string_view label) {
  const std::string name = std::string(label) + " '" + path + "'";
  // Opened without blocking, so a FIFO with no writer cannot hang the open; the type is checked on the
  // descriptor (no window between a stat and the open).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return make_error(name + ": does not exist");
    return make_error(name + ": " + std::strerror(err));
  }
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  if (!stated || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(name + ": is " + (stated ? kind_of(st.st_mode) : "unreadable") + ", not a file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    return make_error(name + ": is " + byte_size_text(size) + ", more than the " + byte_size_text(max_bytes) + " " +
                      std::string(label) + " can be");
  }
  std::string bytes(static_cast<std::size_t>(size), '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return make_error(name + ": " + std::strerror(err));
    }
    if (n == 0) break;  // shrank while reading: keep what is there
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  ::close(fd);
  return bytes;
}

}  // namespace mxlab
