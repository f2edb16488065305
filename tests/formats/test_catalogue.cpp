// Checks the catalogue against docs formats facts (OCP MX v1.0, OFP8 rev 1.0, IEEE 754) and the spec tables.
#include <catch2/catch.hpp>

#include <cmath>

#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"

using namespace mxlab;

TEST_CASE("E2M1 positive values are the OCP list", "[formats]") {
  const Format* f = find_catalogue_format("e2m1");
  REQUIRE(f != nullptr);
  const double expected[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (std::uint32_t c = 0; c < 8; ++c) CHECK(f->decode(c) == expected[c]);
  for (std::uint32_t c = 8; c < 16; ++c) CHECK(f->decode(c) == -expected[c - 8]);
}

TEST_CASE("E4M3 has 126 positive nonzero finite codes and NaN only at S.1111.111", "[formats]") {
  const Format* f = find_catalogue_format("float8_e4m3fn");
  REQUIRE(f != nullptr);
  int positive = 0;
  for (std::uint32_t c = 0; c < 256; ++c) {
    const double v = f->decode(c);
    if (std::isnan(v)) {
      CHECK((c == 0x7F || c == 0xFF));
    } else if (v > 0) {
      ++positive;
    }
  }
  CHECK(positive == 126);
  CHECK(f->decode(0x7E) == 448);
}

TEST_CASE("E8M0 code c is 2^(c-127); 0x00 is 2^-127, not zero; 0xFF is NaN", "[formats]") {
  const Format* f = find_catalogue_format("e8m0");
  REQUIRE(f != nullptr);
  for (std::uint32_t c = 0; c < 255; ++c) CHECK(f->decode(c) == std::ldexp(1.0, static_cast<int>(c) - 127));
  CHECK(std::isnan(f->decode(0xFF)));
  CHECK_FALSE(f->has_zero());
}

TEST_CASE("E5M2 specials are IEEE style", "[formats]") {
  const Format* f = find_catalogue_format("e5m2");
  REQUIRE(f != nullptr);
  CHECK(std::isinf(f->decode(0x7C)));
  CHECK(std::isnan(f->decode(0x7D)));
  CHECK(std::isnan(f->decode(0x7E)));
  CHECK(std::isnan(f->decode(0x7F)));
  CHECK(f->decode(0x7B) == 57344);
}

TEST_CASE("fnuz formats: 0x80 is NaN, no negative zero", "[formats]") {
  for (const char* name : {"float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"}) {
    const Format* f = find_catalogue_format(name);
    REQUIRE(f != nullptr);
    CHECK(std::isnan(f->decode(0x80)));
    CHECK_FALSE(f->has_negative_zero());
    CHECK(f->finite_count() == 255);
  }
}

TEST_CASE("MXINT8 is k * 2^-6 with -128 unused", "[formats]") {
  const Format* f = find_catalogue_format("mxint8");
  REQUIRE(f != nullptr);
  CHECK(f->decode(0x7F) == 127.0 / 64);
  CHECK(f->decode(0x81) == -127.0 / 64);
  CHECK(f->classify(0x80) == CodeClass::Unused);
  CHECK(f->max_code(true) == 0x81);
}

TEST_CASE("storage bits and code counts of every catalogue row", "[formats]") {
  for (const Format& f : catalogue_formats()) {
    INFO(f.name());
    CHECK(f.code_count() == (std::uint64_t{1} << f.bits()));
    if (f.bits() <= 16) {
      std::uint64_t finite = 0;
      for (std::uint64_t c = 0; c < f.code_count(); ++c) {
        const CodeClass k = f.classify(static_cast<std::uint32_t>(c));
        if (k != CodeClass::Nan && k != CodeClass::Inf && k != CodeClass::Unused) ++finite;
      }
      CHECK(finite == f.finite_count());
      CHECK(f.sorted_values().size() == finite);
      CHECK(f.sorted_values().back().value == f.max_finite());
      CHECK(f.sorted_values().front().value == f.lowest());
    }
  }
}

TEST_CASE("MX-SAFE element: E2M5 above 2^-2, E3M2 bias 10 below", "[formats]") {
  const Format* f = find_catalogue_format("float8_mxsf");
  REQUIRE(f != nullptr);
  CHECK(f->decode(0x7F) == 1.96875);                     // 0.11.11111
  CHECK(f->decode(0x20) == 0.25);                        // 0.01.00000: E2M5 smallest normal
  CHECK(f->decode(0x1F) == 1.75 * std::ldexp(1.0, -3));  // 0.00.111.11: E3M2 e=7 -> 2^-3 * 1.75
  CHECK(f->decode(0x04) == std::ldexp(1.0, -9));         // 0.00.001.00: 2^-9
  CHECK(f->decode(0x01) == std::ldexp(1.0, -11));        // 0.00.000.01: subnormal 2^-9 * 0.25
  CHECK(f->classify(0x01) == CodeClass::Subnormal);
  CHECK(f->classify(0x04) == CodeClass::Normal);
}
