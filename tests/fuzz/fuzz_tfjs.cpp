// Fuzz target: a tfjs model.json with its binary shards. The input is the manifest up to the first NUL byte,
// then the shards "group1-shard1of2.bin" and "group1-shard2of2.bin" (the rest split at its middle). The
// manifest may name any path; reads outside the folder must be refused.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz_support.hpp"
#include "mxlab/io/weights.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view manifest = input.substr(0, nul);
  const std::string_view shards = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  const auto path = mxlab::fuzz::write_scratch("model.json", manifest);
  mxlab::fuzz::write_scratch("group1-shard1of2.bin", shards.substr(0, shards.size() / 2));
  mxlab::fuzz::write_scratch("group1-shard2of2.bin", shards.substr(shards.size() / 2));
  auto w = mxlab::WeightFile::open_tfjs(path);
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
