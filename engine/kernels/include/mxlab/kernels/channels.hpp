// The trainer's per-channel layers on NHWC activations ((batch * height * width) x channels, row-major) as SIMD
// kernels on the best target the CPU supports: batch normalisation's column sums, normalisation and input
// gradient, and the depthwise convolution (engine/train BatchNorm and DepthwiseConv2d). The channels lie in the
// vector lanes and every value takes the operations of the scalar definitions below, in their order: the
// kernels' results are those definitions' bit for bit, on every target and for every split of the channels
// (or, for the normalisation, of the rows) over threads. The trainer's double path calls the definitions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mxlab {

/// The columns [j0, j1) of a column-sum pass over rows x cols terms: the columns below `packed` add their rows
/// in the grouped order, the others one row at a time (column_sums_scalar).
struct ColumnRange {
  std::int64_t rows = 0, cols = 0, j0 = 0, j1 = 0, packed = 0;
};

/// The term of a plain column sum: x[r][j].
template <typename T>
struct SumTerm {
  static constexpr int kTerms = 1;
  const T* x;
  std::int64_t cols;
  void operator()(std::int64_t r, std::int64_t j, T* v) const { v[0] = x[r * cols + j]; }
};

/// The term of a variance: (x[r][j] - mean[j])^2, the difference rounded, then its square.
template <typename T>
struct SquaredDeviationTerm {
  static constexpr int kTerms = 1;
  const T *x, *mean;
  std::int64_t cols;
  void operator()(std::int64_t r, std::int64_t j, T* v) const {
    const T d = x[r * cols + j] - mean[j];
    v[0] = d * d;
  }
};

/// Batch normalisation's backward sums: with d = dy[r][j], h = xhat[r][j] and dxh = d gain[j], the terms d h,
/// d, dxh and dxh h.
template <typename T>
struct BatchNormGradientTerms {
  static constexpr int kTerms = 4;
  const T *dy, *xhat, *gain;
  std::int64_t cols;
  void operator()(std::int64_t r, std::int64_t j, T* v) const {
    const T d = dy[r * cols + j], h = xhat[r * cols + j], dxh = d * gain[j];
    v[0] = d * h, v[1] = d, v[2] = dxh, v[3] = dxh * h;
  }
};

/// out[k][j] for j in [range.j0, range.j1): the sum over the rows of term(r, j)[k]. A column below range.packed
/// starts at row 0 and adds rows 1.. in groups of four as (t(r) + t(r+1)) + (t(r+2) + t(r+3)) while r < (rows -
/// 1) rounded down to a multiple of 4, then the remaining rows one at a time (the order of Eigen's
/// `m.colwise().sum()` on a row-major matrix for its columns inside whole packets); a column at or past it adds
/// its rows one at a time. No rows: zeros. Rows outermost, so that a pass reads each row once.
template <typename T, class Term>
void column_sums_scalar(const ColumnRange& range, const Term& term, T* const* out) {
  constexpr int K = Term::kTerms;
  const std::int64_t j0 = range.j0, j1 = range.j1, w = j1 - j0, rows = range.rows;
  if (w <= 0) return;
  if (rows == 0) {
    for (int k = 0; k < K; ++k)
      for (std::int64_t j = j0; j < j1; ++j) out[k][j] = T(0);
    return;
  }
  std::vector<T> acc(static_cast<std::size_t>(K * w));
  auto at = [&](int k, std::int64_t j) -> T& { return acc[static_cast<std::size_t>(k * w + j - j0)]; };
  T v[K], a[K], b[K], c[K], d[K];
  for (std::int64_t j = j0; j < j1; ++j) {
    term(0, j, v);
    for (int k = 0; k < K; ++k) at(k, j) = v[k];
  }
  const std::int64_t jp = range.packed < j0 ? j0 : range.packed > j1 ? j1 : range.packed;
  const std::int64_t grouped = (rows - 1) & ~std::int64_t{3};
  std::int64_t r = 1;
  for (; r < grouped; r += 4)
    for (std::int64_t j = j0; j < jp; ++j) {
      term(r, j, a), term(r + 1, j, b), term(r + 2, j, c), term(r + 3, j, d);
      for (int k = 0; k < K; ++k) at(k, j) += (a[k] + b[k]) + (c[k] + d[k]);
    }
  for (; r < rows; ++r)
    for (std::int64_t j = j0; j < jp; ++j) {
      term(r, j, v);
      for (int k = 0; k < K; ++k) at(k, j) += v[k];
    }
  for (std::int64_t rr = 1; rr < rows && jp < j1; ++rr)
    for (std::int64_t j = jp; j < j1; ++j) {
      term(rr, j, v);
      for (int k = 0; k < K; ++k) at(k, j) += v[k];
    }
  for (int k = 0; k < K; ++k)
    for (std::int64_t j = j0; j < j1; ++j) out[k][j] = at(k, j);
}

