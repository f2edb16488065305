// Compile-time checks of the counter-based random stream (its definition must never drift).
#include "mxlab/core/random.hpp"

namespace mxlab {

// Reference values of SplitMix64 from its published test vector (seed 0 -> first output).
static_assert(splitmix64(0) == 0xE220A8397B1DCDAFULL);
static_assert(stochastic_bits(1, 0) != stochastic_bits(1, 1));
static_assert(stochastic_bits(1, 0) != stochastic_bits(2, 0));

}  // namespace mxlab
