// The reference's element step under a divisor (block_quotient.cpp; cast_quotient itself is declared in
// mxlab/quantize/quantize.hpp). Internal to engine/quantize.
#pragma once

#include "mxlab/formats/cast.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::quantize_detail {

/// Whether d is a positive power of two.
bool is_pow2(double d);

/// The zero-sign rule on an exactly computed element (InputPrecision::Exact): the scaled value is zero
/// exactly when the input x is.
void exact_zero_sign(const Format& e, double x, CastResult& r, const QuantOptions& o);

}  // namespace mxlab::quantize_detail
