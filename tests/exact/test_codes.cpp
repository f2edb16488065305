// Checks decode/classify, derived properties and re-encoding against the oracle's exact reading of the columns.
#include <catch2/catch.hpp>

#include <cmath>

#include "exact_support.hpp"

using namespace mxlab;
using exact::Number;
using exact::Oracle;
using exact::Rational;

namespace {

/// decode/classify of one code against the oracle's reading; returns a description of a difference.
std::string compare_code(const Format& f, std::uint32_t c) {
  const exact::CodeInfo info = exact::code_info(f, c);
  const double d = f.decode(c);
  const CodeClass k = f.classify(c);
  const std::string where = f.name() + " code " + std::to_string(c) + " (" + bit_string(f, c) + "): ";
  switch (info.number.kind) {
    case Number::Kind::Nan:
      if (!std::isnan(d) || k != CodeClass::Nan) return where + "the columns say NaN, decode gives " + g17(d);
      if (std::signbit(d) != info.number.nan_negative) return where + "NaN sign differs";
      return {};
    case Number::Kind::PosInf:
    case Number::Kind::NegInf:
      if (!std::isinf(d) || k != CodeClass::Inf || std::signbit(d) != info.number.negative())
        return where + "the columns say " + (info.number.negative() ? "-inf" : "+inf") + ", decode gives " + g17(d);
      return {};
    case Number::Kind::Finite: break;
  }
  if (!std::isfinite(d))
    return where + "the columns say " + info.number.value.to_decimal() + ", decode gives " + g17(d);
  const Rational got = Rational::from_double(d);
  if (got != info.number.value || got.negative() != info.number.value.negative())
    return where + "exact value " + info.number.value.to_decimal() + ", decode gives " + got.to_decimal();
  const CodeClass expected = info.unused              ? CodeClass::Unused
                             : info.number.value.is_zero() ? CodeClass::Zero
                             : info.subnormal          ? CodeClass::Subnormal
                                                       : CodeClass::Normal;
  if (k != expected)
    return where + "class " + std::string(to_string(k)) + ", expected " + std::string(to_string(expected));
  return {};
}

}  // namespace

TEST_CASE("every code of every format up to 16 bits decodes to its exact value", "[exact][codes]") {
  for (const Format& f : exact_test::formats_up_to(16)) {
    std::uint64_t bad = 0;
    std::string first;
    for (std::uint64_t c = 0; c < f.code_count(); ++c) {
      const std::string diff = compare_code(f, static_cast<std::uint32_t>(c));
      if (!diff.empty() && bad++ == 0) first = diff;
    }
    INFO(first);
    CHECK(bad == 0);
  }
}

