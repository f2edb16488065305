// mxlab command-line entry point.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <streambuf>

#include "cli/cli.hpp"
#include "mxlab/core/memory.hpp"

namespace {

/// Standard output through write(2), remembering why a write failed (a full device, a closed pipe), so the
/// message can say so; iostreams keep only a failbit.
class StdoutBuf : public std::streambuf {
 public:
  StdoutBuf() { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return flush_buffer() ? 0 : -1; }

 private:
  bool flush_buffer() {
    const char* p = pbase();
    while (p < pptr()) {
      const ::ssize_t w = ::write(STDOUT_FILENO, p, static_cast<std::size_t>(pptr() - p));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error_ = w < 0 ? errno : EIO;
        setp(buf_, buf_ + sizeof buf_);
        return false;
      }
      p += w;
    }
    setp(buf_, buf_ + sizeof buf_);
    return true;
  }
  char buf_[1 << 16];
  int error_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  mxlab::keep_freed_memory();
  std::ios::sync_with_stdio(false);
  std::vector<std::string> args(argv, argv + argc);
  const std::string command = argc > 1 ? std::string(" ") + argv[1] : std::string();
  StdoutBuf out_buf;
  std::ostream out(&out_buf);
  int code = 0;
  try {
    code = mxlab::cli::run(args, {std::cin, out, std::cerr});
  } catch (const std::bad_alloc&) {
    // Sizes are checked against the memory budget before large allocations; this is the last line of defence.
    std::cerr << "mxlab" << command << ": not enough memory for this input\n";
    return mxlab::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "mxlab" << command << ": internal error: " << e.what() << "\n";
    return mxlab::cli::kExitFailure;
  }
  out.flush();
  if (!out || out_buf.error() != 0) {
    const int err = out_buf.error();
    std::cerr << "mxlab" << command << ": cannot write standard output"
              << (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) << "\n";
    return mxlab::cli::kExitBadInput;
  }
  return code;
}
