// Worker threads: the machine's hardware thread count (for requests of "every hardware thread", threads = 0)
// and running a function's parts on the threads of a pool that lives as long as the process.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <type_traits>

namespace mxlab {

/// std::thread::hardware_concurrency() (at least 1), asked once: the library reads /sys on every call, which
/// would be a file opened and read by every quantization call.
inline unsigned hardware_threads() {
  static const unsigned n = std::max(1U, std::thread::hardware_concurrency());
  return n;
}

/// Worker threads for a request (0 = every hardware thread).
inline unsigned resolve_threads(unsigned requested) { return requested != 0 ? requested : hardware_threads(); }

/// Threads worth starting for an elementwise pass over n values: at least 16 Ki values each, at least one
/// thread, at most the request's.
inline unsigned useful_threads(std::size_t n, unsigned requested) {
  constexpr std::size_t kMinPerThread = std::size_t{1} << 14;
  const std::size_t useful = std::max<std::size_t>(1, n / kMinPerThread);
  return static_cast<unsigned>(std::min<std::size_t>(resolve_threads(requested), useful));
}

namespace threads_detail {
/// fn(context, t) for t in [0, parts) on the pool (threads.cpp).
void run_on_pool(unsigned parts, void (*fn)(void*, unsigned), void* context);
}  // namespace threads_detail

/// Calls fn(t) for t in [0, parts) and waits for all: the caller takes parts itself while up to parts - 1 of the
/// pool's workers (started once, kept for the process) take the others, so a call costs a wake-up, not a thread
/// start. A part is taken by whichever thread is free first, so parts must not wait for one another; a part
/// may itself call run_parts. An exception thrown by a part reaches the caller after every part has finished.
template <typename Fn>
void run_parts(unsigned parts, Fn&& fn) {
  if (parts <= 1) {
    if (parts == 1) fn(0U);
    return;
  }
  using F = std::remove_reference_t<Fn>;
  threads_detail::run_on_pool(
      parts, [](void* f, unsigned t) { (*static_cast<F*>(f))(t); }, const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace mxlab
