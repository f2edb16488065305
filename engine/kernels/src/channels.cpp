// The trainer's per-channel layers (channels.hpp). Highway dynamic dispatch: foreach_target.h re-includes this file
// once per target; the dispatcher picks the best one the CPU supports at run time. Channels lie in the lanes, each
// lane takes its scalar definition's operations in their order (compiled with -ffp-contract=off), and the channels
// past the last whole vector go through the scalar definitions themselves.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "channels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <hwy/highway.h>

#include "mxlab/kernels/channels.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

/// The terms of column_sums_scalar's Term for the lanes of columns [j, j + lanes) of row r.
struct SumLanes {
  const SumTerm<float>& t;
  void operator()(std::int64_t r, std::int64_t j, VF* v) const { v[0] = hn::LoadU(DF(), t.x + r * t.cols + j); }
};

struct SquaredDeviationLanes {
  const SquaredDeviationTerm<float>& t;
  void operator()(std::int64_t r, std::int64_t j, VF* v) const {
    const DF d;
    const VF diff = hn::Sub(hn::LoadU(d, t.x + r * t.cols + j), hn::LoadU(d, t.mean + j));
    v[0] = hn::Mul(diff, diff);
  }
};

struct BatchNormGradientLanes {
  const BatchNormGradientTerms<float>& t;
  void operator()(std::int64_t r, std::int64_t j, VF* v) const {
    const DF df;
    const VF d = hn::LoadU(df, t.dy + r * t.cols + j), h = hn::LoadU(df, t.xhat + r * t.cols + j);
    const VF dxh = hn::Mul(d, hn::LoadU(df, t.gain + j));
    v[0] = hn::Mul(d, h), v[1] = d, v[2] = dxh, v[3] = hn::Mul(dxh, h);
  }
};

/// Columns [j, j + kV lanes) of column_sums_scalar, kV vectors side by side (independent sums the core overlaps).
template <int K, int kV, class Lanes>
HWY_INLINE void sum_strip(std::int64_t rows, std::int64_t j, bool grouped, const Lanes& lanes_of, float* const* out) {
  const DF d;
  const auto n = static_cast<std::int64_t>(hn::Lanes(d));
  VF acc[kV][K], a[K], b[K], c[K], e[K];
  for (int v = 0; v < kV; ++v) lanes_of(0, j + v * n, acc[v]);
  std::int64_t r = 1;
  if (grouped) {
    const std::int64_t groups = (rows - 1) & ~std::int64_t{3};
    for (; r < groups; r += 4)
      for (int v = 0; v < kV; ++v) {
        const std::int64_t jv = j + v * n;
        lanes_of(r, jv, a), lanes_of(r + 1, jv, b), lanes_of(r + 2, jv, c), lanes_of(r + 3, jv, e);
        for (int k = 0; k < K; ++k) acc[v][k] = hn::Add(acc[v][k], hn::Add(hn::Add(a[k], b[k]), hn::Add(c[k], e[k])));
      }
  }
  for (; r < rows; ++r)
    for (int v = 0; v < kV; ++v) {
      lanes_of(r, j + v * n, a);
      for (int k = 0; k < K; ++k) acc[v][k] = hn::Add(acc[v][k], a[k]);
    }
  for (int v = 0; v < kV; ++v)
    for (int k = 0; k < K; ++k) hn::StoreU(acc[v][k], d, out[k] + j + v * n);
}

/// column_sums_scalar over range: its grouped columns, then the others, each in strips of vectors and the last
/// columns through the scalar definition.
template <class Term, class Lanes>
void column_sums_lanes(const ColumnRange& range, const Term& term, const Lanes& lanes_of, float* const* out) {
  constexpr int K = Term::kTerms;
  constexpr int kStrip = K == 1 ? 4 : 2;  // vectors side by side: their sums stay in registers
  const auto n = static_cast<std::int64_t>(hn::Lanes(DF()));
  if (range.rows == 0 || range.j1 <= range.j0) return column_sums_scalar(range, term, out);
  const std::int64_t jp = range.packed < range.j0 ? range.j0 : range.packed > range.j1 ? range.j1 : range.packed;
  for (const bool grouped : {true, false}) {
    const std::int64_t begin = grouped ? range.j0 : jp, end = grouped ? jp : range.j1;
    std::int64_t j = begin;
    for (; j + kStrip * n <= end; j += kStrip * n) sum_strip<K, kStrip>(range.rows, j, grouped, lanes_of, out);
    for (; j + n <= end; j += n) sum_strip<K, 1>(range.rows, j, grouped, lanes_of, out);
    ColumnRange rest = range;
    rest.j0 = j, rest.j1 = end, rest.packed = grouped ? end : j;
    column_sums_scalar(rest, term, out);
  }
}

