// Shared by the exact tests: the formats under test, the option combinations, the systematic inputs of
// a format, and a recorder that compares the reference cast with the oracle without one Catch2
// assertion per input (millions of inputs; the first mismatches are printed in full).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "mxlab/core/bits.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"

namespace mxlab::exact_test {

/// Parsed formats beside the catalogue, chosen for what the catalogue lacks: other widths and
/// biases, M = 0 floats with zero, IEEE specials on tiny formats, unsigned floats and integers, a
/// codebook without zero, one whose zeros sit at odd indices, and one with a single zero.
inline const std::vector<std::string>& generic_names() {
  static const std::vector<std::string> names = {
      "e3m3",       "e5m6",      "e2m5b3fn",    "e2m3ieee", "e3m2fnuz", "e3m0", "ue4m0fn", "int12",
      "uint5",      "mxint6",    "ue5m3",       "e4m3b-2",
      "codebook:-3,-1,-0.5,0.5,1.25,2,4,8",
      "codebook:0,-0,1,-1,0.375,-0.375,3,-3",
      "codebook:-1,0,0.5,1",
  };
  return names;
}

/// Formats wider than 16 bits (grid path only) besides FP32.
inline const std::vector<std::string>& wide_names() {
  static const std::vector<std::string> names = {"e8m10ieee", "e5m12", "int24", "uint20", "mxint20", "int32"};
  return names;
}

inline Format parsed(const std::string& name) {
  auto f = parse_format(name);
  if (!f) FAIL("format '" << name << "' does not parse: " << f.error().message);
  return *f;
}

/// Every catalogue format and the generic ones, up to `max_bits` bits.
inline std::vector<Format> formats_up_to(int max_bits) {
  std::vector<Format> out;
  for (const Format& f : catalogue_formats())
    if (f.bits() <= max_bits) out.push_back(f);
  for (const auto& n : generic_names()) {
    Format f = parsed(n);
    if (f.bits() <= max_bits) out.push_back(f);
  }
  return out;
}

struct SubnormalConfig {
  SubnormalMode mode;
  SourceType source;
};

/// Keep, flush-output, and flush-input / flush for the two source types whose subnormals FP32 inputs
/// can be: f32 and f16 (an FP32 value is never below 2^-1022, and bf16 shares f32's threshold).
inline constexpr SubnormalConfig kSubnormalConfigs[] = {
    {SubnormalMode::Keep, SourceType::F64},       {SubnormalMode::FlushOutput, SourceType::F64},
    {SubnormalMode::FlushInput, SourceType::F32}, {SubnormalMode::FlushInput, SourceType::F16},
    {SubnormalMode::Flush, SourceType::F32},      {SubnormalMode::Flush, SourceType::F16},
};
/// Every source type, for inputs that are doubles.
inline constexpr SubnormalConfig kAllSubnormalConfigs[] = {
    {SubnormalMode::Keep, SourceType::F64},        {SubnormalMode::FlushOutput, SourceType::F64},
    {SubnormalMode::FlushInput, SourceType::F64},  {SubnormalMode::FlushInput, SourceType::F32},
    {SubnormalMode::FlushInput, SourceType::F16},  {SubnormalMode::FlushInput, SourceType::BF16},
    {SubnormalMode::Flush, SourceType::F64},       {SubnormalMode::Flush, SourceType::F32},
    {SubnormalMode::Flush, SourceType::F16},       {SubnormalMode::Flush, SourceType::BF16},
};

/// Every deterministic rounding mode x every overflow policy the format accepts x the subnormal configs.
inline std::vector<CastOptions> option_combos(const Format& f, std::span<const SubnormalConfig> subs) {
  std::vector<CastOptions> out;
  for (Rounding r : kAllRoundings) {
    if (r == Rounding::Stochastic) continue;
    for (Overflow ov : {Overflow::Saturate, Overflow::Inf, Overflow::Nan}) {
      CastOptions o;
      o.rounding = r;
      o.overflow = ov;
      if (!resolve_options(f, o)) continue;
      for (const SubnormalConfig& s : subs) {
        o.subnormals = s.mode;
        o.source = s.source;
        out.push_back(*resolve_options(f, o));
      }
    }
  }
  return out;
}

inline std::string flags_text(const CastResult& r) {
  std::string s;
  if (r.inexact) s += " inexact";
  if (r.overflow) s += " overflow";
  if (r.underflow) s += " underflow";
  if (r.invalid) s += " invalid";
  return "[" + (s.empty() ? s : s.substr(1)) + "]";
}

inline bool same(const CastResult& a, const CastResult& b) {
  return a.code == b.code && a.inexact == b.inexact && a.overflow == b.overflow && a.underflow == b.underflow &&
         a.invalid == b.invalid;
}

inline std::string options_text(const CastOptions& o) {
  std::string s = std::string(to_string(o.rounding)) + " overflow=" + std::string(to_string(o.overflow)) +
                  " subnormals=" + std::string(to_string(o.subnormals)) + " source=" + std::string(to_string(o.source));
  if (o.rounding == Rounding::Stochastic) s += " random_bits=" + std::to_string(o.random_bits);
  return s;
}

/// Counts reference-vs-oracle comparisons and keeps the first mismatches in full.
class Recorder {
 public:
  explicit Recorder(const Format& f) : format_(f) {}

