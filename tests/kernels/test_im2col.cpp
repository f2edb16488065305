// Checks im2col_row (im2col.hpp) against the definition of the convolution columns, bit for bit, on every SIMD
// target of this CPU: channel counts around the vector widths, kernel sizes, strides and paddings, every output
// value written (the output starts as a sentinel), NaN payloads and signed zeros copied as they are.
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxlab/kernels/im2col.hpp"
#include "mxlab/kernels/simd_target.hpp"

using namespace mxlab;

TEST_CASE("im2col_row writes each window's values in (ky, kx, c) order, zeros outside the image", "[kernels]") {
  std::mt19937_64 rng(23);
  std::normal_distribution<float> normal;
  const float sentinel = std::bit_cast<float>(0x7FC0DEADU);
  for (const std::int64_t c : {1, 3, 15, 16, 17, 40})
    for (const std::int64_t k : {1, 3, 5})
      for (const std::int64_t s : {1, 2})
        for (const std::int64_t pad : {std::int64_t{0}, k / 2}) {
          const std::int64_t h = 7, w = 6;
          const std::int64_t oh = (h + 2 * pad - k) / s + 1, ow = (w + 2 * pad - k) / s + 1;
          std::vector<float> image(static_cast<std::size_t>(h * w * c));
          for (float& v : image) {
            const auto kind = rng() % 8;
            v = kind == 0 ? -0.0F : kind == 1 ? std::bit_cast<float>(0xFFC01234U) : normal(rng);
          }
          const std::int64_t width = k * k * c;
          std::vector<float> want(static_cast<std::size_t>(oh * ow * width));
          for (std::int64_t y = 0; y < oh; ++y)
            for (std::int64_t x = 0; x < ow; ++x)
              for (std::int64_t ky = 0; ky < k; ++ky)
                for (std::int64_t kx = 0; kx < k; ++kx)
                  for (std::int64_t ch = 0; ch < c; ++ch) {
                    const std::int64_t sy = y * s + ky - pad, sx = x * s + kx - pad;
                    const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
                    want[static_cast<std::size_t>(((y * ow + x) * k + ky) * k * c + kx * c + ch)] =
                        inside ? image[static_cast<std::size_t>((sy * w + sx) * c + ch)] : 0.0F;
                  }
          for (const SimdTarget& target : simd_targets()) {
            const ScopedSimdTarget forced(target);
            REQUIRE(forced.forced());
            std::vector<float> got(want.size() + 1, sentinel);  // one value past the end stays the sentinel
            for (std::int64_t y = 0; y < oh; ++y)
              im2col_row(image.data(), h, w, c, k, s, pad, y, ow, got.data() + y * ow * width);
            INFO("target " << target.name << ", c " << c << ", k " << k << ", stride " << s << ", pad " << pad);
            std::size_t mismatches = 0;
            for (std::size_t i = 0; i < want.size(); ++i)
              mismatches += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]);
            CHECK(mismatches == 0);
            CHECK(std::bit_cast<std::uint32_t>(got.back()) == std::bit_cast<std::uint32_t>(sentinel));
          }
        }
}
