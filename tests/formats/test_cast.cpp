// Hand-worked casts from the OCP/OFP8 specifications and IEEE 754 (independent of the oracle).
#include <catch2/catch.hpp>

#include <cmath>

#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"

using namespace mxlab;

namespace {
double q(const char* fmt, double x, Rounding r = Rounding::NearestEven, Overflow ov = Overflow::Default) {
  const Format* f = find_catalogue_format(fmt);
  REQUIRE(f != nullptr);
  CastOptions o;
  o.rounding = r;
  o.overflow = ov;
  auto ro = resolve_options(*f, o);
  REQUIRE(ro.ok());
  return f->decode(cast(*f, x, *ro).code);
}
}  // namespace

TEST_CASE("E2M1 ties to even, away, toward zero", "[cast]") {
  CHECK(q("e2m1", 0.25) == 0.0);  // tie between 0 and 0.5 -> even code 0
  CHECK(q("e2m1", 0.75) == 1.0);  // tie 0.5 (odd) / 1.0 (even)
  CHECK(q("e2m1", 2.5) == 2.0);
  CHECK(q("e2m1", 5.0) == 4.0);
  CHECK(q("e2m1", 2.5, Rounding::NearestAway) == 3.0);
  CHECK(q("e2m1", -2.5, Rounding::NearestAway) == -3.0);
  CHECK(q("e2m1", 2.5, Rounding::NearestZero) == 2.0);
  CHECK(q("e2m1", 7.0) == 6.0);  // saturates (no inf)
  CHECK(q("e2m1", 1e30) == 6.0);
  CHECK(std::signbit(q("e2m1", -0.1)));
}

TEST_CASE("E4M3 overflow: saturate by default, NaN past 464 when asked", "[cast]") {
  CHECK(q("e4m3", 460) == 448);
  CHECK(q("e4m3", 464, Rounding::NearestEven, Overflow::Nan) == 448);  // tie to even 448
  CHECK(std::isnan(q("e4m3", 464.001, Rounding::NearestEven, Overflow::Nan)));
  CHECK(q("e4m3", 1000, Rounding::TowardZero, Overflow::Nan) == 448);  // IEEE 7.4: RZ keeps max
  CHECK(q("e4m3", 1000) == 448);
}

TEST_CASE("E5M2 overflows to inf under the default policy", "[cast]") {
  CHECK(std::isinf(q("e5m2", 61440)));     // midpoint of 57344 and 65536: tie to even (65536) -> inf
  CHECK(q("e5m2", 61439.99) == 57344);
  CHECK(q("e5m2", 1e9, Rounding::Down) == 57344);
  CHECK(std::isinf(q("e5m2", 1e9, Rounding::Up)));
  CHECK(q("e5m2", -1e9, Rounding::Up) == -57344);
}

TEST_CASE("FP16 subnormals and FP32", "[cast]") {
  CHECK(q("fp16", std::ldexp(1.0, -25)) == 0.0);           // tie to even zero
  CHECK(q("fp16", std::ldexp(1.5, -25)) == std::ldexp(1.0, -24));
  CHECK(q("fp32", 0.1) == static_cast<double>(0.1f));
  CHECK(q("bf16", 1.00390625) == 1.0);                      // 1 + 2^-8: tie to even
  CHECK(q("bf16", 1.01171875) == 1.015625);                 // 1 + 3*2^-8: tie to even (up)
}

TEST_CASE("E8M0 rounds on the exponent; ties go to the even code", "[cast]") {
  CHECK(q("e8m0", 1.5) == 2.0);  // 1 = code 127 (odd), 2 = code 128 (even)
  CHECK(q("e8m0", 3.0) == 2.0);  // 2 = code 128 (even), 4 = code 129
  CHECK(q("e8m0", 0.0) == std::ldexp(1.0, -127));
  CHECK(q("e8m0", 1.2, Rounding::Up) == 2.0);
}

TEST_CASE("MXINT8 symmetric saturation", "[cast]") {
  CHECK(q("mxint8", 3.0) == 127.0 / 64);
  CHECK(q("mxint8", -3.0) == -127.0 / 64);
  CHECK(q("mxint8", 1.0 / 128) == 0.0);  // tie to even
  CHECK(q("mxint8", 3.0 / 128) == 2.0 / 64);
}

TEST_CASE("stochastic rounding uses the top random bits", "[cast]") {
  const Format* f = find_catalogue_format("e2m1");
  CastOptions o;
  o.rounding = Rounding::Stochastic;
  o.random_bits = 2;
  auto ro = resolve_options(*f, o);
  REQUIRE(ro.ok());
  // 2.25 lies a quarter of the way from 2 to 3: t = 1 (of 4); up iff r >= 3.
  CHECK(f->decode(cast(*f, 2.25, *ro, 0xBFFFFFFFU).code) == 2.0);  // r = 2
  CHECK(f->decode(cast(*f, 2.25, *ro, 0xC0000000U).code) == 3.0);  // r = 3
}

TEST_CASE("options that a format cannot honour are rejected", "[cast]") {
  const Format* f = find_catalogue_format("e4m3");
  CastOptions o;
  o.overflow = Overflow::Inf;
  auto r = resolve_options(*f, o);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("no infinity"));
  const Format* g = find_catalogue_format("e2m1");
  o.overflow = Overflow::Nan;
  CHECK_FALSE(resolve_options(*g, o).ok());
}
