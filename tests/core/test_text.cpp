// Checks engine/core's text helpers against hand-written expectations from the C++ definitions of from_chars and
// to_chars (whole-text parsing, shortest round-trip decimals).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "mxlab/core/text.hpp"

using namespace mxlab;

TEST_CASE("trim, lower and lower_trim", "[core][text]") {
  CHECK(trim("  a b \t\n") == "a b");
  CHECK(trim("") == "");
  CHECK(trim(" \t ") == "");
  CHECK(lower("MxFP4_E2M1") == "mxfp4_e2m1");
  CHECK(lower_trim("  NVFP4 ") == "nvfp4");
}

TEST_CASE("parse_whole reads the whole text or nothing", "[core][text]") {
  CHECK(parse_whole<int>("42") == 42);
  CHECK(parse_whole<int>("-7") == -7);
  CHECK_FALSE(parse_whole<unsigned>("-7"));
  CHECK_FALSE(parse_whole<int>(""));
  CHECK_FALSE(parse_whole<int>("4x"));
  CHECK_FALSE(parse_whole<int>(" 4"));
  CHECK_FALSE(parse_whole<int>("+4"));
  CHECK_FALSE(parse_whole<std::int8_t>("128"));
  CHECK(parse_whole<std::uint64_t>("18446744073709551615") == UINT64_MAX);
  CHECK_FALSE(parse_whole<std::uint64_t>("18446744073709551616"));
  CHECK(parse_whole_in<int>("32", 1, 32) == 32);
  CHECK_FALSE(parse_whole_in<int>("33", 1, 32));
  CHECK_FALSE(parse_whole_in<int>("0", 1, 32));
}

TEST_CASE("parse_code takes decimal, 0x and (when asked) 0b", "[core][text]") {
  CHECK(parse_code("255") == 255u);
  CHECK(parse_code("0xFF") == 255u);
  CHECK(parse_code("0X3f800000") == 0x3f800000u);
  CHECK_FALSE(parse_code("0x"));
  CHECK_FALSE(parse_code("0b101"));
  CHECK(parse_code("0b101", true) == 5u);
  CHECK_FALSE(parse_code("-1"));
}

TEST_CASE("parse_double: decimal, hexadecimal, inf and nan, with a sign", "[core][text]") {
  CHECK(parse_double("1e-3") == 1e-3);
  CHECK(parse_double("+0.5") == 0.5);
  CHECK(parse_double("-0.5") == -0.5);
  CHECK(parse_double("0x1p-6") == 0.015625);
  CHECK(parse_double("-0x1.8p1") == -3.0);
  CHECK(parse_double("inf") == std::numeric_limits<double>::infinity());
  CHECK(std::isnan(*parse_double("nan")));
  CHECK_FALSE(parse_double(""));
  CHECK_FALSE(parse_double("+-1"));
  CHECK_FALSE(parse_double("1.5x"));
  CHECK_FALSE(parse_double(" 1"));
  CHECK_FALSE(parse_double("1e400"));  // out of range: not read as infinity
}

TEST_CASE("shortest_decimal reads back exactly", "[core][text]") {
  CHECK(shortest_decimal(0.1) == "0.1");
  CHECK(shortest_decimal(65536) == "65536");
  CHECK(shortest_decimal(1e-5) == "1e-05");
  CHECK(shortest_decimal(std::numeric_limits<double>::infinity()) == "inf");
  for (double v : {1.0 / 3, 2.0 / 3e-300, 6.02214076e23, std::numeric_limits<double>::denorm_min()})
    CHECK(*parse_double(shortest_decimal(v)) == v);
}
