// The memory budget (memory.hpp).
#include "mxlab/core/memory.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>

namespace mxlab {
namespace {

std::optional<std::uint64_t> parse_size(const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text) return std::nullopt;
  unsigned shift = 0;
  switch (*end) {
    case '\0': break;
    case 'K': case 'k': shift = 10; ++end; break;
    case 'M': case 'm': shift = 20; ++end; break;
    case 'G': case 'g': shift = 30; ++end; break;
    case 'T': case 't': shift = 40; ++end; break;
    default: return std::nullopt;
  }
  if (*end != '\0' || v > (std::numeric_limits<std::uint64_t>::max() >> shift)) return std::nullopt;
  return static_cast<std::uint64_t>(v) << shift;
}

std::string mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

std::uint64_t memory_budget() {
  if (const char* env = std::getenv("MXLAB_MEMORY_BUDGET"))
    if (auto v = parse_size(env)) return *v;
  std::uint64_t limit = std::numeric_limits<std::uint64_t>::max();
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) limit = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < limit) limit = rl.rlim_cur;
  return limit / 2;
}

std::optional<Error> check_memory(std::uint64_t count, std::uint64_t item_bytes, const std::string& what) {
  const std::uint64_t budget = memory_budget();
  if (item_bytes != 0 && count > budget / item_bytes)
    return make_error(what + " needs " + std::to_string(count) + " values of " + std::to_string(item_bytes) +
                      " bytes, more than the memory budget of " + mib(budget) +
                      " (half the memory; MXLAB_MEMORY_BUDGET sets it)");
  return std::nullopt;
}

void keep_freed_memory() {
  // glibc's largest mmap threshold on 64-bit targets (DEFAULT_MMAP_THRESHOLD_MAX); setting it also stops the
  // threshold from adapting. A value mallopt refuses leaves the default in place.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace mxlab
