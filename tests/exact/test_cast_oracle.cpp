// Checks the reference cast (formats/cast.cpp) bit for bit against the exact oracle built from docs/casting.md.
#include <catch2/catch.hpp>

#include <bit>

#include "exact_support.hpp"

using namespace mxlab;
using exact::Oracle;
using exact::Rational;

namespace {

constexpr std::uint64_t kSeed = 0x6D786C6162ULL;  // "mxlab": seed of every random input in this file

/// Every systematic input under every combination (small formats), or as planned by ComboPlan.
void check_systematic(const Format& f, bool every_combination) {
  const Oracle oracle(f);
  const auto combos = exact_test::option_combos(f, exact_test::kAllSubnormalConfigs);
  const exact_test::ComboPlan plan(f);
  exact_test::Recorder rec(f);
  const std::vector<double> inputs = exact_test::systematic_inputs(oracle, kSeed);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (every_combination) {
      exact_test::check_all(rec, oracle, f, inputs[i], combos);
    } else {
      plan.check(rec, oracle, inputs[i], i);
    }
  }
  rec.report();
}

/// Random FP32 bit patterns: uniform over all 2^32 patterns (NaNs and infinities included), then as
/// many again with the exponent drawn from the format's range +-3 binades so that most land on its grid.
std::vector<double> random_inputs(const Format& f, std::uint64_t seed, std::size_t uniform, std::size_t focused) {
  std::vector<double> v;
  v.reserve(uniform + focused);
  Rng rng(seed);
  for (std::size_t i = 0; i < uniform; ++i) v.push_back(static_cast<double>(bits_float(rng.next_u32())));
  const double lo_mag = f.min_positive() > 0 ? f.min_positive() : f.max_finite();
  const int lo = std::max(-127, floor_log2(lo_mag) - 3);
  const int hi = std::min(127, floor_log2(std::max(std::fabs(f.max_finite()), std::fabs(f.lowest()))) + 3);
  const auto span = static_cast<std::uint32_t>(hi - lo + 1);
  for (std::size_t i = 0; i < focused; ++i) {
    const std::uint32_t r = rng.next_u32();
    const auto e = static_cast<std::uint32_t>(lo + static_cast<int>(rng.next_u32() % span) + 127);  // 0 = subnormal
    v.push_back(static_cast<double>(bits_float((r & 0x807FFFFFU) | (e << 23))));
  }
  return v;
}

/// One option combination per input, cycling through all of them.
void check_random(const Format& f, const Oracle& oracle, std::span<const double> inputs) {
  const auto combos = exact_test::option_combos(f, exact_test::kSubnormalConfigs);
  exact_test::Recorder rec(f);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const double x = inputs[i];
    const CastOptions& o = combos[i % combos.size()];
    rec.compare(x, o, cast(f, x, o), oracle.round(oracle.place(x), o));
  }
  rec.report();
}

/// Inputs of a format too wide to enumerate: seeded random codes and both ends of each sign, each code
/// with its next value up, the midpoint between them and the floats and doubles either side, the
/// overflow thresholds, and special_inputs().
std::vector<double> sampled_inputs(const Format& f, const Oracle& oracle, std::uint64_t seed, int samples) {
  std::vector<std::uint32_t> codes;
  const std::uint64_t n = f.code_count();
  for (std::uint64_t c = 0; c < 64; ++c) {
    codes.push_back(static_cast<std::uint32_t>(c));
    codes.push_back(static_cast<std::uint32_t>(n / 2 - 1 - c));
    codes.push_back(static_cast<std::uint32_t>(n / 2 + c));
    codes.push_back(static_cast<std::uint32_t>(n - 1 - c));
  }
  Rng rng(seed);
  for (int i = 0; i < samples; ++i) codes.push_back(static_cast<std::uint32_t>(rng.next_u64() % n));
  std::vector<double> v;
  for (std::uint32_t c : codes) {
    const exact::CodeInfo a = exact::code_info(f, c);
    if (!a.number.is_finite()) continue;
    exact_test::add_with_neighbours(v, a.number.value.to_double());
    if (c + 1 >= n) continue;
    const exact::CodeInfo b = exact::code_info(f, c + 1);
    if (!b.number.is_finite() || b.unused) continue;
    // Codes c and c + 1 of the same sign hold neighbouring values in these formats.
    const Rational diff = (b.number.value - a.number.value).abs();
    if (diff.is_zero() || a.number.value.negative() != b.number.value.negative()) continue;
    const Rational mid = (a.number.value + b.number.value).ldexp(-1);
    const double md = mid.to_double();
    if (Rational::from_double(md) != mid) FAIL(f.name() << ": midpoint " << mid.to_decimal() << " is not a double");
    exact_test::add_with_neighbours(v, md);
  }
  const Rational mx = oracle.max_value();
  const Rational cont = oracle.continued_point();
  for (const Rational& r : {mx, cont, (mx + cont).ldexp(-1), cont.ldexp(1)})
    exact_test::add_with_neighbours(v, r.to_double());
  for (double x : exact_test::special_inputs(seed)) v.push_back(x);
  const std::size_t count = v.size();
  for (std::size_t i = 0; i < count; ++i) v.push_back(-v[i]);
  exact_test::dedupe(v);
  return v;
}

