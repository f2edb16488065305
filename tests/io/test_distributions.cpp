// Checks generated tensors against replays of the documented algorithms from mxlab::Rng and closed-form moments.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "mxlab/core/random.hpp"
#include "mxlab/io/distributions.hpp"

using namespace mxlab;

namespace {

constexpr std::size_t kN = 200000;

// Sample mean and (n-1)-normalised variance, accumulated in long double.
struct Moments {
  double mean = 0;
  double var = 0;
};

Moments moments(const std::vector<double>& x) {
  long double s = 0;
  for (double v : x) s += v;
  const long double m = s / static_cast<long double>(x.size());
  long double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  return {static_cast<double>(m), static_cast<double>(ss / static_cast<long double>(x.size() - 1))};
}

std::vector<double> draw(const std::string& spec, std::uint64_t seed, std::size_t n = kN) {
  auto t = generate(spec, std::to_string(n), seed, DType::F64);
  REQUIRE(t.ok());
  return t->f64_data();
}

// Checks the sample mean and variance of n draws against the population mean mu, variance sigma2 and
// fourth central moment mu4. Standard errors: mean sqrt(sigma2 / n); variance sqrt((mu4 - sigma2^2) / n)
// (the large-sample variance of the sample variance). Tolerance: 6 standard errors, a two-sided
// probability below 2e-9 for a normal statistic, so a failure means a wrong distribution, not bad luck.
void check_moments(const std::vector<double>& x, double mu, double sigma2, double mu4) {
  const auto n = static_cast<double>(x.size());
  const Moments m = moments(x);
  const double se_mean = std::sqrt(sigma2 / n);
  const double se_var = std::sqrt((mu4 - sigma2 * sigma2) / n);
  CHECK(std::fabs(m.mean - mu) < 6 * se_mean);
  CHECK(std::fabs(m.var - sigma2) < 6 * se_var);
}

// Checks an observed fraction against a probability p: binomial standard error sqrt(p (1 - p) / n),
// tolerance 6 standard errors (same reasoning as above).
void check_fraction(std::size_t hits, std::size_t n, double p) {
  const double se = std::sqrt(p * (1 - p) / static_cast<double>(n));
  CHECK(std::fabs(static_cast<double>(hits) / static_cast<double>(n) - p) < 6 * se);
}

// The polar method as distributions.hpp documents it, replayed from the raw Rng.
struct PolarReplay {
  Rng rng;
  bool has = false;
  double spare = 0;
  explicit PolarReplay(std::uint64_t seed) : rng(seed) {}
  double next() {
    if (has) {
      has = false;
      return spare;
    }
    for (;;) {
      const double u = 2.0 * rng.uniform() - 1.0;
      const double v = 2.0 * rng.uniform() - 1.0;
      const double s = u * u + v * v;
      if (s >= 1.0 || s == 0.0) continue;
      const double f = std::sqrt(-2.0 * std::log(s) / s);
      spare = v * f;
      has = true;
      return u * f;
    }
  }
};

}  // namespace

TEST_CASE("distribution specs parse to their parameters", "[io][distributions]") {
  auto n = parse_distribution("normal:0.5,2");
  REQUIRE(n.ok());
  REQUIRE(std::holds_alternative<NormalDist>(*n));
  CHECK(std::get<NormalDist>(*n).mean == 0.5);
  CHECK(std::get<NormalDist>(*n).stddev == 2);

  auto k = parse_distribution(" Outliers : mag = 50 , rate=0.01 ");
  REQUIRE(k.ok());
  const auto& o = std::get<OutlierDist>(*k);
  CHECK(o.rate == 0.01);
  CHECK(o.mag == 50);
  CHECK(o.mean == 0);
  CHECK(o.stddev == 1);

  auto mixed = parse_distribution("lognormal:0,2,sign=random");
  REQUIRE(mixed.ok());
  CHECK(std::get<LogNormalDist>(*mixed).sigma == 2);
  CHECK(std::get<LogNormalDist>(*mixed).random_sign);

  auto b = parse_distribution("blockexp:block=32,lo=-20,hi=20");
  REQUIRE(b.ok());
  CHECK(std::get<BlockExpDist>(*b).block == 32);
  CHECK(std::get<BlockExpDist>(*b).lo == -20);

  auto defaults = parse_distribution("laplace");
  REQUIRE(defaults.ok());
  CHECK(std::get<LaplaceDist>(*defaults).scale == 1);

  for (const char* spec :
       {"normal:0,1", "laplace:0,1", "student_t:3", "lognormal:0,2", "uniform:-1,1", "outliers:rate=0.001,mag=100",
        "blockexp:block=32,lo=-20,hi=20", "normal:mean=1e-300,std=0.1", "lognormal:mu=-1,sigma=0.5,sign=random"}) {
    INFO(spec);
    auto d = parse_distribution(spec);
    REQUIRE(d.ok());
    const std::string canonical = distribution_text(*d);
    auto again = parse_distribution(canonical);
    REQUIRE(again.ok());
    CHECK(distribution_text(*again) == canonical);
    CHECK(again->index() == d->index());
  }
  CHECK(distribution_text(NormalDist{}) == "normal:mean=0,std=1");
  CHECK(distribution_text(OutlierDist{}) == "outliers:rate=0.001,mag=100,mean=0,std=1");
}

