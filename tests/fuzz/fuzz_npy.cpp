// Fuzz target: .npy bytes through the float reader (with and without bfloat16-as-uint16) and the uint8 reader.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mxlab/io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool bf16 : {false, true}) {
    mxlab::NpyReadOptions o;
    o.u2_as_bf16 = bf16;
    auto t = mxlab::parse_npy(bytes, "fuzz.npy", o);
    if (t && t->size() > size) std::abort();  // every element came from the input's bytes
    if (!t && t.error().message.empty()) std::abort();
  }
  auto u = mxlab::parse_npy_u8(bytes, "fuzz.npy");
  if (u && u->data.size() > size) std::abort();
  return 0;
}
