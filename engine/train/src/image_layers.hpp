// Internal: the layers of the ResNet- and MobileNetV2-style networks on NHWC activations ((batch * height *
// width) x channels, row-major): batch normalisation, depthwise convolution and global average pooling.
#pragma once

#include "layers.hpp"

namespace mxlab::train::detail {

/// Calls fn(r0, r1) for the row ranges of an elementwise pass over rows x cols values, split over `threads`
/// threads when the pass is large (each value's work is the same whatever the split).
template <class Fn>
void for_rows(std::int64_t rows, std::int64_t cols, unsigned threads, Fn&& fn) {
  const std::int64_t by_size = rows * cols / (std::int64_t{1} << 15);
  const auto parts = static_cast<unsigned>(std::clamp<std::int64_t>(std::min<std::int64_t>(resolve_threads(threads), by_size), 1, std::max<std::int64_t>(rows, 1)));
  run_parts(parts, [&](unsigned t) { fn(rows * t / parts, rows * (t + 1) / parts); });
}

/// K sums per column over the rows of rows x cols terms (term(r, j, v) writes the K terms of row r, column j into
/// v), into out[k][j], added in the order of Eigen's `m.colwise().sum()` on a row-major matrix, so they have its
/// bits: a column within Eigen's whole packets starts at row 0 and adds rows 1..4k in groups of four as
/// (r + r+1) + (r+2 + r+3), then the remaining rows one at a time; a column past the last whole packet adds its
/// rows one at a time. Without `packets` (Eigen's order for an expression without packet access, such as one
/// of `m.rowwise() - v`) every column adds its rows one at a time. The columns are split over the threads (each
/// column's sum is the same whatever the split).
template <typename T, int K, class Term>
void column_sums(std::int64_t rows, std::int64_t cols, unsigned threads, bool packets, std::array<T*, K> out,
                 Term&& term) {
  constexpr std::int64_t kPacket = Eigen::internal::packet_traits<T>::Vectorizable ? Eigen::internal::packet_traits<T>::size : 1;
  const std::int64_t packed = packets && kPacket > 1 ? cols / kPacket * kPacket : 0;
  const std::int64_t grouped = rows > 0 ? (rows - 1) & ~std::int64_t{3} : 0;  // rows 1..grouped-1 in fours
  constexpr std::int64_t kStrip = 8;  // columns per piece
  const std::int64_t strips = (cols + kStrip - 1) / kStrip;
  const std::int64_t by_size = rows * cols / (std::int64_t{1} << 15);
  const auto parts = static_cast<unsigned>(std::clamp<std::int64_t>(std::min<std::int64_t>(resolve_threads(threads), by_size), 1, std::max<std::int64_t>(strips, 1)));
  run_parts(parts, [&](unsigned t) {
    const std::int64_t j0 = std::min(cols, strips * t / parts * kStrip), j1 = std::min(cols, strips * (t + 1) / parts * kStrip);
    const std::int64_t w = j1 - j0;
    if (w <= 0) return;
    std::vector<T> acc(static_cast<std::size_t>(K * w));
    T v[K], a[K], b[K], c[K], d[K];
    if (rows == 0) {
      for (int k = 0; k < K; ++k) std::fill_n(out[static_cast<std::size_t>(k)] + j0, w, T(0));
      return;
    }
    for (std::int64_t j = j0; j < j1; ++j) {
      term(0, j, v);
      for (int k = 0; k < K; ++k) acc[static_cast<std::size_t>(k * w + j - j0)] = v[k];
    }
    const std::int64_t jp = std::clamp(packed, j0, j1);  // [j0, jp) packet columns, [jp, j1) one row at a time
    std::int64_t r = 1;
    for (; r < grouped; r += 4)
      for (std::int64_t j = j0; j < jp; ++j) {
        term(r, j, a), term(r + 1, j, b), term(r + 2, j, c), term(r + 3, j, d);
        for (int k = 0; k < K; ++k) acc[static_cast<std::size_t>(k * w + j - j0)] += (a[k] + b[k]) + (c[k] + d[k]);
      }
    for (; r < rows; ++r)
      for (std::int64_t j = j0; j < jp; ++j) {
        term(r, j, v);
        for (int k = 0; k < K; ++k) acc[static_cast<std::size_t>(k * w + j - j0)] += v[k];
      }
    for (std::int64_t rr = 1; rr < rows && jp < j1; ++rr)
      for (std::int64_t j = jp; j < j1; ++j) {
        term(rr, j, v);
        for (int k = 0; k < K; ++k) acc[static_cast<std::size_t>(k * w + j - j0)] += v[k];
      }
    for (int k = 0; k < K; ++k)
      std::copy_n(acc.data() + k * w, w, out[static_cast<std::size_t>(k)] + j0);
  });
}

/// Batch normalisation over the channels (Ioffe and Szegedy 2015, algorithm 1 and 2), epsilon 1e-5. While
/// training it normalises with the batch's mean and biased variance over every row (batch and pixels) and
/// moves running statistics by momentum 0.1 (the unbiased variance, as PyTorch's BatchNorm2d); in evaluation it
/// normalises with the running statistics. Not a GEMM: its statistics, gain, shift and running statistics are
/// FP32; its output and its input gradient are rounded to the recipe's non-GEMM format, like every non-GEMM
/// layer.
template <typename T>
struct BatchNorm {
  Param<T> gain, bias;
  Param<T> running_mean, running_var;  ///< state, not trained (no gradient)
  Mat<T> xhat;
  Mat<T> inv_std;        ///< 1 x channels: of the batch (training) or of the running variance (evaluation)
  bool batch_stats = true;  ///< the last forward used the batch's statistics
  static constexpr T kEps = T(1e-5);
  static constexpr T kMomentum = T(0.1);