TEST_CASE("malformed distribution specs get one message naming the spec and the problem",
          "[io][distributions][errors]") {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty spec"},
      {"gauss:0,1",
       "unknown distribution 'gauss' (known: normal, laplace, student_t, lognormal, uniform, outliers, blockexp)"},
      {"normal:", "nothing after ':' (drop the ':' to use the defaults)"},
      {"normal:0,x", "parameter 'std' value 'x' is not a number"},
      {"normal:0,1,2", "too many values: normal takes at most 2 (mean, std)"},
      {"normal:foo=1", "unknown parameter 'foo' (normal takes mean, std)"},
      {"normal:mean=1,mean=2", "parameter 'mean' is given twice"},
      {"normal:1,mean=2", "parameter 'mean' is given twice"},
      {"normal:mean=1,0", "positional value '0' follows key=value arguments"},
      {"normal:0,,1", "argument 2 is empty"},
      {"normal:std=", "no value for 'std'"},
      {"normal:0,-1", "std must be positive and finite"},
      {"normal:0,1e999", "parameter 'std' value '1e999' is beyond the double range"},
      {"normal:nan,1", "mean must be finite"},
      {"student_t", "parameter 'dof' is required (e.g. \"student_t:dof=3\")"},
      {"student_t:0", "dof must be positive and finite"},
      {"lognormal:sign=maybe", "parameter 'sign' value 'maybe' is not 'positive' or 'random'"},
      {"uniform:1,-1", "lo must be less than hi"},
      {"uniform:-1e308,1e308", "hi - lo must be finite"},
      {"outliers:rate=2", "rate must lie in [0, 1]"},
      {"outliers:mag=0", "mag must be positive and finite"},
      {"blockexp:block=0", "block must be at least 1"},
      {"blockexp:block=1.5", "parameter 'block' value '1.5' is not an integer"},
      {"blockexp:lo=5,hi=-5", "lo must not exceed hi"},
      {"blockexp:hi=2000", "exponents lo and hi must lie in -1074..1023 (2^e must be a double)"},
  };
  for (const auto& [spec, problem] : cases) {
    INFO(spec);
    auto d = parse_distribution(spec);
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().message == "distribution '" + std::string(spec) + "': " + problem);
  }
}

TEST_CASE("shapes parse from AxBxC text", "[io][distributions]") {
  CHECK(*parse_shape("1024x1024") == std::vector<std::int64_t>{1024, 1024});
  CHECK(*parse_shape(" 2 x 3 x 4 ") == std::vector<std::int64_t>{2, 3, 4});
  CHECK(*parse_shape("4096") == std::vector<std::int64_t>{4096});
  CHECK(parse_shape("scalar")->empty());
  const std::pair<const char*, const char*> bad[] = {
      {"", "shape '': empty (write e.g. 1024x1024, 4096 or scalar)"},
      {"10x", "shape '10x': dimension 2 is empty"},
      {"10xa", "shape '10xa': dimension 2 'a' is not a positive integer"},
      {"-3", "shape '-3': dimension 1 '-3' is not a positive integer"},
      {"0x5", "shape '0x5': dimension 1 is 0; every dimension must be at least 1"},
      {"2.5", "shape '2.5': dimension 1 '2.5' is not a positive integer"},
      {"99999999999999999999", "shape '99999999999999999999': dimension 1 is too large"},
      {"4294967296x4294967296x4294967296",
       "shape '4294967296x4294967296x4294967296': shape "
       "4294967296x4294967296x4294967296 has more elements than fit in memory"},
  };
  for (const auto& [text, message] : bad) {
    INFO(text);
    auto s = parse_shape(text);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().message == message);
  }
}