std::vector<Format> wide_formats() {
  std::vector<Format> out{*find_catalogue_format("float32")};
  for (const auto& n : exact_test::wide_names()) out.push_back(exact_test::parsed(n));
  return out;
}

}  // namespace

TEST_CASE("reference cast equals the oracle on every value, midpoint and threshold (up to 12 bits)", "[exact][cast]") {
  for (const Format& f : exact_test::formats_up_to(12)) check_systematic(f, true);
}

TEST_CASE("reference cast equals the oracle on every value and midpoint of the 16-bit formats",
          "[exact][cast][exhaustive]") {
  for (const Format& f : exact_test::formats_up_to(16))
    if (f.bits() > 12) check_systematic(f, false);
}

TEST_CASE("reference cast equals the oracle's grid formula on sampled codes of wide formats",
          "[exact][cast][exhaustive]") {
  for (const Format& f : wide_formats()) {
    const Oracle oracle(f, Oracle::Path::Grid);
    const exact_test::ComboPlan plan(f);
    exact_test::Recorder rec(f);
    const std::vector<double> inputs = sampled_inputs(f, oracle, kSeed, 4000);
    for (std::size_t i = 0; i < inputs.size(); ++i) plan.check(rec, oracle, inputs[i], i);
    rec.report();
  }
}

TEST_CASE("reference cast equals the oracle on 1,000,000+ random FP32 patterns per format",
          "[exact][cast][exhaustive]") {
  // Formats of 16 bits and more go through the oracle's grid formula, narrower ones through its table.
  std::vector<Format> all = exact_test::formats_up_to(16);
  for (const Format& f : wide_formats()) all.push_back(f);
  std::uint64_t seed = kSeed;
  for (const Format& f : all) {
    const bool grid = f.bits() >= 16 && (f.kind() == FormatKind::Integer ||
                                         (f.kind() == FormatKind::Float && f.spec().sub_exponent_bits == 0));
    const Oracle oracle(f, grid ? Oracle::Path::Grid : Oracle::Path::Table);
    INFO("seed " << seed);
    check_random(f, oracle, random_inputs(f, seed++, 1000000, 200000));
  }
}

TEST_CASE("reference cast equals the oracle on random doubles for FP32 and the wide formats",
          "[exact][cast][exhaustive]") {
  // FP32 inputs are exact in FP32, so FP32's rounding is exercised by doubles: uniform bit patterns
  // and patterns whose exponent lies within the format's range.
  std::uint64_t seed = kSeed + 1000;
  for (const Format& f : wide_formats()) {
    const Oracle oracle(f, Oracle::Path::Grid);
    Rng rng(seed);
    INFO("seed " << seed);
    ++seed;
    std::vector<double> v;
    for (int i = 0; i < 250000; ++i) v.push_back(std::bit_cast<double>(rng.next_u64()));
    for (int i = 0; i < 250000; ++i) {
      const std::uint64_t bits = rng.next_u64();
      const auto e = static_cast<std::uint64_t>(1023 - 160 + static_cast<int>(rng.next_u32() % 300));
      v.push_back(std::bit_cast<double>((bits & 0x800FFFFFFFFFFFFFULL) | (e << 52)));
    }
    const auto combos = exact_test::option_combos(f, exact_test::kAllSubnormalConfigs);
    exact_test::Recorder rec(f);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const CastOptions& o = combos[i % combos.size()];
      rec.compare(v[i], o, cast(f, v[i], o), oracle.round(oracle.place(v[i]), o));
    }
    rec.report();
  }
}

