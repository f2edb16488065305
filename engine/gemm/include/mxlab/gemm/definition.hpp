// The definition of docs/gemm.md in exact rational arithmetic (exact::Rational, roundings by exact::round_exact):
// written step by step from the text and independent of gemm.cpp's double arithmetic, which tests check against
// it. Slow (a heap-allocated rational per value): for tests and spot checks, not for GEMMs.
#pragma once

#include <cstdint>

#include "mxlab/formats/format.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/gemm/model.hpp"

namespace mxlab::gemm {

/// The dot product of row row_a of a and row row_b of b under model m, rounded to `out`, by the definition.
double definition_dot(const Model& m, const Operand& a, std::int64_t row_a, const Operand& b, std::int64_t row_b,
                      const Format& out);

/// The exact dot product of the two rows (OCP MX v1.0 special values), rounded once to `out`, by the definition.
double definition_exact_dot(const Operand& a, std::int64_t row_a, const Operand& b, std::int64_t row_b,
                            const Format& out);

}  // namespace mxlab::gemm