TEST_CASE("generated tensors are reproducible for a seed", "[io][distributions]") {
  for (const char* spec : {"normal:0,1", "laplace:0,1", "student_t:3", "lognormal:0,2,sign=random", "uniform:-1,1",
                           "outliers:rate=0.01,mag=100", "blockexp:block=32,lo=-20,hi=20"}) {
    INFO(spec);
    auto a = generate(spec, "64x33", 42, DType::F64);
    auto b = generate(spec, "64x33", 42, DType::F64);
    auto c = generate(spec, "64x33", 43, DType::F64);
    auto f = generate(spec, "64x33", 42, DType::F32);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(c.ok());
    REQUIRE(f.ok());
    CHECK(a->shape() == std::vector<std::int64_t>{64, 33});
    CHECK(a->f64_data() == b->f64_data());
    CHECK(a->f64_data() != c->f64_data());
    CHECK(f->dtype() == DType::F32);
    // The float32 tensor is the float64 tensor of the same seed rounded to nearest.
    for (std::size_t i = 0; i < a->size(); ++i)
      REQUIRE(std::bit_cast<std::uint32_t>(f->data()[i]) ==
              std::bit_cast<std::uint32_t>(static_cast<float>(a->f64_data()[i])));
  }
}

TEST_CASE("generators follow their documented algorithms draw for draw", "[io][distributions]") {
  const std::uint64_t seed = 2024;
  SECTION("uniform: lo + (hi - lo) * U") {
    auto t = generate("uniform:-3,5", "1000", seed, DType::F64);
    REQUIRE(t.ok());
    Rng rng(seed);
    for (std::size_t i = 0; i < 1000; ++i) REQUIRE(t->f64_data()[i] == -3.0 + 8.0 * rng.uniform());
  }
  SECTION("normal: Marsaglia polar pairs, u-variate first") {
    auto t = generate("normal:1,3", "1001", seed, DType::F64);
    REQUIRE(t.ok());
    PolarReplay z(seed);
    for (std::size_t i = 0; i < 1001; ++i) REQUIRE(t->f64_data()[i] == 1.0 + 3.0 * z.next());
  }
  SECTION("laplace: one word, Exp(1) from the top 53 bits, sign from bit 0") {
    auto t = generate("laplace:0.5,2", "1000", seed, DType::F64);
    REQUIRE(t.ok());
    Rng rng(seed);
    for (std::size_t i = 0; i < 1000; ++i) {
      const std::uint64_t r = rng.next_u64();
      const double e = -std::log(1.0 - static_cast<double>(r >> 11) * 0x1.0p-53);
      REQUIRE(t->f64_data()[i] == 0.5 + 2.0 * ((r & 1) ? -e : e));
    }
  }
  SECTION("blockexp: exponent per block, then one normal per element") {
    auto t = generate("blockexp:block=4,lo=-2,hi=3", "10", seed, DType::F64);
    REQUIRE(t.ok());
    Rng rng(seed);
    PolarReplay z(0);
    std::vector<double> want;
    for (int block = 0; block < 3; ++block) {
      std::uint64_t r = 0;
      do r = rng.next_u64();
      while (r < (0 - std::uint64_t{6}) % 6);
      const int e = -2 + static_cast<int>(r % 6);
      for (int j = 0; j < 4 && want.size() < 10; ++j) {
        // The normal stream shares the Rng: replay the polar method on `rng` itself.
        z.rng = rng;
        want.push_back(std::ldexp(z.next(), e));
        rng = z.rng;
      }
    }
    REQUIRE(t->f64_data() == want);
  }
}

