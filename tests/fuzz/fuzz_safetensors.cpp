// Fuzz target: safetensors files. The file is opened (header checked against the file) and every readable
// tensor is read.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz_support.hpp"
#include "mxlab/io/weights.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = mxlab::fuzz::write_scratch("model.safetensors",
                                               std::string_view(reinterpret_cast<const char*>(data), size));
  auto w = mxlab::WeightFile::open_safetensors(path);
  if (!w) {
    if (w.error().message.empty()) std::abort();
    return 0;
  }
  for (std::size_t i = 0; i < w->weights().size(); ++i) {
    auto t = w->read(i);
    if (t && t->size() > size) std::abort();  // every element came from the file's bytes
  }
  return 0;
}
