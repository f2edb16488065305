// Fuzz target: format strings. Any text parses to a format or to an error; a parsed format's own name
// parses again to the same format, and its code points decode.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mxlab/formats/parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto f = mxlab::parse_format(text);
  if (!f) {
    // The message already ran the near-miss suggestions over the catalogue.
    if (f.error().message.empty()) std::abort();
    return 0;
  }
  auto again = mxlab::parse_format(f->name());
  if (!again || again->name() != f->name() || again->bits() != f->bits()) std::abort();
  const std::uint64_t codes = f->bits() >= 32 ? 0 : std::uint64_t{1} << f->bits();
  for (std::uint64_t c = 0; c < codes && c < 4096; c += 1 + codes / 64) (void)f->decode(static_cast<std::uint32_t>(c));
  return 0;
}