  void compare(double x, const CastOptions& o, const CastResult& ref, const CastResult& ora, std::uint32_t random = 0) {
    ++checks_;
    if (same(ref, ora)) return;
    ++mismatches_;
    if (first_.size() < 12) {
      char code_buf[64];
      std::snprintf(code_buf, sizeof code_buf, "reference 0x%X vs oracle 0x%X", ref.code, ora.code);
      std::string s = "format " + format_.name() + " x=" + hex_double(x) + " (" + g17(x) + ") " + options_text(o);
      if (o.rounding == Rounding::Stochastic) s += " random=" + std::to_string(random);
      s += ": " + std::string(code_buf) + ", flags " + flags_text(ref) + " vs " + flags_text(ora);
      first_.push_back(s);
    }
  }

  /// One Catch2 assertion for everything recorded.
  void report() const {
    for (const auto& s : first_) UNSCOPED_INFO(s);
    INFO(format_.name() << ": " << checks_ << " comparisons, " << mismatches_ << " mismatches");
    CHECK(mismatches_ == 0);
  }
  std::uint64_t checks() const { return checks_; }
  std::uint64_t mismatches() const { return mismatches_; }

 private:
  Format format_;
  std::uint64_t checks_ = 0;
  std::uint64_t mismatches_ = 0;
  std::vector<std::string> first_;
};

/// Places x once and compares the reference with the oracle under every combination.
inline void check_all(Recorder& rec, const exact::Oracle& oracle, const Format& f, double x,
                      std::span<const CastOptions> combos) {
  const exact::Placement p = oracle.place(x);
  for (const CastOptions& o : combos) rec.compare(x, o, cast(f, x, o), oracle.round(p, o));
}

/// The combinations for formats with hundreds of thousands of systematic inputs. By docs/casting.md the
/// subnormal handling can change a result only through the flush-input thresholds (2^-1022, 2^-126,
/// 2^-14) and the format's subnormal range, and the overflow policy only for NaN, infinities, negative
/// inputs to unsigned formats and results beyond +-max. Inputs within two binades of a threshold, in or
/// around the subnormal range, or beyond half of +-max run under every combination; every other input
/// runs under every rounding mode with the default policy and keep, plus one more combination taken in
/// turn, so that each combination still sees a share of them. Flush-input for f64 (and bf16, whose
/// threshold is f32's) is run only on inputs below 2^-1000, the only ones where f64 can differ.
class ComboPlan {
 public:
  explicit ComboPlan(const Format& f)
      : format_(f), all_(option_combos(f, kSubnormalConfigs)), all_sources_(option_combos(f, kAllSubnormalConfigs)) {
    for (Rounding r : kAllRoundings) {
      if (r == Rounding::Stochastic) continue;
      CastOptions o;
      o.rounding = r;
      base_.push_back(*resolve_options(f, o));
    }
    if (f.min_positive() > 0) {
      low_binade_ = floor_log2(f.min_positive()) - 2;
      high_binade_ = floor_log2(f.min_normal()) + 2;
    }
    overflow_limit_ = std::min(std::fabs(f.max_finite()), std::fabs(f.lowest())) / 2;
    if (overflow_limit_ == 0) overflow_limit_ = std::fabs(f.max_finite()) / 2;
    unsigned_ = !f.is_signed() && f.kind() != FormatKind::Codebook;
  }

  bool every_combination(double x) const {
    const double a = std::fabs(x);
    if (!std::isfinite(x) || a == 0 || a >= overflow_limit_ || (unsigned_ && std::signbit(x))) return true;
    const int e = floor_log2(a);
    for (int t : {-1022, -126, -14})
      if (e >= t - 2 && e < t + 2) return true;
    return e >= low_binade_ && e < high_binade_;
  }

  void check(Recorder& rec, const exact::Oracle& oracle, double x, std::size_t turn) const {
    if (every_combination(x)) {
      check_all(rec, oracle, format_, x, std::fabs(x) < 0x1p-1000 ? all_sources_ : all_);
      return;
    }
    const exact::Placement p = oracle.place(x);
    for (const CastOptions& o : base_) rec.compare(x, o, cast(format_, x, o), oracle.round(p, o));
    const CastOptions& o = all_[turn % all_.size()];
    rec.compare(x, o, cast(format_, x, o), oracle.round(p, o));
  }

