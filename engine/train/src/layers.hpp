// Internal: layers with forward and backward on Eigen row-major matrices, templated on the scalar (float for
// training, double for the finite-difference gradient checks). Every GEMM goes through QGemm, which
// quantizes each operand along the GEMM's reduction axis with its role's format (float only).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "blas.hpp"
#include "mxlab/core/threads.hpp"
#include "mxlab/kernels/activations.hpp"
#include "mxlab/kernels/channels.hpp"
#include "mxlab/kernels/im2col.hpp"
#include "mxlab/kernels/pool.hpp"
#include "quant.hpp"

namespace mxlab::train::detail {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A trainable tensor: its FP32 (master) value and the gradient accumulated by backward.
template <typename T>
struct Param {
  std::string name;
  Mat<T> value;
  Mat<T> grad;
  bool decay = true;  ///< weight decay applies (weights, not biases or norm gains)
};

/// A matrix's values as a span, in its (row-major) order.
inline std::span<const float> span_of(const Mat<float>& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }
inline std::span<float> span_of(Mat<float>& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }

/// m rounded in place to the context's non-GEMM format (float only; none: unchanged). Returns m.
template <typename T>
Mat<T> rounded(Mat<T> m, QuantContext& ctx) {
  if constexpr (std::is_same_v<T, float>) {
    round_nongemm(span_of(m), m.rows(), m.cols(), ctx);
  }
  return m;
}

/// x (rows x cols) quantized with f into buf; x itself when f is none.
template <typename T>
const Mat<T>& quantized(const Mat<T>& x, const ops::FakeQuantizer* f, Mat<T>& buf, QuantContext& ctx, const std::string& key) {
  if (f == nullptr) return x;
  if constexpr (std::is_same_v<T, float>) {
    buf.resize(x.rows(), x.cols());
    quantize_operand(*f, span_of(x), x.rows(), x.cols(), span_of(buf), ctx, key);
    return buf;
  } else {
    throw std::logic_error("quantized GEMM operands are float32");
  }
}

/// x quantized with f with its blocks down x's columns, in x's layout (ops::FakeQuantizer::run_columns: the
/// operand of a GEMM that reads x transposed, quantized along that GEMM's reduction axis), into buf; x itself
/// when f is none. A 2-D tile format quantizes x as it lies: its tiles serve x and x^T alike.
template <typename T>
const Mat<T>& quantized_columns(const Mat<T>& x, const ops::FakeQuantizer* f, Mat<T>& buf, QuantContext& ctx,
                                const std::string& key) {
  if (f == nullptr) return x;
  if (is_2d(f)) return quantized(x, f, buf, ctx, key);
  if constexpr (std::is_same_v<T, float>) {
    buf.resize(x.rows(), x.cols());
    quantize_operand(*f, span_of(x), x.rows(), x.cols(), span_of(buf), ctx, key, true);
    return buf;
  } else {
    throw std::logic_error("quantized GEMM operands are float32");
  }
}

/// x quantized along its rows with fr into rows_buf and down its columns with fc into columns_buf, in one pass
/// over x (quantize_rows_and_columns); both 1-D block formats. One quantization serves both when it can: under
/// delayed scaling (delayed_cast_both), and for an element cast or a per-tensor scale of one format in both
/// (quantize_once_both). Then only rows_buf is written, and the result is true (columns_buf is not the operand
/// down the columns; rows_buf is).
template <typename T>
bool quantized_both(const Mat<T>& x, const ops::FakeQuantizer& fr, Mat<T>& rows_buf, const ops::FakeQuantizer& fc,
                    Mat<T>& columns_buf, QuantContext& ctx, const std::string& rows_key, const std::string& columns_key) {
  if constexpr (std::is_same_v<T, float>) {
    rows_buf.resize(x.rows(), x.cols());
    const auto n = static_cast<std::size_t>(x.size());
    const std::span<const float> in(x.data(), n);
    const std::span<float> along_rows(rows_buf.data(), n);
    if (delayed_cast_both(fr, fc, in, x.rows(), x.cols(), along_rows, ctx, rows_key, columns_key) ||
        quantize_once_both(fr, fc, in, x.rows(), x.cols(), along_rows, ctx, rows_key, columns_key))
      return true;
    columns_buf.resize(x.rows(), x.cols());
    quantize_rows_and_columns(fr, fc, in, x.rows(), x.cols(), along_rows, std::span<float>(columns_buf.data(), n), ctx,
                              rows_key, columns_key);
    return false;
  } else {
    throw std::logic_error("quantized GEMM operands are float32");
  }
}

/// out (a's rows x b's rows, after the reads) = A B^T under ctx.accumulate (model_product): A read from a (its
/// transpose when ta), B^T from b (when tb), each with the quantizer of its role; false without a model, when
/// the caller's Eigen product runs. The double path of the gradient checks has no accumulation model.
template <typename T>
bool accumulated(Mat<T>& out, const Mat<T>& a, const ops::FakeQuantizer* fa, bool ta, const Mat<T>& b,
                 const ops::FakeQuantizer* fb, bool tb, const QuantContext& ctx, const std::string& key) {
  if (ctx.accumulate == nullptr) return false;
  if constexpr (std::is_same_v<T, float>) {
    out.resize(ta ? a.cols() : a.rows(), tb ? b.cols() : b.rows());
    model_product({a.data(), a.rows(), a.cols(), fa, ta}, {b.data(), b.rows(), b.cols(), fb, tb}, out.data(), ctx, key);
    return true;
  } else {
    throw std::logic_error("accumulation models run on float32 GEMM operands");
  }
}

/// out = op(a) op(b), op the transpose when ta (tb): float32 on OpenBLAS's SGEMM over ctx.threads (sgemm: the
/// same values for any thread count), Eigen for the double of the gradient checks.
template <typename T>
void product(Mat<T>& out, const Mat<T>& a, bool ta, const Mat<T>& b, bool tb, const QuantContext& ctx) {
  const std::int64_t m = ta ? a.cols() : a.rows(), k = ta ? a.rows() : a.cols(), n = tb ? b.rows() : b.cols();
  if ((tb ? b.cols() : b.rows()) != k) throw std::logic_error("product: the operands' inner sizes differ");
  if constexpr (std::is_same_v<T, float>) {
    out.resize(m, n);
    sgemm(ta, tb, m, n, k, a.data(), a.cols(), b.data(), b.cols(), out.data(), n, ctx.threads);
  } else if (ta) {
    if (tb) out.noalias() = a.transpose() * b.transpose();
    else out.noalias() = a.transpose() * b;
  } else {
    if (tb) out.noalias() = a * b.transpose();
    else out.noalias() = a * b;
  }
}

/// The three GEMMs of one weight-like product Y = X Wt^T (X: M x K, Wt: N x K, both row-major with the
/// reduction axis K last), each operand quantized with its role's format along that GEMM's reduction axis:
///   forward   Y   = q_a(X) q_w(Wt)^T           (reduction K: blocks along rows)
///   backward  dX  = q_g(dY) q_wbp(Wt)          (reduction N: dY along rows, Wt down its columns)
///             dWt = q_g(dY)^T q_abp(X)         (reduction M, the batch: both down their columns)
/// Operands quantized down their columns keep their layout (no transposed copies); Eigen's products read them
/// transposed. An operand quantized both ways (X while training, dY when the layer has dX) is read once for
/// both. 2-D tile formats are quantized once and reused when forward and backward share them. The buffers
/// persist across steps, so a layer allocates its quantized operands once. With an accumulation model
/// (ctx.accumulate) each product of the quantized operands is computed under it (accumulated) instead of Eigen.
template <typename T>
struct QGemm {
  std::string name;
  const LayerFormats* formats = nullptr;
  Mat<T> bx, bw, bg, bwc, bgc, bxc;  ///< quantized operands (bx, bw: forward's, reused under 2-D tiles; *c: down columns)
  bool saved_x = false, saved_w = false;
  bool have_xc = false;  ///< X down its columns from forward is in bxc, or in bx when xc_in_x
  bool xc_in_x = false, gc_in_g = false;  ///< one quantization serves both directions (quantized_both)
  /// Forward's Wt serves backward: the same element cast or per-tensor scale both ways (same_values), neither
  /// role under delayed scaling.
  bool same_w = false;
  /// The roles of the second operand (Wt) forward and backward: the weight roles, or the activation roles for
  /// attention's products of two activations.
  Role w_role = Role::W, w_bp_role = Role::WBp;

