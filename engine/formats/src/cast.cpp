// The scalar reference cast (docs/casting.md). Two paths with one set of rules:
// - grid path (floats without a re-read field 0, integers): the magnitude is scaled by a power of two
//   onto an integer grid, so floor, fraction and tie tests are exact in double;
// - table path (codebooks, MX-SAFE): neighbours are found in the sorted value table on the signed
//   value line, and ties are found by comparing with the exact midpoint.
#include "mxlab/formats/cast.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mxlab/core/named.hpp"
#include "mxlab/core/random.hpp"

namespace mxlab {
namespace {

/// Rounding as seen on magnitudes: directed modes become toward or away from zero.
enum class MagMode : std::uint8_t { NearEven, NearAway, NearZero, TowardZero, AwayZero, Odd, Stochastic };

MagMode magnitude_mode(Rounding r, bool negative) {
  switch (r) {
    case Rounding::NearestEven: return MagMode::NearEven;
    case Rounding::NearestAway: return MagMode::NearAway;
    case Rounding::NearestZero: return MagMode::NearZero;
    case Rounding::TowardZero: return MagMode::TowardZero;
    case Rounding::Up: return negative ? MagMode::TowardZero : MagMode::AwayZero;
    case Rounding::Down: return negative ? MagMode::AwayZero : MagMode::TowardZero;
    case Rounding::Odd: return MagMode::Odd;
    case Rounding::Stochastic: return MagMode::Stochastic;
  }
  return MagMode::NearEven;
}

/// IEEE 754 7.4: whether an overflow under this mode goes to the special value (inf, or NaN under
/// Overflow::Nan) rather than to the largest finite value. Round-to-odd keeps the largest finite
/// value, which is the odd neighbour of every overflowing value.
bool overflow_to_special(MagMode m) {
  return m == MagMode::NearEven || m == MagMode::NearAway || m == MagMode::NearZero || m == MagMode::AwayZero ||
         m == MagMode::Stochastic;
}

/// Decides between the neighbour toward zero (tz) and away from zero (az) of an inexact magnitude.
/// `cmp_half` is -1, 0, +1 as the distance to tz is below, at, above half the gap; tz_odd and az_odd
/// are the parities of the two codes (on a grid they differ; in a codebook both may be even, and then
/// a tie goes toward zero); `t` is the top random_bits bits of the fraction of the gap.
bool choose_away(MagMode m, int cmp_half, bool tz_odd, bool az_odd, std::uint64_t t, std::uint32_t random,
                 int random_bits) {
  switch (m) {
    case MagMode::NearEven: return cmp_half > 0 || (cmp_half == 0 && tz_odd && !az_odd);
    case MagMode::NearAway: return cmp_half >= 0;
    case MagMode::NearZero: return cmp_half > 0;
    case MagMode::TowardZero: return false;
    case MagMode::AwayZero: return true;
    case MagMode::Odd: return !tz_odd && az_odd;
    case MagMode::Stochastic: {
      const std::uint64_t r = random >> (32 - random_bits);
      return t + r >= (std::uint64_t{1} << random_bits);
    }
  }
  return false;
}

std::uint32_t overflow_code(const Format& f, Overflow ov, MagMode m, bool negative) {
  if (ov == Overflow::Saturate || !overflow_to_special(m)) return f.max_code(negative);
  if (ov == Overflow::Inf) return f.inf_code(negative);
  return f.nan_code(negative);
}

/// Code of a nonnegative magnitude known to be representable (grid path), with the sign applied.
std::uint32_t encode_magnitude(const Format& f, double mag, bool negative) {
  const FormatSpec& s = f.spec();
  if (s.kind == FormatKind::Integer) {
    const auto k = static_cast<std::int64_t>(std::ldexp(mag, s.frac_bits));
    const std::int64_t v = negative ? -k : k;
    const std::uint64_t mask = (std::uint64_t{1} << s.int_bits) - 1;
    return static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) & mask);
  }
  if (mag == 0) return f.zero_code(negative);
  const int em = s.exponent_bits + s.mantissa_bits;
  const std::uint32_t sign = (negative && s.is_signed) ? std::uint32_t{1} << em : 0;
  const int emin = min_normal_exponent(s);
  const int e = floor_log2(mag);
  if (e < emin) {  // subnormal: exponent field 0
    return sign | static_cast<std::uint32_t>(std::ldexp(mag, s.mantissa_bits - emin));
  }
  const auto field = static_cast<std::uint32_t>(e + s.bias);
  const auto mant = static_cast<std::uint32_t>(std::ldexp(mag, s.mantissa_bits - e) -
                                               std::ldexp(1.0, s.mantissa_bits));
  return sign | (field << s.mantissa_bits) | mant;
}

