// Fuzz target: a tfjs model.json with its binary shards. The input is the manifest up to the first NUL byte,
// then the shards "group1-shard1of2.bin" and "group1-shard2of2.bin" (the rest split at its middle). The
// manifest may name any path; reads outside the folder must be refused.
#include <cstdint>
#include <cstdlib>

#include "fuzz_support.hpp"
#include "mxlab/io/weights.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = mxlab::fuzz::write_manifest_and_halves(data, size, "model.json", "group1-shard1of2.bin",
                                                         "group1-shard2of2.bin");
  auto w = mxlab::WeightFile::open_tfjs(in.manifest_path);
  if (!w) {
    if (w.error().message.empty()) std::abort();
    return 0;
  }
  for (std::size_t i = 0; i < w->weights().size(); ++i) {
    auto t = w->read(i);
    if (t && t->size() > size) std::abort();
  }
  return 0;
}