  const ops::FakeQuantizer* f(Role r) const { return formats != nullptr ? formats->get(r) : nullptr; }
  std::string key(Role r) const { return name + "." + std::string(role_name(r)); }
  bool reuse(Role fwd, Role bwd) const {
    return is_2d(f(fwd)) && f(bwd) != nullptr && f(bwd)->format().name == f(fwd)->format().name;
  }

  /// Whether X's quantization can be made from values X copies (a convolution's pixels, then im2col): role A's
  /// format gives every value the same quantization wherever it lies (ops::FakeQuantizer::positionless; a
  /// per-tensor scale, current or delayed, needs the copies to hold every value, the caller's part) and zeros +0;
  /// while training, one quantization serves dW (roles A and ABp give the same values: same_values, or one cast
  /// under delayed scaling, whose amax both states record); no metrics this pass (they count the copies).
  bool x_from_copies(const QuantContext& ctx) {
    const ops::FakeQuantizer* fa = f(Role::A);
    const ops::FakeQuantizer* fab = f(Role::ABp);
    if constexpr (!std::is_same_v<T, float>) return false;
    if (ctx.collect || fa == nullptr || !fa->positionless()) return false;
    const bool delayed = ctx.delayed_state(key(Role::A)) != nullptr;
    if (ctx.training) {
      if (fab == nullptr || is_2d(fab)) return false;
      if (delayed ? !one_delayed_cast(*fa, *fab, ctx, key(Role::A), key(Role::ABp))
                  : ctx.delayed_state(key(Role::ABp)) != nullptr || !fa->same_values(*fab))
        return false;
    }
    if (zeros_checked_ != fa) {  // a zero must stay +0 (the columns' padding)
      zeros_checked_ = fa;
      std::vector<float> zeros(16, 0.0F), out(16, 1.0F);
      ops::Run one;
      one.threads = 1;
      zeros_stay_ = static_cast<bool>(fa->run(zeros, {1, 16}, out, one)) &&
                    std::all_of(out.begin(), out.end(), [](float v) { return std::bit_cast<std::uint32_t>(v) == 0; });
    }
    return zeros_stay_;
  }
  const ops::FakeQuantizer* zeros_checked_ = nullptr;
  bool zeros_stay_ = false;

  /// Y = q_a(X) q_w(Wt)^T. With x_rows_ready, bx already holds q_a(X), serving dW too while training
  /// (x_from_copies), and x is not read.
  Mat<T> forward(const Mat<T>& x, const Mat<T>& wt, QuantContext& ctx, bool x_rows_ready = false) {
    const ops::FakeQuantizer* fa = f(Role::A);
    const ops::FakeQuantizer* fab = f(Role::ABp);
    saved_x = ctx.training && reuse(Role::A, Role::ABp);
    saved_w = ctx.training && reuse(w_role, w_bp_role);
    same_w = ctx.training && f(w_role) != nullptr && f(w_bp_role) != nullptr && f(w_role)->same_values(*f(w_bp_role)) &&
             ctx.delayed_state(key(w_role)) == nullptr && ctx.delayed_state(key(w_bp_role)) == nullptr;
    // While training, X down its columns (dW's operand) in the same pass over X as along its rows.
    have_xc = ctx.training && fa != nullptr && fab != nullptr && !is_2d(fa) && !is_2d(fab);
    if (x_rows_ready) xc_in_x = true;
    else if (have_xc) xc_in_x = quantized_both(x, *fa, bx, *fab, bxc, ctx, key(Role::A), key(Role::ABp));
    const Mat<T>& qx = have_xc || x_rows_ready ? bx : quantized(x, fa, bx, ctx, key(Role::A));
    const Mat<T>& qw = quantized(wt, f(w_role), bw, ctx, key(w_role));
    Mat<T> y(qx.rows(), wt.rows());
    if (!accumulated(y, qx, fa, false, qw, f(w_role), false, ctx, name + " forward")) product(y, qx, false, qw, true, ctx);
    return y;
  }