CastResult cast_grid(const Format& f, double x, const CastOptions& o, std::uint32_t random) {
  const FormatSpec& s = f.spec();
  CastResult r;
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  const MagMode mode = magnitude_mode(o.rounding, neg);
  if (a == 0) {
    if (f.has_zero()) {
      r.code = f.zero_code(neg);
    } else {  // E8M0: no zero; zero becomes the smallest value (docs/casting.md)
      r.code = f.max_code(true);
      r.inexact = true;
    }
    return r;
  }
  int qe = 0;  // the grid quantum is 2^qe
  bool m0_normal = false;
  if (s.kind == FormatKind::Float) {
    const int emin = min_normal_exponent(s);
    const int e = floor_log2(a);
    if (!s.subnormals && e < emin) {  // below the smallest value of a format without zero
      r.code = f.max_code(true);
      r.inexact = true;
      return r;
    }
    qe = std::max(e, emin) - s.mantissa_bits;
    m0_normal = s.mantissa_bits == 0 && e >= emin;
  } else {
    qe = -s.frac_bits;
  }
  // n = a * 2^-qe, exact: scaling by a power of two (a multiplication by an exact power of two rounds
  // exactly like ldexp, and is much cheaper).
  const double n = (-qe >= -1022 && -qe <= 1023) ? a * pow2(-qe) : std::ldexp(a, -qe);
  const double nf = std::floor(n);
  // exact: n and nf share their exponent range. An integer format's n is infinite only far past its
  // range (|x| * 2^frac_bits >= 2^1024): nothing to round, and inf - inf would be a NaN fraction.
  const double frac = std::isinf(n) ? 0.0 : n - nf;
  double chosen = nf;
  if (frac != 0) {
    // Parity of the code of the lower neighbour. With mantissa bits it is the significand's last bit;
    // with none (E8M0-like) it is the exponent field's last bit.
    bool tz_odd = false;
    if (m0_normal) {
      tz_odd = ((qe + s.bias) & 1) != 0;
    } else {
      tz_odd = nf < 0x1p63 ? (static_cast<std::uint64_t>(nf) & 1U) != 0 : std::fmod(nf, 2.0) != 0;
    }
    const int cmp = frac < 0.5 ? -1 : (frac > 0.5 ? 1 : 0);
    const auto t = static_cast<std::uint64_t>(std::ldexp(frac, o.random_bits));
    if (choose_away(mode, cmp, tz_odd, !tz_odd, t, random, o.random_bits)) chosen = nf + 1;
    r.inexact = true;
  }
  const double mag = (qe >= -1022 && qe <= 1023) ? chosen * pow2(qe) : std::ldexp(chosen, qe);
  const double limit = neg ? -f.lowest() : f.max_finite();
  if (mag > limit) {
    r.overflow = true;
    r.inexact = true;
    r.code = overflow_code(f, o.overflow, mode, neg);
    return r;
  }
  if (mag == 0) {
    r.underflow = true;
    r.code = f.zero_code(neg);
    return r;
  }
  if ((o.subnormals == SubnormalMode::FlushOutput || o.subnormals == SubnormalMode::Flush) &&
      s.kind == FormatKind::Float && mag < f.min_normal()) {
    r.underflow = true;
    r.inexact = true;
    r.code = f.zero_code(neg);
    return r;
  }
  r.code = encode_magnitude(f, mag, neg);
  return r;
}