  BatchNorm(const std::string& name, std::int64_t channels) {
    gain = Param<T>{name + ".weight", Mat<T>::Ones(1, channels), Mat<T>::Zero(1, channels), false};
    bias = Param<T>{name + ".bias", Mat<T>::Zero(1, channels), Mat<T>::Zero(1, channels), false};
    running_mean = Param<T>{name + ".running_mean", Mat<T>::Zero(1, channels), Mat<T>(), false};
    running_var = Param<T>{name + ".running_var", Mat<T>::Ones(1, channels), Mat<T>(), false};
  }
  Mat<T> forward(const Mat<T>& x, QuantContext& ctx) {
    batch_stats = ctx.training;
    const std::int64_t rows = x.rows(), c = x.cols();
    const auto n = static_cast<T>(rows);
    const T* xd = x.data();
    Mat<T> mean, var;
    if (batch_stats) {
      mean.resize(1, c);
      var.resize(1, c);
      T* m = mean.data();
      column_sums<T, 1>(rows, c, ctx.threads, true, {m}, [&](std::int64_t r, std::int64_t j, T* v) { v[0] = xd[r * c + j]; });
      for (std::int64_t j = 0; j < c; ++j) m[j] /= n;
      column_sums<T, 1>(rows, c, ctx.threads, false, {var.data()}, [&](std::int64_t r, std::int64_t j, T* v) {
        const T d = xd[r * c + j] - m[j];
        v[0] = d * d;
      });
      for (std::int64_t j = 0; j < c; ++j) var(0, j) /= n;
      running_mean.value = (T(1) - kMomentum) * running_mean.value + kMomentum * mean;
      const T unbias = rows > 1 ? n / (n - T(1)) : T(1);
      running_var.value = (T(1) - kMomentum) * running_var.value + (kMomentum * unbias) * var;
    } else {
      mean = running_mean.value;
      var = running_var.value;
    }
    inv_std = (var.array() + kEps).rsqrt().matrix();
    xhat.resize(rows, c);
    Mat<T> y(rows, c);
    const T *m = mean.data(), *inv = inv_std.data(), *g = gain.value.data(), *b = bias.value.data();
    T *xh = xhat.data(), *yd = y.data();
    for_rows(rows, c, ctx.threads, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t i = r0 * c; i < r1 * c; i += c)
        for (std::int64_t j = 0; j < c; ++j) {
          const T h = (xd[i + j] - m[j]) * inv[j];
          xh[i + j] = h;
          yd[i + j] = h * g[j] + b[j];
        }
    });
    return rounded<T>(std::move(y), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) {
    const std::int64_t rows = dy.rows(), c = dy.cols();
    const T *dd = dy.data(), *xh = xhat.data(), *g = gain.value.data(), *inv = inv_std.data();
    // Per channel: sum dy xhat, sum dy, and of dxh = dy gain: sum dxh, sum dxh xhat.
    Mat<T> sums(4, c);
    column_sums<T, 4>(rows, c, ctx.threads, true, {sums.row(0).data(), sums.row(1).data(), sums.row(2).data(), sums.row(3).data()},
                      [&](std::int64_t r, std::int64_t j, T* v) {
                        const T d = dd[r * c + j], h = xh[r * c + j], dxh = d * g[j];
                        v[0] = d * h, v[1] = d, v[2] = dxh, v[3] = dxh * h;
                      });
    gain.grad += sums.row(0);
    bias.grad += sums.row(1);
    Mat<T> dx(rows, c);
    T* out = dx.data();
    if (!batch_stats) {
      for_rows(rows, c, ctx.threads, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t i = r0 * c; i < r1 * c; i += c)
          for (std::int64_t j = 0; j < c; ++j) out[i + j] = dd[i + j] * g[j] * inv[j];
      });
      return rounded<T>(std::move(dx), ctx);
    }
    // dx = inv_std (dxh - mean(dxh) - xhat mean(dxh o xhat)), per channel over the rows.
    const auto n = static_cast<T>(rows);
    std::vector<T> m1(static_cast<std::size_t>(c)), m2(static_cast<std::size_t>(c));
    for (std::int64_t j = 0; j < c; ++j) m1[static_cast<std::size_t>(j)] = sums(2, j) / n, m2[static_cast<std::size_t>(j)] = sums(3, j) / n;
    const T *a1 = m1.data(), *a2 = m2.data();
    for_rows(rows, c, ctx.threads, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t i = r0 * c; i < r1 * c; i += c)
        for (std::int64_t j = 0; j < c; ++j) out[i + j] = ((dd[i + j] * g[j] - a1[j]) - xh[i + j] * a2[j]) * inv[j];
    });
    return rounded<T>(std::move(dx), ctx);
  }
  void collect(std::vector<Param<T>*>& p) { p.push_back(&gain), p.push_back(&bias); }
  void collect_buffers(std::vector<Param<T>*>& p) { p.push_back(&running_mean), p.push_back(&running_var); }
};