namespace {

CastResult oracle_cast(const char* format, const char* literal, Rounding r = Rounding::NearestEven,
                       Overflow ov = Overflow::Default, SubnormalMode sm = SubnormalMode::Keep) {
  const Format f = exact_test::parsed(format);
  auto x = exact::parse_number(literal);
  if (!x) FAIL(x.error().message);
  CastOptions o;
  o.rounding = r;
  o.overflow = ov;
  o.subnormals = sm;
  return exact::round_exact(f, *x, *resolve_options(f, o));
}

double decoded(const char* format, const CastResult& r) { return exact_test::parsed(format).decode(r.code); }

}  // namespace

TEST_CASE("the oracle reproduces the worked examples of docs/casting.md", "[exact][cast]") {
  // Continued grid points: 480 for E4M3, 65536 for E5M2, 128/64 for MXINT8.
  CHECK(Oracle(exact_test::parsed("e4m3")).continued_point() == Rational::from_int(480));
  CHECK(Oracle(exact_test::parsed("e5m2")).continued_point() == Rational::from_int(65536));
  CHECK(Oracle(exact_test::parsed("mxint8")).continued_point() == Rational::from_int(2));
  CHECK(Oracle(exact_test::parsed("e4m3"), Oracle::Path::Grid).continued_point() == Rational::from_int(480));
  // E4M3: 464 is the tie between 448 (even code 0x7E) and 480 (odd): 448; above it, NaN under `nan`.
  CHECK(oracle_cast("e4m3", "464", Rounding::NearestEven, Overflow::Nan).code == 0x7E);
  CHECK(oracle_cast("e4m3", "464.001", Rounding::NearestEven, Overflow::Nan).code == 0x7F);
  const CastResult rz = oracle_cast("e4m3", "1000", Rounding::TowardZero, Overflow::Nan);
  CHECK((rz.code == 0x7E && rz.overflow && rz.inexact));
  // E4M3 round-to-odd between 448 and 480 picks 480, which overflows to max under every policy.
  CHECK(oracle_cast("e4m3", "450", Rounding::Odd, Overflow::Nan).code == 0x7E);
  // E5M2: 61440 ties 57344 (odd) with 65536 (even): inf.
  CHECK(decoded("e5m2", oracle_cast("e5m2", "61440")) == HUGE_VAL);
  CHECK(decoded("e5m2", oracle_cast("e5m2", "1e9", Rounding::Down)) == 57344);
  CHECK(decoded("e5m2", oracle_cast("e5m2", "-1e9", Rounding::Up)) == -57344);
  // E8M0: parity of the exponent code; zero and tiny values give 2^-127.
  CHECK(oracle_cast("e8m0", "1.5").code == 128);
  CHECK(oracle_cast("e8m0", "3").code == 128);
  CHECK(oracle_cast("e8m0", "0").code == 0);
  CHECK(oracle_cast("e8m0", "0x1p-200", Rounding::Down).code == 0);
  CHECK(oracle_cast("e8m0", "nan").code == 0xFF);
  // Negative input to an unsigned format: invalid; NaN under `nan`.
  const CastResult neg = oracle_cast("ue4m3", "-1", Rounding::NearestEven, Overflow::Nan);
  CHECK((neg.code == 0x7F && neg.invalid && neg.inexact));
  // NaN into a format without NaN: +0, invalid only.
  const CastResult nan = oracle_cast("e2m1", "-nan");
  CHECK((nan.code == 0 && nan.invalid && !nan.inexact));
  // Zero results keep the input's sign where -0 exists; fnuz gives +0.
  const CastResult tiny = oracle_cast("e4m3", "-0x1p-20");
  CHECK((tiny.code == 0x80 && tiny.underflow && tiny.inexact));
  CHECK(oracle_cast("e4m3fnuz", "-0x1p-20").code == 0);
  // Flush output happens after rounding: just below the smallest normal, rounding up keeps 2^-6.
  CHECK(oracle_cast("e4m3", "0x1.fp-7", Rounding::NearestEven, Overflow::Default, SubnormalMode::FlushOutput).code ==
        0x08);
}

TEST_CASE("regression: exact MX-SAFE subnormals were not flushed by flush-output", "[exact][cast]") {
  // 0.00.000.01 is the E3M2 reading's smallest subnormal 2^-11; step 9 flushes it even when exact.
  const Format& f = *find_catalogue_format("float8_mxsf");
  CastOptions o;
  o.subnormals = SubnormalMode::FlushOutput;
  o = *resolve_options(f, o);
  const CastResult r = cast(f, std::ldexp(1.0, -11), o);
  CHECK((r.code == 0 && r.underflow && r.inexact));
  const CastResult n = cast(f, -std::ldexp(1.0, -11), o);
  CHECK((n.code == 0x80 && n.underflow && n.inexact));
  CHECK(exact_test::same(n, exact::round_exact(f, Rational::from_double(-std::ldexp(1.0, -11)), o)));
}

