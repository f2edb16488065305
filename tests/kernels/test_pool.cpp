// Checks pool_2x2_row (pool.hpp) against the scalar loop it stands for, bit for bit, on every SIMD target of this
// CPU: max and average pooling, channel counts around the vector widths, ties, signed zeros, infinities and NaNs.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxlab/kernels/pool.hpp"
#include "mxlab/kernels/simd_target.hpp"

using namespace mxlab;

namespace {

void scalar_row(const float* top, const float* bottom, std::int64_t ow, std::int64_t c, bool max, float* out,
                std::uint8_t* at) {
  for (std::int64_t ox = 0; ox < ow; ++ox)
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const float v[4] = {top[2 * ox * c + ch], top[(2 * ox + 1) * c + ch], bottom[2 * ox * c + ch],
                          bottom[(2 * ox + 1) * c + ch]};
      float best = -std::numeric_limits<float>::infinity(), sum = 0.0F;
      std::uint8_t first = 4;
      for (std::uint8_t q = 0; q < 4; ++q) {
        sum += v[q];
        if (v[q] > best) best = v[q], first = q;
      }
      out[ox * c + ch] = max ? best : sum * 0.25F;
      at[ox * c + ch] = first;
    }
}

}  // namespace

TEST_CASE("pool_2x2_row is the scalar loop bit for bit", "[kernels]") {
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::int64_t c : {1, 3, 8, 15, 16, 17, 32, 40, 64}) {
    const std::int64_t ow = 7, width = 2 * ow + 1;  // an odd width: its last column is left out
    std::vector<float> top(static_cast<std::size_t>(width * c)), bottom(top.size());
    for (auto* row : {&top, &bottom})
      for (float& v : *row) {
        const auto kind = rng() % 16;
        v = kind == 0 ? 0.0F : kind == 1 ? -0.0F : kind == 2 ? -inf : kind == 3 ? inf : kind == 4 ? nan
            : kind < 8 ? static_cast<float>(rng() % 3)  // ties
                       : normal(rng);
      }
    for (std::size_t i = 0; i < 4; ++i) top[i] = bottom[i] = -inf;  // windows with no input above -infinity
    top[4] = nan, top[5] = -inf, bottom[4] = nan, bottom[5] = nan;
    for (const bool max : {true, false}) {
      std::vector<float> want(static_cast<std::size_t>(ow * c));
      std::vector<std::uint8_t> want_at(want.size());
      scalar_row(top.data(), bottom.data(), ow, c, max, want.data(), want_at.data());
      for (const SimdTarget& target : simd_targets()) {
        const ScopedSimdTarget forced(target);
        REQUIRE(forced.forced());
        std::vector<float> got(want.size());
        std::vector<std::uint8_t> got_at(want.size(), 99);
        pool_2x2_row(top.data(), bottom.data(), ow, c, max, got.data(), got_at.data());
        for (std::size_t i = 0; i < want.size(); ++i) {
          INFO("target " << target.name << ", c " << c << (max ? ", max" : ", average") << ", output " << i);
          CHECK((std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want[i]) ||
                 (std::isnan(got[i]) && std::isnan(want[i]))));
          CHECK(got_at[i] == want_at[i]);
        }
      }
    }
  }
}

TEST_CASE("pool_2x2_backward_row is the scalar loop bit for bit", "[kernels]") {
  // The gradient of every window input: 0 + g at the first maximum (none when no input was above -infinity),
  // 0 elsewhere; 0 + g * 0.25 for average pooling. Signed zeros, infinities and NaNs among the gradients.
  std::mt19937_64 rng(22);
  std::normal_distribution<float> normal;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::int64_t c : {1, 3, 8, 15, 16, 17, 32, 40, 64}) {
    const std::int64_t ow = 7, width = 2 * ow + 1;
    std::vector<float> g(static_cast<std::size_t>(ow * c));
    std::vector<std::uint8_t> at(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      const auto kind = rng() % 16;
      g[i] = kind == 0 ? 0.0F : kind == 1 ? -0.0F : kind == 2 ? inf : kind == 3 ? nan : normal(rng);
      at[i] = static_cast<std::uint8_t>(rng() % 5);  // 4: no maximum
    }
    for (const bool max : {true, false}) {
      std::vector<float> want_top(static_cast<std::size_t>(width * c), 9.0F), want_bottom(want_top);
      for (std::int64_t ox = 0; ox < ow; ++ox)
        for (std::int64_t ch = 0; ch < c; ++ch) {
          const auto i = static_cast<std::size_t>(ox * c + ch);
          float* v[4] = {&want_top[static_cast<std::size_t>(2 * ox * c + ch)], &want_top[static_cast<std::size_t>((2 * ox + 1) * c + ch)],
                         &want_bottom[static_cast<std::size_t>(2 * ox * c + ch)], &want_bottom[static_cast<std::size_t>((2 * ox + 1) * c + ch)]};
          for (std::uint8_t q = 0; q < 4; ++q) {
            float dx = 0.0F;
            if (!max) dx += g[i] * 0.25F;
            else if (at[i] == q) dx += g[i];
            *v[q] = dx;
          }
        }
      for (const SimdTarget& target : simd_targets()) {
        const ScopedSimdTarget forced(target);
        REQUIRE(forced.forced());
        std::vector<float> top(want_top.size(), 9.0F), bottom(top);  // the odd last column is left alone
        pool_2x2_backward_row(g.data(), at.data(), ow, c, max, top.data(), bottom.data());
        for (std::size_t i = 0; i < top.size(); ++i) {
          INFO("target " << target.name << ", c " << c << (max ? ", max" : ", average") << ", input " << i);
          CHECK((std::bit_cast<std::uint32_t>(top[i]) == std::bit_cast<std::uint32_t>(want_top[i]) ||
                 (std::isnan(top[i]) && std::isnan(want_top[i]))));
          CHECK((std::bit_cast<std::uint32_t>(bottom[i]) == std::bit_cast<std::uint32_t>(want_bottom[i]) ||
                 (std::isnan(bottom[i]) && std::isnan(want_bottom[i]))));
        }
      }
    }
  }
}