void sums_x_impl(const ColumnRange& range, const SumTerm<float>& term, float* const* out) {
  column_sums_lanes(range, term, SumLanes{term}, out);
}
void sums_sq_dev_impl(const ColumnRange& range, const SquaredDeviationTerm<float>& term, float* const* out) {
  column_sums_lanes(range, term, SquaredDeviationLanes{term}, out);
}
void sums_bn_gradient_impl(const ColumnRange& range, const BatchNormGradientTerms<float>& term, float* const* out) {
  column_sums_lanes(range, term, BatchNormGradientLanes{term}, out);
}

void batchnorm_normalize_impl(const float* x, const float* mean, const float* inv_std, const float* gain,
                              const float* bias, std::int64_t rows, std::int64_t cols, float* xhat, float* y) {
  const DF d;
  const auto n = static_cast<std::int64_t>(hn::Lanes(d));
  const std::int64_t whole = cols - cols % n;
  for (std::int64_t i = 0; i < rows * cols; i += cols)
    for (std::int64_t j = 0; j < whole; j += n) {
      const VF h = hn::Mul(hn::Sub(hn::LoadU(d, x + i + j), hn::LoadU(d, mean + j)), hn::LoadU(d, inv_std + j));
      hn::StoreU(h, d, xhat + i + j);
      hn::StoreU(hn::Add(hn::Mul(h, hn::LoadU(d, gain + j)), hn::LoadU(d, bias + j)), d, y + i + j);
    }
  if (whole < cols) batchnorm_normalize_scalar(x, mean, inv_std, gain, bias, rows, cols, whole, cols, xhat, y);
}

void batchnorm_gradient_impl(const float* dy, const float* xhat, const float* gain, const float* inv_std,
                             const float* m1, const float* m2, std::int64_t rows, std::int64_t cols, float* dx) {
  const DF d;
  const auto n = static_cast<std::int64_t>(hn::Lanes(d));
  const std::int64_t whole = cols - cols % n;
  for (std::int64_t i = 0; i < rows * cols; i += cols)
    for (std::int64_t j = 0; j < whole; j += n) {
      const VF dg = hn::Mul(hn::LoadU(d, dy + i + j), hn::LoadU(d, gain + j));
      const VF inv = hn::LoadU(d, inv_std + j);
      const VF v = m1 != nullptr ? hn::Mul(hn::Sub(hn::Sub(dg, hn::LoadU(d, m1 + j)),
                                                   hn::Mul(hn::LoadU(d, xhat + i + j), hn::LoadU(d, m2 + j))),
                                           inv)
                                 : hn::Mul(dg, inv);
      hn::StoreU(v, d, dx + i + j);
    }
  if (whole < cols) batchnorm_gradient_scalar(dy, xhat, gain, inv_std, m1, m2, rows, cols, whole, cols, dx);
}

/// An output row's taps inside the image, or an input pixel's terms: (pixel or row, tap) pairs in order, at most
/// k * k of them.
struct TapList {
  explicit TapList(const WindowShape& s) : at(static_cast<std::size_t>(s.k * s.k)), tap(at.size()) {}
  void add(std::int64_t a, std::int64_t t) {
    at[static_cast<std::size_t>(count)] = a, tap[static_cast<std::size_t>(count)] = t, ++count;
  }
  std::int64_t count = 0;
  std::vector<std::int64_t> at, tap;
};

/// The images [b0, b1) of s as a shape of their own (row and pixel numbers from their first image's).
WindowShape images(const WindowShape& s, std::int64_t b0, std::int64_t b1) {
  WindowShape t = s;
  t.batch = b1 - b0;
  return t;
}

/// fn(row, taps) for every output row of s in order, with its (input pixel, tap) pairs in window_taps' order
/// (none for a row whose window lies outside the image).
template <class Fn>
HWY_INLINE void for_each_output_row(const WindowShape& s, Fn&& fn) {
  TapList taps(s);
  const TapList none(WindowShape{});
  std::int64_t next = 0;  // the first row not yet passed to fn
  const auto flush = [&](std::int64_t row) {
    for (; next < row; ++next) fn(next, none);
    fn(row, taps);
    taps.count = 0, next = row + 1;
  };
  std::int64_t last = -1;
  window_taps(s, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
    if (row != last && last >= 0) flush(last);
    last = row;
    taps.add(pixel, tap);
  });
  if (last >= 0) flush(last);
  for (const std::int64_t rows = s.batch * s.out_height() * s.out_width(); next < rows; ++next) fn(next, none);
}

