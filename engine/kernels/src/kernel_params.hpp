// The numbers a format and a set of cast options reduce to for the SIMD kernels (cast_kernels-inl.h).
// Built on the scalar side (cast_kernel.cpp, decode_kernel.cpp); plain data, no Highway types.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab::kernel_detail {

/// Input element type of a cast kernel; all are widened to float32 bits first (exact).
enum class InputKind : std::uint8_t { F32, BF16, F16 };

/// A grid cast (docs/casting.md) in integer arithmetic on the float32 bits of the input.
/// For a finite nonzero input with significand sig in [2^23, 2^24) and exponent e (|x| = sig * 2^(e-23)):
///   ec = min(e, exponent_clamp); qe = max(ec - quantum_drop, quantum_min)   (grid quantum 2^qe)
///   truncated code magnitude tz = ((qe - quantum_min + field_offset) << mantissa_shift) + (sig >> (23 + qe - ec))
/// and the code of the neighbour away from zero is tz + 1 (codes are consecutive on the grid, also
/// across binades and onto the first code past the largest finite value).
struct CastParams {
  Rounding rounding = Rounding::NearestEven;
  std::int32_t random_bits = 32;

  // Grid. Floats: quantum_drop = mantissa bits, quantum_min = emin - mantissa bits; integers: the quantum is
  // always 2^-frac_bits (quantum_drop large). exponent_clamp = emax + 1: anything at or above 2^(emax+1)
  // overflows whatever its significand, and clamping keeps the code arithmetic inside 32 bits.
  std::int32_t exponent_clamp = 0;
  std::int32_t quantum_drop = 0;
  std::int32_t quantum_min = 0;
  std::int32_t field_offset = 0;  ///< 0 with subnormals (field 0 holds the lowest grid), -1 without
  std::int32_t mantissa_shift = 0;
  /// Formats whose exponent field 0 is read again as a second float (MX-SAFE): below 2^split_exponent the
  /// grid is the second reading's, with its own mantissa width; codes stay consecutive across the split.
  /// There tz = ((qe + low_field_base) << low_mantissa_shift) + kept with qe = max(ec - low_quantum_drop,
  /// quantum_min), and above it the formula of the fields above.
  bool split = false;
  std::int32_t split_exponent = 0;
  std::int32_t low_quantum_drop = 0;
  std::int32_t low_mantissa_shift = 0;
  std::int32_t low_field_base = 0;
  /// Formats without subnormals: inputs below 2^tiny_below_exponent give tiny_code (the smallest value).
  bool has_tiny = false;
  std::int32_t tiny_below_exponent = 0;
  std::uint32_t tiny_code = 0;

  /// Largest code magnitude that is not an overflow, per input sign [positive, negative].
  std::uint32_t limit[2] = {0, 0};
  /// Code magnitudes below this become the zero of the input's sign: 1 (code 0 is zero), the smallest
  /// normal's code under flush-output, or 0 for formats without zero (code 0 is their smallest value).
  std::uint32_t flush_below = 1;
  /// Negative results: code = (((magnitude ^ neg_xor) + neg_add) & neg_mask) | neg_or, i.e. a sign bit for
  /// floats and two's complement for integers.
  std::uint32_t neg_xor = 0;
  std::uint32_t neg_add = 0;
  std::uint32_t neg_mask = 0xFFFFFFFFU;
  std::uint32_t neg_or = 0;

  // Fixed results, per input sign [positive, negative] where the sign matters.
  std::uint32_t zero_code[2] = {0, 0};        ///< a zero result
  std::uint32_t overflow_code[2] = {0, 0};    ///< a rounded result beyond the largest finite value
  std::uint32_t zero_input_code[2] = {0, 0};  ///< a zero (or flushed) input
  std::uint32_t inf_code[2] = {0, 0};         ///< an infinite input
  std::uint32_t nan_code[2] = {0, 0};         ///< a NaN input
  bool is_unsigned = false;
  std::uint32_t negative_unsigned_code = 0;  ///< a nonzero negative input to an unsigned format
  /// Flush-input: nonzero inputs whose float32 magnitude bits are below this are read as zero (0: none).
  std::uint32_t flush_input_below_bits = 0;
  /// Whether an infinite input counts as an overflow (the reference's flag; not when the cast keeps Inf).
  bool inf_overflows = false;
};

/// Exact values of binary16 and bfloat16 bit patterns (cast_kernel.cpp).
double half_value(std::uint16_t h);
double bf16_value(std::uint16_t b);

/// The reduction of a format and resolved cast options (cast_kernel.cpp).
CastParams build_cast_params(const Format& f, const CastOptions& o);

/// Per-call arguments of a cast kernel over elements [0, n) of in/out.
struct CastCall {
  InputKind input = InputKind::F32;
  const void* in = nullptr;
  void* out = nullptr;
  bool out16 = false;  ///< uint16_t codes, else uint8_t
  std::size_t n = 0;
  std::uint64_t seed_key = 0;     ///< splitmix64(seed), see stochastic_bits()
  std::uint64_t first_index = 0;  ///< stream index of element 0
};

/// Decoding of codes to float32: arithmetic for Float and Integer formats, a lookup table otherwise.
enum class DecodeKind : std::uint8_t { Float, Integer, Table };

struct DecodeParams {
  DecodeKind kind = DecodeKind::Float;
  std::uint32_t code_mask = 0;
  // Float: sign at bit sign_shift (sign_mask 0 for unsigned), exponent field, mantissa field.
  std::int32_t sign_shift = 0;
  std::uint32_t sign_mask = 0;
  std::int32_t mantissa_bits = 0;
  std::uint32_t exponent_mask = 0;
  std::int32_t bias = 0;
  bool subnormals = true;
  /// IEEE-style: field all ones is inf (mantissa 0) or NaN. fn and fnuz styles: a code whose bits under
  /// nan_code_mask equal nan_code is NaN.
  bool ieee_specials = false;
  bool has_nan_codes = false;
  std::uint32_t nan_code_mask = 0;
  std::uint32_t nan_code = 0;
  // Integer: value = k * 2^-frac_bits with k the int_bits-bit (two's complement if signed) code.
  std::int32_t int_bits = 0;
  bool int_signed = false;
  std::int32_t frac_bits = 0;
  // Table: float32 bits of every code.
  const std::uint32_t* table = nullptr;
};

struct DecodeCall {
  const void* in = nullptr;
  bool in16 = false;
  float* out = nullptr;
  std::size_t n = 0;
};

/// Dispatch entry points (dispatch.cpp): run on the best target the CPU supports (or the forced one).
void cast_dispatch(const CastParams& p, const CastCall& call);
void decode_dispatch(const DecodeParams& p, const DecodeCall& call);

}  // namespace mxlab::kernel_detail
