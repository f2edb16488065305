// Error construction.
#include "mxlab/core/error.hpp"
#include "mxlab/core/quote.hpp"

namespace mxlab {

Error make_error(std::string message) { return Error{std::move(message)}; }

std::string quote_input(std::string_view text) {
  constexpr std::size_t kWhole = 60, kStart = 40;
  if (text.size() <= kWhole) return "'" + std::string(text) + "'";
  return "'" + std::string(text.substr(0, kStart)) + "...' (" + std::to_string(text.size()) + " characters)";
}

}  // namespace mxlab
