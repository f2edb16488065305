// The format catalogue as tables: every derived property of element formats, and the named block formats.
#pragma once

#include <cstdint>
#include <span>

#include "mxlab/core/error.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/formats/format.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::ops {

/// One row per format: name, aliases, kind, role, bits, exponent/mantissa bits, bias, specials, emax, max finite,
/// min normal, min subnormal, min positive, finite codes, inf/NaN/-0, description (values exact, %.17g).
Table format_table(std::span<const Format> formats);

/// The named block formats: element, scales, block size, rule and storage cost.
Table block_format_table();

/// Codes first..last (inclusive, last < code_count()) of an element format: code, hex, bits, sign, exponent,
/// mantissa, class, value (%.17g), exact (exact decimal; NaN and Inf as value), gap_up (empty for the largest).
Table codepoint_table(const Format& f, std::uint64_t first, std::uint64_t last);

/// The per-gap error bounds of two block formats (`mxlab bounds`): both checked for support first; max_gap -1
/// is every gap up to full underflow of both.
Result<Table> bounds_table(const BlockFormat& a, const BlockFormat& b, int max_gap = -1);

}  // namespace mxlab::ops
