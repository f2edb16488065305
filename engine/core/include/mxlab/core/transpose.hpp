// A cache-friendly matrix transpose (the trainer's transposed GEMM operands, ops' transposed quantization).
#pragma once

#include <algorithm>
#include <cstdint>

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

}  // namespace mxlab
