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

/// fn(j0, j1) for the column ranges of a pass over rows x cols values, split over `threads` threads in strips of
/// 16 columns (whole vectors up to AVX-512's) when the pass is large; for per-column work, whose values do not
/// depend on the split.
template <class Fn>
void for_column_strips(std::int64_t rows, std::int64_t cols, unsigned threads, Fn&& fn) {
  constexpr std::int64_t kStrip = 16;
  const std::int64_t strips = (cols + kStrip - 1) / kStrip;
  const std::int64_t by_size = rows * cols / (std::int64_t{1} << 15);
  const auto parts = static_cast<unsigned>(std::clamp<std::int64_t>(std::min<std::int64_t>(resolve_threads(threads), by_size), 1, std::max<std::int64_t>(strips, 1)));
  run_parts(parts, [&](unsigned t) {
    fn(std::min(cols, strips * t / parts * kStrip), std::min(cols, strips * (t + 1) / parts * kStrip));
  });
}

/// out[k][j] for every column j: the sums over the rows of rows x cols terms (column_sums_scalar's order, that of
/// Eigen's `m.colwise().sum()` on a row-major matrix: with `packets` its columns within Eigen's whole packets add
/// their rows in groups of four; without, as for an expression without packet access such as one of
/// `m.rowwise() - v`, every column adds its rows one at a time). The columns are split over the threads in
/// strips of 16 (each column's sum is the same whatever the split); float sums run on the kernels.
template <typename T, class Term>
void channel_sums(std::int64_t rows, std::int64_t cols, unsigned threads, bool packets, const Term& term, T* const* out) {
  constexpr std::int64_t kPacket = Eigen::internal::packet_traits<T>::Vectorizable ? Eigen::internal::packet_traits<T>::size : 1;
  const std::int64_t packed = packets && kPacket > 1 ? cols / kPacket * kPacket : 0;
  for_column_strips(rows, cols, threads, [&](std::int64_t j0, std::int64_t j1) {
    const ColumnRange range{rows, cols, j0, j1, packed};
    if constexpr (std::is_same_v<T, float>) mxlab::column_sums(range, term, out);
    else column_sums_scalar(range, term, out);
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
      T* const sum_out[] = {m};
      channel_sums(rows, c, ctx.threads, true, SumTerm<T>{xd, c}, sum_out);
      for (std::int64_t j = 0; j < c; ++j) m[j] /= n;
      T* const var_out[] = {var.data()};
      channel_sums(rows, c, ctx.threads, false, SquaredDeviationTerm<T>{xd, m, c}, var_out);
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
      const std::int64_t at = r0 * c;
      if constexpr (std::is_same_v<T, float>) batchnorm_normalize(xd + at, m, inv, g, b, r1 - r0, c, xh + at, yd + at);
      else batchnorm_normalize_scalar(xd + at, m, inv, g, b, r1 - r0, c, 0, c, xh + at, yd + at);
    });
    return rounded<T>(std::move(y), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) {
    const std::int64_t rows = dy.rows(), c = dy.cols();
    const T *dd = dy.data(), *xh = xhat.data(), *g = gain.value.data(), *inv = inv_std.data();
    // Per channel: sum dy xhat, sum dy, and of dxh = dy gain: sum dxh, sum dxh xhat.
    Mat<T> sums(4, c);
    T* const sum_out[] = {sums.row(0).data(), sums.row(1).data(), sums.row(2).data(), sums.row(3).data()};
    channel_sums(rows, c, ctx.threads, true, BatchNormGradientTerms<T>{dd, xh, g, c}, sum_out);
    gain.grad += sums.row(0);
    bias.grad += sums.row(1);
    Mat<T> dx(rows, c);
    T* out = dx.data();
    // With the batch's statistics: dx = inv_std (dxh - mean(dxh) - xhat mean(dxh o xhat)), per channel over the
    // rows; with the running ones: dy gain inv_std.
    const auto n = static_cast<T>(rows);
    std::vector<T> m1, m2;
    if (batch_stats) {
      m1.resize(static_cast<std::size_t>(c)), m2.resize(static_cast<std::size_t>(c));
      for (std::int64_t j = 0; j < c; ++j) m1[static_cast<std::size_t>(j)] = sums(2, j) / n, m2[static_cast<std::size_t>(j)] = sums(3, j) / n;
    }
    const T *a1 = batch_stats ? m1.data() : nullptr, *a2 = batch_stats ? m2.data() : nullptr;
    for_rows(rows, c, ctx.threads, [&](std::int64_t r0, std::int64_t r1) {
      const std::int64_t at = r0 * c;
      if constexpr (std::is_same_v<T, float>) batchnorm_gradient(dd + at, xh + at, g, inv, a1, a2, r1 - r0, c, out + at);
      else batchnorm_gradient_scalar(dd + at, xh + at, g, inv, a1, a2, r1 - r0, c, 0, c, out + at);
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
  WindowShape window(const Dims& d) const { return {d.batch, d.height, d.width, d.channels, k, stride}; }
  /// Whether backward's X (a_bp) is forward's quantized X: both quantize X along the channels, so one format
  /// with deterministic rounding and no delayed scaling of its own gives the same values.
  bool reuse_x(QuantContext& ctx) const {
    const ops::FakeQuantizer *fa = f(Role::A), *fab = f(Role::ABp);
    return fa != nullptr && fab != nullptr && fa->format().name == fab->format().name &&
           fab->format().options.element.rounding != Rounding::Stochastic && ctx.delayed_state(key(Role::ABp)) == nullptr;
  }
  /// Forward's quantized X as the a_bp operand, its counts added under a_bp's key as a quantization of its own
  /// would add them.
  const Mat<T>& forward_x(QuantContext& ctx) {
    if constexpr (std::is_same_v<T, float>) {
      if (ctx.collect) add_counts(ctx.at(key(Role::ABp)), span_of(x_saved), span_of(bx));
    }
    return bx;
  }

  Mat<T> forward(const Mat<T>& x, const Dims& d, QuantContext& ctx) {
    in = d;
    if (ctx.training) x_saved = x;
    const Dims o = out_dims(d);
    const Mat<T>& qx = quantized(x, f(Role::A), bx, ctx, key(Role::A));
    const Mat<T> wt = quantized(w.value, f(Role::W), bw, ctx, key(Role::W)).transpose();  // taps x channels
    Mat<T> y(o.batch * o.height * o.width, d.channels);
    const WindowShape shape = window(d);
    if constexpr (std::is_same_v<T, float>) {
      for_images(d.batch, ctx.threads, [&](std::int64_t image) { depthwise_forward(qx.data(), wt.data(), shape, image, image + 1, y.data()); });
    } else {
      depthwise_forward_scalar(qx.data(), wt.data(), shape, y.data());
    }
    if (has_bias) y.rowwise() += b.value.row(0);
    return y;
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx, bool need_dx = true) {
    const Mat<T>& qg = quantized(dy, f(Role::G), bg, ctx, key(Role::G));
    const Mat<T>& qx = reuse_x(ctx) ? forward_x(ctx) : quantized(x_saved, f(Role::ABp), bxb, ctx, key(Role::ABp));
    const Mat<T> wt = quantized(w.value, f(Role::WBp), bwb, ctx, key(Role::WBp)).transpose();
    Mat<T> dwt = Mat<T>::Zero(k * k, in.channels);
    const WindowShape shape = window(in);
    Mat<T> dx;
    if constexpr (std::is_same_v<T, float>) {
      // dx per image and dwt per channel: neither split changes an addition, and no two threads write one value.
      if (need_dx) {
        dx.resize(in.batch * in.height * in.width, in.channels);
        for_images(in.batch, ctx.threads, [&](std::int64_t image) { depthwise_input_gradient(qg.data(), wt.data(), shape, image, image + 1, dx.data()); });
      }
      for_column_strips(in.batch * in.height * in.width, in.channels, ctx.threads, [&](std::int64_t c0, std::int64_t c1) { depthwise_weight_gradient(qg.data(), qx.data(), shape, c0, c1, dwt.data()); });
    } else {
      if (need_dx) dx = Mat<T>::Zero(in.batch * in.height * in.width, in.channels);
      depthwise_backward_scalar(qg.data(), qx.data(), wt.data(), shape, need_dx ? dx.data() : nullptr, dwt.data());
    }
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
