// Block kernels, blocks down the columns of a row-major matrix (the quantization of its transpose, written in
// its own layout): a vector of columns at a time, each lane a block, for the common MX case of fast_floor_loop.
// Included once per Highway target by block_pow2_kernel.cpp (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_COLUMNS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_COLUMNS_INL_H_
#undef MXLAB_KERNELS_BLOCK_COLUMNS_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_COLUMNS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <hwy/highway.h>

#include "block_pow2-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// Matrices of at most this many vectors of columns go down one vector of columns at a time (measured on
/// 12544 x 32 and 50176 x 9: 0.50 and 0.71 ms against 0.59 and 1.28 ms row by row; 12544 x 144: 2.74 against
/// 1.91 ms).
constexpr std::size_t kNarrowVectors = 4;

/// Panels [call.p0, call.p1) of a column call (ColumnsCall): each panel's rows hold one block of every column,
/// or, with a tile width tw > 1, one 2-D tile of every tw neighbouring columns (each tile's amax the largest of its
/// columns', its scale copied to them; always row by row).
/// Two passes over a panel: the blocks' amax, a vector of columns at a time (a lane per column, no reduction
/// across lanes), then every element through fast_rne_fake with its column's scale (the element step of
/// fast_floor_loop, lane for lane); between them each column's scale exponent comes from floor_marks. Wide
/// panels are read row by row in memory order, narrow ones a vector of columns at a time. A block holding NaN or Inf, or whose scale is below the fast path's, and
/// every block outside the default floating-point environment, is gathered into a row and goes through
/// one_block, as in fast_floor_loop. A row's last vector of columns overlaps the one before it (call.cols >=
/// lanes): shared columns get the same values again. A matrix of fewer columns than lanes is one partial vector
/// of columns.
template <FastKind kKind>
HWY_NOINLINE void fast_floor_columns(const BlockParams& p, const ColumnsCall& cc) {
  using Rne = RoundingTag<Rounding::NearestEven>;
  const DU du;
  const DF df;
  const DI di;
  const std::size_t lanes = hn::Lanes(du);
  const CastVectors c(p.cast);
  const FastVectors fv(p.fast);
  const bool fast_env = default_fp_environment();
  const auto cols = static_cast<std::size_t>(cc.cols);
  // 2-D tiles: a block is cc.block rows of tw neighbouring columns; columns: tw = 1.
  const auto tw = static_cast<std::size_t>(cc.tile_width);
  const std::size_t units = (cols + tw - 1) / tw;  // blocks across a panel
  // Fewer columns than lanes: one partial vector of columns (masked lanes, or a zero-padded copy).
  ColumnVector vec(cols);
  const bool partial = vec.partial();
  const std::size_t last = partial ? 0 : cols - lanes;  // first column of a row's last vector
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  // Per column (padded to whole vectors): the panel's amax bits, then its inverse scale and scale; per tile the
  // same (padded to whole vectors).
  const std::size_t padded = (cols + lanes - 1) / lanes * lanes;
  const std::size_t padded_units = (units + lanes - 1) / lanes * lanes;
  std::vector<std::uint32_t> amax(padded), tile_amax(tw > 1 ? padded_units : 0);
  std::vector<float> inverse_c(padded), scale_c(padded);
  std::vector<float> tile_inverse(tile_amax.size()), tile_scale(tile_amax.size());
  std::vector<std::size_t> special;  // blocks (columns, or tiles) that go through one_block
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN std::int32_t marks_buf[kMaxLanes];
  std::vector<float> column(static_cast<std::size_t>(cc.block) * tw), column_out(column.size());
  // The gathered block as a tensor of one row, for one_block.
  BlockCall row_call;
  row_call.input = InputKind::F32;
  row_call.x = column.data();
  row_call.out = BlockOut::Fake;
  row_call.fake = column_out.data();
  CodeSink sink(p, row_call);
  // The scales of blocks [b0, b1) from their amax bits, a vector of blocks at a time (floor_marks; lanes past b1
  // fill the padding or are written again with the same values).
  const auto scales = [&](const std::uint32_t* block_amax, float* inverse_out, float* scale_out, std::size_t b0,
                          std::size_t b1) {
    if (!fast_env) {
      for (std::size_t b = b0; b < b1; ++b) {
        special.push_back(b);
        inverse_out[b] = scale_out[b] = 1.0F;
      }
      return;
    }
    for (std::size_t b = b0; b < b1; b += lanes) {
      const VI marks = floor_marks(p, hn::LoadU(du, block_amax + b));
      VF inverse, scale;
      mark_scales(p, marks, &inverse, &scale);
      hn::StoreU(inverse, df, inverse_out + b);
      hn::StoreU(scale, df, scale_out + b);
      if (hn::AllFalse(di, hn::Eq(marks, hn::Set(di, kSpecialBlock)))) continue;
      hn::Store(marks, di, marks_buf);
      for (std::size_t l = 0; l < lanes && b + l < b1; ++l)
        if (marks_buf[l] == kSpecialBlock) special.push_back(b + l);
    }
  };
  for (std::int64_t panel = cc.p0; panel < cc.p1; ++panel) {
    const std::size_t len = cc.panel_rows(panel);
    const float* xp = cc.panel_in(panel);
    float* op = cc.panel_out(panel);
    special.clear();
    // The element step of the vector of columns at j in row r.
    const auto elements = [&](std::size_t r, std::size_t j) {
      const VU u = hn::BitCast(du, vec.load(xp + r * cols + j));
      vec.store(fast_rne_fake<kKind>(fv, u, hn::LoadU(df, inverse_c.data() + j), hn::LoadU(df, scale_c.data() + j)),
                op + r * cols + j);
    };
    if (tw == 1 && cols <= kNarrowVectors * lanes) {
      // A narrow panel is a few cache lines: each vector of columns down the panel, its amax in a register.
      for (std::size_t j0 = 0; j0 < cols; j0 += lanes) {
        const std::size_t j = std::min(j0, last);
        VU vmax = hn::Zero(du);
        for (std::size_t r = 0; r < len; ++r)
          vmax = hn::Max(vmax, hn::And(hn::BitCast(du, vec.load(xp + r * cols + j)), abs_mask));
        hn::StoreU(vmax, du, amax.data() + j);
        scales(amax.data(), inverse_c.data(), scale_c.data(), j0, std::min(j0 + lanes, cols));
        for (std::size_t r = 0; r < len; ++r) elements(r, j);
      }
    } else {
      // A wide panel (or a band of tiles) row by row in memory order, the amax of every column kept in memory.
      std::fill(amax.begin(), amax.end(), 0U);
      for (std::size_t r = 0; r < len; ++r) {
        const float* row = xp + r * cols;
        for (std::size_t j0 = 0; j0 < cols; j0 += lanes) {
          const std::size_t j = std::min(j0, last);
          const VU a = hn::And(hn::BitCast(du, vec.load(row + j)), abs_mask);
          hn::StoreU(hn::Max(hn::LoadU(du, amax.data() + j), a), du, amax.data() + j);
        }
      }
      if (tw == 1) {
        scales(amax.data(), inverse_c.data(), scale_c.data(), 0, cols);
      } else {
        // Each tile's amax from its columns', its scale, and the scale copied to its columns.
        std::fill(tile_amax.begin(), tile_amax.end(), 0U);
        for (std::size_t t = 0; t < units; ++t)
          tile_amax[t] = *std::max_element(amax.begin() + static_cast<std::ptrdiff_t>(t * tw),
                                           amax.begin() + static_cast<std::ptrdiff_t>(std::min(cols, (t + 1) * tw)));
        scales(tile_amax.data(), tile_inverse.data(), tile_scale.data(), 0, units);
        for (std::size_t j = 0; j < cols; ++j) inverse_c[j] = tile_inverse[j / tw], scale_c[j] = tile_scale[j / tw];
      }
      if (special.size() < units)
        for (std::size_t r = 0; r < len; ++r)
          for (std::size_t j0 = 0; j0 < cols; j0 += lanes) elements(r, std::min(j0, last));
    }
    for (const std::size_t b : special) {
      const std::size_t j0 = b * tw, w = std::min(tw, cols - j0), n = len * w;
      for (std::size_t r = 0; r < len; ++r) std::copy_n(xp + r * cols + j0, w, column.data() + r * w);
      row_call.row = row_call.block = static_cast<std::int64_t>(n);
      row_call.blocks_per_row = 1;
      one_block<Rne, BlockOut::Fake>(p, row_call, c, fv, fast_env, sink, in_buf, 0, 0, n);
      for (std::size_t r = 0; r < len; ++r) std::copy_n(column_out.data() + r * w, w, op + r * cols + j0);
    }
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