  /// Rows of dX handed over a block at a time (sgemm_rows) instead of written to dx: `rows` rows a block.
  struct DxRows {
    std::int64_t rows = 0;
    std::function<void(std::int64_t, std::int64_t, const float*)> take;
  };

  /// dx = dY Wt (if dx), dwt = dY^T X (if dwt); x and wt are forward's inputs. With dx_rows, dX goes to
  /// dx_rows->take by blocks of rows, unless the product runs under an accumulation model; true when it did.
  bool backward(const Mat<T>& dy, const Mat<T>& x, const Mat<T>& wt, Mat<T>* dx, Mat<T>* dwt, QuantContext& ctx,
                const DxRows* dx_rows = nullptr) {
    bool by_rows = false;
    const ops::FakeQuantizer* fg = f(Role::G);
    const ops::FakeQuantizer* fa = f(Role::ABp);
    // dY along N is needed for dX, or as the 2-D tiles dW reuses; the first layer (no dX) under 1-D blocks
    // quantizes dY only along the batch.
    const bool g_2d = is_2d(fg);
    // dY along N for dX and down its columns for dW in one pass.
    const bool g_both = fg != nullptr && !g_2d && dx != nullptr && dwt != nullptr;
    if (g_both) gc_in_g = quantized_both(dy, *fg, bg, *fg, bgc, ctx, key(Role::G), key(Role::G));
    const Mat<T>& qg = g_both ? bg : dx != nullptr || g_2d ? quantized(dy, fg, bg, ctx, key(Role::G)) : dy;
    if (dx != nullptr) {
      // Forward's 2-D tiles of Wt are the tiles of W.
      if constexpr (std::is_same_v<T, float>) {
        if (same_w && ctx.collect) add_counts(ctx.at(key(w_bp_role)), span_of(wt), span_of(bw));
      }
      const Mat<T>& qw = saved_w || same_w ? bw : quantized_columns(wt, f(w_bp_role), bwc, ctx, key(w_bp_role));
      if (!accumulated(*dx, qg, fg, false, qw, f(saved_w ? w_role : w_bp_role), true, ctx, name + " backward dX")) {
        if constexpr (std::is_same_v<T, float>) {
          if (dx_rows != nullptr) {
            sgemm_rows(qg.rows(), qw.cols(), qg.cols(), qg.data(), qg.cols(), qw.data(), qw.cols(), dx_rows->rows,
                       dx_rows->take, ctx.threads);
            by_rows = true;
          }
        }
        if (!by_rows) product(*dx, qg, false, qw, false, ctx);
      }
    }
    if (dwt != nullptr) {
      if (fg == nullptr && fa == nullptr) {
        if (!accumulated(*dwt, dy, fg, true, x, fa, true, ctx, name + " backward dW")) product(*dwt, dy, true, x, false, ctx);
        return by_rows;
      }
      const Mat<T>& qgc = g_2d ? qg : g_both ? (gc_in_g ? bg : bgc) : quantized_columns(dy, fg, bgc, ctx, key(Role::G));
      const Mat<T>& qxc = saved_x ? bx : have_xc ? (xc_in_x ? bx : bxc) : quantized_columns(x, fa, bxc, ctx, key(Role::ABp));
      if (!accumulated(*dwt, qgc, fg, true, qxc, saved_x ? f(Role::A) : fa, true, ctx, name + " backward dW"))
        product(*dwt, qgc, true, qxc, false, ctx);
    }
    return by_rows;
  }
};

/// Fully connected layer: y = x W^T + b with W stored out x in.
template <typename T>
struct Linear {
  Param<T> w, b;
  QGemm<T> gemm;
  Mat<T> x_saved;

  bool has_bias = true;  ///< false: no bias (a layer followed by batch normalisation, whose shift replaces it)

  Linear(const std::string& name, std::int64_t in, std::int64_t out, const LayerFormats* formats, bool bias = true)
      : has_bias(bias) {
    w = Param<T>{name + ".weight", Mat<T>::Zero(out, in), Mat<T>::Zero(out, in), true};
    if (bias) b = Param<T>{name + ".bias", Mat<T>::Zero(1, out), Mat<T>::Zero(1, out), false};
    gemm.name = name;
    gemm.formats = formats;
  }
  Mat<T> forward(const Mat<T>& x, QuantContext& ctx) {
    if (ctx.training) x_saved = x;
    return output(x, ctx);
  }
  /// The same for an input of the layer's own (a convolution's columns): kept for backward without a copy.
  Mat<T> forward(Mat<T>&& x, QuantContext& ctx) {
    if (!ctx.training) return output(x, ctx);
    x_saved = std::move(x);
    return output(x_saved, ctx);
  }
  Mat<T> output(const Mat<T>& x, QuantContext& ctx, bool x_rows_ready = false) {
    Mat<T> y = gemm.forward(x, w.value, ctx, x_rows_ready);
    if (has_bias) y.rowwise() += b.value.row(0);
    return y;
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx, bool need_dx = true) {
    Mat<T> dx;
    backward(dy, ctx, need_dx ? &dx : nullptr);
    return dx;
  }
  /// dX into *dx (none: not wanted), or by blocks of rows to dx_rows (QGemm::backward; true when it did).
  bool backward(const Mat<T>& dy, QuantContext& ctx, Mat<T>* dx, const typename QGemm<T>::DxRows* dx_rows = nullptr) {
    Mat<T> dw;
    const bool by_rows = gemm.backward(dy, x_saved, w.value, dx, &dw, ctx, dx_rows);
    w.grad += dw;
    if (has_bias) b.grad += dy.colwise().sum();
    return by_rows;
  }
  /// The weight, and the bias if it has one.
  void collect(std::vector<Param<T>*>& p) {
    p.push_back(&w);
    if (has_bias) p.push_back(&b);
  }
};

/// Elementwise activation: ReLU, ReLU6 (min(max(x, 0), 6), MobileNetV2's) or GELU (tanh approximation,
/// Hendrycks and Gimpel 2016, eq. 2). While training, GELU keeps its tanh values for backward, so each step
/// evaluates tanh once per element.
template <typename T>
struct Activation {
  bool gelu = false;
  bool relu6 = false;
  Mat<T> x_saved;
  Mat<T> tanh_saved;  ///< GELU while training: tanh(kC (v + kA v^3)) of each saved input v
  static constexpr T kC = T(0.7978845608028654);  // sqrt(2 / pi)
  static constexpr T kA = T(0.044715);
  static T gelu_tanh(T v) { return std::tanh(kC * (v + kA * v * v * v)); }

