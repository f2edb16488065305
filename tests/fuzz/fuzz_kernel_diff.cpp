// Fuzz target, differential: fuzzed float32 tensors under a fuzzed catalogue block format, peer profile,
// scale rule, element rounding mode, seed and SIMD target, through the engine's entry points (which run the
// SIMD kernels wherever they cover the request) and through the scalar reference mxlab::quantize and
// mxlab::pack. Any difference in a value's bits or a packed byte aborts. With bit 2 of the override byte set,
// the same matrix is also quantized down its columns (FakeQuantizer::run_columns, against the reference on the
// transpose) and both ways in one pass (run_rows_and_columns, against the two single-direction results).
//
// Input: format, profile, override, rule, rounding, columns, SIMD target, threads (one byte each), a 4-byte
// seed, then float32 values (little-endian, at most 512).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "mxlab/io/tensor.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace {
const std::vector<std::string>& names() {
  static const std::vector<std::string> v = mxlab::block_format_names();
  return v;
}
const std::vector<std::string>& profiles() {
  static const std::vector<std::string> v = mxlab::profile_names();
  return v;
}
const std::vector<mxlab::SimdTarget>& targets() {
  static const std::vector<mxlab::SimdTarget> v = mxlab::simd_targets();
  return v;
}
bool same(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) || (std::isnan(a) && std::isnan(b)); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mxlab::fuzz::Bytes in(data, size);
  auto f = mxlab::parse_block_format(names()[in.byte() % names().size()]);
  if (!f) std::abort();
  const std::uint8_t profile = in.byte();
  if (profile % 2 == 1) {
    f = mxlab::apply_profile(*f, profiles()[(profile / 2u) % profiles().size()]);
    if (!f) return 0;  // the peer does not produce this format
  }
  const std::uint8_t override_bits = in.byte();
  const std::uint8_t rule = in.byte(), rounding = in.byte();
  if (override_bits & 1) f->options.rule = static_cast<mxlab::ScaleRule>(rule % 7);
  if (override_bits & 2) f->options.element.rounding = static_cast<mxlab::Rounding>(rounding % 8);
  const auto cols = static_cast<std::int64_t>(1 + in.byte() % 80);
  const mxlab::SimdTarget& target = targets()[in.byte() % targets().size()];
  const unsigned threads = 1 + in.byte() % 2;
  f->options.seed = in.u32();
  std::vector<float> x(std::min<std::size_t>(in.left() / 4, 512));
  if (x.empty()) return 0;
  std::memcpy(x.data(), in.take(x.size() * 4).data(), x.size() * 4);
  const auto rows = (static_cast<std::int64_t>(x.size()) + cols - 1) / cols;
  x.resize(static_cast<std::size_t>(rows * cols), 0.0F);
  const std::vector<std::int64_t> shape = {rows, cols};

  const std::vector<double> xd(x.begin(), x.end());
  auto q = mxlab::quantize(*f, xd, shape);
  const mxlab::ScopedSimdTarget forced(target);
  mxlab::ops::Run run;
  run.threads = threads;
  std::vector<float> fake(x.size());
  auto got = mxlab::ops::fake_quantize(*f, x, shape, fake, run);
  if (!q) {
    if (got) std::abort();  // the engine must refuse what the reference refuses
    return 0;
  }
  if (!got) std::abort();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!same(fake[i], static_cast<float>(q->values[i]))) std::abort();

  auto tensor = mxlab::Tensor::from_f32(shape, x);
  if (!tensor) std::abort();
  auto packed = mxlab::ops::quantize_packed(*f, mxlab::ops::TensorSource::of(*tensor), run);
  if (!packed) std::abort();
  const mxlab::PackedTensor want = mxlab::pack(*f, *q);
  if (packed->elements != want.elements || packed->scales != want.scales || packed->tensor_scale != want.tensor_scale ||
      packed->subtile_offsets != want.subtile_offsets || packed->scale_grid != want.scale_grid)
    std::abort();
  if ((override_bits & 4) == 0) return 0;

  // Down the columns: the reference quantizes x^T ({cols, rows}); run_columns writes it back in x's layout.
  const auto r = static_cast<std::size_t>(rows), c = static_cast<std::size_t>(cols);
  std::vector<double> xt(x.size());
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j) xt[j * r + i] = xd[i * c + j];
  auto qt = mxlab::quantize(*f, xt, {cols, rows});
  const mxlab::ops::FakeQuantizer quantizer(*f);
  std::vector<float> down(x.size());
  auto got_down = quantizer.run_columns(x, rows, cols, down, run);
  if (!qt) {
    if (got_down) std::abort();
    return 0;
  }
  if (!got_down) std::abort();
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j)
      if (!same(down[i * c + j], static_cast<float>(qt->values[j * r + i]))) std::abort();

  // Both directions in one pass equal the two calls.
  std::vector<float> along(x.size()), down2(x.size());
  if (!quantizer.run_rows_and_columns(x, rows, cols, along, quantizer, down2, run)) std::abort();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!same(along[i], fake[i]) || !same(down2[i], down[i])) std::abort();
  return 0;
}
