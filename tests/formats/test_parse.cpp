// Checks format-string parsing against the catalogue and the grammar in docs/formats-strings.md.
#include <catch2/catch.hpp>

#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"

using namespace mxlab;

TEST_CASE("names, aliases and ml_dtypes spellings resolve to catalogue rows", "[formats][parse]") {
  const std::pair<const char*, const char*> cases[] = {
      {"float8_e4m3fn", "float8_e4m3fn"}, {"e4m3", "float8_e4m3fn"},     {"E4M3FN", "float8_e4m3fn"},
      {"mxfp8_e4m3", "float8_e4m3fn"},    {"float6_e3m2fn", "float6_e3m2fn"}, {"fp6_e2m3", "float6_e2m3fn"},
      {"float4_e2m1fn", "float4_e2m1fn"}, {"float8_e8m0fnu", "float8_e8m0fnu"}, {"e8m0fnu", "float8_e8m0fnu"},
      {"bf16", "bfloat16"},               {"fp32", "float32"},                {"e5m2fnuz", "float8_e5m2fnuz"},
      {"e4m3b11fnuz", "float8_e4m3b11fnuz"}, {"e2m5b3", "float8_e2m5b3"},     {" mxint8 ", "mxint8"},
      {"e4m3b7fn", "float8_e4m3fn"},      {"e5m2ieee", "float8_e5m2"},        {"e4m3b8fnuz", "float8_e4m3fnuz"},
      {"int8", "int8"},                   {"e3m2", "float6_e3m2fn"},          {"ue4m3", "ue4m3"},
  };
  for (const auto& [text, name] : cases) {
    INFO(text);
    auto f = parse_format(text);
    REQUIRE(f.ok());
    CHECK(f->name() == name);
  }
}

TEST_CASE("generic formats get derived properties", "[formats][parse]") {
  auto f = parse_format("e3m3");
  REQUIRE(f.ok());
  CHECK(f->bits() == 7);
  CHECK(f->spec().bias == 3);
  CHECK(f->max_finite() == 30.0);  // field 7, no specials: 2^(7-3) * 1.875
  auto i = parse_format("int16");
  REQUIRE(i.ok());
  CHECK(i->max_finite() == 32767);
  CHECK(i->lowest() == -32768);
  auto u = parse_format("uint3");
  REQUIRE(u.ok());
  CHECK(u->max_finite() == 7);
  auto m = parse_format("mxint6");
  REQUIRE(m.ok());
  CHECK(m->max_finite() == 31.0 / 16);
  auto c = parse_format("codebook:-1,-0.5,0,0.5");
  REQUIRE(c.ok());
  CHECK(c->bits() == 2);
  CHECK(c->decode(1) == -0.5);
}

TEST_CASE("bad format strings get one message naming the string and the problem", "[formats][parse]") {
  const std::pair<const char*, const char*> cases[] = {
      {"e4m3x", "unknown suffix 'x'"},
      {"float8_e3m2", "the prefix says 8 bits"},
      {"ue4m3fnuz", "unsigned"},
      {"e4", "expected 'm'"},
      {"e0m3", "at least one exponent bit"},
      {"int1", "outside 2..32"},
      {"int", "expected a bit width"},
      {"e9m30", "more than 32 bits"},
      {"e4m3b", "expected the bias"},
      {"", "empty"},
      {"codebook:1,2,3", "power-of-two"},
      {"codebook:1,1", "appears twice"},
      {"e12m3", "double range"},
      {"e4m3fnn", "unknown suffix"},
      {"e99m99", "more than 32 bits"},  // found by fuzzing: the default bias was shifted by 98 bits first
      {"e31m1b3", "more than 32 bits"},
  };
  for (const auto& [text, needle] : cases) {
    INFO(text);
    auto f = parse_format(text);
    REQUIRE_FALSE(f.ok());
    CHECK_THAT(f.error().message, Catch::Contains(needle));
    CHECK_THAT(f.error().message, Catch::Contains(std::string("'") + text + "'"));
  }
}

TEST_CASE("a huge format string is named by its start and length, not repeated", "[formats][parse]") {
  const std::string text(100000, 'x');
  auto f = parse_format(text);
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message, Catch::StartsWith("format 'xxxxxxxxxx"));
  CHECK_THAT(f.error().message, Catch::Contains("...' (100000 characters)"));
  CHECK(f.error().message.size() < 300);
}

TEST_CASE("misspelled names get close suggestions", "[formats][parse]") {
  auto f = parse_format("flaot8_e4m3fn");
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message, Catch::Contains("did you mean 'float8_e4m3fn'"));
  auto g = parse_format("bfloat61");
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error().message, Catch::Contains("bfloat16"));
}
