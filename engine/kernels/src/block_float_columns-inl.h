// Block kernels, float block scales down the columns of a row-major matrix (the quantization of its transpose,
// written in its own layout): a vector of columns at a time, each lane a block, for the common case of
// fast_float_loop (NVFP4 and other rule-amax formats).
// Included once per Highway target by block_float_kernel.cpp (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_FLOAT_COLUMNS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_FLOAT_COLUMNS_INL_H_
#undef MXLAB_KERNELS_BLOCK_FLOAT_COLUMNS_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_FLOAT_COLUMNS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <hwy/highway.h>

#include "block_float_scale-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// Panels [cc.p0, cc.p1) of a column call under float block scales (BlockKernel::float_columns_native), the
/// tensor scale cc.g: each panel's rows hold one block of every column. The columns' amax a vector of columns at
/// a time (a lane per column), their scale codes in groups (group_scale_codes, the rules of fast_float_loop),
/// then every element through fast_rne_fake with its column's fl32(1 / (s * g)) and s, times g when g != 1, as
/// fast_float_loop does lane for lane; a finite block whose scale is zero gives zeros of its elements' signs.
/// A column whose block holds NaN or Inf, whose scale is outside the fast path's range (or zero by rule one), or
/// with an element near a rounding boundary (near_boundary32), is gathered into a row and quantized by
/// float_scale_loop as one block, then written back. A row's last vector of columns overlaps the one before it
/// (cc.cols >= lanes); a matrix of fewer columns than lanes is one partial vector of columns.
HWY_NOINLINE inline void fast_float_columns(const BlockParams& p, const ColumnsCall& cc) {
  const DU du;
  const DF df;
  const DF64 df64;
  const DFh dfh;
  const std::size_t lanes = hn::Lanes(du), l64 = hn::Lanes(df64);
  const DefaultFpEnvironment fp_env;  // fast_rne_fake and the float32 quotients assume it
  const FloatScaleVectors v(p);
  const FastVectors fv(p.fast);
  const auto cols = static_cast<std::size_t>(cc.cols);
  ColumnVector vec(cols);
  const bool partial = vec.partial();
  const std::size_t last = partial ? 0 : cols - lanes;
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU sign_mask = hn::Set(du, 0x80000000U);
  const bool unit_g = cc.g == 1.0;
  const VF g_v = hn::Set(df, static_cast<float>(cc.g));
  const std::size_t padded = (cols + lanes - 1) / lanes * lanes;
  std::vector<std::uint32_t> amax(padded), zero_c(padded);
  std::vector<float> inverse_c(padded), scale_c(padded);
  std::vector<std::uint8_t> redo(padded);  // columns that go through the gathered row
  HWY_ALIGN std::uint32_t flags[kMaxLanes];
  HWY_ALIGN double scale_d[BlockGroup::kSize + kMaxLanes] = {};
  BlockGroup group;
  BlockCall scale_call;  // group_scale_codes reads the tensor scale only
  scale_call.g = cc.g;
  std::vector<float> column(static_cast<std::size_t>(cc.block)), column_out(column.size());
  for (std::int64_t panel = cc.p0; panel < cc.p1; ++panel) {
    const std::size_t len = cc.panel_rows(panel);
    const float* xp = cc.panel_in(panel);
    float* op = cc.panel_out(panel);
    // The columns' amax bits, row by row in memory order.
    std::fill(amax.begin(), amax.end(), 0U);
    for (std::size_t r = 0; r < len; ++r)
      for (std::size_t j0 = 0; j0 < cols; j0 += lanes) {
        const std::size_t j = std::min(j0, last);
        const VU a = hn::And(hn::BitCast(du, vec.load(xp + r * cols + j)), abs_mask);
        hn::StoreU(hn::Max(hn::LoadU(du, amax.data() + j), a), du, amax.data() + j);
      }
    // The columns' scales, BlockGroup::kSize columns at a time: the codes of one vector cast, then
    // fast_float_loop's rules and multipliers.
    std::fill(redo.begin(), redo.end(), std::uint8_t{0});
    for (std::size_t j0 = 0; j0 < cols; j0 += BlockGroup::kSize) {
      group.count = std::min(BlockGroup::kSize, cols - j0);
      for (std::size_t i = 0; i < group.count; ++i) {
        const std::uint32_t bits = amax[j0 + i];
        group.amax[i] = bits >= 0x7F800000U ? 0.0 : static_cast<double>(std::bit_cast<float>(bits));
      }
      group_scale_codes(p, scale_call, v.s64, group);
      for (std::size_t i = 0; i < group.count; ++i) {
        const FastFloatBlock b = fast_float_block(p, group.codes[i], group.amax[i], amax[j0 + i] < 0x7F800000U, cc.g);
        zero_c[j0 + i] = b.zero ? ~0U : 0U;
        redo[j0 + i] = b.fast || b.zero ? 0 : 1;
        scale_d[i] = b.fast ? b.s : 1.0;
      }
      for (std::size_t i = 0; i < group.count; i += l64) {
        const VF64 inv = hn::Div(hn::Set(df64, 1.0), hn::Mul(hn::Load(df64, scale_d + i), hn::Set(df64, cc.g)));
        HWY_ALIGN float inv_f[kMaxLanes];
        hn::Store(hn::DemoteTo(dfh, inv), dfh, inv_f);
        for (std::size_t l = 0; l < l64 && i + l < group.count; ++l) {
          inverse_c[j0 + i + l] = inv_f[l];
          scale_c[j0 + i + l] = static_cast<float>(scale_d[i + l]);
        }
      }
    }
    // The elements; a lane near a rounding boundary sends its column to the gathered row.
    for (std::size_t r = 0; r < len; ++r)
      for (std::size_t j0 = 0; j0 < cols; j0 += lanes) {
        const std::size_t j = std::min(j0, last);
        const VU u = hn::BitCast(du, vec.load(xp + r * cols + j));
        const VF inverse = hn::LoadU(df, inverse_c.data() + j);
        const MU zero = hn::Ne(hn::LoadU(du, zero_c.data() + j), hn::Zero(du));
        const VF q = hn::Mul(hn::BitCast(df, hn::And(u, abs_mask)), inverse);
        const MU near = hn::AndNot(zero, near_boundary32(v.c32, q, u));
        if (!hn::AllFalse(du, near)) {
          hn::Store(hn::VecFromMask(du, near), du, flags);
          for (std::size_t l = 0; l < lanes && j + l < cols; ++l)
            if (flags[l] != 0) redo[j + l] = 1;
        }
        VF value = fast_rne_fake(fv, u, inverse, hn::LoadU(df, scale_c.data() + j));
        if (!unit_g) value = hn::Mul(value, g_v);
        vec.store(hn::IfThenElse(hn::RebindMask(df, zero), hn::BitCast(df, hn::And(u, sign_mask)), value), op + r * cols + j);
      }
    // The gathered rows: each one block of len elements through the row kernel.
    BlockCall row_call;
    row_call.input = InputKind::F32;
    row_call.x = column.data();
    row_call.out = BlockOut::Fake;
    row_call.fake = column_out.data();
    row_call.row = row_call.block = static_cast<std::int64_t>(len);
    row_call.blocks_per_row = 1;
    row_call.b0 = 0, row_call.b1 = 1;
    row_call.g = cc.g;
    for (std::size_t j = 0; j < cols; ++j) {
      if (redo[j] == 0) continue;
      for (std::size_t r = 0; r < len; ++r) column[r] = xp[r * cols + j];
      float_scale_loop(p, row_call);
      for (std::size_t r = 0; r < len; ++r) op[r * cols + j] = column_out[r];
    }
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
