// Internal helpers shared by the ops entry points: threads, kernel selection, chunking.
#pragma once

#include <algorithm>
#include <bit>
#include <span>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "mxlab/core/threads.hpp"
#include "mxlab/kernels/block_kernel.hpp"
#include "mxlab/ops/ops.hpp"

namespace mxlab::ops::detail {

using mxlab::resolve_threads;
using mxlab::run_parts;

/// The kernel for a format, when it covers it and the input reaches it exactly (float32-exact values).
std::optional<BlockKernel> kernel_for(const BlockFormat& f, const TensorSource& input, std::string* why_not);

/// The input as the kernels read it (float32 values, or float16/bfloat16 bits of a mapped file).
BlockInput kernel_input(const TensorSource& input);

/// The same format with one block per row along the last axis, where running it over the tensor as one row
/// (a per-tensor scale) or over every 2-D tile's elements gathered into a row is the reference's computation
/// of the format itself (quantize.cpp has the argument and its exceptions); nullopt elsewhere.
std::optional<BlockFormat> whole_row_format(const BlockFormat& f);

/// Tiles of one shape (whole tiles, or the partial ones of the last tile column, the last tile row, the corner).
struct TileClass {
  std::int64_t count = 0;  ///< tiles
  std::int64_t size = 0;   ///< elements per tile
};

/// The 2-D tiles of layout l over the last two axes of shape (a leading axis indexes whole matrices; a missing
/// axis has extent 1), class by class as TileClass lists them, and in each class tile by tile in row-major
/// order of the tile grid: row(first, length) for each of a tile's rows, top to bottom, with its first element's
/// index in the tensor. Returns the classes that hold tiles.
template <class Row>
std::vector<TileClass> for_each_tile_row(const std::vector<std::int64_t>& shape, const ScaleLayout& l, Row&& row) {
  const std::size_t n = shape.size();
  const std::int64_t rows = n >= 2 ? shape[n - 2] : 1;
  const std::int64_t cols = n >= 1 ? shape[n - 1] : 1;
  std::int64_t matrices = 1;
  for (std::size_t a = 0; a + 2 < n; ++a) matrices *= shape[a];
  const std::pair<std::int64_t, std::int64_t> tile = l.geometry().tile_shape(rows, cols);
  const std::int64_t th = tile.first, tw = tile.second;
  const std::int64_t full_rows = rows / th, full_cols = cols / tw;
  std::vector<TileClass> classes;
  // Tile rows [i0, i1) of height h by tile columns [j0, j1) of width w.
  const auto visit = [&](std::int64_t i0, std::int64_t i1, std::int64_t h, std::int64_t j0, std::int64_t j1,
                         std::int64_t w) {
    const std::int64_t count = matrices * (i1 - i0) * (j1 - j0);
    if (count == 0 || h == 0 || w == 0) return;
    for (std::int64_t m = 0; m < matrices; ++m)
      for (std::int64_t i = i0; i < i1; ++i)
        for (std::int64_t j = j0; j < j1; ++j)
          for (std::int64_t r = 0; r < h; ++r)
            row(static_cast<std::size_t>((m * rows + i * th + r) * cols + j * tw), static_cast<std::size_t>(w));
    classes.push_back({count, h * w});
  };
  const std::int64_t part_h = rows % th, part_w = cols % tw;
  const std::int64_t last_row = full_rows + (part_h > 0 ? 1 : 0), last_col = full_cols + (part_w > 0 ? 1 : 0);
  visit(0, full_rows, th, 0, full_cols, tw);
  visit(0, full_rows, th, full_cols, last_col, part_w);
  visit(full_rows, last_row, part_h, 0, full_cols, tw);
  visit(full_rows, last_row, part_h, full_cols, last_col, part_w);
  return classes;
}

/// Elements per chunk of a streamed pass (bounded working set: 4 MiB of float32 outputs).
inline constexpr std::int64_t kChunkElements = std::int64_t{1} << 20;

/// The block after the chunk that starts at block b0: about kChunkElements elements, ending where the next
/// chunk's first element is a multiple of 8 (so packed codes of every width start on a byte), or at the last
/// block; every block at once where the format cannot be split (N:M sparsity prunes the whole tensor).
std::int64_t chunk_end(const BlockKernel& k, const std::vector<std::int64_t>& shape, std::int64_t b0, const Run& run);

/// Adds a kernel pass's exact totals to an ErrorStats.
inline void add_metrics(ErrorStats& s, const BlockMetrics& m) {
  s.count += m.count;
  s.nonzero_inputs += m.nonzero_inputs;
  s.underflows += m.underflows;
  s.saturations += m.saturations;
  s.nan_outputs += m.nan_outputs;
  s.sse.add(m.sse);
  s.signal.add(m.signal);
  s.error_sum.add(m.error_sum);
  s.max_abs_error = std::max(s.max_abs_error, m.max_abs_error);
  s.max_rel_error = std::max(s.max_rel_error, m.max_rel_error);
}

/// The input's exact values for the reference: float64 values where they lie (a mapped float64 array or file,
/// a float64 tensor's own doubles), other inputs widened into `storage`.
inline std::span<const double> exact_values(const TensorSource& input, std::vector<double>& storage) {
  if (const MappedTensor* m = input.mapped(); m != nullptr && m->type() == MappedType::F64)
    return {static_cast<const double*>(m->data()), m->size()};
  if (const Tensor* t = input.tensor(); t != nullptr && t->dtype() == DType::F64) return t->f64_data();
  storage.resize(input.size());
  for (std::size_t i = 0; i < storage.size(); ++i) storage[i] = input.value(i);
  return storage;
}

/// The tensor-level quantities of the input (x as the kernels read it) for chunked kernel calls (none where
/// the format needs none). A tensor scale from the tensor's amax alone is found chunk by chunk, giving a mapped
/// file's pages back as it goes (the largest of the blocks' amaxes is the tensor's); the other facts (NVFP4
/// peers, tensor-nan) come from one kernel pass over the whole tensor.
Result<BlockTensorFacts> facts_for(const BlockKernel& k, const TensorSource& input, const BlockInput& x,
                                   const BlockRun& br, const Run& run);

/// An error when the format's block axis is outside the tensor (1-D tiles only).
inline std::optional<Error> check_axis(const BlockFormat& f, const TensorSource& input) {
  const auto rank = static_cast<int>(input.shape().size());
  const BlockGeometry geometry = f.layout.geometry();
  if (geometry.per_channel()) {
    const int c = geometry.channel_axis_in(rank);
    if (c < 0 || c >= rank)
      return make_error("format '" + f.name + "': channel axis " + std::to_string(geometry.channel_axis()) +
                        " is outside the tensor's " + std::to_string(rank) + " axes (shape " +
                        format_shape(input.shape()) + ")");
    return std::nullopt;
  }
  if (!geometry.one_d()) return std::nullopt;
  const int a = geometry.axis_in(rank);
  if (rank > 0 && (a < 0 || a >= rank))
    return make_error("format '" + f.name + "': block axis " + std::to_string(geometry.axis()) +
                      " is outside the tensor's " + std::to_string(rank) + " axes (shape " +
                      format_shape(input.shape()) + ")");
  return std::nullopt;
}

/// NaN fake-quant values take the format's bits (QuantOptions::fake_nan); nothing to do for quiet NaNs.
inline void apply_fake_nan(const BlockFormat& f, std::span<float> v) {
  if (f.options.fake_nan != FakeNan::AllOnes) return;
  const float all_ones = std::bit_cast<float>(std::uint32_t{0xFFFFFFFFU});
  // A select with an unconditional store, which the compiler turns into vector blends.
  for (float& x : v) x = x != x ? all_ones : x;  // NaN
}

/// The SIMD target name the kernels run on now ("simd:AVX2").
std::string simd_engine();

}  // namespace mxlab::ops::detail
