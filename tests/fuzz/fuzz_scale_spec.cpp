// Fuzz target: block format (scale spec) strings, optionally followed by a line naming a peer profile. A spec
// that parses is quantized over a small fixed tensor by the scalar reference; nothing may crash.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/quantize.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nl = input.find('\n');
  auto f = mxlab::parse_block_format(input.substr(0, nl));
  if (!f) {
    if (f.error().message.empty()) std::abort();
    return 0;
  }
  if (nl != std::string_view::npos) {
    f = mxlab::apply_profile(*f, input.substr(nl + 1));
    if (!f) return 0;
  }
  (void)f->block_elements();
  const std::vector<std::int64_t> shape = {4, 24};
  (void)f->stored_bits_per_element(shape);
  std::vector<double> x(96);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (static_cast<double>(i) - 40.5) * 0.37 * static_cast<double>(i % 7);
  auto q = mxlab::quantize(*f, x, shape);
  if (q && q->values.size() != x.size()) std::abort();
  return 0;
}
