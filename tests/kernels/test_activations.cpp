// Checks the trainer's activation kernels (activations.hpp) on every SIMD target of this CPU: GELU's tanh and
// attention's exp against 50-digit values of tanh and exp (Boost.Multiprecision) within the error bounds Highway
// states for its vector tanh and exp, and everything around them bit for bit against the scalar expressions.
#include <catch2/catch.hpp>

#include <boost/multiprecision/cpp_bin_float.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxlab/kernels/activations.hpp"
#include "mxlab/kernels/simd_target.hpp"

using namespace mxlab;
using Big = boost::multiprecision::cpp_bin_float_50;

namespace {

constexpr float kC = 0.7978845608028654F;
constexpr float kA = 0.044715F;

/// |got - exact| in units of the float spacing at the exact value (the spacing of the smallest normal below it).
double ulps(float got, const Big& exact) {
  if (exact == 0) return got == 0.0F ? 0.0 : std::numeric_limits<double>::infinity();
  int e = 0;
  boost::multiprecision::frexp(abs(exact), &e);  // |exact| in [2^(e-1), 2^e)
  const int spacing_exp = std::max(e - 1, std::numeric_limits<float>::min_exponent - 1) - 23;
  const Big diff = abs(Big(got) - exact);
  return static_cast<double>(ldexp(diff, -spacing_exp));
}

std::vector<float> inputs(std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> x;
  for (int i = 0; i < 3000; ++i) x.push_back(normal(rng) * 3.0F);
  for (int i = 0; i < 500; ++i) x.push_back(std::ldexp(normal(rng), static_cast<int>(rng() % 60) - 40));
  for (const float v : {0.0F, -0.0F, 1e-30F, -1e-30F, 9.0F, -9.0F, 20.0F, -20.0F, 1e20F, -1e20F, 3e38F, -3e38F})
    x.push_back(v);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  return x;
}

}  // namespace

TEST_CASE("gelu_tanh: Highway's tanh within 4 ULP, the rest as the scalar expression", "[kernels]") {
  std::mt19937_64 rng(11);
  const std::vector<float> x = inputs(rng);
  for (const std::size_t n : {x.size(), std::size_t{1}, std::size_t{7}, std::size_t{17}}) {  // partial last vectors
    for (const SimdTarget& target : simd_targets()) {
      const ScopedSimdTarget forced(target);
      REQUIRE(forced.forced());
      std::vector<float> t(n), y(n);
      gelu_tanh(std::span<const float>(x.data(), n), t, y);
      for (std::size_t i = 0; i < n; ++i) {
        INFO("target " << target.name << ", x = " << x[i]);
        const float v = x[i];
        const float arg = kC * (v + kA * v * v * v);
        // Highway's stated bound for its float32 tanh (hwy/contrib/math/math-inl.h: "Max Error: ULP = 4").
        CHECK(ulps(t[i], tanh(Big(arg))) <= 4.0);
        const float want = 0.5F * v * (1.0F + t[i]);
        CHECK((y[i] == want || (std::isnan(y[i]) && std::isnan(want))));
        if (!std::isnan(want)) CHECK(std::signbit(y[i]) == std::signbit(want));  // -0 where 1 + t is 0
      }
    }
  }
}

TEST_CASE("gelu_tanh_backward is the scalar expression bit for bit", "[kernels]") {
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal;
  const std::vector<float> x = inputs(rng);
  std::vector<float> t(x.size()), y(x.size()), dy(x.size());
  gelu_tanh(x, t, y);
  for (float& g : dy) g = normal(rng);
  std::vector<float> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = x[i], th = t[i];
    want[i] = dy[i] * (0.5F * (1.0F + th) + 0.5F * v * (1.0F - th * th) * kC * (1.0F + 3.0F * kA * v * v));
  }
  for (const std::size_t n : {x.size(), std::size_t{5}, std::size_t{23}})
    for (const SimdTarget& target : simd_targets()) {
      const ScopedSimdTarget forced(target);
      REQUIRE(forced.forced());
      std::vector<float> dx(n);
      gelu_tanh_backward(std::span<const float>(x.data(), n), std::span<const float>(t.data(), n),
                         std::span<const float>(dy.data(), n), dx);
      for (std::size_t i = 0; i < n; ++i) {
        INFO("target " << target.name << ", x = " << x[i] << ", t = " << t[i]);
        CHECK((dx[i] == want[i] || (std::isnan(dx[i]) && std::isnan(want[i]))));
      }
    }
}

TEST_CASE("exp_values: Highway's exp within 1 ULP over the softmax range", "[kernels]") {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<float> uniform(-87.0F, 0.0F);
  std::vector<float> x;
  for (int i = 0; i < 4000; ++i) x.push_back(uniform(rng));
  for (int i = 0; i < 500; ++i) x.push_back(-std::ldexp(uniform(rng), -static_cast<int>(rng() % 30)));
  for (const float v : {0.0F, -0.0F, -1e-30F, -1.0F, -87.0F, 1.0F, 10.0F, 88.0F}) x.push_back(v);
  for (const SimdTarget& target : simd_targets()) {
    const ScopedSimdTarget forced(target);
    REQUIRE(forced.forced());
    std::vector<float> y(x);
    exp_values(y, y);  // in place, as the softmax calls it
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("target " << target.name << ", x = " << x[i]);
      // Highway's stated bound for its float32 exp (hwy/contrib/math/math-inl.h: "Max Error: ULP = 1").
      CHECK(ulps(y[i], exp(Big(x[i]))) <= 1.0);
    }
  }
}