  Mat<T> forward(const Mat<T>& x, QuantContext& ctx) {
    if (!ctx.training) return apply(x, ctx);
    x_saved = x;
    return saved_output(ctx);
  }
  /// The same for an input the caller no longer needs: kept for backward without a copy.
  Mat<T> forward(Mat<T>&& x, QuantContext& ctx) {
    if (!ctx.training) return apply(x, ctx);
    x_saved = std::move(x);
    return saved_output(ctx);
  }
  Mat<T> apply(const Mat<T>& x, QuantContext& ctx) const {
    if (relu6) return rounded<T>(x.cwiseMax(T(0)).cwiseMin(T(6)), ctx);
    if (!gelu) return rounded<T>(x.cwiseMax(T(0)), ctx);
    if constexpr (std::is_same_v<T, float>) {
      Mat<T> t(x.rows(), x.cols()), y(x.rows(), x.cols());
      mxlab::gelu_tanh(span_of(x), span_of(t), span_of(y));
      return rounded<T>(std::move(y), ctx);
    } else {
      return rounded<T>(x.unaryExpr([](T v) { return T(0.5) * v * (T(1) + gelu_tanh(v)); }), ctx);
    }
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) const {
    if (relu6)
      return rounded<T>(dy.cwiseProduct(x_saved.unaryExpr([](T v) { return v > T(0) && v < T(6) ? T(1) : T(0); })), ctx);
    if (!gelu) return rounded<T>(dy.cwiseProduct(x_saved.unaryExpr([](T v) { return v > T(0) ? T(1) : T(0); })), ctx);
    if constexpr (std::is_same_v<T, float>) {
      Mat<T> dx(dy.rows(), dy.cols());
      mxlab::gelu_tanh_backward(span_of(x_saved), span_of(tanh_saved), span_of(dy), span_of(dx));
      return rounded<T>(std::move(dx), ctx);
    } else {
      return rounded<T>(dy.cwiseProduct(x_saved.binaryExpr(tanh_saved, [](T v, T t) {
        return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * kC * (T(1) + T(3) * kA * v * v);
      })), ctx);
    }
  }

 private:
  /// The output of the saved input; GELU keeps its tanh values.
  Mat<T> saved_output(QuantContext& ctx) {
    if (!gelu) return apply(x_saved, ctx);
    if constexpr (std::is_same_v<T, float>) {
      tanh_saved.resize(x_saved.rows(), x_saved.cols());
      Mat<T> y(x_saved.rows(), x_saved.cols());
      mxlab::gelu_tanh(span_of(x_saved), span_of(tanh_saved), span_of(y));
      return rounded<T>(std::move(y), ctx);
    } else {
      tanh_saved = x_saved.unaryExpr([](T v) { return gelu_tanh(v); });
      return rounded<T>(x_saved.binaryExpr(tanh_saved, [](T v, T t) { return T(0.5) * v * (T(1) + t); }), ctx);
    }
  }
};

/// Image tensor dimensions: activations are (batch * height * width) x channels, row-major (NHWC).
struct Dims {
  std::int64_t batch = 0, height = 0, width = 0, channels = 0;
};

/// The output dimensions of a k x k window with the stride and zero padding k / 2 over d, with `channels`.
inline Dims window_out(const Dims& d, std::int64_t k, std::int64_t stride, std::int64_t channels) {
  const std::int64_t pad = k / 2;
  return {d.batch, (d.height + 2 * pad - k) / stride + 1, (d.width + 2 * pad - k) / stride + 1, channels};
}

/// Calls fn(b) for every image b in [0, batch), the images split over `threads` threads (each image's work is
/// the same whatever the split, so the values do not depend on the thread count).
template <class Fn>
void for_images(std::int64_t batch, unsigned threads, Fn&& fn) {
  const auto parts = static_cast<unsigned>(std::clamp<std::int64_t>(resolve_threads(threads), 1, std::max<std::int64_t>(batch, 1)));
  run_parts(parts, [&](unsigned t) {
    for (std::int64_t b = batch * t / parts; b < batch * (t + 1) / parts; ++b) fn(b);
  });
}

/// Copies n values (a single one without a library call: a first layer's image has one channel).
template <typename T>
void copy_values(const T* from, std::int64_t n, T* to) {
  if (n == 1) *to = *from;
  else std::copy_n(from, n, to);
}

/// Convolution with zero padding k / 2 ("same" at stride 1) and a stride, as an im2col GEMM: columns
/// (B*OH*OW) x (k*k*C) in (ky, kx, c) order times W (out x k*k*C) transposed. A 1x1 convolution of stride 1
/// (pointwise) is the GEMM on the activations themselves.
template <typename T>
struct Conv2d {
  Linear<T> lin;
  std::int64_t k, stride;
  Dims in;
  Mat<T> quantized_pixels;  ///< forward's input quantized, when its columns are made from it (x_from_copies)
  Conv2d(const std::string& name, std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         const LayerFormats* formats, std::int64_t stride_ = 1, bool bias = true)
      : lin(name, kernel * kernel * in_channels, out_channels, formats, bias), k(kernel), stride(stride_) {}

