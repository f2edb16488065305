// The format catalogue as tables: every derived property of element formats, and the named block formats.
#pragma once

#include <span>

#include "mxlab/core/table.hpp"
#include "mxlab/formats/format.hpp"

namespace mxlab::ops {

/// One row per format: name, aliases, kind, role, bits, exponent/mantissa bits, bias, specials, emax, max finite,
/// min normal, min subnormal, min positive, finite codes, inf/NaN/-0, description (values exact, %.17g).
Table format_table(std::span<const Format> formats);

/// The named block formats: element, scales, block size, rule and storage cost.
Table block_format_table();

}  // namespace mxlab::ops
