// Atomic file replacement: temporary file in the same directory, fsync, rename(2).
#include "mxlab/core/atomic_file.hpp"

#include "mxlab/core/table.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <system_error>
#include <utility>

namespace mxlab {
namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::atomic<unsigned> g_temp_counter{0};

// Temporary files to remove when SIGINT or SIGTERM ends the process, so an interrupted write leaves nothing.
// The handler only reads slots marked ready and calls unlink(2), which is async-signal-safe.
constexpr std::size_t kTempSlots = 64;
constexpr std::size_t kTempPathMax = 4096;
struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled or emptied, 2 ready
  char path[kTempPathMax];
};
TempSlot g_temp_slots[kTempSlots];

extern "C" void remove_temps_on_signal(int sig) {
  for (auto& slot : g_temp_slots)
    if (slot.state.load() == 2) ::unlink(slot.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Checked at every registration (a sigaction query is cheap): a program with its own handler (a runner that
// stops cleanly) or one that ignores the signal keeps it; a default disposition gets the cleanup.
void install_signal_cleanup() {
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO)) {
      struct sigaction sa {};
      sa.sa_handler = remove_temps_on_signal;
      sigemptyset(&sa.sa_mask);
      ::sigaction(sig, &sa, nullptr);
    }
  }
}

/// Registers a temporary file for removal on SIGINT/SIGTERM; the slot index, or -1 if none is free.
int register_temp(const std::string& path) {
  if (path.size() >= kTempPathMax) return -1;
  install_signal_cleanup();
  for (std::size_t i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (g_temp_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_temp_slots[i].path, path.c_str(), path.size() + 1);
      g_temp_slots[i].state.store(2);
      return static_cast<int>(i);
    }
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot >= 0) g_temp_slots[static_cast<std::size_t>(slot)].state.store(0);
}

}  // namespace

Error AtomicFile::fail(const std::string& problem) const { return make_error(label_ + " '" + path_ + "': " + problem); }

Result<AtomicFile> AtomicFile::create(std::string path, std::string label) {
  AtomicFile f;
  f.path_ = std::move(path);
  f.label_ = std::move(label);
  const auto slash = f.path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : f.path_.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? f.path_ : f.path_.substr(slash + 1);
  if (auto problem = output_path_problem(f.path_)) return f.fail(*problem);
  const std::string pid = std::to_string(static_cast<long long>(::getpid()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string temp = dir + "." + base + ".tmp-" + pid + "-" + std::to_string(g_temp_counter.fetch_add(1));
    // O_EXCL: never reuse a name another writer holds; mode 0666 is reduced by the umask as for any file.
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      f.fd_ = fd;
      f.temp_ = std::move(temp);
      f.signal_slot_ = register_temp(f.temp_);
      return f;
    }
    const int err = errno;
    if (err == EEXIST) continue;
    struct stat st {};
    if (err == ENOENT && ::stat(dir.empty() ? "." : dir.c_str(), &st) != 0)
      return f.fail("cannot create a file there: directory '" + (dir.empty() ? std::string(".") : dir) +
                    "' does not exist");
    return f.fail("cannot create a temporary file next to it: " + errno_text(err));
  }
  return f.fail("cannot create a temporary file next to it: 100 names were already taken");
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::exchange(other.temp_, std::string())),
      label_(std::move(other.label_)),
      fd_(std::exchange(other.fd_, -1)),
      signal_slot_(std::exchange(other.signal_slot_, -1)),
      written_(other.written_),
      write_error_(std::move(other.write_error_)) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_);
    temp_ = std::exchange(other.temp_, std::string());
    label_ = std::move(other.label_);
    fd_ = std::exchange(other.fd_, -1);
    signal_slot_ = std::exchange(other.signal_slot_, -1);
    written_ = other.written_;
    write_error_ = std::move(other.write_error_);
  }
  return *this;
}

AtomicFile::~AtomicFile() { discard(); }

bool AtomicFile::write(const void* data, std::size_t n) {
  if (!write_error_.empty()) return false;
  if (fd_ < 0) {
    write_error_ = "the file is already closed";
    return false;
  }
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ::ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      write_error_ = "cannot write: " + errno_text(errno);
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    written_ += static_cast<std::size_t>(w);
  }
  return true;
}

Result<std::size_t> AtomicFile::commit() {
  if (fd_ < 0) return fail("the file is already closed");
  if (!write_error_.empty()) {
    const Error e = fail(write_error_);
    discard();
    return e;
  }
  // fsync before rename: after a crash the name refers either to the old file or to all new bytes.
  if (::fsync(fd_) != 0 && errno != EINVAL) {
    const Error e = fail("cannot flush to disk: " + errno_text(errno));
    discard();
    return e;
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const Error e = fail("cannot close: " + errno_text(errno));
    discard();
    return e;
  }
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    const Error e = fail("cannot replace it: " + errno_text(errno));
    discard();
    return e;
  }
  unregister_temp(std::exchange(signal_slot_, -1));
  temp_.clear();
  return written_;
}

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    temp_.clear();
  }
  unregister_temp(std::exchange(signal_slot_, -1));
}

Result<std::size_t> write_file_atomic(const std::string& path, std::string_view bytes, std::string_view label) {
  auto f = AtomicFile::create(path, std::string(label));
  if (!f) return f.error();
  f->write(bytes);
  return f->commit();
}

}  // namespace mxlab
