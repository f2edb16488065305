// Fuzz target: packed-tensor files (`mxlab quantize --packed`). Input: one byte choosing the block format,
// then five sections, each a 2-byte little-endian length and that many bytes: BASE.json,
// BASE.elements.npy, BASE.scales.npy, BASE.tensor_scale.npy, BASE.subtiles.npy. What parses is
// dequantized by ops (the kernels where they cover the format) and by the reference unpack, in the packing the
// metadata records; any difference in a value's bits aborts.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/packed_file.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/pack.hpp"

namespace {
const std::vector<mxlab::BlockFormat>& formats() {
  static const std::vector<mxlab::BlockFormat> all = [] {
    std::vector<mxlab::BlockFormat> v;
    for (const char* s : {"mxfp4", "mxfp8_e4m3", "mxint8", "nvfp4", "mxfp6_e3m2", "e4m3:e8m0_t16s4_t16s4", "e2m1:e8m0_t32",
                          "int8:float32_t0"}) {
      auto f = mxlab::parse_block_format(s);
      if (!f) std::abort();
      v.push_back(*f);
    }
    return v;
  }();
  return all;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mxlab::fuzz::Bytes in(data, size);
  const mxlab::BlockFormat& f = formats()[in.byte() % formats().size()];
  mxlab::ops::PackedFileBytes files;
  for (std::string* part : {&files.json, &files.elements, &files.scales, &files.tensor_scale, &files.subtiles}) {
    const std::size_t n = in.byte() | (std::size_t{in.byte()} << 8);
    *part = std::string(in.take(n));
  }
  auto p = mxlab::ops::parse_packed(f, files, "fuzz");
  if (!p) {
    if (p.error().message.empty()) std::abort();
    return 0;
  }
  mxlab::ops::Run run;
  run.threads = 1;
  auto got = mxlab::ops::dequantize(p->format, p->tensor, run);
  auto want = mxlab::unpack(p->format, p->tensor);
  if (got.ok() != want.ok()) std::abort();
  if (!got) return 0;
  if (got->size() != want->values.size()) std::abort();
  for (std::size_t i = 0; i < got->size(); ++i) {
    const double a = (*got)[i], b = want->values[i];
    if (std::bit_cast<std::uint64_t>(a) != std::bit_cast<std::uint64_t>(b) && !(std::isnan(a) && std::isnan(b)))
      std::abort();
  }
  return 0;
}