  Dims out_dims(const Dims& d) const { return window_out(d, k, stride, lin.w.value.rows()); }
  /// The columns: each output position's row holds its window's pixels in (ky, kx, c) order, zeros outside.
  Mat<T> im2col(const Mat<T>& x, const Dims& d, unsigned threads) const {
    Mat<T> cols;
    im2col_into(x, d, threads, cols);
    return cols;
  }
  void im2col_into(const Mat<T>& x, const Dims& d, unsigned threads, Mat<T>& cols) const {
    const Dims o = out_dims(d);
    const std::int64_t c = d.channels, pad = k / 2, width = k * k * c;
    cols.resize(o.batch * o.height * o.width, width);
    if constexpr (std::is_same_v<T, float>) {  // the SIMD kernel of the loop below, an output row at a time
      for_images(d.batch, threads, [&](std::int64_t b) {
        const T* image = x.data() + b * d.height * d.width * c;
        for (std::int64_t y = 0; y < o.height; ++y)
          mxlab::im2col_row(image, d.height, d.width, c, k, stride, pad, y, o.width,
                            cols.data() + (b * o.height + y) * o.width * width);
      });
      return;
    }
    for_images(d.batch, threads, [&](std::int64_t b) {
      for (std::int64_t y = 0; y < o.height; ++y)
        for (std::int64_t xx = 0; xx < o.width; ++xx) {
          T* out = cols.data() + ((b * o.height + y) * o.width + xx) * width;
          // A window row's taps inside the image are neighbouring pixels: one copy of their channels, zeros around.
          const std::int64_t sx0 = xx * stride - pad;
          const std::int64_t first = std::clamp<std::int64_t>(-sx0, 0, k);
          const std::int64_t last = std::clamp<std::int64_t>(d.width - sx0, first, k);
          for (std::int64_t ky = 0; ky < k; ++ky, out += k * c) {
            const std::int64_t sy = y * stride + ky - pad;
            if (sy < 0 || sy >= d.height) {
              std::fill_n(out, k * c, T(0));
              continue;
            }
            std::fill_n(out, first * c, T(0));
            if (last > first)
              copy_values(x.data() + ((b * d.height + sy) * d.width + sx0 + first) * c, (last - first) * c,
                          out + first * c);
            std::fill_n(out + last * c, (k - last) * c, T(0));
          }
        }
    });
  }
  /// The adjoint of im2col: each tap's columns added back to its input pixel (col2im_scalar, in window_taps' order).
  Mat<T> col2im(const Mat<T>& cols, const Dims& d, unsigned threads) const {
    Mat<T> x(d.batch * d.height * d.width, d.channels);  // every value written
    const Dims o = out_dims(d);
    const std::int64_t image_cols = o.height * o.width * k * k * d.channels;
    for_images(d.batch, threads, [&](std::int64_t b) { col2im_images(cols.data() + b * image_cols, b, 1, d, x); });
    return x;
  }
  /// col2im of the images [b0, b0 + n), whose columns start at `cols`, into their rows of x: mxlab::col2im in
  /// float, its definition col2im_scalar in double.
  void col2im_images(const T* cols, std::int64_t b0, std::int64_t n, const Dims& d, Mat<T>& x) const {
    const WindowShape shape{n, d.height, d.width, d.channels, k, stride};
    T* to = x.data() + b0 * d.height * d.width * d.channels;
    if constexpr (std::is_same_v<T, float>) mxlab::col2im(cols, shape, 0, n, to);
    else col2im_scalar(cols, shape, to);
  }
  bool pointwise() const { return k == 1 && stride == 1; }
  /// Whether every input pixel lies in some window (the columns hold every value of the image, and zeros).
  bool covers(const Dims& d) const {
    const Dims o = out_dims(d);
    const std::int64_t pad = k / 2;
    return k >= stride && (o.height - 1) * stride + k - 1 - pad >= d.height - 1 &&
           (o.width - 1) * stride + k - 1 - pad >= d.width - 1;
  }
  Mat<T> forward(const Mat<T>& x, const Dims& d, QuantContext& ctx) {
    in = d;
    if (pointwise()) return lin.forward(x, ctx);
    if constexpr (std::is_same_v<T, float>) {
      // An element cast or a per-tensor scale quantizes each pixel's value the same in every window (the
      // per-tensor amax is the image's when the windows cover it): the pixels quantized once and then copied
      // give the quantized columns, a k * k-th of the values to quantize; the plain columns are not made
      // (QGemm::x_from_copies: they serve only the metrics, and dW uses the same quantization).
      if (covers(d) && lin.gemm.x_from_copies(ctx)) {
        QGemm<T>& g = lin.gemm;
        // While training, one quantization for roles A and ABp (quantize_once_both, or delayed_cast_both recording
        // the pixels' amax, the columns', in both states).
        Mat<T> unused;  // quantized_both's buffer down the columns, not written when one quantization serves both
        if (!ctx.training) quantized(x, g.f(Role::A), quantized_pixels, ctx, g.key(Role::A));
        else if (!quantized_both(x, *g.f(Role::A), quantized_pixels, *g.f(Role::ABp), unused, ctx, g.key(Role::A),
                                 g.key(Role::ABp)))
          throw std::logic_error(g.name + ": x_from_copies without one quantization for both roles");
        im2col_into(quantized_pixels, d, ctx.threads, lin.gemm.bx);
        if (ctx.training) lin.x_saved.resize(0, 0);
        return lin.output(Mat<T>(), ctx, true);
      }
    }
    return lin.forward(im2col(x, d, ctx.threads), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx, bool need_dx = true) {
    if (!need_dx || pointwise()) return lin.backward(dy, ctx, need_dx);
    Mat<T> dcols;
    if constexpr (std::is_same_v<T, float>) {
      // The columns' gradient by blocks of whole images (about 512 KiB of columns), each added back to its pixels
      // while in the caches (mxlab::col2im of the block): the same values as col2im of the whole, which is never
      // written out.
      const Dims o = out_dims(in);
      Mat<T> x(in.batch * in.height * in.width, in.channels);
      const std::int64_t image_rows = o.height * o.width;
      const std::int64_t images =
          std::max<std::int64_t>(1, (std::int64_t{1} << 17) / std::max<std::int64_t>(1, image_rows * k * k * in.channels));
      const typename QGemm<T>::DxRows rows{images * image_rows, [&](std::int64_t r0, std::int64_t r1, const float* block) {
        col2im_images(block, r0 / image_rows, (r1 - r0) / image_rows, in, x);
      }};
      if (lin.backward(dy, ctx, &dcols, &rows)) return x;
    } else {
      lin.backward(dy, ctx, &dcols);
    }
    return col2im(dcols, in, ctx.threads);
  }
};

/// 2 x 2 pooling with stride 2 (max or average) on NHWC activations with even height and width.
template <typename T>
struct Pool2d {
  bool max = true;
  Dims in;
  /// Which of its window's four inputs ((0, 0), (0, 1), (1, 0), (1, 1)) is each output's first maximum; kNone: no
  /// input is above -infinity (all NaN or -infinity), whose gradient goes to input row 0.
  std::vector<std::uint8_t> argmax;
  static constexpr std::uint8_t kNone = mxlab::kPoolNoMaximum;

