// Sequential reading of plain files, gzip-compressed files and in-memory bytes.
#include "input_file.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace mxlab::io_detail {

std::string errno_message(int err) { return std::error_code(err, std::generic_category()).message(); }

Result<InputFile> InputFile::open(const std::string& path, std::string label) {
  InputFile f;
  f.name_ = path;
  f.label_ = std::move(label);
  if (path.empty()) return f.fail("no file name given");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return f.fail("cannot open: " + errno_message(errno));
  if (S_ISDIR(st.st_mode)) return f.fail("is a directory, not a file");
  // Only regular files: a device (/dev/zero, or a link to it) would be read without end and a FIFO could
  // block the open for ever; the size a reader checks its header against comes from here.
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return f.fail("is a device, not a file");
  if (S_ISFIFO(st.st_mode)) return f.fail("is a FIFO, not a file");
  if (!S_ISREG(st.st_mode)) return f.fail("is not a regular file");
  f.stored_size_ = static_cast<std::uint64_t>(st.st_size);
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) {
    // A ".gz" file that is not gzip data is read as it is (zlib's transparent mode).
    f.gz_ = ::gzopen(path.c_str(), "rb");
    if (f.gz_ == nullptr) return f.fail("cannot open: " + errno_message(errno));
    ::gzbuffer(f.gz_, 1U << 17);
  } else {
    f.file_ = std::fopen(path.c_str(), "rb");
    if (f.file_ == nullptr) return f.fail("cannot open: " + errno_message(errno));
    f.size_ = static_cast<std::uint64_t>(st.st_size);
  }
  return f;
}

InputFile InputFile::from_memory(std::string_view bytes, std::string name, std::string label) {
  InputFile f;
  f.name_ = std::move(name);
  f.label_ = std::move(label);
  f.memory_ = bytes;
  f.in_memory_ = true;
  f.size_ = bytes.size();
  f.stored_size_ = bytes.size();
  return f;
}

InputFile::InputFile(InputFile&& other) noexcept
    : name_(std::move(other.name_)),
      label_(std::move(other.label_)),
      file_(std::exchange(other.file_, nullptr)),
      gz_(std::exchange(other.gz_, nullptr)),
      memory_(other.memory_),
      in_memory_(other.in_memory_),
      size_(other.size_),
      position_(other.position_),
      stored_size_(other.stored_size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    close();
    name_ = std::move(other.name_);
    label_ = std::move(other.label_);
    file_ = std::exchange(other.file_, nullptr);
    gz_ = std::exchange(other.gz_, nullptr);
    memory_ = other.memory_;
    in_memory_ = other.in_memory_;
    size_ = other.size_;
    position_ = other.position_;
    stored_size_ = other.stored_size_;
  }
  return *this;
}

InputFile::~InputFile() { close(); }

void InputFile::close() {
  if (file_ != nullptr) std::fclose(std::exchange(file_, nullptr));
  if (gz_ != nullptr) ::gzclose(std::exchange(gz_, nullptr));
}

Error InputFile::fail(std::string_view problem) const {
  return make_error(label_ + " '" + name_ + "': " + std::string(problem));
}

Result<std::size_t> InputFile::read(void* dest, std::size_t n) {
  auto* out = static_cast<unsigned char*>(dest);
  std::size_t got = 0;
  if (in_memory_) {
    got = std::min<std::size_t>(n, memory_.size() - static_cast<std::size_t>(position_));
    if (got > 0) std::memcpy(out, memory_.data() + position_, got);
  } else if (file_ != nullptr) {
    got = std::fread(out, 1, n, file_);
    if (got < n && std::ferror(file_)) return fail("cannot read: " + errno_message(errno));
  } else if (gz_ != nullptr) {
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, std::size_t{1} << 30));
      const int r = ::gzread(gz_, out + got, chunk);
      int errnum = Z_OK;
      const char* msg = ::gzerror(gz_, &errnum);
      if (r < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
        if (errnum == Z_ERRNO) return fail("cannot read: " + errno_message(errno));
        // zlib prefixes its message with the path; the caller's prefix already names the file.
        std::string text = msg != nullptr ? msg : "unknown error";
        const std::string prefix = name_ + ": ";
        if (text.rfind(prefix, 0) == 0) text.erase(0, prefix.size());
        return fail("cannot decompress: " + text);
      }
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
  } else {
    return fail("the file is closed");
  }
  position_ += got;
  return got;
}

std::optional<std::uint64_t> InputFile::remaining() const {
  if (!size_) return std::nullopt;
  return *size_ > position_ ? *size_ - position_ : 0;
}

Result<std::string> InputFile::read_rest() {
  std::string out;
  try {
    if (auto rem = remaining()) out.reserve(static_cast<std::size_t>(*rem));
    char buf[1 << 16];
    for (;;) {
      auto r = read(buf, sizeof buf);
      if (!r) return r.error();
      if (*r == 0) break;
      out.append(buf, *r);
    }
  } catch (const std::bad_alloc&) {
    return fail("not enough memory to hold the file");
  } catch (const std::length_error&) {
    return fail("too large to hold in memory");
  }
  return out;
}

Result<std::uint64_t> InputFile::skip_rest() {
  std::uint64_t n = 0;
  char buf[1 << 16];
  for (;;) {
    auto r = read(buf, sizeof buf);
    if (!r) return r.error();
    if (*r == 0) break;
    n += *r;
  }
  return n;
}

}  // namespace mxlab::io_detail
