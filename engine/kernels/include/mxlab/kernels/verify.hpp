// Exhaustive check of the SIMD cast against the scalar reference over float32 bit patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxlab/core/error.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab {

/// One input on which the SIMD cast and the reference disagree.
struct CastMismatch {
  std::uint32_t input_bits = 0;  ///< the float32 input's bit pattern
  std::uint32_t simd_code = 0;
  std::uint32_t reference_code = 0;
};

/// Progress report: patterns checked so far and in total. Returning false stops the run early.
using VerifyProgress = std::function<bool(std::uint64_t done, std::uint64_t total)>;

struct VerifyOptions {
  unsigned threads = 0;  ///< worker threads; 0 = all hardware threads
  /// The float32 bit patterns checked: [begin, end), at most [0, 2^32).
  std::uint64_t begin = 0;
  std::uint64_t end = std::uint64_t{1} << 32;
  std::size_t max_examples = 16;  ///< mismatches kept (those with the smallest input bits)
  /// Stochastic rounding: the input with bit pattern u uses the random word stochastic_bits(seed, u).
  std::uint64_t seed = 0;
  VerifyProgress progress;  ///< called from the calling thread a few times a second; may be empty
};

struct VerifyReport {
  std::uint64_t checked = 0;           ///< patterns compared (end - begin unless cancelled)
  std::uint64_t mismatches = 0;        ///< patterns whose SIMD code differs from the reference code
  std::vector<CastMismatch> examples;  ///< up to max_examples mismatches, by increasing input bits
  bool cancelled = false;              ///< the progress callback stopped the run
  std::string simd_target;             ///< the target the SIMD side ran on
  double seconds = 0;
};

/// Casts every float32 bit pattern in the range with the SIMD kernel (cast_f32) and with the scalar
/// reference mxlab::cast, and compares the codes. Errors: unsupported format, invalid options, bad range.
Result<VerifyReport> verify_cast(const Format& f, const CastOptions& options, const VerifyOptions& verify = {});

}  // namespace mxlab
