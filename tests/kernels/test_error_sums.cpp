// Checks plain_error_sums (error_sums.hpp) against the plain loop it stands for, bit for bit, on every SIMD target
// of this CPU: quantized-like errors, exact errors on coarse grids (ties of the chunked sum), huge and tiny values,
// zeros, infinities and NaNs.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxlab/kernels/error_sums.hpp"
#include "mxlab/kernels/simd_target.hpp"

using namespace mxlab;

namespace {

PlainErrorSums plain_loop(const std::vector<float>& x, const std::vector<float>& out) {
  PlainErrorSums r;
  for (std::size_t i = 0; i < x.size(); ++i) {
    r.nonzero += x[i] != 0.0F ? 1 : 0;
    r.underflow += (x[i] != 0.0F && out[i] == 0.0F) ? 1 : 0;
    const double e = static_cast<double>(out[i]) - static_cast<double>(x[i]);
    r.sse += e * e;
  }
  return r;
}

float on_grid(float v, int bits) { return std::ldexp(std::nearbyint(std::ldexp(v, bits)), -bits); }

}  // namespace

TEST_CASE("plain_error_sums gives the plain loop's sum bit for bit", "[kernels]") {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  const float inf = std::numeric_limits<float>::infinity();
  int chunked = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const int mode = trial % 8;
    const std::size_t n = trial % 5 == 0 ? rng() % 50 : 1000 + rng() % 9000;
    std::vector<float> x(n), out(n);
    for (std::size_t i = 0; i < n; ++i) {
      float v = normal(rng);
      float q = 0;
      switch (mode) {
        case 0: q = on_grid(v, 3); break;
        case 1: v = on_grid(v, 4), q = on_grid(v, 1); break;  // errors of few bits: halfway terms
        case 2:
          v = std::ldexp(v, static_cast<int>(rng() % 200) - 100);
          q = rng() % 3 == 0 ? 0.0F : v * 1.0001F;
          break;
        case 3: q = rng() % 2 ? v : 0.0F; break;
        case 4: v = static_cast<float>(rng() % 64), q = static_cast<float>(rng() % 64); break;
        case 5:
          v = std::ldexp(static_cast<float>(rng() % 1024), static_cast<int>(rng() % 20) - 10);
          q = std::ldexp(static_cast<float>(rng() % 1024), static_cast<int>(rng() % 20) - 10);
          break;
        case 6:
          v = std::ldexp(v, 60), q = std::ldexp(normal(rng), 60);
          if (i == n / 2) q = inf;
          break;
        default:
          q = v + std::ldexp(normal(rng), -20);
          if (i == n - 3) q = std::numeric_limits<float>::quiet_NaN();
          if (i < 700) v = q = 0;  // the sum starts late
          break;
      }
      x[i] = v;
      out[i] = q;
    }
    const PlainErrorSums want = plain_loop(x, out);
    chunked += n >= 2048 && std::isfinite(want.sse) ? 1 : 0;
    for (const SimdTarget& t : simd_targets()) {
      const ScopedSimdTarget forced(t);
      REQUIRE(forced.forced());
      INFO("target " << t.name << ", trial " << trial << ", " << n << " values");
      const PlainErrorSums got = plain_error_sums(x, out);
      CHECK(got.nonzero == want.nonzero);
      CHECK(got.underflow == want.underflow);
      CHECK(std::bit_cast<std::uint64_t>(got.sse) == std::bit_cast<std::uint64_t>(want.sse));
    }
  }
  CHECK(chunked > 100);
}
