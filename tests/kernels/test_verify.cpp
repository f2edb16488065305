// Checks verify_cast, the exhaustive SIMD-versus-reference comparison, on sub-ranges of the float32 bit
// patterns against a direct loop over the scalar reference mxlab::cast.
#include <catch2/catch.hpp>

#include <atomic>
#include <bit>

#include "mxlab/core/random.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/kernels/verify.hpp"

using namespace mxlab;

TEST_CASE("verify_cast finds no mismatch on sub-ranges of the float32 patterns", "[kernels][slow]") {
  struct Case {
    const char* format;
    Rounding rounding;
    std::uint64_t begin;
    std::uint64_t count;
  };
  // Zero and float32 subnormals; E4M3's range; negatives around E2M1's range; the top: infinities and NaNs;
  // E8M0 at float32's smallest normals.
  const Case cases[] = {
      {"float8_e4m3fn", Rounding::NearestEven, 0x00000000U, 1U << 24},
      {"float8_e4m3fn", Rounding::NearestEven, 0x3C000000U, 1U << 24},
      {"float4_e2m1fn", Rounding::Stochastic, 0xBF000000U, 1U << 24},
      {"float8_e5m2", Rounding::Odd, 0xFF800000U - (1U << 23), 1U << 24},
      {"float8_e8m0fnu", Rounding::Up, 0x00700000U, 1U << 24},
  };
  for (const Case& c : cases) {
    const Format& f = *find_catalogue_format(c.format);
    CastOptions o;
    o.rounding = c.rounding;
    VerifyOptions v;
    v.threads = 2;
    v.begin = c.begin;
    v.end = c.begin + c.count;
    v.seed = 77;
    std::atomic<int> calls{0};
    v.progress = [&](std::uint64_t done, std::uint64_t total) {
      CHECK(done <= total);
      ++calls;
      return true;
    };
    const auto report = verify_cast(f, o, v);
    REQUIRE(report.ok());
    INFO(c.format << " from " << c.begin);
    CHECK(report->checked == c.count);
    CHECK(report->mismatches == 0);
    CHECK(report->examples.empty());
    CHECK_FALSE(report->cancelled);
    CHECK(report->simd_target == active_simd_target());
    CHECK(calls.load() >= 1);  // at least the final report
  }
}

TEST_CASE("verify_cast compares against the reference with the documented random stream", "[kernels]") {
  // The SIMD side of verify_cast is cast_f32 with first_index = the bit pattern; check that pairing
  // directly: the kernel over patterns [b, b + n) equals mxlab::cast with stochastic_bits(seed, pattern).
  const Format& f = *find_catalogue_format("float6_e3m2fn");
  CastOptions o;
  o.rounding = Rounding::Stochastic;
  o.random_bits = 5;
  const auto kernel = CastKernel::make(f, o);
  REQUIRE(kernel.ok());
  const std::uint32_t begin = 0x3E000000U;
  std::vector<float> in(1 << 16);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::bit_cast<float>(begin + static_cast<std::uint32_t>(i));
  std::vector<std::uint8_t> out(in.size());
  KernelRun run;
  run.seed = 9;
  run.first_index = begin;
  REQUIRE(kernel->cast_f32(in, out, run).ok());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto bits = begin + static_cast<std::uint32_t>(i);
    if (out[i] != cast(f, static_cast<double>(in[i]), kernel->options(), stochastic_bits(9, bits)).code) {
      FAIL("pattern " << bits);
    }
  }
  VerifyOptions v;
  v.begin = begin;
  v.end = begin + in.size();
  v.seed = 9;
  const auto report = verify_cast(f, o, v);
  REQUIRE(report.ok());
  CHECK(report->mismatches == 0);
  CHECK(report->checked == in.size());
}

TEST_CASE("verify_cast reports bad requests and stops when asked", "[kernels]") {
  const Format& e4m3 = *find_catalogue_format("e4m3");
  VerifyOptions v;
  v.end = (std::uint64_t{1} << 32) + 1;
  CHECK_FALSE(verify_cast(e4m3, CastOptions{}, v).ok());
  v.begin = 10;
  v.end = 5;
  CHECK_FALSE(verify_cast(e4m3, CastOptions{}, v).ok());
  CHECK_FALSE(verify_cast(*find_catalogue_format("nf4"), CastOptions{}, VerifyOptions{}).ok());
  CastOptions inf_policy;
  inf_policy.overflow = Overflow::Inf;
  CHECK_FALSE(verify_cast(e4m3, inf_policy, VerifyOptions{}).ok());

  VerifyOptions cancel;  // the whole range, stopped at the first progress report
  cancel.threads = 2;
  cancel.progress = [](std::uint64_t, std::uint64_t) { return false; };
  const auto report = verify_cast(e4m3, CastOptions{}, cancel);
  REQUIRE(report.ok());
  CHECK(report->cancelled);
  CHECK(report->checked < (std::uint64_t{1} << 32));
  CHECK(report->mismatches == 0);
}
