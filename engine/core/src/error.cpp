// Error construction.
#include "mxlab/core/error.hpp"

namespace mxlab {

Error make_error(std::string message) { return Error{std::move(message)}; }

}  // namespace mxlab