/// column_sums_scalar with these terms, channels in the lanes.
void column_sums(const ColumnRange& range, const SumTerm<float>& term, float* const* out);
void column_sums(const ColumnRange& range, const SquaredDeviationTerm<float>& term, float* const* out);
void column_sums(const ColumnRange& range, const BatchNormGradientTerms<float>& term, float* const* out);

/// Batch normalisation of rows x cols values, columns [j0, j1): h = (x - mean) inv_std, xhat = h, y = h gain +
/// bias, each operation rounded.
template <typename T>
void batchnorm_normalize_scalar(const T* x, const T* mean, const T* inv_std, const T* gain, const T* bias,
                                std::int64_t rows, std::int64_t cols, std::int64_t j0, std::int64_t j1, T* xhat, T* y) {
  for (std::int64_t i = 0; i < rows * cols; i += cols)
    for (std::int64_t j = j0; j < j1; ++j) {
      const T h = (x[i + j] - mean[j]) * inv_std[j];
      xhat[i + j] = h;
      y[i + j] = h * gain[j] + bias[j];
    }
}

void batchnorm_normalize(const float* x, const float* mean, const float* inv_std, const float* gain,
                         const float* bias, std::int64_t rows, std::int64_t cols, float* xhat, float* y);

/// Batch normalisation's input gradient of rows x cols values, columns [j0, j1). With the batch's statistics
/// (m1 and m2 the means of dxh and of dxh xhat, dxh = dy gain): dx = ((dy gain - m1) - xhat m2) inv_std; with
/// fixed statistics (m1 null): dx = dy gain inv_std, left to right. Each operation rounded.
template <typename T>
void batchnorm_gradient_scalar(const T* dy, const T* xhat, const T* gain, const T* inv_std, const T* m1, const T* m2,
                               std::int64_t rows, std::int64_t cols, std::int64_t j0, std::int64_t j1, T* dx) {
  for (std::int64_t i = 0; i < rows * cols; i += cols)
    for (std::int64_t j = j0; j < j1; ++j)
      dx[i + j] = m1 != nullptr ? ((dy[i + j] * gain[j] - m1[j]) - xhat[i + j] * m2[j]) * inv_std[j]
                                : dy[i + j] * gain[j] * inv_std[j];
}

void batchnorm_gradient(const float* dy, const float* xhat, const float* gain, const float* inv_std, const float* m1,
                        const float* m2, std::int64_t rows, std::int64_t cols, float* dx);

/// A k x k window with a stride and zero padding k / 2 over NHWC images (a convolution's or the depthwise
/// convolution's, one filter of k * k taps per channel). Output sides are (side + 2 (k / 2) - k) / stride + 1.
struct WindowShape {
  std::int64_t batch = 0, height = 0, width = 0, channels = 0, k = 1, stride = 1;
  std::int64_t out_height() const { return (height + 2 * (k / 2) - k) / stride + 1; }
  std::int64_t out_width() const { return (width + 2 * (k / 2) - k) / stride + 1; }
};

