// Internal: the layers of the ResNet- and MobileNetV2-style networks on NHWC activations ((batch * height *
// width) x channels, row-major): batch normalisation, depthwise convolution and global average pooling.
#pragma once

#include "layers.hpp"

namespace mxlab::train::detail {

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
    const auto n = static_cast<T>(x.rows());
    Mat<T> mean, var;
    if (batch_stats) {
      mean = x.colwise().sum() / n;
      var = (x.rowwise() - mean.row(0)).array().square().matrix().colwise().sum() / n;
      running_mean.value = (T(1) - kMomentum) * running_mean.value + kMomentum * mean;
      const T unbias = x.rows() > 1 ? n / (n - T(1)) : T(1);
      running_var.value = (T(1) - kMomentum) * running_var.value + (kMomentum * unbias) * var;
    } else {
      mean = running_mean.value;
      var = running_var.value;
    }
    inv_std = (var.array() + kEps).rsqrt().matrix();
    Mat<T> xh = (x.rowwise() - mean.row(0)).array().rowwise() * inv_std.row(0).array();
    Mat<T> y = (xh.array().rowwise() * gain.value.row(0).array()).rowwise() + bias.value.row(0).array();
    xhat = std::move(xh);
    return rounded<T>(std::move(y), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) {
    gain.grad += dy.cwiseProduct(xhat).colwise().sum();
    bias.grad += dy.colwise().sum();
    Mat<T> dxh = dy.array().rowwise() * gain.value.row(0).array();
    if (!batch_stats) return rounded<T>(Mat<T>(dxh.array().rowwise() * inv_std.row(0).array()), ctx);
    // dx = inv_std (dxh - mean(dxh) - xhat mean(dxh o xhat)), per channel over the rows.
    const auto n = static_cast<T>(dy.rows());
    const Mat<T> m1 = dxh.colwise().sum() / n;
    const Mat<T> m2 = dxh.cwiseProduct(xhat).colwise().sum() / n;
    Mat<T> dx = ((dxh.rowwise() - m1.row(0)).array() - xhat.array().rowwise() * m2.row(0).array()).rowwise() *
                inv_std.row(0).array();
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
