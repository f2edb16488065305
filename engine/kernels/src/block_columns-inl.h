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

/// Panels [call.p0, call.p1) of a column call (ColumnsCall): each panel's rows hold one block of every column.
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
  // Fewer columns than lanes: one partial vector of columns (masked lanes, or a zero-padded copy).
  ColumnVector vec(cols);
  const bool partial = vec.partial();
  const std::size_t last = partial ? 0 : cols - lanes;  // first column of a row's last vector
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  // Per column (padded to whole vectors): the panel's amax bits, then its inverse scale and scale.
  const std::size_t padded = (cols + lanes - 1) / lanes * lanes;
  std::vector<std::uint32_t> amax(padded);
  std::vector<float> inverse_c(padded), scale_c(padded);
  std::vector<std::size_t> special;  // columns whose block goes through one_block
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN std::int32_t marks_buf[kMaxLanes];
  std::vector<float> column(static_cast<std::size_t>(cc.block)), column_out(column.size());
  // The gathered column block as a tensor of one row, for one_block.
  BlockCall row_call;
  row_call.input = InputKind::F32;
  row_call.x = column.data();
  row_call.out = BlockOut::Fake;
  row_call.fake = column_out.data();
  CodeSink sink(p, row_call);
  for (std::int64_t panel = cc.p0; panel < cc.p1; ++panel) {
    const std::size_t len = cc.panel_rows(panel);
    const float* xp = cc.panel_in(panel);
    float* op = cc.panel_out(panel);
    special.clear();
    // Each column's scale from its amax (columns [j0, j1)), a vector of columns at a time (floor_marks; lanes
    // past j1 fill the padding or are written again with the same values).
    const auto scales = [&](std::size_t j0, std::size_t j1) {
      if (!fast_env) {
        for (std::size_t j = j0; j < j1; ++j) {
          special.push_back(j);
          inverse_c[j] = scale_c[j] = 1.0F;
        }
        return;
      }
      for (std::size_t j = j0; j < j1; j += lanes) {
        const VI marks = floor_marks(p, hn::LoadU(du, amax.data() + j));
        VF inverse, scale;
        mark_scales(p, marks, &inverse, &scale);
        hn::StoreU(inverse, df, inverse_c.data() + j);
        hn::StoreU(scale, df, scale_c.data() + j);
        if (hn::AllFalse(di, hn::Eq(marks, hn::Set(di, kSpecialBlock)))) continue;
        hn::Store(marks, di, marks_buf);
        for (std::size_t l = 0; l < lanes && j + l < j1; ++l)
          if (marks_buf[l] == kSpecialBlock) special.push_back(j + l);
      }
    };
    // The element step of the vector of columns at j in row r.
    const auto elements = [&](std::size_t r, std::size_t j) {
      const VU u = hn::BitCast(du, vec.load(xp + r * cols + j));
      vec.store(fast_rne_fake<kKind>(fv, u, hn::LoadU(df, inverse_c.data() + j), hn::LoadU(df, scale_c.data() + j)),
            op + r * cols + j);
    };
    if (cols <= kNarrowVectors * lanes) {
      // A narrow panel is a few cache lines: each vector of columns down the panel, its amax in a register.
      for (std::size_t j0 = 0; j0 < cols; j0 += lanes) {
        const std::size_t j = std::min(j0, last);
        VU vmax = hn::Zero(du);
        for (std::size_t r = 0; r < len; ++r)
          vmax = hn::Max(vmax, hn::And(hn::BitCast(du, vec.load(xp + r * cols + j)), abs_mask));
        hn::StoreU(vmax, du, amax.data() + j);
        scales(j0, std::min(j0 + lanes, cols));
        for (std::size_t r = 0; r < len; ++r) elements(r, j);
      }
    } else {
      // A wide panel row by row in memory order, the amax of every column kept in memory.
      std::fill(amax.begin(), amax.end(), 0U);
      for (std::size_t r = 0; r < len; ++r) {
        const float* row = xp + r * cols;
        for (std::size_t j0 = 0; j0 < cols; j0 += lanes) {
          const std::size_t j = std::min(j0, last);
          const VU a = hn::And(hn::BitCast(du, hn::LoadU(df, row + j)), abs_mask);
          hn::StoreU(hn::Max(hn::LoadU(du, amax.data() + j), a), du, amax.data() + j);
        }
      }
      scales(0, cols);
      if (special.size() < cols)
        for (std::size_t r = 0; r < len; ++r)
          for (std::size_t j0 = 0; j0 < cols; j0 += lanes) elements(r, std::min(j0, last));
    }
    row_call.row = row_call.block = static_cast<std::int64_t>(len);
    row_call.blocks_per_row = 1;
    for (const std::size_t j : special) {
      for (std::size_t r = 0; r < len; ++r) column[r] = xp[r * cols + j];
      one_block<Rne, BlockOut::Fake>(p, row_call, c, fv, fast_env, sink, in_buf, 0, 0, len);
      for (std::size_t r = 0; r < len; ++r) op[r * cols + j] = column_out[r];
    }
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
