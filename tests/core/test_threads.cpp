// Checks run_parts (engine/core/src/threads.cpp) against its contract: every part runs exactly once, on any number
// of parts, from nested calls and from several callers at once, and a part's exception reaches the caller after
// every part has finished.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "mxlab/core/threads.hpp"

using namespace mxlab;

TEST_CASE("run_parts runs every part once, also nested and from concurrent callers", "[core]") {
  for (const unsigned parts : {0U, 1U, 2U, 3U, 17U}) {
    std::vector<std::atomic<int>> runs(parts);
    run_parts(parts, [&](unsigned t) { runs[t].fetch_add(1); });
    for (unsigned t = 0; t < parts; ++t) CHECK(runs[t].load() == 1);
  }
  std::atomic<int> inner{0};
  run_parts(4, [&](unsigned) { run_parts(3, [&](unsigned) { inner.fetch_add(1); }); });
  CHECK(inner.load() == 12);
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) run_parts(2, [&](unsigned) { total.fetch_add(1); });
    });
  for (auto& c : callers) c.join();
  CHECK(total.load() == 3 * 200 * 2);
}

TEST_CASE("run_parts gives the caller a part's exception once every part has finished", "[core]") {
  std::atomic<int> finished{0};
  CHECK_THROWS_AS(run_parts(4,
                            [&](unsigned t) {
                              if (t == 1) throw std::runtime_error("part 1");
                              finished.fetch_add(1);
                            }),
                  std::runtime_error);
  CHECK(finished.load() == 3);
}