/// out[j] = 0 + a[at[q]][j] wt[tap[q]][j] + ... over the list in order, for every channel j of rows of c values:
/// the forward pass's output row (a = x, at = input pixels) and dx's input pixel (a = g, at = output rows).
HWY_INLINE void tap_sums(const float* a, const float* wt, const TapList& t, std::int64_t c, float* out) {
  const DF d;
  const auto n = static_cast<std::int64_t>(hn::Lanes(d));
  const std::int64_t whole = c / n * n;
  std::int64_t j = 0;
  for (; j + 2 * n <= whole; j += 2 * n) {
    VF s0 = hn::Zero(d), s1 = hn::Zero(d);
    for (std::int64_t q = 0; q < t.count; ++q) {
      const float* ap = a + t.at[static_cast<std::size_t>(q)] * c + j;
      const float* wp = wt + t.tap[static_cast<std::size_t>(q)] * c + j;
      s0 = hn::Add(s0, hn::Mul(hn::LoadU(d, ap), hn::LoadU(d, wp)));
      s1 = hn::Add(s1, hn::Mul(hn::LoadU(d, ap + n), hn::LoadU(d, wp + n)));
    }
    hn::StoreU(s0, d, out + j), hn::StoreU(s1, d, out + j + n);
  }
  for (; j < whole; j += n) {
    VF s0 = hn::Zero(d);
    for (std::int64_t q = 0; q < t.count; ++q)
      s0 = hn::Add(s0, hn::Mul(hn::LoadU(d, a + t.at[static_cast<std::size_t>(q)] * c + j),
                               hn::LoadU(d, wt + t.tap[static_cast<std::size_t>(q)] * c + j)));
    hn::StoreU(s0, d, out + j);
  }
  for (; j < c; ++j) {
    out[j] = 0.0F;
    for (std::int64_t q = 0; q < t.count; ++q)
      depthwise_term(a[t.at[static_cast<std::size_t>(q)] * c + j], wt[t.tap[static_cast<std::size_t>(q)] * c + j], out[j]);
  }
}

void depthwise_forward_impl(const float* x, const float* wt, const WindowShape& s, std::int64_t b0, std::int64_t b1,
                            float* y) {
  const std::int64_t c = s.channels;
  const float* xs = x + b0 * s.height * s.width * c;
  float* ys = y + b0 * s.out_height() * s.out_width() * c;
  for_each_output_row(images(s, b0, b1), [&](std::int64_t row, const TapList& t) { tap_sums(xs, wt, t, c, ys + row * c); });
}

/// fn(pixel, terms) for every input pixel of the images [b0, b1) in order (its row in the images, from b0's), with
/// the (output row, tap) pairs whose window reads it in the order of the output rows: window_taps' order, in
/// which the scalar definitions add a pixel's terms (one per output row).
template <class Fn>
HWY_INLINE void for_each_input_pixel(const WindowShape& s, std::int64_t b0, std::int64_t b1, Fn&& fn) {
  const std::int64_t pad = s.k / 2, oh = s.out_height(), ow = s.out_width();
  // The output rows oy (or columns) whose window covers input row py: ky = py + pad - oy stride in [0, k).
  const auto first_out = [&](std::int64_t p) {
    const std::int64_t lo = p + pad - (s.k - 1);
    return lo <= 0 ? std::int64_t{0} : (lo + s.stride - 1) / s.stride;
  };
  TapList terms(s);
  for (std::int64_t b = b0; b < b1; ++b)
    for (std::int64_t py = 0; py < s.height; ++py)
      for (std::int64_t px = 0; px < s.width; ++px) {
        terms.count = 0;
        for (std::int64_t oy = first_out(py), oy_end = std::min(oh - 1, (py + pad) / s.stride); oy <= oy_end; ++oy)
          for (std::int64_t ox = first_out(px), ox_end = std::min(ow - 1, (px + pad) / s.stride); ox <= ox_end; ++ox) {
            const std::int64_t ky = py + pad - oy * s.stride, kx = px + pad - ox * s.stride;
            terms.add((b * oh + oy) * ow + ox, ky * s.k + kx);
          }
        fn((b * s.height + py) * s.width + px, terms);
      }
}

/// dx for the images [b0, b1) gathered per input pixel: its terms g[row] wt[tap] in the order of the output rows
/// (the order in which depthwise_backward_scalar adds them), summed from zero in registers.
void depthwise_input_gradient_impl(const float* g, const float* wt, const WindowShape& s, std::int64_t b0,
                                   std::int64_t b1, float* dx) {
  const std::int64_t c = s.channels;
  for_each_input_pixel(s, b0, b1, [&](std::int64_t pixel, const TapList& terms) { tap_sums(g, wt, terms, c, dx + pixel * c); });
}

