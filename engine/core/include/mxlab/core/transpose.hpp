// A cache-friendly matrix transpose (the trainer's transposed GEMM operands, ops' transposed quantization).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mxlab {

/// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols: copied in 32 x 32 tiles so that
/// both the reads and the writes stay within a few cache lines, each tile in 4 x 4 squares (read as four rows
/// of four, written as four columns of four, which compilers turn into vector shuffles).
template <typename T>
void transpose(const T* src, std::int64_t rows, std::int64_t cols, std::int64_t src_stride, T* dst,
               std::int64_t dst_stride) {
  constexpr std::int64_t kTile = 32, kSquare = 4;
  for (std::int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (std::int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const std::int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
      const std::int64_t is = i0 + (i1 - i0) / kSquare * kSquare, js = j0 + (j1 - j0) / kSquare * kSquare;
      for (std::int64_t i = i0; i < is; i += kSquare) {
        for (std::int64_t j = j0; j < js; j += kSquare) {
          T t[kSquare][kSquare];
          for (std::int64_t a = 0; a < kSquare; ++a)
            for (std::int64_t b = 0; b < kSquare; ++b) t[b][a] = src[(i + a) * src_stride + j + b];
          for (std::int64_t b = 0; b < kSquare; ++b)
            for (std::int64_t a = 0; a < kSquare; ++a) dst[(j + b) * dst_stride + i + a] = t[b][a];
        }
        for (std::int64_t j = js; j < j1; ++j)
          for (std::int64_t a = 0; a < kSquare; ++a) dst[j * dst_stride + i + a] = src[(i + a) * src_stride + j];
      }
      for (std::int64_t i = is; i < i1; ++i)
        for (std::int64_t j = j0; j < j1; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
    }
}

/// An operation on the columns of x (rows x cols, row-major) done on the rows of a transposed copy: along_rows(xt,
/// yt) reads x^T (cols x rows) and writes its rows' results to yt, which is transposed back into out (rows x cols)
/// when along_rows succeeds. Returns what along_rows returns.
template <typename T, typename F>
auto along_columns_by_transposing(const T* x, std::int64_t rows, std::int64_t cols, T* out, F&& along_rows) {
  const auto n = static_cast<std::size_t>(rows * cols);
  // Not value-initialised: the transpose writes every value of xt, and along_rows every value of yt.
  const std::unique_ptr<T[]> xt(new T[n]), yt(new T[n]);
  transpose(x, rows, cols, cols, xt.get(), rows);
  auto r = along_rows(static_cast<const T*>(xt.get()), yt.get());
  if (r) transpose(yt.get(), cols, rows, rows, out, cols);
  return r;
}

}  // namespace mxlab
