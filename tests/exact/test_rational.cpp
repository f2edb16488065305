// Checks literal parsing, decimal text and source rounding against hand-derived IEEE 754 values and glibc strtod.
#include <catch2/catch.hpp>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdlib>

#include "exact_support.hpp"

using namespace mxlab;
using exact::Number;
using exact::Rational;

namespace {

Rational rat(std::string_view text) {
  auto r = exact::parse_rational(text);
  if (!r) FAIL(r.error().message);
  return *r;
}

Rational frac(std::int64_t p, std::int64_t q) { return Rational::from_int(p) / Rational::from_int(q); }

std::string parse_error(std::string_view text) {
  auto r = exact::parse_rational(text);
  return r ? std::string("(parsed)") : r.error().message;
}

double to_source(const Rational& x, SourceType t, bool* inexact = nullptr) {
  return exact::round_to_source(x, t, inexact);
}

}  // namespace

TEST_CASE("decimal literals are parsed exactly", "[exact][parse]") {
  CHECK(rat("-1.25e-3") == frac(-1, 800));
  CHECK(rat(".5") == frac(1, 2));
  CHECK(rat("7") == Rational::from_int(7));
  CHECK(rat("+7.") == Rational::from_int(7));
  CHECK(rat("  42  ") == Rational::from_int(42));
  CHECK(rat("1E3") == Rational::from_int(1000));
  CHECK(rat("0.1") == frac(1, 10));
  CHECK_FALSE(rat("0.1").is_dyadic());
  CHECK(rat("0.1").to_decimal() == "1/10");
  CHECK(rat("-0.0e5").is_zero());
  CHECK(rat("-0.0e5").negative());
  CHECK_FALSE(rat("0").negative());
  // 1e400: a 1 followed by 400 zeros.
  CHECK(rat("1e400").to_decimal() == "1" + std::string(400, '0'));
  CHECK(rat("1e400").to_double() == HUGE_VAL);
  CHECK(rat("1e-400").to_double() == 0.0);
  CHECK(std::signbit(rat("-1e-400").to_double()));
}

TEST_CASE("hexadecimal literals are parsed exactly", "[exact][parse]") {
  CHECK(rat("0x1.8p+3") == Rational::from_int(12));
  CHECK(rat("-0X.Ap-1") == frac(-5, 16));
  CHECK(rat("0x10") == Rational::from_int(16));
  CHECK(rat("0x1p-1074") == Rational::pow2(-1074));
  CHECK(rat("0x1p-1074").to_double() == std::numeric_limits<double>::denorm_min());
  CHECK(rat("0x0.0000000000001p-1022") == Rational::pow2(-1074));
  CHECK(rat("0x1.fffffffffffffp+1023").to_double() == DBL_MAX);
  CHECK(rat("0x1.FFFFFEp127").to_double() == static_cast<double>(FLT_MAX));
  CHECK(rat("0x1p-149").to_double() == static_cast<double>(std::numeric_limits<float>::denorm_min()));
}

TEST_CASE("to_double rounds long and halfway decimals to nearest, ties to even", "[exact][parse]") {
  // The exact binary value of the double nearest 0.1.
  CHECK(rat("0.1000000000000000055511151231257827021181583404541015625") == Rational::from_double(0.1));
  CHECK(rat("0.1").to_double() == 0.1);
  // 2^53 + 1 lies halfway between 2^53 and 2^53 + 2: to the even significand 2^53.
  CHECK(rat("9007199254740993").to_double() == 9007199254740992.0);
  CHECK(rat("9007199254740995").to_double() == 9007199254740996.0);
  CHECK(rat("9007199254740993.00000000000000000000001").to_double() == 9007199254740994.0);
  // 1 + 2^-53, exactly halfway between 1 and 1 + 2^-52.
  const Rational half_ulp = rat("1.00000000000000011102230246251565404236316680908203125");
  CHECK(half_ulp == Rational::from_int(1) + Rational::pow2(-53));
  CHECK(half_ulp.to_double() == 1.0);
  CHECK(rat("1.000000000000000111022302462515654042363166809082031250001").to_double() == 1.0 + 0x1p-52);
  // Subnormal halfway points: 2^-1075 (between 0 and 2^-1074) goes to 0; 3 * 2^-1075 to 2^-1073.
  CHECK(rat("0x1p-1075").to_double() == 0.0);
  CHECK(rat("0x1.8p-1074").to_double() == 0x1p-1073);
  CHECK(std::signbit(rat("-0x1p-1075").to_double()));
  // Halfway between DBL_MAX and 2^1024 rounds to the even 2^1024: overflow.
  CHECK(rat("0x1.fffffffffffff8p+1023").to_double() == HUGE_VAL);
  CHECK(rat("0x1.fffffffffffff7ffp+1023").to_double() == DBL_MAX);
}