TEST_CASE("regression: +0 in a codebook without zero was rounded as a negative value", "[exact][cast]") {
  // Values -3,-1,-0.5,0.5,... at codes 0,1,2,3: +0 lies between -0.5 (tz for +0) and 0.5 (az).
  const Format f = exact_test::parsed("codebook:-3,-1,-0.5,0.5,1.25,2,4,8");
  auto run = [&](double x, Rounding r) {
    CastOptions o;
    o.rounding = r;
    return cast(f, x, *resolve_options(f, o)).code;
  };
  CHECK(run(0.0, Rounding::NearestAway) == 3);
  CHECK(run(-0.0, Rounding::NearestAway) == 2);
  CHECK(run(0.0, Rounding::Up) == 3);
  CHECK(run(-0.0, Rounding::Up) == 3);
  CHECK(run(0.0, Rounding::Down) == 2);
  CHECK(run(0.0, Rounding::NearestZero) == 2);
  CHECK(run(-0.0, Rounding::NearestZero) == 3);
}

TEST_CASE("regression: integer cast of a double whose scaled magnitude overflows", "[exact][cast]") {
  // |x| * 2^frac_bits is inf in double for x = DBL_MAX; the fraction inf - inf was a NaN converted to
  // an integer (undefined behaviour). The result is an overflow to +-max.
  const Format& f = *find_catalogue_format("mxint8");
  CastOptions o;
  o.rounding = Rounding::Stochastic;
  o = *resolve_options(f, o);
  for (double x : {std::numeric_limits<double>::max(), -std::numeric_limits<double>::max()}) {
    const CastResult r = cast(f, x, o, 0x80000000U);
    CHECK((r.code == f.max_code(x < 0) && r.overflow && r.inexact));
  }
}

TEST_CASE("the oracle rounds rationals that are not doubles", "[exact][cast]") {
  // 0.1 in FP32 is 0x3DCCCCCD (the IEEE 754 example); in E4M3 it lies at 12.8 quanta of 2^-7 in the
  // binade [2^-4, 2^-3), so it rounds to 13 * 2^-7 = 0b0.0011.101.
  CHECK(oracle_cast("float32", "0.1").code == 0x3DCCCCCDU);
  CHECK(oracle_cast("e4m3", "0.1").code == 0x1D);
  CHECK(oracle_cast("e4m3", "0.1", Rounding::Down).code == 0x1C);
  // Every format value is a double, so no value lies strictly between a non-double x and the
  // doubles just below and above it: directed rounding of x equals that of those doubles.
  std::uint64_t bad = 0;
  std::string first;
  for (const Format& f : exact_test::formats_up_to(16)) {
    const Oracle oracle(f);
    for (int k = -4000; k <= 4000; k += 37) {
      for (int q : {3, 10, 11, 1000003}) {
        const Rational x = Rational::from_int(k) * Rational::from_double(f.max_finite()) /
                           Rational::from_int(static_cast<std::int64_t>(q) * 1000);
        const double d = x.to_double();
        const double lo = Rational::from_double(d) > x ? std::nextafter(d, -HUGE_VAL) : d;
        const double hi = std::nextafter(lo, HUGE_VAL);
        if (x.is_zero() || Rational::from_double(lo) == x) continue;
        const exact::Placement p = oracle.place(exact::Number::finite(x));
        for (Rounding r : {Rounding::Down, Rounding::Up, Rounding::TowardZero}) {
          CastOptions o;
          o.rounding = r;
          o = *resolve_options(f, o);
          const CastResult got = oracle.round(p, o);
          const double side = r == Rounding::Down || (r == Rounding::TowardZero && !x.negative()) ? lo : hi;
          const CastResult want = cast(f, side, o);
          if ((got.code != want.code || got.overflow != want.overflow || got.underflow != want.underflow ||
               got.invalid != want.invalid || !got.inexact) &&
              bad++ == 0)
            first = f.name() + " x=" + x.to_decimal() + " " + exact_test::options_text(o);
        }
      }
    }
  }
  INFO(first);
  CHECK(bad == 0);
}