/// fn(row, pixel, tap) for every output position and every kernel tap inside the image: the output position's
/// row, the input pixel's row and the tap's index ky * k + kx, in the order of the output rows and, within a row,
/// of the taps: the order in which the sums below take their terms.
template <class Fn>
void window_taps(const WindowShape& s, Fn&& fn) {
  const std::int64_t pad = s.k / 2, oh = s.out_height(), ow = s.out_width();
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t y = 0; y < oh; ++y)
      for (std::int64_t xx = 0; xx < ow; ++xx) {
        const std::int64_t row = (b * oh + y) * ow + xx;
        for (std::int64_t ky = 0; ky < s.k; ++ky) {
          const std::int64_t sy = y * s.stride + ky - pad;
          if (sy < 0 || sy >= s.height) continue;
          for (std::int64_t kx = 0; kx < s.k; ++kx) {
            const std::int64_t sx = xx * s.stride + kx - pad;
            if (sx < 0 || sx >= s.width) continue;
            fn(row, (b * s.height + sy) * s.width + sx, ky * s.k + kx);
          }
        }
      }
}

/// A term of the depthwise convolution's sums for one channel: acc += a b, the product rounded, then the sum (y
/// += x wt forward, dx += g wt and dwt += g x backward).
template <typename T>
inline void depthwise_term(T a, T b, T& acc) {
  acc += a * b;
}

/// The forward pass: y[row][j] = 0 + x[pixel][j] wt[tap][j] + ... over the row's taps in window_taps' order, each
/// product and sum rounded. wt is taps x channels.
template <typename T>
void depthwise_forward_scalar(const T* x, const T* wt, const WindowShape& s, T* y) {
  const std::int64_t c = s.channels, rows = s.batch * s.out_height() * s.out_width();
  for (std::int64_t i = 0; i < rows * c; ++i) y[i] = T(0);
  window_taps(s, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
    for (std::int64_t j = 0; j < c; ++j) depthwise_term(x[pixel * c + j], wt[tap * c + j], y[row * c + j]);
  });
}

/// The backward pass, adding to dx (input pixels x channels, null: not wanted) and dwt (taps x channels) in
/// window_taps' order: dx[pixel][j] += g[row][j] wt[tap][j] and dwt[tap][j] += g[row][j] x[pixel][j], each
/// product and sum rounded. A pixel takes its terms in the order of the output rows (one per row).
template <typename T>
void depthwise_backward_scalar(const T* g, const T* x, const T* wt, const WindowShape& s, T* dx, T* dwt) {
  const std::int64_t c = s.channels;
  window_taps(s, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
    for (std::int64_t j = 0; j < c; ++j) {
      if (dx != nullptr) depthwise_term(g[row * c + j], wt[tap * c + j], dx[pixel * c + j]);
      depthwise_term(g[row * c + j], x[pixel * c + j], dwt[tap * c + j]);
    }
  });
}

/// The adjoint of a convolution's columns (the trainer's Conv2d::col2im): cols holds, for each output row of s, its
/// window's k * k * c values in (ky, kx, c) order (im2col_row's layout); dx (input pixels x c) = 0 plus, for each
/// (row, pixel, tap) of window_taps in its order, cols[row][tap * c + j] added to dx[pixel][j], each sum rounded.
/// dx need not start at zero: every value is written.
template <typename T>
void col2im_scalar(const T* cols, const WindowShape& s, T* dx) {
  const std::int64_t c = s.channels, width = s.k * s.k * c;
  for (std::int64_t i = 0; i < s.batch * s.height * s.width * c; ++i) dx[i] = T(0);
  window_taps(s, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
    for (std::int64_t j = 0; j < c; ++j) dx[pixel * c + j] += cols[row * width + tap * c + j];
  });
}
/// col2im_scalar's dx for the images [b0, b1) (cols and dx of the whole batch), bit for bit: each input pixel's
/// values gathered in window_taps' order and written once.
void col2im(const float* cols, const WindowShape& s, std::int64_t b0, std::int64_t b1, float* dx);

/// depthwise_forward_scalar's y for the images [b0, b1), every channel.
void depthwise_forward(const float* x, const float* wt, const WindowShape& s, std::int64_t b0, std::int64_t b1,
                       float* y);
/// depthwise_backward_scalar's dx for the images [b0, b1) (dx starting at zero), every channel.
void depthwise_input_gradient(const float* g, const float* wt, const WindowShape& s, std::int64_t b0, std::int64_t b1,
                              float* dx);
/// depthwise_backward_scalar's additions to dwt for the channels [c0, c1).
void depthwise_weight_gradient(const float* g, const float* x, const WindowShape& s, std::int64_t c0, std::int64_t c1,
                               float* dwt);

}  // namespace mxlab
