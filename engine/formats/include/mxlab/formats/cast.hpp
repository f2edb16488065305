// The scalar reference cast: any double (and so any float, BF16 or FP16 value) to any format, with
// explicit rounding, overflow and subnormal choices. This is the definition of mxlab's behaviour;
// the multiprecision oracle (exact/) checks it and every faster path must match it bit for bit.
// The rules are written out in docs/casting.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab {

/// Rounding modes; the command-line names are in parentheses.
enum class Rounding : std::uint8_t {
  NearestEven,  ///< (nearest-even) ties to the even code (IEEE roundTiesToEven; OCP MX default)
  NearestAway,  ///< (nearest-away) ties away from zero
  NearestZero,  ///< (nearest-zero) ties toward zero
  TowardZero,   ///< (zero) truncate
  Up,           ///< (up) toward +infinity
  Down,         ///< (down) toward -infinity
  Odd,          ///< (odd) inexact results take the neighbour with an odd code
  Stochastic,   ///< (stochastic) away from zero with probability = fraction of the gap, from random bits
};

/// What happens to values beyond the largest finite value (and to infinite inputs).
enum class Overflow : std::uint8_t {
  Default,   ///< Inf for formats with infinity (IEEE 754), Saturate otherwise (OCP MX v1.0 6.3)
  Saturate,  ///< clamp to +-max finite; infinities too
  Inf,       ///< IEEE 754 7.4: +-inf where IEEE rounds to infinity, max finite otherwise
  Nan,       ///< like Inf, but NaN (OFP8 non-saturating conversion)
};

/// Subnormal handling.
enum class SubnormalMode : std::uint8_t {
  Keep,         ///< gradual underflow
  FlushInput,   ///< inputs subnormal in their source type are read as zero (DAZ)
  FlushOutput,  ///< results that are subnormal in the target format become zero (FTZ)
  Flush,        ///< both
};

/// The type the input values come from (for FlushInput: whose subnormals are flushed).
enum class SourceType : std::uint8_t { F64, F32, F16, BF16 };

struct CastOptions {
  Rounding rounding = Rounding::NearestEven;
  Overflow overflow = Overflow::Default;
  SubnormalMode subnormals = SubnormalMode::Keep;
  SourceType source = SourceType::F64;
  /// Stochastic rounding: how many random bits are compared with the discarded fraction (1..32).
  int random_bits = 32;
  bool operator==(const CastOptions&) const = default;
};

/// Outcome of one cast. `code` is always a valid code of the format.
struct CastResult {
  std::uint32_t code = 0;
  bool inexact = false;    ///< the result's value differs from the input (NaN in, NaN out is exact)
  bool overflow = false;   ///< the input lay beyond the range and the overflow policy decided
  bool underflow = false;  ///< a nonzero input became zero (rounded or flushed)
  bool invalid = false;    ///< NaN into a format without NaN, or a negative input to an unsigned format
};

/// Checks the options against the format (e.g. Overflow::Inf needs infinities) and resolves Default.
Result<CastOptions> resolve_options(const Format& f, CastOptions o);

/// Casts one value. `random` supplies the random bits for Stochastic (its top random_bits bits are
/// used; see stochastic_bits() in core/random.hpp for the seeded stream). Options must be resolved.
CastResult cast(const Format& f, double x, const CastOptions& o, std::uint32_t random = 0);

/// Casts a sequence; element i uses random bits stochastic_bits(seed, first_index + i).
void cast_all(const Format& f, std::span<const double> in, std::span<CastResult> out, const CastOptions& o,
              std::uint64_t seed = 0, std::uint64_t first_index = 0);

/// Parses "nearest-even", "nearest-away", "nearest-zero", "zero", "up", "down", "odd", "stochastic".
Result<Rounding> parse_rounding(std::string_view text);
/// Parses "saturate", "inf", "nan" (and "default").
Result<Overflow> parse_overflow(std::string_view text);
/// Parses "keep", "flush" (both), "flush-input", "flush-output".
Result<SubnormalMode> parse_subnormals(std::string_view text);
/// Parses "f64", "f32", "f16", "bf16" (and "float64", "double", "float32", "float", ...).
Result<SourceType> parse_source_type(std::string_view text);

std::string_view to_string(Rounding r);
std::string_view to_string(Overflow o);
std::string_view to_string(SubnormalMode s);
std::string_view to_string(SourceType s);

/// All rounding modes, deterministic ones first (Stochastic last).
inline constexpr Rounding kAllRoundings[] = {Rounding::NearestEven, Rounding::NearestAway, Rounding::NearestZero,
                                             Rounding::TowardZero,  Rounding::Up,          Rounding::Down,
                                             Rounding::Odd,         Rounding::Stochastic};

/// Smallest positive normal of a source type (the DAZ threshold).
double source_min_normal(SourceType t);

}  // namespace mxlab
