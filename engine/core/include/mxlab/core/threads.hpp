// The machine's hardware thread count, for requests of "every hardware thread" (threads = 0).
#pragma once

#include <algorithm>
#include <thread>

namespace mxlab {

/// std::thread::hardware_concurrency() (at least 1), asked once: the library reads /sys on every call, which
/// would be a file opened and read by every quantization call.
inline unsigned hardware_threads() {
  static const unsigned n = std::max(1U, std::thread::hardware_concurrency());
  return n;
}

}  // namespace mxlab
