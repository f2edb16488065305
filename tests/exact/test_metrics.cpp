// Checks the analysis sums (ExactSum superaccumulator) against a Boost.Multiprecision recomputation.
#include <catch2/catch.hpp>

#include <cmath>

#include "mxlab/core/exact_sum.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/io/distributions.hpp"
#include "mxlab/quantize/analysis.hpp"

using namespace mxlab;
using exact::Rational;

TEST_CASE("ExactSum equals the rational sum of doubles, squares and products", "[exact][metrics]") {
  Rng rng(20261122);
  for (int trial = 0; trial < 200; ++trial) {
    ExactSum s;
    Rational r;
    const int n = 1 + static_cast<int>(rng.next_u32() % 64);
    for (int i = 0; i < n; ++i) {
      // Random doubles over the whole range, including subnormals and both signs.
      double x = std::bit_cast<double>(rng.next_u64());
      if (!std::isfinite(x)) x = 1.5;
      if (std::fabs(x) > 1e150 || (std::fabs(x) < 1e-150 && x != 0)) {
        s.add(x);  // too large/small to square within the accumulator's range: add plainly
        r = r + Rational::from_double(x);
      } else {
        s.add_square(x);
        r = r + Rational::from_double(x) * Rational::from_double(x);
      }
    }
    REQUIRE(exact::from_parts(s.parts()) == r);
    CHECK(s.to_double() == r.to_double());
  }
}

TEST_CASE("analysis SSE, signal and bias equal a rational recomputation on sampled tensors", "[exact][metrics]") {
  const char* specs[] = {"mxfp4", "nvfp4", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8", "mxsf", "mxfp6_e2m3", "e4m3:float32_t0"};
  const char* dists[] = {"normal:0,1", "laplace:0,1", "student_t:3", "blockexp:block=32,lo=-30,hi=30",
                         "outliers:rate=0.01,mag=1000"};
  std::uint64_t seed = 1;
  for (const char* spec : specs) {
    for (const char* dist : dists) {
      INFO(spec << " " << dist);
      auto f = parse_block_format(spec);
      REQUIRE(f.ok());
      auto t = generate(dist, "16x96", seed++, DType::F32);
      REQUIRE(t.ok());
      const auto x = t->exact_values();
      auto q = quantize(*f, x, t->shape());
      REQUIRE(q.ok());
      const Analysis a = analyze(*f, x, *q);
      Rational sse, signal, bias;
      double max_abs = 0;
      std::int64_t underflows = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const Rational e = Rational::from_double(q->values[i]) - Rational::from_double(x[i]);
        sse = sse + e * e;
        signal = signal + Rational::from_double(x[i]) * Rational::from_double(x[i]);
        bias = bias + e;
        max_abs = std::max(max_abs, e.abs().to_double());
        if (x[i] != 0 && q->values[i] == 0) ++underflows;
      }
      CHECK(exact::from_parts(a.total.sse.parts()) == sse);
      CHECK(exact::from_parts(a.total.signal.parts()) == signal);
      CHECK(exact::from_parts(a.total.error_sum.parts()) == bias);
      CHECK(a.total.sse.to_double() == sse.to_double());
      CHECK(a.total.max_abs_error == max_abs);
      CHECK(a.total.underflows == underflows);
      // Per-block sums add up to the total exactly.
      ExactSum blocks;
      for (const auto& b : a.blocks) blocks.add(b.sse);
      CHECK(exact::from_parts(blocks.parts()) == sse);
    }
  }
}