  /// The input rows of output (b, oy, ox)'s window, in the order above.
  std::array<std::int64_t, 4> window(std::int64_t b, std::int64_t oy, std::int64_t ox) const {
    const std::int64_t r = (b * in.height + 2 * oy) * in.width + 2 * ox;
    return {r, r + 1, r + in.width, r + in.width + 1};
  }

  Mat<T> forward(const Mat<T>& x, const Dims& d, QuantContext& ctx) {
    in = d;
    const std::int64_t oh = d.height / 2, ow = d.width / 2, c = d.channels;
    Mat<T> y(d.batch * oh * ow, c);
    argmax.resize(static_cast<std::size_t>(y.size()));
    if constexpr (std::is_same_v<T, float>) {  // the SIMD kernel of the loop below, a row of windows at a time
      for_images(d.batch, ctx.threads, [&](std::int64_t b) {
        for (std::int64_t oy = 0; oy < oh; ++oy) {
          const std::int64_t orow = (b * oh + oy) * ow;
          const T* top = x.data() + (b * d.height + 2 * oy) * d.width * c;
          mxlab::pool_2x2_row(top, top + d.width * c, ow, c, max, y.data() + orow * c, argmax.data() + orow * c);
        }
      });
      return rounded<T>(std::move(y), ctx);
    }
    for_images(d.batch, ctx.threads, [&](std::int64_t b) {
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          const std::int64_t orow = (b * oh + oy) * ow + ox;
          const auto rows = window(b, oy, ox);
          const T* v[4];
          for (int q = 0; q < 4; ++q) v[q] = x.data() + rows[static_cast<std::size_t>(q)] * c;
          T* out = y.data() + orow * c;
          std::uint8_t* at = argmax.data() + orow * c;
          for (std::int64_t ch = 0; ch < c; ++ch) mxlab::pool_2x2_window(v, ch, max, out[ch], at[ch]);  // double
        }
    });
    return rounded<T>(std::move(y), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) const {
    Mat<T> dx = Mat<T>::Zero(in.batch * in.height * in.width, in.channels);
    const std::int64_t oh = in.height / 2, ow = in.width / 2, c = in.channels;
    bool none = false;
    for_images(in.batch, ctx.threads, [&](std::int64_t b) {
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        const std::int64_t orow = (b * oh + oy) * ow;
        if constexpr (std::is_same_v<T, float>) {  // the SIMD kernel of the loop below
          T* top = dx.data() + (b * in.height + 2 * oy) * in.width * c;
          mxlab::pool_2x2_backward_row(dy.data() + orow * c, argmax.data() + orow * c, ow, c, max, top, top + in.width * c);
          continue;
        }
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          const T* g = dy.data() + (orow + ox) * c;
          const std::uint8_t* at = argmax.data() + (orow + ox) * c;
          const auto rows = window(b, oy, ox);
          for (std::int64_t ch = 0; ch < c; ++ch)
            for (std::uint8_t q = 0; q < 4; ++q) dx(rows[q], ch) = mxlab::pool_2x2_input_gradient(g[ch], at[ch], max, q);
        }
      }
    });
    for (std::size_t i = 0; max && i < argmax.size(); ++i) none = none || argmax[i] == kNone;
    if (none)  // outside the images' threads: row 0 belongs to the first image
      for (std::int64_t i = 0; i < dy.size(); ++i)
        if (argmax[static_cast<std::size_t>(i)] == kNone) dx(0, i % c) += dy.data()[i];
    return rounded<T>(std::move(dx), ctx);
  }
};

