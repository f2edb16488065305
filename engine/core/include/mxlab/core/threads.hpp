// Worker threads: the machine's hardware thread count (for requests of "every hardware thread", threads = 0)
// and running a function's parts on threads of their own.
#pragma once

#include <algorithm>
#include <thread>
#include <vector>

namespace mxlab {

/// std::thread::hardware_concurrency() (at least 1), asked once: the library reads /sys on every call, which
/// would be a file opened and read by every quantization call.
inline unsigned hardware_threads() {
  static const unsigned n = std::max(1U, std::thread::hardware_concurrency());
  return n;
}

/// Worker threads for a request (0 = every hardware thread).
inline unsigned resolve_threads(unsigned requested) { return requested != 0 ? requested : hardware_threads(); }

/// Calls fn(t) for t in [0, parts), each on its own thread (t = 0 on the caller's), and waits for all.
template <typename Fn>
void run_parts(unsigned parts, Fn&& fn) {
  std::vector<std::thread> workers;
  for (unsigned t = 1; t < parts; ++t) workers.emplace_back([&fn, t] { fn(t); });
  fn(0U);
  for (auto& w : workers) w.join();
}

}  // namespace mxlab
