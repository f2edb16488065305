// Quoting inputs in messages.
#pragma once

#include <string>
#include <string_view>

namespace mxlab {

/// An input as a message quotes it: 'text' when short, else 'its start...' and its length, so a message
/// names a huge token without repeating it.
std::string quote_input(std::string_view text);

}  // namespace mxlab