/// Layer normalisation over each row (Ba, Kiros, Hinton 2016), epsilon 1e-5.
template <typename T>
struct LayerNorm {
  Param<T> gain, bias;
  Mat<T> xhat;
  std::vector<T> inv_std;
  LayerNorm(const std::string& name, std::int64_t dim) {
    gain = Param<T>{name + ".weight", Mat<T>::Ones(1, dim), Mat<T>::Zero(1, dim), false};
    bias = Param<T>{name + ".bias", Mat<T>::Zero(1, dim), Mat<T>::Zero(1, dim), false};
  }
  Mat<T> forward(const Mat<T>& x, QuantContext& ctx) {
    const auto n = static_cast<T>(x.cols());
    Mat<T> xh(x.rows(), x.cols());
    std::vector<T> inv(static_cast<std::size_t>(x.rows()));
    for (std::int64_t r = 0; r < x.rows(); ++r) {
      const T mean = x.row(r).sum() / n;
      const T var = (x.row(r).array() - mean).square().sum() / n;
      inv[static_cast<std::size_t>(r)] = T(1) / std::sqrt(var + T(1e-5));
      xh.row(r) = (x.row(r).array() - mean) * inv[static_cast<std::size_t>(r)];
    }
    Mat<T> y = (xh.array().rowwise() * gain.value.row(0).array()).rowwise() + bias.value.row(0).array();
    if (ctx.training) xhat = std::move(xh), inv_std = std::move(inv);
    return rounded<T>(std::move(y), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) {
    gain.grad += dy.cwiseProduct(xhat).colwise().sum();
    bias.grad += dy.colwise().sum();
    const auto n = static_cast<T>(dy.cols());
    Mat<T> dxh = dy.array().rowwise() * gain.value.row(0).array();
    Mat<T> dx(dy.rows(), dy.cols());
    for (std::int64_t r = 0; r < dy.rows(); ++r) {
      const T m1 = dxh.row(r).sum() / n;
      const T m2 = dxh.row(r).dot(xhat.row(r)) / n;
      dx.row(r) = (dxh.row(r).array() - m1 - xhat.row(r).array() * m2) * inv_std[static_cast<std::size_t>(r)];
    }
    return rounded<T>(std::move(dx), ctx);
  }
};

/// Token and learned position embeddings: row (b, t) = token[ids(b, t)] + position[t].
template <typename T>
struct Embedding {
  Param<T> token, position;
  std::vector<int> ids;
  std::int64_t seq = 0;
  Embedding(const std::string& name, std::int64_t vocab, std::int64_t context, std::int64_t dim) {
    token = Param<T>{name + ".token", Mat<T>::Zero(vocab, dim), Mat<T>::Zero(vocab, dim), true};
    position = Param<T>{name + ".position", Mat<T>::Zero(context, dim), Mat<T>::Zero(context, dim), true};
  }
  Mat<T> forward(const std::vector<int>& tokens, std::int64_t batch, std::int64_t t) {
    ids = tokens;
    seq = t;
    Mat<T> x(batch * t, token.value.cols());
    for (std::int64_t r = 0; r < batch * t; ++r)
      x.row(r) = token.value.row(tokens[static_cast<std::size_t>(r)]) + position.value.row(r % t);
    return x;
  }
  void backward(const Mat<T>& dy) {
    for (std::int64_t r = 0; r < dy.rows(); ++r) {
      token.grad.row(ids[static_cast<std::size_t>(r)]) += dy.row(r);
      position.grad.row(r % seq) += dy.row(r);
    }
  }
};

/// Multi-head self-attention: qkv projection, per (sequence, head) S = Q K^T / sqrt(d), softmax (causal, or over
/// every position with causal = false, as in a vision transformer), O = P V, output projection. Q K^T and P V are quantized GEMMs named NAME.qk and NAME.av (operands as
/// activations, a forward and a_bp backward; their output gradients as g).
template <typename T>
struct Attention {
  Linear<T> qkv, proj;
  std::int64_t heads, dim, seq = 0, batch = 0;
  std::vector<QGemm<T>> qk, av;
  std::vector<Mat<T>> probs;  ///< P per (b, h)
  Mat<T> qkv_out;
  const LayerFormats* qk_formats;
  const LayerFormats* av_formats;
  std::string name;
  bool causal = true;

  Attention(const std::string& n, std::int64_t d, std::int64_t h, const LayerFormats* qkv_f,
            const LayerFormats* proj_f, const LayerFormats* qk_f, const LayerFormats* av_f)
      : qkv(n + ".qkv", d, 3 * d, qkv_f), proj(n + ".proj", d, d, proj_f), heads(h), dim(d), qk_formats(qk_f),
        av_formats(av_f), name(n) {}

  /// fn(b, h, u, c) for every (sequence b, head h) unit u. With more than one thread and no delayed scaling state
  /// among attention's operands, the units run side by side, each on one thread with its own log of operand
  /// counts, and the logs join the step's counts in unit order afterwards (QuantContext::replay): every value and
  /// every count is one thread's. The products' time on the pool's threads is added to this thread's tally.
  template <class Fn>
  void for_units(QuantContext& ctx, Fn&& fn) {
    const std::int64_t units = batch * heads;
    bool side_by_side = resolve_threads(ctx.threads) > 1 && units > 1;
    for (int r = 0; side_by_side && r < kRoleCount; ++r)
      for (const char* product : {".qk.", ".av."})
        if (ctx.delayed_state(name + product + std::string(role_name(static_cast<Role>(r)))) != nullptr) side_by_side = false;
    if (!side_by_side) {
      for (std::int64_t u = 0; u < units; ++u) fn(u / heads, u % heads, static_cast<std::size_t>(u), ctx);
      return;
    }
    const auto parts = static_cast<unsigned>(std::min<std::int64_t>(resolve_threads(ctx.threads), units));
    std::vector<std::deque<std::pair<std::string, OperandStats>>> logs(static_cast<std::size_t>(units));
    std::vector<GemmTally> tallies(parts);
    const std::thread::id caller = std::this_thread::get_id();
    run_parts(parts, [&](unsigned t) {
      const GemmTally before = gemm_tally();
      for (std::int64_t u = units * t / parts; u < units * (t + 1) / parts; ++u) {
        QuantContext c = ctx.unit(&logs[static_cast<std::size_t>(u)]);
        fn(u / heads, u % heads, static_cast<std::size_t>(u), c);
      }
      if (std::this_thread::get_id() != caller)
        tallies[t] = {gemm_tally().seconds - before.seconds, gemm_tally().flops - before.flops};
    });
    for (const auto& log : logs) ctx.replay(log);
    for (const GemmTally& g : tallies) gemm_tally().seconds += g.seconds, gemm_tally().flops += g.flops;
  }