TEST_CASE("sampled codes of wider formats decode to their exact value", "[exact][codes]") {
  std::vector<Format> wide{*find_catalogue_format("float32")};
  for (const auto& n : exact_test::wide_names()) wide.push_back(exact_test::parsed(n));
  Rng rng(0x5EED'C0DE);  // seed of the sampled codes
  for (const Format& f : wide) {
    const std::uint64_t n = f.code_count();
    std::vector<std::uint32_t> codes;
    for (std::uint64_t c = 0; c < 256 && c < n; ++c) {  // both ends of each sign
      codes.push_back(static_cast<std::uint32_t>(c));
      codes.push_back(static_cast<std::uint32_t>(n - 1 - c));
      codes.push_back(static_cast<std::uint32_t>((n / 2 + c) % n));
      codes.push_back(static_cast<std::uint32_t>((n / 2 - 1 - c) % n));
    }
    for (int i = 0; i < 5000; ++i) codes.push_back(static_cast<std::uint32_t>(rng.next_u64() % n));
    std::uint64_t bad = 0;
    std::string first;
    for (std::uint32_t c : codes) {
      const std::string diff = compare_code(f, c);
      if (!diff.empty() && bad++ == 0) first = diff;
    }
    INFO(first);
    CHECK(bad == 0);
  }
}

TEST_CASE("derived properties of each format equal the oracle's enumeration", "[exact][codes]") {
  for (const Format& f : exact_test::formats_up_to(16)) {
    INFO(f.name());
    const Oracle oracle(f);
    const Oracle::Properties p = oracle.properties();
    CHECK(Rational::from_double(f.max_finite()) == p.max_finite);
    CHECK(Rational::from_double(f.lowest()) == p.lowest);
    CHECK(Rational::from_double(f.min_normal()) == p.min_normal);
    CHECK(Rational::from_double(f.min_positive()) == p.min_positive);
    CHECK(f.emax() == p.emax);
    CHECK(f.finite_count() == p.finite_count);
    CHECK(f.has_zero() == std::any_of(oracle.values().begin(), oracle.values().end(),
                                      [](const Oracle::Value& v) { return v.value.is_zero(); }));
    CHECK(f.has_negative_zero() == std::any_of(oracle.values().begin(), oracle.values().end(), [](const auto& v) {
            return v.value.is_zero() && v.value.negative();
          }));
    // The reference's sorted table lists the same codes in the same order.
    const auto table = f.sorted_values();
    REQUIRE(table.size() == oracle.values().size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < table.size(); ++i)
      if (table[i].code != oracle.values()[i].code) ++differ;
    CHECK(differ == 0);
  }
}

TEST_CASE("every code re-encodes to itself through the reference cast", "[exact][codes]") {
  for (const Format& f : exact_test::formats_up_to(16)) {
    const Oracle oracle(f);
    const auto combos = exact_test::option_combos(f, exact_test::kSubnormalConfigs);
    std::uint64_t bad = 0;
    std::string first;
    auto fail = [&](std::uint32_t c, const CastOptions& o, const CastResult& r, const std::string& why) {
      if (bad++ == 0)
        first = f.name() + " code " + std::to_string(c) + " " + exact_test::options_text(o) + ": got code " +
                std::to_string(r.code) + " " + exact_test::flags_text(r) + ", " + why;
    };
    for (std::uint64_t cc = 0; cc < f.code_count(); ++cc) {
      const auto c = static_cast<std::uint32_t>(cc);
      const exact::CodeInfo info = exact::code_info(f, c);
      const double x = f.decode(c);
      for (const CastOptions& o : combos) {
        const CastResult r = cast(f, x, o);
        const bool flush_in = (o.subnormals == SubnormalMode::FlushInput || o.subnormals == SubnormalMode::Flush) &&
                              x != 0 && std::fabs(x) < source_min_normal(o.source);
        const bool flush_out = (o.subnormals == SubnormalMode::FlushOutput || o.subnormals == SubnormalMode::Flush) &&
                               info.subnormal;
        if (info.number.kind == Number::Kind::Nan) {
          // NaN codes map to the canonical NaN of the same sign.
          if (r.code != oracle.nan_code(info.number.nan_negative) ||
              exact::code_info(f, r.code).number.kind != Number::Kind::Nan || r.inexact || r.invalid)
            fail(c, o, r, "expected the canonical NaN");
        } else if (info.number.kind != Number::Kind::Finite) {
          if (o.overflow == Overflow::Inf && (r.code != c || r.inexact || r.overflow)) fail(c, o, r, "expected itself");
          if (o.overflow == Overflow::Saturate && (r.code != f.max_code(info.number.negative()) || !r.overflow))
            fail(c, o, r, "expected +-max with overflow");
        } else if (info.unused) {
          if (r.code == c) fail(c, o, r, "the unused code was produced");
        } else if (flush_in || flush_out) {
          // Flushed to a zero (a format without zero gives its smallest value): as the oracle says.
          if (!exact_test::same(r, oracle.round(oracle.place(x), o)) || !r.underflow)
            fail(c, o, r, "expected the flushed result");
        } else if (r.code != c || r.inexact || r.overflow || r.underflow || r.invalid) {
          fail(c, o, r, "expected itself, exactly");
        }
      }
    }
    INFO(first);
    CHECK(bad == 0);
  }
}

TEST_CASE("the MXINT unused code is never produced", "[exact][codes]") {
  for (const char* name : {"mxint8", "mxint4", "mxint2", "mxint6"}) {
    const Format f = exact_test::parsed(name);
    const auto unused = std::uint32_t{1} << (f.bits() - 1);
    REQUIRE(exact::code_info(f, unused).unused);
    const Oracle oracle(f);
    std::uint64_t produced = 0;
    for (double x : exact_test::systematic_inputs(oracle, 7))
      for (const CastOptions& o : exact_test::option_combos(f, exact_test::kSubnormalConfigs))
        if (cast(f, x, o).code == unused) ++produced;
    CHECK(produced == 0);
  }
}
