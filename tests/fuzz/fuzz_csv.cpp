// Fuzz target: CSV tensors, flat and as a table.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mxlab/io/csv.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto layout : {mxlab::CsvLayout::Flat, mxlab::CsvLayout::Table}) {
    auto t = mxlab::parse_csv(text, "fuzz.csv", mxlab::CsvOptions{layout});
    if (t && t->size() > size) std::abort();  // a number takes at least one byte
    if (!t && t.error().message.empty()) std::abort();
  }
  return 0;
}
