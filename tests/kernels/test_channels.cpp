// Checks the per-channel kernels (channels.hpp) bit for bit, on every SIMD target of this CPU, against plain loops
// written here: the column sums (the plain sum also against Eigen's colwise().sum(), whose order they follow),
// batch normalisation's normalisation and input gradient, and the depthwise convolution's passes, for channel
// counts around the vector widths, channel ranges as the trainer's threads split them, signed zeros, infinities
// and NaNs.
#include <catch2/catch.hpp>

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxlab/kernels/channels.hpp"
#include "mxlab/kernels/simd_target.hpp"

using namespace mxlab;

namespace {

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

/// Values with ties, signed zeros and, when `specials`, infinities and NaNs among normal ones.
std::vector<float> values(std::mt19937_64& rng, std::size_t n, bool specials) {
  std::normal_distribution<float> normal;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(n);
  for (float& x : v) {
    const auto kind = rng() % 64;
    x = kind == 0 ? 0.0F : kind == 1 ? -0.0F : specials && kind == 2 ? inf : specials && kind == 3 ? -inf
        : specials && kind == 4 ? nan : kind < 8 ? static_cast<float>(rng() % 3) : normal(rng) * 3.0F;
  }
  return v;
}

/// One column's sum of terms t(0..rows-1): grouped, t(0) then fours as (a + b) + (c + d) while r < (rows - 1) & ~3,
/// then one at a time; otherwise one at a time.
template <class Term>
float column_sum(std::int64_t rows, bool grouped, Term&& t) {
  if (rows == 0) return 0.0F;
  float acc = t(0);
  std::int64_t r = 1;
  if (grouped)
    for (; r < ((rows - 1) & ~std::int64_t{3}); r += 4) acc += (t(r) + t(r + 1)) + (t(r + 2) + t(r + 3));
  for (; r < rows; ++r) acc += t(r);
  return acc;
}

/// fn(row, pixel, tap) for every output row of s in order and each of its taps (ky, kx) in order that lies inside
/// the image: the plain loops the window kernels are checked against, written out apart from window_taps.
template <class Fn>
void plain_taps(const WindowShape& s, Fn&& fn) {
  const std::int64_t pad = s.k / 2, oh = s.out_height(), ow = s.out_width();
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t oy = 0; oy < oh; ++oy)
      for (std::int64_t ox = 0; ox < ow; ++ox)
        for (std::int64_t ky = 0; ky < s.k; ++ky)
          for (std::int64_t kx = 0; kx < s.k; ++kx) {
            const std::int64_t sy = oy * s.stride + ky - pad, sx = ox * s.stride + kx - pad;
            if (sy < 0 || sy >= s.height || sx < 0 || sx >= s.width) continue;
            fn((b * oh + oy) * ow + ox, (b * s.height + sy) * s.width + sx, ky * s.k + kx);
          }
}

/// The trainer's splits of [0, cols): the whole range, and strips of 16 in two parts.
std::vector<std::pair<std::int64_t, std::int64_t>> splits(std::int64_t cols) {
  std::vector<std::pair<std::int64_t, std::int64_t>> s{{0, cols}};
  const std::int64_t strips = (cols + 15) / 16;
  if (strips > 1) {
    const std::int64_t mid = std::min(cols, strips / 2 * 16);
    s.push_back({0, mid}), s.push_back({mid, cols});
  }
  return s;
}

}  // namespace

