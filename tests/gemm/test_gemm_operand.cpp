// Checks gemm::quantize_operand, which quantizes on the SIMD block kernel where it covers the format, against the
// reference quantizer (mxlab::quantize, mxlab::dequantize) bit for bit, on every catalogue block format and on
// formats the kernel does not cover (which fall back to the reference).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mxlab/core/random.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/kernels/block_kernel.hpp"
#include "mxlab/quantize/quantize.hpp"

using namespace mxlab;

namespace {

bool same(double x, double y) { return (std::isnan(x) && std::isnan(y)) || (x == y && std::signbit(x) == std::signbit(y)); }

}  // namespace

TEST_CASE("quantize_operand gives the reference quantizer's values, elements and scales", "[gemm][operand]") {
  const std::int64_t rows = 6, depth = 80;  // partial blocks at the row ends of 32 and 16 element blocks
  Rng rng(23);
  std::vector<double> x(static_cast<std::size_t>(rows * depth));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = rng.uniform() * 2 - 1;
    x[i] = static_cast<double>(static_cast<float>(std::ldexp(u, static_cast<int>(rng.next_u64() % 30) - 15)));
  }
  x[7] = std::numeric_limits<double>::quiet_NaN();
  x[100] = std::numeric_limits<double>::infinity();
  for (std::size_t i = 160; i < 192; ++i) x[i] = 0;  // a block of zeros
  std::vector<std::string> names = block_format_names();
  for (const char* extra : {"e4m3:float32", "mxfp8_e4m3@8x8", "mxfp4@16"}) names.emplace_back(extra);
  int on_kernel = 0;
  for (const auto& name : names) {
    INFO(name);
    auto f = parse_block_format(name);
    REQUIRE(f.ok());
    on_kernel += BlockKernel::make(*f).ok() ? 1 : 0;
    auto op = gemm::quantize_operand(*f, x, rows, depth);
    auto q = quantize(*f, x, {rows, depth});
    REQUIRE(op.ok() == q.ok());
    if (!q.ok()) continue;
    const std::vector<double> values = dequantize(*f, *q);
    REQUIRE(op->value.size() == values.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      differ += same(op->value[i], values[i]) ? 0 : 1;
      // Each element's code decodes to the reference's.
      differ += same(op->element[i], f->element.decode(q->codes[i])) ? 0 : 1;
    }
    CHECK(differ == 0);
  }
  CHECK(on_kernel >= 10);  // the catalogue's MX and NVFP4 formats run on the kernel
}
