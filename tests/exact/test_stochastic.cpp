// Checks stochastic rounding against docs/casting.md's definition (t + r >= 2^R) with d exact from the oracle.
#include <catch2/catch.hpp>

#include "exact_support.hpp"

using namespace mxlab;
using exact::Oracle;
using exact::Rational;

namespace {

constexpr std::uint64_t kSeed = 0x5354'4F43ULL;  // seed of the inputs and random words in this file
constexpr int kRandomBits[] = {1, 8, 23, 32};

std::vector<CastOptions> stochastic_combos(const Format& f) {
  std::vector<CastOptions> out;
  for (int bits : kRandomBits) {
    for (Overflow ov : {Overflow::Saturate, Overflow::Inf, Overflow::Nan}) {
      // Flush only with R = 8: the flushed input is a zero, whose rounding does not depend on R.
      for (SubnormalMode sm : {SubnormalMode::Keep, SubnormalMode::Flush}) {
        if (sm == SubnormalMode::Flush && bits != 8) continue;
        CastOptions o;
        o.rounding = Rounding::Stochastic;
        o.random_bits = bits;
        o.overflow = ov;
        o.subnormals = sm;
        o.source = SourceType::F32;
        auto r = resolve_options(f, o);
        if (r) out.push_back(*r);
      }
    }
  }
  return out;
}

/// Every value and midpoint input is thinned to at most `keep` inputs (evenly spaced), plus random ones.
std::vector<double> inputs_for(const Format& f, const Oracle& oracle, std::size_t keep, int random) {
  std::vector<double> all;
  if (f.bits() <= 16) {
    all = exact_test::systematic_inputs(oracle, kSeed);
  } else {
    for (double x : exact_test::special_inputs(kSeed)) all.push_back(x);
  }
  std::vector<double> v;
  const std::size_t stride = all.size() > keep ? all.size() / keep : 1;
  for (std::size_t i = 0; i < all.size(); i += stride) v.push_back(all[i]);
  Rng rng(kSeed ^ f.code_count());
  for (int i = 0; i < random; ++i) {
    // Values on the format's scale with more bits than its grid: uniform in [0, 2 max).
    const double u = rng.uniform() * 2.0 * std::fabs(f.max_finite());
    v.push_back((rng.next_u32() & 1U) ? -u : u);
    v.push_back(static_cast<double>(bits_float(rng.next_u32())));
  }
  return v;
}

/// The random words tried for one input: seeded ones, the extremes, and the two words either side of
/// the point where the decision flips (r = 2^R - t).
std::vector<std::uint32_t> words_for(const exact::Placement& p, int bits, Rng& rng) {
  std::vector<std::uint32_t> w{0U, 0xFFFFFFFFU, rng.next_u32()};
  if (p.has_fraction) {
    const std::uint64_t t = p.t32 >> (32 - bits);
    const std::uint64_t flip = (std::uint64_t{1} << bits) - t;  // smallest r that goes away from zero
    const int shift = 32 - bits;
    if (flip < (std::uint64_t{1} << bits)) w.push_back(static_cast<std::uint32_t>(flip << shift));
    if (flip >= 1 && flip - 1 < (std::uint64_t{1} << bits))
      w.push_back(static_cast<std::uint32_t>(((flip - 1) << shift) | ((std::uint64_t{1} << shift) - 1)));
  }
  return w;
}

std::vector<Format> stochastic_formats() {
  std::vector<Format> out = exact_test::formats_up_to(16);
  out.push_back(*find_catalogue_format("float32"));
  for (const char* n : {"e8m10ieee", "int24", "mxint20"}) out.push_back(exact_test::parsed(n));
  return out;
}

}  // namespace

TEST_CASE("the oracle's fraction d is exact on grids", "[exact][stochastic]") {
  // t32 = floor(d * 2^32) with d = (|x| - |tz|) / (|az| - |tz|), checked with exact arithmetic on the
  // codes' values: t32 / 2^32 <= d < (t32 + 1) / 2^32.
  for (const Format& f : exact_test::formats_up_to(8)) {
    if (f.kind() == FormatKind::Codebook) continue;  // codebooks compute d in double (docs/casting.md)
    const Oracle oracle(f);
    std::uint64_t bad = 0;
    std::string first;
    for (double x : inputs_for(f, oracle, 500, 200)) {
      const exact::Placement p = oracle.place(x, true);
      if (p.kind != exact::Placement::Kind::Finite || p.exact || p.below_smallest || p.clamp || p.tz.beyond ||
          p.az.beyond || (p.negative && !f.is_signed()) || !p.has_fraction)
        continue;
      const Rational ax = Rational::from_double(x).abs();
      const Rational tz = exact::code_value(f, p.tz.code).abs();
      const Rational az = exact::code_value(f, p.az.code).abs();
      const Rational d = (ax - tz) / (az - tz);
      const Rational lo = Rational::from_int(static_cast<std::int64_t>(p.t32)).ldexp(-32);
      const Rational hi = Rational::from_int(static_cast<std::int64_t>(p.t32 + 1)).ldexp(-32);
      if (!(lo <= d && d < hi) && bad++ == 0)
        first = f.name() + " x=" + hex_double(x) + ": d=" + d.to_decimal() + " t32=" + std::to_string(p.t32);
    }
    INFO(first);
    CHECK(bad == 0);
  }
}

TEST_CASE("stochastic rounding: reference equals the definition for R in {1, 8, 23, 32}",
          "[exact][stochastic][exhaustive]") {
  for (const Format& f : stochastic_formats()) {
    const Oracle oracle(f, f.bits() > 16 ? Oracle::Path::Grid : Oracle::Path::Auto);
    const auto combos = stochastic_combos(f);
    exact_test::Recorder rec(f);
    Rng rng(kSeed + f.code_count());
    for (double x : inputs_for(f, oracle, 1500, 500)) {
      const exact::Placement p = oracle.place(x, true);
      for (const CastOptions& o : combos) {
        for (std::uint32_t w : words_for(p, o.random_bits, rng))
          rec.compare(x, o, cast(f, x, o, w), oracle.round(p, o, w), w);
      }
    }
    rec.report();
  }
}

TEST_CASE("stochastic streams: cast_all uses stochastic_bits(seed, index)", "[exact][stochastic]") {
  for (const char* name : {"e2m1", "e4m3", "bf16", "mxint8", "nf4"}) {
    const Format& f = *find_catalogue_format(name);
    const Oracle oracle(f);
    CastOptions o;
    o.rounding = Rounding::Stochastic;
    o = *resolve_options(f, o);
    Rng rng(kSeed);
    std::vector<double> in(4096);
    for (double& x : in) x = (rng.uniform() * 2 - 1) * f.max_finite();
    std::vector<CastResult> out(in.size());
    const std::uint64_t seed = 42;
    const std::uint64_t first = 1000;
    cast_all(f, in, out, o, seed, first);
    exact_test::Recorder rec(f);
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::uint32_t w = stochastic_bits(seed, first + i);
      rec.compare(in[i], o, out[i], oracle.round(oracle.place(in[i], true), o, w), w);
    }
    rec.report();
  }
}