TEST_CASE("column_sums are the per-column sums in their order, bit for bit", "[kernels]") {
  std::mt19937_64 rng(7);
  for (const std::int64_t rows : {0, 1, 2, 5, 8, 9, 10, 37, 203}) {
    for (const std::int64_t cols : {1, 3, 4, 15, 16, 17, 24, 33, 64, 96}) {
      const auto n = static_cast<std::size_t>(rows * cols);
      const bool specials = rows % 2 == 1;
      const std::vector<float> x = values(rng, n, specials), dy = values(rng, n, specials),
                               xhat = values(rng, n, false), mean = values(rng, static_cast<std::size_t>(cols), false),
                               gain = values(rng, static_cast<std::size_t>(cols), false);
      for (const std::int64_t packed : {std::int64_t{0}, cols / 4 * 4, cols}) {
        // The wanted sums: the plain loops per column.
        std::vector<float> want[6];
        for (auto& w : want) w.resize(static_cast<std::size_t>(cols));
        for (std::int64_t j = 0; j < cols; ++j) {
          const bool grouped = j < packed;
          const auto at = [&](const std::vector<float>& v, std::int64_t r) { return v[static_cast<std::size_t>(r * cols + j)]; };
          const auto u = static_cast<std::size_t>(j);
          want[0][u] = column_sum(rows, grouped, [&](std::int64_t r) { return at(x, r); });
          want[1][u] = column_sum(rows, grouped, [&](std::int64_t r) {
            const float d = at(x, r) - mean[u];
            return d * d;
          });
          want[2][u] = column_sum(rows, grouped, [&](std::int64_t r) { return at(dy, r) * at(xhat, r); });
          want[3][u] = column_sum(rows, grouped, [&](std::int64_t r) { return at(dy, r); });
          want[4][u] = column_sum(rows, grouped, [&](std::int64_t r) { return at(dy, r) * gain[u]; });
          want[5][u] = column_sum(rows, grouped, [&](std::int64_t r) { return (at(dy, r) * gain[u]) * at(xhat, r); });
        }
        if (packed == cols / 4 * 4 && rows > 0) {
          // Eigen's own order for a row-major matrix's column sums (4-float packets without -m flags).
          const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> m(x.data(), rows, cols);
          const Eigen::Matrix<float, 1, Eigen::Dynamic> eigen = m.colwise().sum();
          for (std::int64_t j = 0; j < cols; ++j) CHECK(same_bits(eigen(j), want[0][static_cast<std::size_t>(j)]));
        }
        for (const SimdTarget& target : simd_targets()) {
          const ScopedSimdTarget forced(target);
          REQUIRE(forced.forced());
          for (const auto& [j0, j1] : splits(cols)) {
            std::vector<float> got[6];
            for (auto& g : got) g.assign(static_cast<std::size_t>(cols), 12345.0F);
            const ColumnRange range{rows, cols, j0, j1, packed};
            float* const sum_out[] = {got[0].data()};
            column_sums(range, SumTerm<float>{x.data(), cols}, sum_out);
            float* const var_out[] = {got[1].data()};
            column_sums(range, SquaredDeviationTerm<float>{x.data(), mean.data(), cols}, var_out);
            float* const grad_out[] = {got[2].data(), got[3].data(), got[4].data(), got[5].data()};
            column_sums(range, BatchNormGradientTerms<float>{dy.data(), xhat.data(), gain.data(), cols}, grad_out);
            for (int k = 0; k < 6; ++k)
              for (std::int64_t j = 0; j < cols; ++j) {
                INFO("target " << target.name << ", rows " << rows << ", cols " << cols << ", packed " << packed
                               << ", range [" << j0 << ", " << j1 << "), sum " << k << ", column " << j);
                const float g = got[k][static_cast<std::size_t>(j)];
                CHECK((j >= j0 && j < j1 ? same_bits(g, want[k][static_cast<std::size_t>(j)]) : g == 12345.0F));
              }
          }
        }
      }
    }
  }
}