  Mat<T> forward(const Mat<T>& x, std::int64_t b_count, std::int64_t t_count, QuantContext& ctx) {
    batch = b_count;
    seq = t_count;
    const std::int64_t dh = dim / heads;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    Mat<T> all = qkv.forward(x, ctx);
    const auto units = static_cast<std::size_t>(batch * heads);
    if (qk.size() != units) {  // one unit per (sequence, head), kept across steps with their buffers
      qk.assign(units, QGemm<T>{});
      av.assign(units, QGemm<T>{});
      for (std::size_t u = 0; u < units; ++u) {
        qk[u].name = name + ".qk", qk[u].formats = qk_formats;
        av[u].name = name + ".av", av[u].formats = av_formats;
        for (auto* g : {&qk[u], &av[u]}) g->w_role = Role::A, g->w_bp_role = Role::ABp;
      }
    }
    probs.resize(units);
    Mat<T> out(batch * seq, dim);
    for_units(ctx, [&](std::int64_t b, std::int64_t h, std::size_t u, QuantContext& c) {
        const Mat<T> q = all.block(b * seq, h * dh, seq, dh);
        const Mat<T> k = all.block(b * seq, dim + h * dh, seq, dh);
        const Mat<T> vt = all.block(b * seq, 2 * dim + h * dh, seq, dh).transpose();
        Mat<T> s = qk[u].forward(q, k, c) * scale;
        for (std::int64_t i = 0; i < seq; ++i) {
          const std::int64_t last = causal ? i : seq - 1;  // the last key position row i attends to
          const T m = s.row(i).head(last + 1).maxCoeff();
          T* row = &s(i, 0);
          for (std::int64_t j = 0; j < seq; ++j) row[j] = j <= last ? row[j] - m : T(0);
          if constexpr (std::is_same_v<T, float>) {
            const std::span<float> shifted(row, static_cast<std::size_t>(last + 1));
            mxlab::exp_values(shifted, shifted);
          } else {
            for (std::int64_t j = 0; j <= last; ++j) row[j] = std::exp(row[j]);
          }
          T sum = 0;
          for (std::int64_t j = 0; j < seq; ++j) sum += row[j];
          s.row(i) /= sum;
        }
        s = rounded<T>(std::move(s), c);
        out.block(b * seq, h * dh, seq, dh) = av[u].forward(s, vt, c);
        if (c.training) probs[u] = std::move(s);
    });
    if (ctx.training) qkv_out = std::move(all);
    return proj.forward(out, ctx);
  }

  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) {
    const std::int64_t dh = dim / heads;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    Mat<T> dout = proj.backward(dy, ctx);
    Mat<T> dall = Mat<T>::Zero(batch * seq, 3 * dim);
    for_units(ctx, [&](std::int64_t b, std::int64_t h, std::size_t u, QuantContext& c) {
        const Mat<T> q = qkv_out.block(b * seq, h * dh, seq, dh);
        const Mat<T> k = qkv_out.block(b * seq, dim + h * dh, seq, dh);
        const Mat<T> vt = qkv_out.block(b * seq, 2 * dim + h * dh, seq, dh).transpose();
        const Mat<T> d_o = dout.block(b * seq, h * dh, seq, dh);
        const Mat<T>& p = probs[u];
        Mat<T> dp, dvt;
        av[u].backward(d_o, p, vt, &dp, &dvt, c);
        // Softmax backward: dS = P o (dP - rowsum(dP o P)), then the 1/sqrt(d) of the scores.
        Mat<T> ds(seq, seq);
        for (std::int64_t i = 0; i < seq; ++i) {
          const T dot = dp.row(i).dot(p.row(i));
          ds.row(i) = p.row(i).array() * (dp.row(i).array() - dot) * scale;
        }
        ds = rounded<T>(std::move(ds), c);
        Mat<T> dq, dk;
        qk[u].backward(ds, q, k, &dq, &dk, c);
        dall.block(b * seq, h * dh, seq, dh) = dq;
        dall.block(b * seq, dim + h * dh, seq, dh) = dk;
        dall.block(b * seq, 2 * dim + h * dh, seq, dh) = dvt.transpose();
    });
    return qkv.backward(dall, ctx);
  }
};

/// Mean softmax cross-entropy of logits (rows) against targets; dlogits = scale * d(mean loss)/d(logits).
/// Returns the loss (computed in double) and the count of rows whose arg max is the target.
template <typename T>
double softmax_cross_entropy(const Mat<T>& logits, const std::vector<int>& targets, T scale, Mat<T>* dlogits,
                             std::int64_t* correct) {
  const std::int64_t n = logits.rows();
  double loss = 0;
  if (dlogits != nullptr) dlogits->resize(logits.rows(), logits.cols());
  std::int64_t right = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    std::int64_t arg = 0;
    const T m = logits.row(r).maxCoeff(&arg);
    const int target = targets[static_cast<std::size_t>(r)];
    right += arg == target ? 1 : 0;
    double sum = 0;
    for (std::int64_t c = 0; c < logits.cols(); ++c) sum += std::exp(static_cast<double>(logits(r, c) - m));
    loss += std::log(sum) - static_cast<double>(logits(r, target) - m);
    if (dlogits != nullptr) {
      for (std::int64_t c = 0; c < logits.cols(); ++c)
        (*dlogits)(r, c) = static_cast<T>(std::exp(static_cast<double>(logits(r, c) - m)) / sum);
      (*dlogits)(r, target) -= T(1);
      dlogits->row(r) *= scale / static_cast<T>(n);
    }
  }
  if (correct != nullptr) *correct = right;
  return loss / static_cast<double>(n);
}

}  // namespace mxlab::train::detail