CastResult cast_table(const Format& f, double x, const CastOptions& o, std::uint32_t random) {
  const FormatSpec& s = f.spec();
  const auto table = f.sorted_values();
  CastResult r;
  const bool neg = std::signbit(x);
  const MagMode mode = magnitude_mode(o.rounding, neg);
  // Virtual grid points beyond the ends: floats continue their top binade's step (the overflow
  // threshold); codebooks have nothing beyond their ends.
  double beyond = std::numeric_limits<double>::infinity();
  if (s.kind == FormatKind::Float) beyond = f.max_finite() + pow2(f.emax() - s.mantissa_bits);

  auto finish_zero_or = [&](const Format::Entry& e) {
    if (e.value == 0) {
      r.code = f.zero_code(neg);
      if (x != 0) r.underflow = true;
    } else {
      r.code = e.code;
    }
  };
  // Index of the first entry with value > x; -0 and +0 compare equal, so zeros count as <= 0.
  const auto hi_it = std::upper_bound(table.begin(), table.end(), x,
                                      [](double v, const Format::Entry& e) { return v < e.value; });
  const bool flush_output = o.subnormals == SubnormalMode::FlushOutput || o.subnormals == SubnormalMode::Flush;
  if (hi_it != table.begin() && (hi_it - 1)->value == x) {  // exact
    if (flush_output && f.classify((hi_it - 1)->code) == CodeClass::Subnormal) {  // step 9 applies to exact values too
      r.underflow = true;
      r.inexact = true;
      r.code = f.zero_code(neg);
      return r;
    }
    finish_zero_or(*(hi_it - 1));
    return r;
  }
  r.inexact = true;
  // Neighbours toward zero (tz) and away from zero (az); an end neighbour may be virtual.
  const bool above = hi_it == table.end();
  const bool below = hi_it == table.begin();
  if ((above && !(x < beyond)) || (below && !(x > -beyond))) {
    r.overflow = true;
    r.code = s.kind == FormatKind::Codebook ? f.max_code(neg) : overflow_code(f, o.overflow, mode, neg);
    return r;
  }
  if (above || below) {
    if (s.kind == FormatKind::Codebook) {  // nothing beyond a codebook's ends: clamp to the end
      r.overflow = true;
      r.code = above ? table.back().code : table.front().code;
      return r;
    }
  }
  const double lo = below ? -beyond : (hi_it - 1)->value;
  const double hi = above ? beyond : hi_it->value;
  const std::uint32_t lo_code = below ? 0 : (hi_it - 1)->code;
  const std::uint32_t hi_code = above ? 0 : hi_it->code;
  // Parity of a virtual point is the opposite of its real neighbour's (the code sequence continues).
  const bool lo_odd = below ? (hi_code & 1U) == 0 : (lo_code & 1U) != 0;
  const bool hi_odd = above ? (lo_code & 1U) == 0 : (hi_code & 1U) != 0;
  const bool x_pos = !neg;  // by sign bit: +-0 in a codebook without zero lies on the side of its sign
  const double tz = x_pos ? lo : hi;
  const double az = x_pos ? hi : lo;
  const bool tz_odd = x_pos ? lo_odd : hi_odd;
  const double mid = (lo + hi) * 0.5;  // exact: checked when the format was made
  int cmp = 0;
  if (x == mid) {
    cmp = 0;
  } else {
    cmp = ((x < mid) == x_pos) ? -1 : 1;  // -1: closer to tz
  }
  std::uint64_t t = 0;
  if (mode == MagMode::Stochastic) {
    const double fraction = std::fabs(x - tz) / std::fabs(az - tz);
    t = static_cast<std::uint64_t>(std::ldexp(fraction, o.random_bits));
  }
  const bool az_odd = x_pos ? hi_odd : lo_odd;
  const bool away = choose_away(mode, cmp, tz_odd, az_odd, t, random, o.random_bits);
  const bool pick_hi = x_pos ? away : !away;
  if ((pick_hi && above) || (!pick_hi && below)) {
    r.overflow = true;
    r.code = overflow_code(f, o.overflow, mode, neg);
    return r;
  }
  const Format::Entry chosen = pick_hi ? *hi_it : *(hi_it - 1);
  if (flush_output && f.classify(chosen.code) == CodeClass::Subnormal) {
    r.underflow = true;
    r.code = f.zero_code(neg);
    return r;
  }
  finish_zero_or(chosen);
  return r;
}

}  // namespace

double source_min_normal(SourceType t) {
  switch (t) {
    case SourceType::F64: return std::numeric_limits<double>::min();
    case SourceType::F32: return pow2(-126);
    case SourceType::F16: return pow2(-14);
    case SourceType::BF16: return pow2(-126);
  }
  return 0;
}

Result<CastOptions> resolve_options(const Format& f, CastOptions o) {
  if (o.overflow == Overflow::Default) o.overflow = f.has_inf() ? Overflow::Inf : Overflow::Saturate;
  if (o.overflow == Overflow::Inf && !f.has_inf())
    return make_error("overflow policy 'inf': format '" + f.name() + "' has no infinity (use saturate" +
                      std::string(f.has_nan() ? " or nan)" : ")"));
  if (o.overflow == Overflow::Nan && !f.has_nan())
    return make_error("overflow policy 'nan': format '" + f.name() + "' has no NaN (use saturate" +
                      std::string(f.has_inf() ? " or inf)" : ")"));
  if (o.random_bits < 1 || o.random_bits > 32)
    return make_error("random bits must be 1..32 (got " + std::to_string(o.random_bits) + ")");
  return o;
}