TEST_CASE("generated samples have the population moments", "[io][distributions][statistics]") {
  SECTION("normal(1.5, 2^2): mu4 = 3 sigma^4") { check_moments(draw("normal:1.5,2", 1), 1.5, 4.0, 3 * 16.0); }
  SECTION("laplace(0.5, b=2): variance 2 b^2, mu4 = 24 b^4") {
    check_moments(draw("laplace:0.5,2", 2), 0.5, 8.0, 24 * 16.0);
  }
  SECTION("student_t(5): variance 5/3, mu4 = 3 nu^2 / ((nu-2)(nu-4)) = 25") {
    check_moments(draw("student_t:5", 3), 0.0, 5.0 / 3.0, 25.0);
  }
  SECTION("student_t(3) and (1): P(|T| <= 1) from the closed-form CDF") {
    // nu = 3: F(t) = 1/2 + (1/pi) (t/sqrt3 / (1 + t^2/3) + atan(t/sqrt3)), so P(|T|<=1) = (2/pi)(sqrt3/4 + pi/6).
    const auto t3 = draw("student_t:3", 4);
    std::size_t in3 = 0;
    for (double v : t3) in3 += std::fabs(v) <= 1.0 ? 1 : 0;
    check_fraction(in3, t3.size(), 2 / std::numbers::pi * (std::sqrt(3.0) / 4 + std::numbers::pi / 6));
    // nu = 1 is the Cauchy distribution: P(|T| <= 1) = 1/2.
    const auto t1 = draw("student_t:1", 5);
    std::size_t in1 = 0;
    for (double v : t1) in1 += std::fabs(v) <= 1.0 ? 1 : 0;
    check_fraction(in1, t1.size(), 0.5);
  }
  SECTION("lognormal(-0.5, 0.75) with random sign: log|x| is normal, signs are fair coins") {
    const auto x = draw("lognormal:-0.5,0.75,sign=random", 6);
    std::vector<double> logs;
    std::size_t negative = 0;
    for (double v : x) {
      logs.push_back(std::log(std::fabs(v)));
      negative += v < 0 ? 1 : 0;
    }
    check_moments(logs, -0.5, 0.5625, 3 * 0.5625 * 0.5625);
    check_fraction(negative, x.size(), 0.5);
    const auto positive = draw("lognormal:0,1", 7, 1000);
    for (double v : positive) CHECK(v > 0);
  }
  SECTION("uniform(-3, 5): mean 1, variance w^2/12, mu4 = w^4/80, all inside [lo, hi]") {
    const auto x = draw("uniform:-3,5", 8);
    check_moments(x, 1.0, 64.0 / 12.0, 4096.0 / 80.0);
    for (double v : x) REQUIRE((v >= -3.0 && v <= 5.0));
  }
  SECTION("outliers(rate 0.01, mag 100): P(|x| > 10) = rate P(|Z| > 0.1) + (1 - rate) P(|Z| > 10)") {
    const auto x = draw("outliers:rate=0.01,mag=100", 9);
    std::size_t big = 0;
    for (double v : x) big += std::fabs(v) > 10 ? 1 : 0;
    const double p = 0.01 * std::erfc(0.1 / std::sqrt(2.0)) + 0.99 * std::erfc(10 / std::sqrt(2.0));
    check_fraction(big, x.size(), p);
  }
  SECTION("blockexp with lo = hi: every value is exactly 2^e times a standard normal") {
    const auto x = draw("blockexp:block=16,lo=3,hi=3", 10);
    std::vector<double> z;
    for (double v : x) z.push_back(v / 8.0);
    check_moments(z, 0.0, 1.0, 3.0);
  }
  SECTION("blockexp(block 64, -20..20): block scales are uniform over the exponents") {
    // Estimate each block's exponent as round(log2(rms)). The rms of 64 standard normals lies in
    // [2^-0.5, 2^0.5] unless chi2_64 < 32 or > 128 (probability about 3e-4), so the estimate is the
    // drawn exponent, rarely off by one. Over 3125 blocks: every exponent appears (each is missed with
    // probability (40/41)^3125 < 1e-33), and the mean estimate is 0 within 6 standard errors of a
    // discrete uniform on 41 values (variance (41^2 - 1) / 12), plus 0.01 for the rare off-by-one.
    const auto x = draw("blockexp:block=64,lo=-20,hi=20", 11);
    const std::size_t blocks = x.size() / 64;
    std::vector<int> seen(43, 0);
    double sum = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      double ss = 0;
      for (std::size_t i = 0; i < 64; ++i) ss += x[b * 64 + i] * x[b * 64 + i];
      const int e = static_cast<int>(std::lround(std::log2(std::sqrt(ss / 64))));
      REQUIRE((e >= -21 && e <= 21));
      ++seen[static_cast<std::size_t>(e + 21)];
      sum += e;
    }
    for (int e = -20; e <= 20; ++e) CHECK(seen[static_cast<std::size_t>(e + 21)] > 0);
    const double se = std::sqrt((41.0 * 41.0 - 1) / 12.0 / static_cast<double>(blocks));
    CHECK(std::fabs(sum / static_cast<double>(blocks)) < 6 * se + 0.01);
  }
}

TEST_CASE("generate rejects what it cannot produce", "[io][distributions][errors]") {
  auto h = generate("normal:0,1", "4", 1, DType::F16);
  REQUIRE_FALSE(h.ok());
  CHECK(h.error().message ==
        "generate normal:mean=0,std=1 shape 4: dtype f16 is not generated; generate f32 or f64 and cast with the "
        "formats module");
  auto bad = generate(NormalDist{0, -1}, {4}, 1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message == "distribution 'normal:mean=0,std=-1': std must be positive and finite");
  auto neg = generate(NormalDist{}, {-4}, 1);
  REQUIRE_FALSE(neg.ok());
  CHECK(neg.error().message == "generate normal:mean=0,std=1 shape -4: dimension 1 is negative (-4)");
  auto spec = generate("normal:0,1", "4x", 1);
  REQUIRE_FALSE(spec.ok());
  CHECK(spec.error().message == "shape '4x': dimension 2 is empty");
  auto empty = generate(UniformDist{}, {0}, 1);
  REQUIRE(empty.ok());
  CHECK(empty->size() == 0);
}