TEST_CASE("to_double agrees with glibc strtod on seeded random literals", "[exact][parse]") {
  Rng rng(0x5713'70D0ULL);  // seed of the literals
  int bad = 0;
  std::string first;
  for (int i = 0; i < 5000; ++i) {
    char buf[128];
    const int digits = 1 + static_cast<int>(rng.next_u32() % 40);
    std::string s = (rng.next_u32() & 1U) ? "-" : "";
    for (int d = 0; d < digits; ++d) s += static_cast<char>('0' + rng.next_u32() % 10);
    const int point = static_cast<int>(rng.next_u32() % static_cast<std::uint32_t>(digits + 1));
    s.insert(s.size() - static_cast<std::size_t>(point), ".");
    std::snprintf(buf, sizeof buf, "e%d", static_cast<int>(rng.next_u32() % 700) - 350);
    s += buf;
    const double expected = std::strtod(s.c_str(), nullptr);
    if (rat(s).to_double() != expected && bad++ == 0) first = s;
    // Hexadecimal: a random double written with %a parses back to itself.
    const double x = std::bit_cast<double>(rng.next_u64());
    if (!std::isfinite(x)) continue;
    std::snprintf(buf, sizeof buf, "%a", x);
    if (rat(buf).to_double() != x && bad++ == 0) first = buf;
    if (rat(buf) != Rational::from_double(x) && bad++ == 0) first = buf;
  }
  INFO(first);
  CHECK(bad == 0);
}

TEST_CASE("decimal text is exact", "[exact][parse]") {
  CHECK(Rational::from_double(448).to_decimal() == "448");
  CHECK(Rational::from_double(-448).to_decimal() == "-448");
  CHECK(Rational::from_double(-0.0).to_decimal() == "-0");
  CHECK(Rational::from_double(0.0).to_decimal() == "0");
  CHECK(Rational::from_double(0.0029296875).to_decimal() == "0.0029296875");  // 3 * 2^-10
  CHECK(Rational::from_double(std::ldexp(1.0, -10)).to_decimal() == "0.0009765625");
  CHECK(frac(1, 3).to_decimal() == "1/3");
  CHECK(frac(-5, 7).to_decimal() == "-5/7");
  // 2^-133 written out: 133 decimals, the last a 5, and the text parses back to the same value.
  const std::string s = Rational::pow2(-133).to_decimal();
  REQUIRE(s.rfind("0.", 0) == 0);
  CHECK(s.size() == 2 + 133);
  CHECK(s.back() == '5');
  CHECK(rat(s) == Rational::pow2(-133));
  // Every double survives the round trip through its exact decimal text.
  Rng rng(0xDEC1'0A1ULL);
  int bad = 0;
  for (int i = 0; i < 2000; ++i) {
    const double x = std::bit_cast<double>(rng.next_u64());
    if (!std::isfinite(x)) continue;
    const Rational r = Rational::from_double(x);
    if (!(rat(r.to_decimal()) == r) || rat(r.to_decimal()).to_double() != x) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("malformed literals are refused with the text and the reason", "[exact][parse]") {
  CHECK_THAT(parse_error(""), Catch::Contains("empty"));
  CHECK_THAT(parse_error("1e"), Catch::Contains("'1e'") && Catch::Contains("exponent"));
  CHECK_THAT(parse_error("0x"), Catch::Contains("'0x'") && Catch::Contains("hexadecimal digits"));
  CHECK_THAT(parse_error("0x1p"), Catch::Contains("after 'p'"));
  CHECK_THAT(parse_error("1.2.3"), Catch::Contains("'1.2.3'") && Catch::Contains("second '.'"));
  CHECK_THAT(parse_error("12abc"), Catch::Contains("unexpected character 'a' at position 3"));
  CHECK_THAT(parse_error("-"), Catch::Contains("no digits"));
  CHECK_THAT(parse_error("."), Catch::Contains("no digits"));
  CHECK_THAT(parse_error("1e999999"), Catch::Contains("out of range"));
  CHECK_THAT(parse_error("1e5e5"), Catch::Contains("unexpected character 'e'"));
  CHECK_THAT(parse_error("inf"), Catch::Contains("not a finite number"));
  CHECK_THAT(parse_error("nan"), Catch::Contains("not a finite number"));
}

TEST_CASE("parse_number adds NaN and infinities", "[exact][parse]") {
  auto n = exact::parse_number("nan");
  REQUIRE(n);
  CHECK(n->kind == Number::Kind::Nan);
  CHECK_FALSE(n->negative());
  n = exact::parse_number("-NaN");
  REQUIRE(n);
  CHECK((n->kind == Number::Kind::Nan && n->negative()));
  for (const char* t : {"inf", "+inf", "INF", "Infinity"}) {
    n = exact::parse_number(t);
    REQUIRE(n);
    CHECK(n->kind == Number::Kind::PosInf);
  }
  n = exact::parse_number("-inf");
  REQUIRE(n);
  CHECK(n->kind == Number::Kind::NegInf);
  n = exact::parse_number("-0x1p-3");
  REQUIRE(n);
  CHECK((n->kind == Number::Kind::Finite && n->value == frac(-1, 8)));
  CHECK_FALSE(exact::parse_number("infinite"));
}

TEST_CASE("round_to_source: f64, f32, f16, bf16 with ties to even and overflow to inf", "[exact][parse]") {
  bool inexact = false;
  // 0.1 = 0x1.999...p-4: f32 rounds up (next bit 1, rest nonzero), f16 down (next bit 0), bf16 up.
  CHECK(to_source(rat("0.1"), SourceType::F32, &inexact) == static_cast<double>(0x1.99999ap-4f));
  CHECK(inexact);
  CHECK(to_source(rat("0.1"), SourceType::F16) == 0x1.998p-4);
  CHECK(to_source(rat("0.1"), SourceType::BF16) == 0x1.9ap-4);
  CHECK(to_source(rat("0.1"), SourceType::F64) == 0.1);
  CHECK(to_source(rat("0.5"), SourceType::F16, &inexact) == 0.5);
  CHECK_FALSE(inexact);
  // Overflow thresholds: max + half an ulp is a tie that goes to the even 2^(emax+1), i.e. inf.
  CHECK(to_source(rat("65520"), SourceType::F16, &inexact) == HUGE_VAL);
  CHECK(inexact);
  CHECK(to_source(rat("65519.99"), SourceType::F16) == 65504.0);
  CHECK(to_source(rat("-65520"), SourceType::F16) == -HUGE_VAL);
  CHECK(to_source(Rational::pow2(128) - Rational::pow2(103), SourceType::F32) == HUGE_VAL);
  CHECK(to_source(Rational::pow2(128) - Rational::pow2(103) - Rational::pow2(50), SourceType::F32) ==
        static_cast<double>(FLT_MAX));
  CHECK(to_source(Rational::pow2(128) - Rational::pow2(119), SourceType::BF16) == HUGE_VAL);
  CHECK(to_source(Rational::pow2(128) - Rational::pow2(119) - Rational::pow2(100), SourceType::BF16) ==
        0x1.fep127);
  // Subnormals: 2^-25 is halfway between 0 and f16's 2^-24 (to 0); 3 * 2^-26 rounds to 2^-24.
  CHECK(to_source(Rational::pow2(-25), SourceType::F16, &inexact) == 0.0);
  CHECK(inexact);
  CHECK(to_source(Rational::from_int(3).ldexp(-26), SourceType::F16) == 0x1p-24);
  CHECK(to_source(Rational::pow2(-150), SourceType::F32) == 0.0);
  CHECK(to_source(Rational::from_int(3).ldexp(-150), SourceType::F32) == 0x1p-148);
  CHECK(to_source(Rational::pow2(-134), SourceType::BF16) == 0.0);
  CHECK(to_source(Rational::from_int(3).ldexp(-135), SourceType::BF16) == 0x1p-133);
  CHECK(std::signbit(to_source(-Rational::pow2(-200), SourceType::F32)));
  // Agreement with the hardware's conversions: double -> float is correctly rounded (RNE).
  Rng rng(0xF32'0001ULL);
  int bad = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t bits = rng.next_u64();
    const auto e = static_cast<std::uint64_t>(1023 - 160 + static_cast<int>(rng.next_u32() % 300));
    const double x = std::bit_cast<double>((bits & 0x800FFFFFFFFFFFFFULL) | (e << 52));
    if (to_source(Rational::from_double(x), SourceType::F32) != static_cast<double>(static_cast<float>(x))) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("rational arithmetic keeps the sign of zero as IEEE 754 does", "[exact][parse]") {
  const Rational nz = Rational::from_double(-0.0);
  const Rational pz = Rational::from_double(0.0);
  CHECK(nz.negative());
  CHECK(nz.is_zero());
  CHECK(nz == pz);
  CHECK((nz + nz).negative());
  CHECK_FALSE((nz + pz).negative());
  CHECK_FALSE((Rational::from_int(1) - Rational::from_int(1)).negative());
  CHECK((nz * Rational::from_int(3)).negative());
  CHECK_FALSE((-nz).negative());
  CHECK((-pz).negative());
  CHECK(nz.ldexp(5).negative());
  CHECK(Rational::from_int(3).ldexp(-2) == frac(3, 4));
  CHECK(frac(3, 4).ilog2() == -1);
  CHECK(frac(1, 3).ilog2() == -2);
  CHECK(Rational::from_int(1024).ilog2() == 10);
  CHECK(frac(-7, 2) < frac(-3, 1));
  CHECK(frac(-7, 2).abs() == frac(7, 2));
  CHECK_THROWS_AS(Rational::from_int(1) / pz, std::domain_error);
  CHECK_THROWS_AS(Rational::from_double(HUGE_VAL), std::domain_error);
  // error(): value(code) - x exactly. E4M3 code 0x7E is 448.
  const Format& e4m3 = *find_catalogue_format("e4m3");
  CHECK(exact::error(e4m3, 0x7E, rat("447.9")) == frac(1, 10));
  CHECK(exact::code_value(e4m3, 0x01) == Rational::pow2(-9));
  CHECK_THROWS_AS(exact::code_value(e4m3, 0x7F), std::domain_error);
}

TEST_CASE("from_parts reads a superaccumulator exactly", "[exact][parse]") {
  Rng rng(0xACC0'0001ULL);  // seed of the summands
  ExactSum sum;
  Rational expected;
  for (int i = 0; i < 500; ++i) {
    const std::uint64_t bits = rng.next_u64();
    const auto e = static_cast<std::uint64_t>(1023 - 300 + static_cast<int>(rng.next_u32() % 600));
    const double x = std::bit_cast<double>((bits & 0x800FFFFFFFFFFFFFULL) | (e << 52));
    sum.add(x);
    expected = expected + Rational::from_double(x);
  }
  CHECK(exact::from_parts(sum.parts()) == expected);
  CHECK(exact::from_parts(sum.parts()).to_double() == sum.to_double());
  CHECK(exact::from_parts(ExactSum().parts()).is_zero());
}