/// Depthwise k x k convolution (one filter per channel; zero padding k / 2, a stride), MobileNetV2's middle
/// layer. Its products are per channel, so it has no GEMM to hand to a matrix unit; its operands are quantized
/// as microxcaling's mx.Conv2d quantizes a grouped convolution's: activations X (roles a, a_bp) and output
/// gradients dY (g) in blocks along the channels (the last axis of NHWC rows), the weights (w, w_bp, C x k*k)
/// in blocks along the k*k taps (the `hwio-depthwise` layout of `mxlab analyze`). Every product and sum is FP32.
template <typename T>
struct DepthwiseConv2d {
  Param<T> w, b;
  std::int64_t k, stride;
  std::string name;
  const LayerFormats* formats;
  Dims in;
  Mat<T> x_saved;
  Mat<T> bx, bw, bg, bwb, bxb;  ///< quantized operands, kept across steps

  bool has_bias = true;

  DepthwiseConv2d(const std::string& n, std::int64_t channels, std::int64_t kernel, const LayerFormats* f,
                  std::int64_t stride_ = 1, bool bias = true)
      : k(kernel), stride(stride_), name(n), formats(f), has_bias(bias) {
    w = Param<T>{n + ".weight", Mat<T>::Zero(channels, k * k), Mat<T>::Zero(channels, k * k), true};
    if (bias) b = Param<T>{n + ".bias", Mat<T>::Zero(1, channels), Mat<T>::Zero(1, channels), false};
  }
  const ops::FakeQuantizer* f(Role r) const { return formats != nullptr ? formats->get(r) : nullptr; }
  std::string key(Role r) const { return name + "." + std::string(role_name(r)); }
  Dims out_dims(const Dims& d) const { return window_out(d, k, stride, d.channels); }

  Mat<T> forward(const Mat<T>& x, const Dims& d, QuantContext& ctx) {
    in = d;
    if (ctx.training) x_saved = x;
    const Dims o = out_dims(d);
    const Mat<T>& qx = quantized(x, f(Role::A), bx, ctx, key(Role::A));
    const Mat<T> wt = quantized(w.value, f(Role::W), bw, ctx, key(Role::W)).transpose();  // taps x channels
    Mat<T> y = Mat<T>::Zero(o.batch * o.height * o.width, d.channels);
    for_each_tap(d, k, stride, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
      y.row(row).array() += qx.row(pixel).array() * wt.row(tap).array();
    });
    if (has_bias) y.rowwise() += b.value.row(0);
    return y;
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx, bool need_dx = true) {
    const Mat<T>& qg = quantized(dy, f(Role::G), bg, ctx, key(Role::G));
    const Mat<T>& qx = quantized(x_saved, f(Role::ABp), bxb, ctx, key(Role::ABp));
    const Mat<T> wt = quantized(w.value, f(Role::WBp), bwb, ctx, key(Role::WBp)).transpose();
    Mat<T> dx = need_dx ? Mat<T>::Zero(in.batch * in.height * in.width, in.channels) : Mat<T>();
    Mat<T> dwt = Mat<T>::Zero(k * k, in.channels);
    for_each_tap(in, k, stride, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
      if (need_dx) dx.row(pixel).array() += qg.row(row).array() * wt.row(tap).array();
      dwt.row(tap).array() += qg.row(row).array() * qx.row(pixel).array();
    });
    w.grad += dwt.transpose();
    if (has_bias) b.grad += dy.colwise().sum();
    return dx;
  }
  void collect(std::vector<Param<T>*>& p) {
    p.push_back(&w);
    if (has_bias) p.push_back(&b);
  }
};

/// Global average pooling: (batch * height * width) x channels to batch x channels, the mean over each
/// image's pixels.
template <typename T>
struct GlobalAvgPool {
  Dims in;
  Mat<T> forward(const Mat<T>& x, const Dims& d, QuantContext& ctx) {
    in = d;
    const std::int64_t hw = d.height * d.width;
    Mat<T> y(d.batch, d.channels);
    for (std::int64_t b = 0; b < d.batch; ++b) y.row(b) = x.middleRows(b * hw, hw).colwise().sum() / static_cast<T>(hw);
    return rounded<T>(std::move(y), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) const {
    const std::int64_t hw = in.height * in.width;
    Mat<T> dx(in.batch * hw, in.channels);
    for (std::int64_t b = 0; b < in.batch; ++b) dx.middleRows(b * hw, hw).rowwise() = dy.row(b) / static_cast<T>(hw);
    return rounded<T>(std::move(dx), ctx);
  }
};

}  // namespace mxlab::train::detail
