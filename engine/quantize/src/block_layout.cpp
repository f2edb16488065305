// How blocks lie over a tensor: the block (and subtile) of every element under tiles, channels or the whole
// tensor, and N:M sparsity along the last axis before scaling.
#include "block_layout.hpp"

#include <algorithm>
#include <cmath>

#include "mxlab/core/ceil_div.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

bool quantize_detail::has_subtiles(const ScaleLayout& l) { return l.geometry().has_subtiles(); }

BlockIndexer::BlockIndexer(const std::vector<std::int64_t>& shape, const ScaleLayout& layout)
    : BlockIndexer(shape, layout.geometry()) {}

BlockIndexer::BlockIndexer(const std::vector<std::int64_t>& shape, const BlockGeometry& g) : shape_(shape) {
  const auto n = static_cast<int>(shape_.size());
  tile_.assign(shape_.size(), 1);
  auto whole = [&](int a) { return std::max<std::int64_t>(shape_[static_cast<std::size_t>(a)], 1); };
  if (g.per_channel()) {
    const int c = g.channel_axis_in(n);
    for (int a = 0; a < n; ++a) tile_[static_cast<std::size_t>(a)] = a == c ? 1 : whole(a);
  } else if (g.per_tensor()) {
    for (int a = 0; a < n; ++a) tile_[static_cast<std::size_t>(a)] = whole(a);
  } else if (g.one_d()) {
    const int ax = g.axis_in(n);
    if (ax >= 0 && ax < n) tile_[static_cast<std::size_t>(ax)] = g.tile_extent(0, shape_[static_cast<std::size_t>(ax)]);
  } else {
    for (int k = 0; k < 2; ++k) {
      const int ax = n - 2 + k;
      if (ax < 0) continue;  // a 1-D tensor under 2-D tiles: the missing axis has extent 1
      tile_[static_cast<std::size_t>(ax)] = g.tile_extent(k, shape_[static_cast<std::size_t>(ax)]);
    }
  }
  grid_.resize(shape_.size());
  blocks_ = 1;
  for (std::size_t a = 0; a < shape_.size(); ++a) {
    grid_[a] = ceil_div(shape_[a], tile_[a]);
    blocks_ *= std::max<std::int64_t>(grid_[a], 1);
  }
}

BlockIndexer BlockIndexer::subtiles(const std::vector<std::int64_t>& shape, const ScaleLayout& layout) {
  return BlockIndexer(shape, layout.geometry().subtiles());
}

std::vector<std::int64_t> BlockIndexer::block_of_all() const {
  std::int64_t total = 1;
  for (auto d : shape_) total *= d;
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max<std::int64_t>(total, 0)));
  if (total <= 0) return out;
  const std::size_t n = shape_.size();
  std::vector<std::int64_t> coord(n, 0);
  for (std::int64_t i = 0; i < total; ++i) {
    std::int64_t b = 0;
    for (std::size_t a = 0; a < n; ++a) b = b * grid_[a] + coord[a] / tile_[a];
    out[static_cast<std::size_t>(i)] = b;
    for (std::size_t a = n; a-- > 0;) {
      if (++coord[a] < shape_[a]) break;
      coord[a] = 0;
    }
  }
  return out;
}

std::vector<std::int64_t> BlockIndexer::elements_of(std::int64_t b, std::vector<std::int64_t>* extent) const {
  const std::size_t n = shape_.size();
  std::vector<std::int64_t> origin(n, 0), ext(n, 1), stride(n, 1);
  for (std::size_t a = n; a-- > 0;) {
    const std::int64_t g = std::max<std::int64_t>(grid_[a], 1);
    origin[a] = (b % g) * tile_[a];
    b /= g;
    ext[a] = std::max<std::int64_t>(std::min(tile_[a], shape_[a] - origin[a]), 0);
    if (a + 1 < n) stride[a] = stride[a + 1] * shape_[a + 1];
  }
  std::int64_t count = 1;
  for (const auto e : ext) count *= e;
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(std::max<std::int64_t>(count, 0)));
  std::vector<std::int64_t> off(n, 0);
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t at = 0;
    for (std::size_t a = 0; a < n; ++a) at += (origin[a] + off[a]) * stride[a];
    out.push_back(at);
    for (std::size_t a = n; a-- > 0;) {
      if (++off[a] < ext[a]) break;
      off[a] = 0;
    }
  }
  if (extent != nullptr) *extent = ext;
  return out;
}

void apply_nm_sparsity(std::span<double> x, std::int64_t last, int n_keep, int m) {
  if (m <= 0 || last <= 0) return;
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / last;
  std::vector<std::int64_t> idx;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < last; g += m) {
      const std::int64_t end = std::min<std::int64_t>(g + m, last);
      idx.clear();
      for (std::int64_t j = g; j < end; ++j) idx.push_back(r * last + j);
      std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
        return std::fabs(x[static_cast<std::size_t>(a)]) > std::fabs(x[static_cast<std::size_t>(b)]);
      });
      for (std::size_t k = static_cast<std::size_t>(n_keep); k < idx.size(); ++k) x[static_cast<std::size_t>(idx[k])] = 0.0;
    }
  }
}

}  // namespace mxlab