/// col2im_scalar's dx for the images [b0, b1), gathered per input pixel: its columns' values in the order of the
/// output rows, summed from zero in registers and written once (no zeroing, no sums kept in memory). Every image
/// has the same terms at the same offsets from its columns: they are listed once, for the first image.
void col2im_impl(const float* cols, const WindowShape& s, std::int64_t b0, std::int64_t b1, float* dx) {
  const DF d;
  const auto n = static_cast<std::int64_t>(hn::Lanes(d));
  const std::int64_t c = s.channels, width = s.k * s.k * c, whole = c / n * n, pixels = s.height * s.width;
  const std::int64_t image_cols = s.out_height() * s.out_width() * width;
  std::vector<std::int64_t> offsets, first(static_cast<std::size_t>(pixels) + 1, 0);
  offsets.reserve(static_cast<std::size_t>(pixels * s.k * s.k));
  for_each_input_pixel(s, 0, 1, [&](std::int64_t pixel, const TapList& t) {
    for (std::int64_t q = 0; q < t.count; ++q)
      offsets.push_back(t.at[static_cast<std::size_t>(q)] * width + t.tap[static_cast<std::size_t>(q)] * c);
    first[static_cast<std::size_t>(pixel) + 1] = static_cast<std::int64_t>(offsets.size());
  });
  for (std::int64_t b = b0; b < b1; ++b) {
    const float* image = cols + b * image_cols;
    for (std::int64_t p = 0; p < pixels; ++p) {
      const std::int64_t* o = offsets.data() + first[static_cast<std::size_t>(p)];
      const std::int64_t count = first[static_cast<std::size_t>(p) + 1] - first[static_cast<std::size_t>(p)];
      float* out = dx + (b * pixels + p) * c;
      std::int64_t j = 0;
      for (; j + 2 * n <= whole; j += 2 * n) {
        VF s0 = hn::Zero(d), s1 = hn::Zero(d);
        for (std::int64_t q = 0; q < count; ++q) {
          const float* from = image + o[q] + j;
          s0 = hn::Add(s0, hn::LoadU(d, from));
          s1 = hn::Add(s1, hn::LoadU(d, from + n));
        }
        hn::StoreU(s0, d, out + j), hn::StoreU(s1, d, out + j + n);
      }
      for (; j < whole; j += n) {
        VF s0 = hn::Zero(d);
        for (std::int64_t q = 0; q < count; ++q) s0 = hn::Add(s0, hn::LoadU(d, image + o[q] + j));
        hn::StoreU(s0, d, out + j);
      }
      for (; j < c; ++j) {
        float v = 0.0F;
        for (std::int64_t q = 0; q < count; ++q) v += image[o[q] + j];
        out[j] = v;
      }
    }
  }
}

/// dwt's channels [j, j + kV lanes) for a 3 x 3 window: per image, the 9 x kV sums in registers from dwt's values
/// over the image's rows and taps in window_taps' order, then back to dwt (the same additions as the scalar
/// definition's, which keeps them in memory).
template <int kV>
HWY_INLINE void weight_gradient_3x3(const float* g, const float* x, const WindowShape& s, std::int64_t j, float* dwt) {
  const DF d;
  const auto n = static_cast<std::int64_t>(hn::Lanes(d));
  const std::int64_t c = s.channels, oh = s.out_height(), ow = s.out_width();
  for (std::int64_t b = 0; b < s.batch; ++b) {
    VF acc[9][kV];
    for (int t = 0; t < 9; ++t)
      for (int v = 0; v < kV; ++v) acc[t][v] = hn::LoadU(d, dwt + t * c + j + v * n);
    for (std::int64_t oy = 0; oy < oh; ++oy)
      for (std::int64_t ox = 0; ox < ow; ++ox) {
        const float* gp = g + ((b * oh + oy) * ow + ox) * c + j;
        VF gv[kV];
        for (int v = 0; v < kV; ++v) gv[v] = hn::LoadU(d, gp + v * n);
#pragma GCC unroll 3
        for (int ky = 0; ky < 3; ++ky) {
          const std::int64_t sy = oy * s.stride + ky - 1;
          if (sy < 0 || sy >= s.height) continue;
#pragma GCC unroll 3
          for (int kx = 0; kx < 3; ++kx) {
            const std::int64_t sx = ox * s.stride + kx - 1;
            if (sx < 0 || sx >= s.width) continue;
            const float* xp = x + ((b * s.height + sy) * s.width + sx) * c + j;
            for (int v = 0; v < kV; ++v) acc[ky * 3 + kx][v] = hn::Add(acc[ky * 3 + kx][v], hn::Mul(gv[v], hn::LoadU(d, xp + v * n)));
          }
        }
      }
    for (int t = 0; t < 9; ++t)
      for (int v = 0; v < kV; ++v) hn::StoreU(acc[t][v], d, dwt + t * c + j + v * n);
  }
}

