// The process's pool of worker threads behind run_parts: a queue of calls whose parts idle workers take by index.
#include "mxlab/core/threads.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace mxlab::threads_detail {
namespace {

/// One run_parts call: its parts are taken by index (next) by the caller and by workers.
struct Call {
  void (*fn)(void*, unsigned) = nullptr;
  void* context = nullptr;
  unsigned parts = 0;
  std::atomic<unsigned> next{0};
  unsigned finished = 0;  ///< under the pool's mutex
  std::exception_ptr error;
  std::condition_variable done;
};

class Pool {
 public:
  /// Runs c's parts on the caller and on free workers; returns once every part has finished and no worker
  /// holds c any more.
  void run(Call& c) {
    {
      std::lock_guard lock(mutex_);
      while (workers_ + 1 < c.parts) {
        std::thread(&Pool::work, this).detach();
        ++workers_;
      }
      queue_.push_back(&c);
    }
    wake_.notify_all();
    for (unsigned t = c.next.fetch_add(1); t < c.parts; t = c.next.fetch_add(1)) finish(c, t);
    std::unique_lock lock(mutex_);
    c.done.wait(lock, [&] { return c.finished == c.parts; });
    if (auto at = std::find(queue_.begin(), queue_.end(), &c); at != queue_.end()) queue_.erase(at);
  }

 private:
  /// Runs part t of c; the last part to finish wakes the caller.
  void finish(Call& c, unsigned t) {
    std::exception_ptr error;
    try {
      c.fn(c.context, t);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    if (error && !c.error) c.error = error;
    if (++c.finished == c.parts) c.done.notify_all();
  }

  /// A worker takes parts under the mutex, so it touches a call only while the call is queued or while it runs
  /// one of the call's parts (which its caller waits for).
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return !queue_.empty(); });
      Call* c = queue_.front();
      const unsigned t = c->next.fetch_add(1);
      if (t + 1 >= c->parts) queue_.pop_front();  // its last part is taken
      if (t >= c->parts) continue;
      lock.unlock();
      finish(*c, t);
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Call*> queue_;
  unsigned workers_ = 0;
};

}  // namespace

void run_on_pool(unsigned parts, void (*fn)(void*, unsigned), void* context) {
  // Never destroyed: detached workers may still wait on it while the process exits.
  static Pool* const pool = new Pool;
  Call c;
  c.fn = fn;
  c.context = context;
  c.parts = parts;
  pool->run(c);
  if (c.error) std::rethrow_exception(c.error);
}

}  // namespace mxlab::threads_detail