CastResult cast(const Format& f, double x, const CastOptions& o, std::uint32_t random) {
  CastResult r;
  const bool neg = std::signbit(x);
  if (std::isnan(x)) {
    if (f.has_nan()) {
      r.code = f.nan_code(neg);
    } else {  // documented: NaN into a format without NaN gives +0 and the invalid flag
      r.code = f.has_zero() ? f.zero_code(false) : f.max_code(true);
      r.invalid = true;
    }
    return r;
  }
  const bool is_codebook = f.kind() == FormatKind::Codebook;
  if (!f.is_signed() && !is_codebook && neg && x != 0) {  // negative input to an unsigned format
    r.invalid = true;
    r.inexact = true;
    r.code = (o.overflow == Overflow::Nan) ? f.nan_code(false) : f.max_code(true);
    return r;
  }
  if (std::isinf(x)) {
    if (o.overflow == Overflow::Inf) {
      r.code = f.inf_code(neg);
    } else {
      r.overflow = true;
      r.inexact = true;
      r.code = o.overflow == Overflow::Nan ? f.nan_code(neg) : f.max_code(neg);
    }
    return r;
  }
  if ((o.subnormals == SubnormalMode::FlushInput || o.subnormals == SubnormalMode::Flush) && x != 0 &&
      std::fabs(x) < source_min_normal(o.source)) {
    CastResult z = cast(f, neg ? -0.0 : 0.0, o, random);
    z.underflow = true;
    z.inexact = true;
    return z;
  }
  return f.uses_table() ? cast_table(f, x, o, random) : cast_grid(f, x, o, random);
}

void cast_all(const Format& f, std::span<const double> in, std::span<CastResult> out, const CastOptions& o,
              std::uint64_t seed, std::uint64_t first_index) {
  const bool stochastic = o.rounding == Rounding::Stochastic;
  for (std::size_t i = 0; i < in.size() && i < out.size(); ++i) {
    const std::uint32_t random = stochastic ? stochastic_bits(seed, first_index + i) : 0;
    out[i] = cast(f, in[i], o, random);
  }
}

namespace {

constexpr Named<Rounding> kRoundingNames[] = {
    {"nearest-even", Rounding::NearestEven}, {"nearest-away", Rounding::NearestAway},
    {"nearest-zero", Rounding::NearestZero}, {"zero", Rounding::TowardZero},
    {"up", Rounding::Up},                    {"down", Rounding::Down},
    {"odd", Rounding::Odd},                  {"stochastic", Rounding::Stochastic},
    // accepted synonyms
    {"rne", Rounding::NearestEven},          {"even", Rounding::NearestEven},
    {"rna", Rounding::NearestAway},          {"rtz", Rounding::TowardZero},
    {"truncate", Rounding::TowardZero},      {"rtp", Rounding::Up},
    {"rtn", Rounding::Down},                 {"rto", Rounding::Odd},
    {"sr", Rounding::Stochastic},
};
constexpr Named<Overflow> kOverflowNames[] = {{"saturate", Overflow::Saturate},
                                              {"inf", Overflow::Inf},
                                              {"nan", Overflow::Nan},
                                              {"default", Overflow::Default},
                                              {"clamp", Overflow::Saturate},
                                              {"satfinite", Overflow::Saturate}};
constexpr Named<SubnormalMode> kSubnormalNames[] = {{"keep", SubnormalMode::Keep},
                                                    {"flush-input", SubnormalMode::FlushInput},
                                                    {"flush-output", SubnormalMode::FlushOutput},
                                                    {"flush", SubnormalMode::Flush},
                                                    {"daz", SubnormalMode::FlushInput},
                                                    {"ftz", SubnormalMode::FlushOutput}};
constexpr Named<SourceType> kSourceNames[] = {{"f64", SourceType::F64},     {"f32", SourceType::F32},
                                              {"f16", SourceType::F16},     {"bf16", SourceType::BF16},
                                              {"float64", SourceType::F64}, {"double", SourceType::F64},
                                              {"float32", SourceType::F32}, {"float", SourceType::F32},
                                              {"fp32", SourceType::F32},    {"float16", SourceType::F16},
                                              {"fp16", SourceType::F16},    {"half", SourceType::F16},
                                              {"bfloat16", SourceType::BF16}, {"fp64", SourceType::F64}};

}  // namespace

Result<Rounding> parse_rounding(std::string_view t) { return parse_named(t, kRoundingNames, "rounding mode", 8); }
Result<Overflow> parse_overflow(std::string_view t) { return parse_named(t, kOverflowNames, "overflow policy", 3); }
Result<SubnormalMode> parse_subnormals(std::string_view t) {
  return parse_named(t, kSubnormalNames, "subnormal handling", 4);
}
Result<SourceType> parse_source_type(std::string_view t) {
  return parse_named(t, kSourceNames, "source type", 4);
}
std::string_view to_string(Rounding r) { return name_of(r, kRoundingNames); }
std::string_view to_string(Overflow o) { return name_of(o, kOverflowNames); }
std::string_view to_string(SubnormalMode s) { return name_of(s, kSubnormalNames); }
std::string_view to_string(SourceType s) { return name_of(s, kSourceNames); }

}  // namespace mxlab
