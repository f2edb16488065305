// The reference grid cast (formats/src/cast.cpp) reduced to the constants the SIMD element casts take;
// shared by the elementwise kernels (CastParams) and the block kernels (ElementParams).
#pragma once

#include <cstdint>

#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab::kernel_detail {

/// Low n bits set.
inline std::uint32_t low_bits(int n) { return n >= 32 ? 0xFFFFFFFFU : (std::uint32_t{1} << n) - 1; }

/// Fills the grid fields every element-cast parameter set has (rounding, quantum, limits, flush,
/// negative-code construction) for a Float format (also one whose field 0 is read again, as MX-SAFE) or an
/// Integer format.
template <typename P>
void fill_grid_params(P& p, const Format& f, const CastOptions& o) {
  const FormatSpec& s = f.spec();
  p.rounding = o.rounding;
  p.random_bits = o.random_bits;
  p.exponent_clamp = f.emax() + 1;
  if (s.kind == FormatKind::Float) {
    const int emin = min_normal_exponent(s);
    p.quantum_drop = s.mantissa_bits;
    p.quantum_min = emin - s.mantissa_bits;
    p.field_offset = s.subnormals ? 0 : -1;
    p.mantissa_shift = s.mantissa_bits;
    p.has_tiny = !s.subnormals;
    p.tiny_below_exponent = emin;
    p.tiny_code = f.max_code(true);
    p.limit[0] = f.max_code(false);
    p.limit[1] = s.is_signed ? f.max_code(false) : 0;
    const bool flush_output = o.subnormals == SubnormalMode::FlushOutput || o.subnormals == SubnormalMode::Flush;
    // Without subnormals code 0 is the smallest value, not zero: nothing rounds to zero.
    p.flush_below = !s.subnormals ? 0 : (flush_output ? std::uint32_t{1} << s.mantissa_bits : 1);
    p.neg_or = s.is_signed ? std::uint32_t{1} << (s.exponent_bits + s.mantissa_bits) : 0;
    if (s.sub_exponent_bits > 0) {
      // Field 0 read again as a float with sub_mantissa_bits and sub_bias, IEEE subnormals at its field 0:
      // a normal binade e of the second reading has codes ((e + sub_bias) << sm) + mantissa, i.e.
      // tz = ((qe + sub_bias + sm - 1) << sm) + kept; the first reading's binades e >= emin give
      // tz = ((qe + bias + m - 1) << m) + kept. Its smallest quantum is the second reading's.
      const int sm = s.sub_mantissa_bits;
      p.split = true;
      p.split_exponent = emin;
      p.low_quantum_drop = sm;
      p.low_mantissa_shift = sm;
      p.low_field_base = s.sub_bias + sm - 1;
      p.quantum_min = 1 - s.sub_bias - sm;
      p.field_offset = (s.bias + s.mantissa_bits - 1) + p.quantum_min;  // field_base = bias + m - 1 above
      p.has_tiny = false;
      // Flush-output flushes the second reading's subnormals (codes below its first normal, 1 << sm).
      p.flush_below = flush_output ? std::uint32_t{1} << sm : 1;
    }
  } else {  // Integer: one quantum 2^-frac_bits everywhere; two's complement negatives
    // Any drop larger than the exponent span of the integer (at most 16 binades here) keeps qe at its minimum.
    p.quantum_drop = 64;
    p.quantum_min = -s.frac_bits;
    p.field_offset = 0;
    p.mantissa_shift = 0;
    const std::uint32_t kmax = s.is_signed ? low_bits(s.int_bits - 1) : low_bits(s.int_bits);
    p.limit[0] = kmax;
    p.limit[1] = !s.is_signed ? 0 : (s.symmetric ? kmax : kmax + 1);
    p.flush_below = 1;
    p.neg_xor = 0xFFFFFFFFU;
    p.neg_add = 1;
    p.neg_mask = low_bits(s.int_bits);
  }
}

}  // namespace mxlab::kernel_detail