void depthwise_weight_gradient_impl(const float* g, const float* x, const WindowShape& s, std::int64_t c0,
                                    std::int64_t c1, float* dwt) {
  const DF d;
  const auto n = static_cast<std::int64_t>(hn::Lanes(d));
  const std::int64_t c = s.channels, whole = c0 + (c1 - c0) / n * n;
  std::int64_t j = c0;
  if (s.k == 3) {
    for (; j + 2 * n <= whole; j += 2 * n) weight_gradient_3x3<2>(g, x, s, j, dwt);
    for (; j < whole; j += n) weight_gradient_3x3<1>(g, x, s, j, dwt);
  } else {
    for_each_output_row(s, [&](std::int64_t row, const TapList& t) {
      for (std::int64_t jj = c0; jj < whole; jj += n) {
        const VF gv = hn::LoadU(d, g + row * c + jj);
        for (std::int64_t q = 0; q < t.count; ++q) {
          float* wp = dwt + t.tap[static_cast<std::size_t>(q)] * c + jj;
          hn::StoreU(hn::Add(hn::LoadU(d, wp), hn::Mul(gv, hn::LoadU(d, x + t.at[static_cast<std::size_t>(q)] * c + jj))), d, wp);
        }
      }
    });
    j = whole;
  }
  if (j < c1)
    window_taps(s, [&](std::int64_t row, std::int64_t pixel, std::int64_t tap) {
      for (std::int64_t jj = j; jj < c1; ++jj) depthwise_term(g[row * c + jj], x[pixel * c + jj], dwt[tap * c + jj]);
    });
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(sums_x_impl);
HWY_EXPORT(sums_sq_dev_impl);
HWY_EXPORT(sums_bn_gradient_impl);
HWY_EXPORT(batchnorm_normalize_impl);
HWY_EXPORT(batchnorm_gradient_impl);
HWY_EXPORT(depthwise_forward_impl);
HWY_EXPORT(depthwise_input_gradient_impl);
HWY_EXPORT(col2im_impl);
HWY_EXPORT(depthwise_weight_gradient_impl);

}  // namespace kernel_detail

void column_sums(const ColumnRange& range, const SumTerm<float>& term, float* const* out) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::sums_x_impl)(range, term, out);
}
void column_sums(const ColumnRange& range, const SquaredDeviationTerm<float>& term, float* const* out) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::sums_sq_dev_impl)(range, term, out);
}
void column_sums(const ColumnRange& range, const BatchNormGradientTerms<float>& term, float* const* out) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::sums_bn_gradient_impl)(range, term, out);
}

void batchnorm_normalize(const float* x, const float* mean, const float* inv_std, const float* gain,
                         const float* bias, std::int64_t rows, std::int64_t cols, float* xhat, float* y) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::batchnorm_normalize_impl)(x, mean, inv_std, gain, bias, rows, cols, xhat, y);
}

void batchnorm_gradient(const float* dy, const float* xhat, const float* gain, const float* inv_std, const float* m1,
                        const float* m2, std::int64_t rows, std::int64_t cols, float* dx) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::batchnorm_gradient_impl)(dy, xhat, gain, inv_std, m1, m2, rows, cols, dx);
}

void depthwise_forward(const float* x, const float* wt, const WindowShape& s, std::int64_t b0, std::int64_t b1,
                       float* y) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::depthwise_forward_impl)(x, wt, s, b0, b1, y);
}

void depthwise_input_gradient(const float* g, const float* wt, const WindowShape& s, std::int64_t b0, std::int64_t b1,
                              float* dx) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::depthwise_input_gradient_impl)(g, wt, s, b0, b1, dx);
}

void col2im(const float* cols, const WindowShape& s, std::int64_t b0, std::int64_t b1, float* dx) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::col2im_impl)(cols, s, b0, b1, dx);
}

void depthwise_weight_gradient(const float* g, const float* x, const WindowShape& s, std::int64_t c0, std::int64_t c1,
                               float* dwt) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::depthwise_weight_gradient_impl)(g, x, s, c0, c1, dwt);
}

}  // namespace mxlab
#endif  // HWY_ONCE
