// Block geometry: how a layout's tiles cut a tensor into blocks (one block, per channel, 1-D tiles along an
// axis, 2-D tiles over the last two axes), as a value with the questions code asks of it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "mxlab/core/ceil_div.hpp"

namespace mxlab {

/// One dimension of a tile: size 0 means the whole extent of the axis (a channel scale).
struct TileDim {
  std::int64_t size = 0;
  /// Subtile size along this axis (0: no subtiles). Subtiles carry shared microexponents: each subtile
  /// of a block scaled by 2^X uses 2^(X - d) with a d of subtile_bits bits (docs/quantization.md).
  std::int64_t subtile = 0;
};

/// The tiles, block axis and channel axis of a ScaleLayout (`ScaleLayout::geometry()`). Tiles are k = 0 (and
/// k = 1 for 2-D tiles, over the last two axes: k = 0 along the rows, k = 1 along the columns).
class BlockGeometry {
 public:
  static constexpr int kNoAxis = -1000;  ///< ScaleLayout::kNoAxis

  constexpr BlockGeometry() = default;  ///< one block for the whole tensor
  constexpr BlockGeometry(std::span<const TileDim> tiles, int axis, int channel_axis)
      : dims_(static_cast<int>(tiles.size())), axis_(axis), channel_axis_(channel_axis) {
    for (std::size_t k = 0; k < tiles.size() && k < tile_.size(); ++k) tile_[k] = tiles[k];
  }

  /// Number of tile dimensions as written (0: per tensor or per channel, 1, 2; a parser may hold more).
  constexpr int tile_dims() const { return dims_; }
  constexpr bool per_channel() const { return channel_axis_ != kNoAxis; }
  /// No tiles and no channel axis: one block (and one scale) for the whole tensor.
  constexpr bool per_tensor() const { return dims_ == 0 && !per_channel(); }
  /// Tiles (1-D or 2-D) cut the tensor; a channel axis is not a tiling.
  constexpr bool tiled() const { return dims_ > 0; }
  constexpr bool one_d() const { return dims_ == 1; }
  constexpr bool two_d() const { return dims_ == 2; }
  /// 1-D tiles of a fixed size (size 0, a tile of a whole axis, is a channel scale along that axis).
  constexpr bool one_d_sized() const { return one_d() && tile_[0].size > 0; }
  /// 2-D k x k tiles.
  constexpr bool square_of(std::int64_t k) const { return two_d() && tile_[0].size == k && tile_[1].size == k; }

  /// Tile dimension k (k < 2; a default TileDim past the tiles written).
  constexpr const TileDim& tile(int k) const { return tile_[static_cast<std::size_t>(k)]; }
  /// Elements of a 1-D tile along its axis (0: the whole axis).
  constexpr std::int64_t block_size() const { return tile_[0].size; }
  /// The 1-D tile's axis as written (negative counts from the end; -1, the last, by default).
  constexpr int axis() const { return axis_; }
  constexpr bool along_last_axis() const { return axis_ == -1; }
  /// The 1-D tile's axis in a tensor of `rank` axes (may lie outside [0, rank) for a bad layout).
  constexpr int axis_in(int rank) const { return axis_ < 0 ? axis_ + rank : axis_; }
  constexpr int channel_axis() const { return channel_axis_; }
  constexpr int channel_axis_in(int rank) const { return channel_axis_ < 0 ? channel_axis_ + rank : channel_axis_; }

  constexpr bool has_subtiles() const {
    for (int k = 0; k < std::min(dims_, 2); ++k)
      if (tile_[static_cast<std::size_t>(k)].subtile > 0) return true;
    return false;
  }
  /// Elements per tile (product of the tile sizes; 0 without tiles or when a tile spans a whole axis).
  constexpr std::int64_t tile_elements() const {
    if (dims_ == 0 || per_channel()) return 0;
    std::int64_t n = 1;
    for (int k = 0; k < std::min(dims_, 2); ++k) {
      if (tile_[static_cast<std::size_t>(k)].size == 0) return 0;
      n *= tile_[static_cast<std::size_t>(k)].size;
    }
    return n;
  }
  /// Elements sharing one microexponent: the product over the tiles of the subtile size, or the tile size
  /// where a tile has no subtiles (1 for a tile of a whole axis).
  constexpr std::int64_t subtile_elements() const {
    std::int64_t n = 1;
    for (int k = 0; k < std::min(dims_, 2); ++k) {
      const TileDim& t = tile_[static_cast<std::size_t>(k)];
      n *= t.subtile > 0 ? t.subtile : (t.size > 0 ? t.size : 1);
    }
    return n;
  }

  /// Extent of tile dimension k on an axis of `extent` elements (a size-0 tile covers the whole axis, at least 1).
  constexpr std::int64_t tile_extent(int k, std::int64_t extent) const {
    const std::int64_t t = tile(k).size;
    return t == 0 ? std::max<std::int64_t>(extent, 1) : t;
  }
  /// 2-D tiles: the tile's rows and columns in a matrix of `rows` x `cols`.
  constexpr std::pair<std::int64_t, std::int64_t> tile_shape(std::int64_t rows, std::int64_t cols) const {
    return {tile_extent(0, rows), tile_extent(1, cols)};
  }
  /// Blocks of tile dimension k along an axis of `extent` elements (the last one may be partial).
  constexpr std::int64_t blocks_along(int k, std::int64_t extent) const {
    return ceil_div(extent, tile_extent(k, extent));
  }
  /// The block, along tile dimension k, of the element at `index` on an axis of `extent` elements.
  constexpr std::int64_t block_of(int k, std::int64_t index, std::int64_t extent) const {
    return index / tile_extent(k, extent);
  }

  /// The same blocks with each tile replaced by its subtile (tiles without subtiles stay).
  constexpr BlockGeometry subtiles() const {
    BlockGeometry g = *this;
    for (auto& t : g.tile_)
      if (t.subtile > 0) t.size = t.subtile;
    return g;
  }
  /// 2-D tiles of the transposed matrix (rows and columns swapped); other geometries are their own.
  constexpr BlockGeometry transposed() const {
    BlockGeometry g = *this;
    if (two_d()) std::swap(g.tile_[0], g.tile_[1]);
    return g;
  }

 private:
  std::array<TileDim, 2> tile_{};
  int dims_ = 0;
  int axis_ = -1;
  int channel_axis_ = kNoAxis;
};

static_assert(BlockGeometry().per_tensor());
static_assert(BlockGeometry(std::array{TileDim{32, 0}}, -1, BlockGeometry::kNoAxis).blocks_along(0, 65) == 3);
static_assert(BlockGeometry(std::array{TileDim{0, 0}}, -1, BlockGeometry::kNoAxis).blocks_along(0, 65) == 1);
static_assert(BlockGeometry(std::array{TileDim{32, 0}}, -1, BlockGeometry::kNoAxis).block_of(0, 64, 65) == 2);
static_assert(BlockGeometry(std::array{TileDim{8, 4}, TileDim{16, 0}}, -1, BlockGeometry::kNoAxis)
                  .transposed()
                  .subtiles()
                  .tile_shape(100, 100) == std::pair<std::int64_t, std::int64_t>{16, 4});

}  // namespace mxlab
