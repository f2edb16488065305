// Fuzz target: a capture folder (mxlab.torch.capture). The input is capture.json up to the first NUL byte, then
// the bytes of the tensor files "000000.f32" and "000001.f32" (the rest split at its middle). The manifest may
// name any path; files outside the folder must be refused, and every tensor that opens reads exactly the
// bytes of its shape.
#include <cstdint>
#include <cstdlib>

#include "fuzz_support.hpp"
#include "mxlab/io/weights.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = mxlab::fuzz::write_manifest_and_halves(data, size, "capture.json", "000000.f32", "000001.f32");
  auto w = mxlab::WeightFile::open_capture(in.manifest_path);
  if (!w) {
    if (w.error().message.empty()) std::abort();
    return 0;
  }
  for (std::size_t i = 0; i < w->weights().size(); ++i) {
    const auto& info = w->weights()[i];
    if (info.shape.size() != 2 || info.layout != mxlab::WeightLayout::TokensHidden || info.byte_size > in.file_bytes)
      std::abort();
    auto t = w->read(i);
    if (!t || t->size() != info.elements || t->shape() != info.shape) std::abort();
  }
  return 0;
}
