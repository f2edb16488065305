// Fuzz target: a capture folder (mxlab.torch.capture). The input is capture.json up to the first NUL byte, then
// the bytes of the tensor files "000000.f32" and "000001.f32" (the rest split at its middle). The manifest may
// name any path; files outside the folder must be refused, and every tensor that opens reads exactly the
// bytes of its shape.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "fuzz_support.hpp"
#include "mxlab/io/weights.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view manifest = input.substr(0, nul);
  const std::string_view files = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  const auto path = mxlab::fuzz::write_scratch("capture.json", manifest);
  mxlab::fuzz::write_scratch("000000.f32", files.substr(0, files.size() / 2));
  mxlab::fuzz::write_scratch("000001.f32", files.substr(files.size() / 2));
  auto w = mxlab::WeightFile::open_capture(path);
  if (!w) {
    if (w.error().message.empty()) std::abort();
    return 0;
  }
  for (std::size_t i = 0; i < w->weights().size(); ++i) {
    const auto& info = w->weights()[i];
    if (info.shape.size() != 2 || info.layout != mxlab::WeightLayout::TokensHidden || info.byte_size > files.size())
      std::abort();
    auto t = w->read(i);
    if (!t || t->size() != info.elements || t->shape() != info.shape) std::abort();
  }
  return 0;
}