TEST_CASE("batch normalisation's normalisation and input gradient are the plain loops bit for bit", "[kernels]") {
  std::mt19937_64 rng(11);
  for (const std::int64_t cols : {1, 7, 16, 17, 24, 40, 96}) {
    const std::int64_t rows = 13;
    const auto n = static_cast<std::size_t>(rows * cols), c = static_cast<std::size_t>(cols);
    const std::vector<float> x = values(rng, n, true), dy = values(rng, n, true), xh = values(rng, n, false),
                             mean = values(rng, c, false), inv = values(rng, c, false), gain = values(rng, c, true),
                             bias = values(rng, c, false), m1 = values(rng, c, false), m2 = values(rng, c, false);
    std::vector<float> want_xhat(n), want_y(n), want_dx(n), want_dx_eval(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t j = i % c;
      const float h = (x[i] - mean[j]) * inv[j];
      want_xhat[i] = h, want_y[i] = h * gain[j] + bias[j];
      want_dx[i] = ((dy[i] * gain[j] - m1[j]) - xh[i] * m2[j]) * inv[j];
      want_dx_eval[i] = (dy[i] * gain[j]) * inv[j];
    }
    for (const SimdTarget& target : simd_targets()) {
      const ScopedSimdTarget forced(target);
      REQUIRE(forced.forced());
      std::vector<float> xhat(n), y(n), dx(n), dx_eval(n);
      // Rows split as the trainer's threads split them: the first 5 rows, then the rest.
      for (const auto& [r0, r1] : {std::pair<std::int64_t, std::int64_t>{0, 5}, {5, rows}}) {
        const auto at = static_cast<std::size_t>(r0 * cols);
        batchnorm_normalize(x.data() + at, mean.data(), inv.data(), gain.data(), bias.data(), r1 - r0, cols,
                            xhat.data() + at, y.data() + at);
        batchnorm_gradient(dy.data() + at, xh.data() + at, gain.data(), inv.data(), m1.data(), m2.data(), r1 - r0, cols,
                           dx.data() + at);
        batchnorm_gradient(dy.data() + at, xh.data() + at, gain.data(), inv.data(), nullptr, nullptr, r1 - r0, cols,
                           dx_eval.data() + at);
      }
      for (std::size_t i = 0; i < n; ++i) {
        INFO("target " << target.name << ", cols " << cols << ", value " << i);
        CHECK(same_bits(xhat[i], want_xhat[i]));
        CHECK(same_bits(y[i], want_y[i]));
        CHECK(same_bits(dx[i], want_dx[i]));
        CHECK(same_bits(dx_eval[i], want_dx_eval[i]));
      }
    }
  }
}

TEST_CASE("the depthwise convolution's passes are the plain loops bit for bit", "[kernels]") {
  std::mt19937_64 rng(5);
  for (const std::int64_t k : {1, 3, 5, 13})
    for (const std::int64_t stride : {1, 2})
      for (const std::int64_t channels : {1, 5, 16, 17, 40, 96}) {
        const WindowShape s{2, 7, 6, channels, k, stride};
        const std::int64_t pad = k / 2, oh = s.out_height(), ow = s.out_width(), c = channels;
        REQUIRE(oh == (7 + 2 * pad - k) / stride + 1);
        const auto in_n = static_cast<std::size_t>(2 * 7 * 6 * c), out_n = static_cast<std::size_t>(2 * oh * ow * c),
                   w_n = static_cast<std::size_t>(k * k * c);
        const std::vector<float> x = values(rng, in_n, true), wt = values(rng, w_n, false), g = values(rng, out_n, true);
        // The plain loops: every output row's taps in order (ky, kx), the products rounded, then the sums.
        std::vector<float> want_y(out_n, 0.0F), want_dx(in_n, 0.0F), want_dwt(w_n, 0.0F);
        plain_taps(s, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
          for (std::int64_t j = 0; j < c; ++j) {
            const auto yi = static_cast<std::size_t>(row * c + j), xi = static_cast<std::size_t>(pixel * c + j),
                       wi = static_cast<std::size_t>(tap * c + j);
            want_y[yi] += x[xi] * wt[wi];
            want_dx[xi] += g[yi] * wt[wi];
            want_dwt[wi] += g[yi] * x[xi];
          }
        });
        {
          // The scalar definitions (the trainer's double path) are the plain loops too.
          std::vector<float> y(out_n, 777.0F), dx(in_n, 0.0F), dwt(w_n, 0.0F);
          depthwise_forward_scalar(x.data(), wt.data(), s, y.data());
          depthwise_backward_scalar(g.data(), x.data(), wt.data(), s, dx.data(), dwt.data());
          for (std::size_t i = 0; i < out_n; ++i) CHECK(same_bits(y[i], want_y[i]));
          for (std::size_t i = 0; i < in_n; ++i) CHECK(same_bits(dx[i], want_dx[i]));
          for (std::size_t i = 0; i < w_n; ++i) CHECK(same_bits(dwt[i], want_dwt[i]));
        }
        for (const SimdTarget& target : simd_targets()) {
          const ScopedSimdTarget forced(target);
          REQUIRE(forced.forced());
          // dx and y per image range (images [0, 1) and [1, 2) as the trainer's threads split them), dwt per
          // channel range.
          std::vector<float> y(out_n, 777.0F), dx(in_n, 777.0F);
          for (const auto& [b0, b1] : {std::pair<std::int64_t, std::int64_t>{0, 1}, {1, 2}}) {
            depthwise_forward(x.data(), wt.data(), s, b0, b1, y.data());
            depthwise_input_gradient(g.data(), wt.data(), s, b0, b1, dx.data());
          }
          INFO("target " << target.name << ", k " << k << ", stride " << stride << ", channels " << c);
          for (std::size_t i = 0; i < out_n; ++i) CHECK(same_bits(y[i], want_y[i]));
          for (std::size_t i = 0; i < in_n; ++i) CHECK(same_bits(dx[i], want_dx[i]));
          for (const auto& [c0, c1] : splits(c)) {
            std::vector<float> dwt(w_n, 0.0F);
            depthwise_weight_gradient(g.data(), x.data(), s, c0, c1, dwt.data());
            INFO("range [" << c0 << ", " << c1 << ")");
            for (std::size_t i = 0; i < w_n; ++i) {
              const auto j = static_cast<std::int64_t>(i) % c;
              CHECK((j >= c0 && j < c1 ? same_bits(dwt[i], want_dwt[i]) : dwt[i] == 0.0F));
            }
          }
        }
      }
}

