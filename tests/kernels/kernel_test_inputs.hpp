// Shared by the kernel tests: the formats and option grids to check, and input sets aimed at the places a
// cast can go wrong (values, midpoints, their float neighbours, overflow thresholds, subnormals, specials).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mxlab/core/random.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"

namespace mxlab::test {

/// Catalogue formats plus generic ones that stress other corners: other biases, no subnormals, one-bit
/// fields, 16-bit grids, ranges beyond float32, integers with unusual fraction bits.
inline std::vector<Format> formats_to_check() {
  std::vector<Format> out(catalogue_formats().begin(), catalogue_formats().end());
  for (const char* text :
       {"e3m4",     "e4m3b10fnuz", "ue4m3",        "ue5m2ieee", "e4m3b-2",   "e6m1",    "e1m6",  "e2m0",
        "e3m0ieee", "e8m0fnu",     "e5m10b20ieee", "e8m7b200",  "e11m4ieee", "ue1m15",  "e1m14", "e7m8fn",
        "e2m1fnuz", "int16",       "uint16",       "int2",      "uint1",     "mxint16", "mxint6"}) {
    auto f = parse_format(text);
    REQUIRE(f.ok());
    out.push_back(*f);
  }
  auto spec_format = [&](const std::string& name, FormatSpec s) {
    auto f = Format::make(name, s);
    REQUIRE(f.ok());
    out.push_back(*f);
  };
  FormatSpec s;  // signed E3M2 without subnormals: field 0 is a normal binade, no zero
  s.kind = FormatKind::Float;
  s.exponent_bits = 3;
  s.mantissa_bits = 2;
  s.bias = 3;
  s.subnormals = false;
  spec_format("e3m2_nosub", s);
  s.is_signed = false;  // unsigned E4M0 without zero, NaN at all ones: a small E8M0
  s.exponent_bits = 4;
  s.mantissa_bits = 0;
  s.bias = 7;
  s.specials = Specials::AllOnesNan;
  spec_format("ue4m0_nosub", s);
  s.is_signed = true;  // IEEE specials without subnormals
  s.exponent_bits = 5;
  s.mantissa_bits = 2;
  s.bias = 15;
  s.specials = Specials::Ieee;
  spec_format("e5m2_ieee_nosub", s);
  FormatSpec i;
  i.kind = FormatKind::Integer;
  i.int_bits = 6;
  i.frac_bits = -3;  // steps of 8
  spec_format("int6_step8", i);
  i.int_bits = 8;
  i.frac_bits = 140;  // steps below float32's normal range
  i.is_signed = false;
  spec_format("uint8_tiny", i);
  i.is_signed = true;
  i.symmetric = true;
  i.frac_bits = -130;  // steps above float32's range: every finite input rounds within one step of 0
  spec_format("int8_huge", i);
  i.int_bits = 16;
  i.symmetric = false;
  i.frac_bits = 1000;  // steps far below float32: every nonzero input overflows (|x| * 2^1000 can exceed double)
  spec_format("int16_minute", i);
  return out;
}

/// Every rounding mode (stochastic with 32 random bits, and with 9 and 1 when `random_widths`), every
/// overflow policy the format allows and every subnormal mode, with the given source type.
inline std::vector<CastOptions> option_grid(const Format& f, SourceType source, bool random_widths = true) {
  std::vector<Overflow> policies = {Overflow::Saturate};
  if (f.has_inf()) policies.push_back(Overflow::Inf);
  if (f.has_nan()) policies.push_back(Overflow::Nan);
  std::vector<CastOptions> out;
  for (Rounding r : kAllRoundings) {
    for (int random_bits : {32, 9, 1}) {
      if ((r != Rounding::Stochastic || !random_widths) && random_bits != 32) continue;
      for (Overflow ov : policies) {
        for (SubnormalMode sub :
             {SubnormalMode::Keep, SubnormalMode::FlushInput, SubnormalMode::FlushOutput, SubnormalMode::Flush}) {
          CastOptions o;
          o.rounding = r;
          o.overflow = ov;
          o.subnormals = sub;
          o.source = source;
          o.random_bits = random_bits;
          auto resolved = resolve_options(f, o);
          REQUIRE(resolved.ok());
          out.push_back(*resolved);
        }
      }
    }
  }
  return out;
}

inline std::string describe(const Format& f, const CastOptions& o) {
  return f.name() + " " + std::string(to_string(o.rounding)) + "/" + std::to_string(o.random_bits) + " " +
         std::string(to_string(o.overflow)) + " " + std::string(to_string(o.subnormals)) + " from " +
         std::string(to_string(o.source));
}

/// Distance to the next grid point beyond the largest magnitude (docs/casting.md "continued grid"), 0 for
/// codebooks.
inline double step_beyond_max(const Format& f) {
  if (f.kind() == FormatKind::Float) return pow2(f.emax() - f.spec().mantissa_bits);
  if (f.kind() == FormatKind::Integer) return pow2(-f.spec().frac_bits);
  return 0;
}

/// float32 bit patterns of special inputs: zeros, infinities, NaNs with payloads and signs, float32
/// subnormals (every power of two and a spread of patterns), the smallest and largest normals.
inline std::vector<float> special_inputs() {
  std::vector<std::uint32_t> bits = {0x00000000U, 0x80000000U, 0x7F800000U, 0xFF800000U, 0x7FC00000U,
                                     0xFFC00000U, 0x7F800001U, 0xFF800001U, 0x7FBFFFFFU, 0xFFFFFFFFU,
                                     0x7FFFFFFFU, 0x00800000U, 0x00800001U, 0x007FFFFFU, 0x7F7FFFFFU,
                                     0x7F7FFFFEU, 0x3F800000U, 0x3F800001U, 0x3F7FFFFFU};
  for (int k = 0; k < 23; ++k) {
    bits.push_back(std::uint32_t{1} << k);
    bits.push_back((std::uint32_t{1} << k) + 1);
    bits.push_back((std::uint32_t{1} << k) - 1);
    bits.push_back((std::uint32_t{3} << k) & 0x7FFFFFU);
  }
  for (std::uint32_t u = 1; u < 0x800000U; u += 4099) bits.push_back(u);
  std::vector<float> out;
  for (std::uint32_t u : bits) {
    out.push_back(std::bit_cast<float>(u));
    out.push_back(std::bit_cast<float>(u ^ 0x80000000U));
  }
  return out;
}

/// Inputs at and around the format's grid: each value, each midpoint and quarter point between
/// neighbouring values (including the continued point past the largest value and the gap below the
/// smallest), and the float32 numbers one and two steps either side of each; both signs.
/// `stride` > 1 samples every stride-th gap (and the first and last 128) for 16-bit formats; `light` keeps
/// only each gap's lower end and midpoint, with one float step either side.
inline std::vector<float> grid_inputs(const Format& f, std::size_t stride, bool light = false) {
  std::vector<double> grid;
  for (const Format::Entry& e : f.sorted_values())
    if (grid.empty() || e.value != grid.back()) grid.push_back(e.value);
  const double step = step_beyond_max(f);
  if (step > 0) {
    grid.push_back(f.max_finite() + step);
    if (f.lowest() < 0) grid.insert(grid.begin(), f.lowest() - step);
  }
  if (f.min_positive() > 0 && !f.has_zero()) grid.insert(grid.begin(), 0.0);  // the gap below the smallest value
  std::vector<double> anchors;
  for (std::size_t i = 0; i + 1 < grid.size(); ++i) {
    if (stride > 1 && i % stride != 0 && i > 128 && i + 128 < grid.size()) continue;
    const double a = grid[i];
    const double b = grid[i + 1];
    if (light) {
      anchors.insert(anchors.end(), {a, (a + b) / 2});
    } else {
      anchors.insert(anchors.end(), {a, b, (a + b) / 2, a + (b - a) / 4, b - (b - a) / 4});
    }
  }
  std::vector<float> out;
  auto push = [&](float x) {
    if (!std::isfinite(x)) return;
    out.push_back(x);
    out.push_back(-x);
  };
  for (double a : anchors) {
    const auto x = static_cast<float>(a);
    push(x);
    float up = x;
    float down = x;
    for (int k = 0; k < (light ? 1 : 2); ++k) {
      up = std::nextafter(up, std::numeric_limits<float>::infinity());
      down = std::nextafter(down, -std::numeric_limits<float>::infinity());
      push(up);
      push(down);
    }
  }
  return out;
}

/// Random float32 bit patterns, and random floats whose exponents lie in and just around the format's range.
inline std::vector<float> random_inputs(const Format& f, std::size_t n_bits, std::size_t n_range, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> out;
  out.reserve(n_bits + n_range);
  for (std::size_t i = 0; i < n_bits; ++i) out.push_back(std::bit_cast<float>(rng.next_u32()));
  const FormatSpec& s = f.spec();
  int lo = -150;
  if (s.kind == FormatKind::Float) lo = min_normal_exponent(s) - s.mantissa_bits - 3;
  if (s.kind == FormatKind::Integer) lo = -s.frac_bits - 3;
  lo = std::max(lo, -150);
  const int hi = std::min(f.emax() + 2, 127);
  if (lo > hi) return out;
  for (std::size_t i = 0; i < n_range; ++i) {
    const int e = lo + static_cast<int>(rng.next_u32() % static_cast<std::uint32_t>(hi - lo + 1));
    const double mant = 1.0 + static_cast<double>(rng.next_u32() >> 9) * 0x1p-23;
    const auto x = static_cast<float>(std::ldexp(mant, e));
    out.push_back((rng.next_u32() & 1U) != 0 ? -x : x);
  }
  return out;
}

/// The reference: mxlab::cast on each input, element i with stochastic_bits(seed, first_index + i).
/// Two threads share the (slow) reference calls.
template <typename T, typename ToDouble>
std::vector<std::uint16_t> reference_codes(const Format& f, const CastOptions& o, const std::vector<T>& in,
                                           std::uint64_t seed, std::uint64_t first_index, ToDouble to_double) {
  std::vector<std::uint16_t> out(in.size());
  const bool stochastic = o.rounding == Rounding::Stochastic;
  auto part = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const std::uint32_t random = stochastic ? stochastic_bits(seed, first_index + i) : 0;
      out[i] = static_cast<std::uint16_t>(cast(f, to_double(in[i]), o, random).code);
    }
  };
  const std::size_t half = in.size() / 2;
  std::thread other(part, half, in.size());
  part(0, half);
  other.join();
  return out;
}

/// First index where two code arrays differ, or -1.
inline long first_difference(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return -1;
}

}  // namespace mxlab::test