 private:
  Format format_;
  std::vector<CastOptions> all_;
  std::vector<CastOptions> all_sources_;
  std::vector<CastOptions> base_;
  int low_binade_ = 0;
  int high_binade_ = 0;
  double overflow_limit_ = 0;
  bool unsigned_ = false;
};

/// The floats just below and just above x (x excluded), as doubles; beyond FLT_MAX the float above is inf.
inline std::pair<double, double> float_bracket(double x) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr double kMax = std::numeric_limits<float>::max();
  if (x > kMax) return {kMax, kInf};
  if (x < -kMax) return {-static_cast<double>(kInf), -kMax};
  const auto f = static_cast<float>(x);
  const double fd = f;
  if (fd == x) return {std::nextafter(f, -kInf), std::nextafter(f, kInf)};
  if (fd < x) return {fd, std::nextafter(f, kInf)};
  return {std::nextafter(f, -kInf), fd};
}

/// x, the floats just either side of it, and (with `doubles`) the doubles just either side.
inline void add_with_neighbours(std::vector<double>& v, double x, bool doubles = true) {
  v.push_back(x);
  const auto [below, above] = float_bracket(x);
  v.push_back(below);
  v.push_back(above);
  if (!doubles) return;
  v.push_back(std::nextafter(x, -std::numeric_limits<double>::infinity()));
  v.push_back(std::nextafter(x, std::numeric_limits<double>::infinity()));
}

/// Sorts by bit pattern and drops repeats (keeps -0 and +0, and NaNs of both signs, apart).
inline void dedupe(std::vector<double>& v) {
  std::sort(v.begin(), v.end(), [](double a, double b) { return double_bits(a) < double_bits(b); });
  v.erase(std::unique(v.begin(), v.end(), [](double a, double b) { return double_bits(a) == double_bits(b); }),
          v.end());
}

/// Inputs every format is checked on: signed zeros, infinities, NaNs, the ends of the double, float,
/// half and bfloat16 ranges and their neighbours, and FP32 subnormals (powers of two and seeded random).
inline std::vector<double> special_inputs(std::uint64_t seed) {
  std::vector<double> v;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double s : {1.0, -1.0}) {
    v.push_back(s * 0.0);
    v.push_back(s * inf);
    v.push_back(std::copysign(nan, s));
    for (double x : {std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min(),
                     std::numeric_limits<double>::min(), 1e300, 1e-300}) {
      add_with_neighbours(v, s * x);
    }
    for (int e : {-149, -127, -126, -133, -25, -24, -15, -14, 127, 128}) add_with_neighbours(v, s * std::ldexp(1.0, e));
    add_with_neighbours(v, s * static_cast<double>(std::numeric_limits<float>::max()));
    for (int k = 127; k <= 149; ++k) v.push_back(s * std::ldexp(1.0, -k));
  }
  Rng rng(seed);
  for (int i = 0; i < 1000; ++i) {
    const std::uint32_t bits = rng.next_u32() & 0x807FFFFFU;  // sign and a random FP32 subnormal mantissa
    v.push_back(static_cast<double>(bits_float(bits)));
  }
  return v;
}

/// The systematic inputs of a format up to 16 bits: every value and the floats just either side of
/// it, every midpoint between neighbouring values (continued-grid points included) and the floats and
/// doubles just either side of it, points past the overflow threshold, their negatives, and
/// special_inputs(). All derived from the oracle's values.
inline std::vector<double> systematic_inputs(const exact::Oracle& oracle, std::uint64_t seed) {
  std::vector<exact::Rational> points;
  for (const auto& v : oracle.values()) points.push_back(v.value);
  const bool codebook = oracle.format().kind() == FormatKind::Codebook;
  if (!codebook) {
    points.push_back(oracle.continued_point());
    // Below the lowest value the grid continues with the same step (floats: -continued).
    const exact::Rational step = oracle.continued_point() - oracle.max_value();
    if (oracle.format().is_signed()) points.insert(points.begin(), oracle.values().front().value - step);
  }
  std::vector<double> v;
  v.reserve(points.size() * 12);
  for (std::size_t i = 0; i < points.size(); ++i) {
    add_with_neighbours(v, points[i].to_double(), false);
    if (i + 1 < points.size() && points[i] != points[i + 1]) {
      const exact::Rational mid = (points[i] + points[i + 1]).ldexp(-1);
      const double md = mid.to_double();
      if (exact::Rational::from_double(md) != mid)
        FAIL(oracle.format().name() << ": midpoint " << mid.to_decimal() << " is not a double");
      add_with_neighbours(v, md);
    }
  }
  // Beyond the continued point: its midpoint with max was covered; add points well past it.
  const double c = oracle.continued_point().to_double();
  for (double k : {1.5, 2.0, 4.0, 1024.0}) add_with_neighbours(v, c * k);
  for (double x : special_inputs(seed)) v.push_back(x);
  const std::size_t n = v.size();
  for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  dedupe(v);
  return v;
}

}  // namespace mxlab::exact_test