TEST_CASE("col2im gathers each input pixel's column values in window_taps' order, bit for bit", "[kernels]") {
  std::mt19937_64 rng(29);
  for (const std::int64_t k : {1, 3, 5})
    for (const std::int64_t stride : {1, 2})
      for (const std::int64_t channels : {1, 5, 16, 17, 40, 96}) {
        const WindowShape s{2, 7, 6, channels, k, stride};
        const std::int64_t oh = s.out_height(), ow = s.out_width(), c = channels, width = k * k * c;
        const auto in_n = static_cast<std::size_t>(2 * 7 * 6 * c);
        const std::vector<float> cols = values(rng, static_cast<std::size_t>(2 * oh * ow * width), true);
        // The plain loop: zeros, then every output row's taps in order (ky, kx) added to their pixels.
        std::vector<float> want(in_n, 0.0F);
        plain_taps(s, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
          for (std::int64_t j = 0; j < c; ++j)
            want[static_cast<std::size_t>(pixel * c + j)] += cols[static_cast<std::size_t>(row * width + tap * c + j)];
        });
        INFO("k " << k << ", stride " << stride << ", channels " << c);
        {
          std::vector<float> dx(in_n, 777.0F);  // the definition writes every value
          col2im_scalar(cols.data(), s, dx.data());
          for (std::size_t i = 0; i < in_n; ++i) CHECK(same_bits(dx[i], want[i]));
        }
        for (const SimdTarget& target : simd_targets()) {
          const ScopedSimdTarget forced(target);
          REQUIRE(forced.forced());
          INFO("target " << target.name);
          std::vector<float> dx(in_n, 777.0F);  // every value written, pixels no window reads (k 1, stride 2) too
          for (const auto& [b0, b1] : {std::pair<std::int64_t, std::int64_t>{0, 1}, {1, 2}})
            col2im(cols.data(), s, b0, b1, dx.data());
          std::size_t mismatches = 0;
          for (std::size_t i = 0; i < in_n; ++i) mismatches += !same_bits(dx[i], want[i]);
          CHECK(mismatches == 0);
        }
      }
}
