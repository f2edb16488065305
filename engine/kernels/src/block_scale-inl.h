// Block kernels, block statistics and power-of-two scale selection: amax and specials of a block, its clamped
// scale exponent, and the all-NaN blocks of the specials policies.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_SCALE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_SCALE_INL_H_
#undef MXLAB_KERNELS_BLOCK_SCALE_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_SCALE_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "block_io-inl.h"
#include "block_params.hpp"
#include "mxlab/quantize/quantize.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// floor(log2 a) of a positive float32 given by its bits, subnormals included.
HWY_INLINE int floor_log2_bits(std::uint32_t a) {
  const auto biased = static_cast<int>(a >> 23);
  if (biased != 0) return biased - 127;
  return (31 - std::countl_zero(a)) - 149;
}

/// The clamped scale exponent of a block with finite amax bits a (docs/quantization.md, scale selection).
HWY_INLINE int block_exponent(const BlockParams& p, std::uint32_t a) {
  if (a == 0) return p.zero_block_exponent;
  int x = 0;
  if (p.rule == ScaleRule::Floor) {
    int e = floor_log2_bits(a);
    if (p.clamp == ClampSite::Amax) e = std::clamp(e, -126, 127);
    x = e - p.emax;
  } else {
    // One call per block: the reference's own rule (ceil, rceil, even, midmax) on the exact amax.
    x = scale_exponent(*p.element, static_cast<double>(std::bit_cast<float>(a)), *p.options);
  }
  return std::clamp(x, p.x_min, p.x_max);
}

/// Statistics of one block: the largest finite magnitude (float32 bits order like the magnitudes), NaN, Inf.
struct BlockStats {
  std::uint32_t amax_bits = 0;
  bool finite = true;  ///< neither NaN nor Inf in the block
  bool has_nan = false;
  bool has_inf = false;
};

/// One reduction in the common case: the largest magnitude bits, specials included; only a block whose
/// largest bits are Inf or NaN needs the finite amax and the two flags separately. The block's last partial
/// vector (rest > 0 elements from full on) is read from in_buf, zero-padded: zeros change nothing here.
HWY_INLINE BlockStats block_stats(InputKind in_kind, const std::uint8_t* xb, const std::uint8_t* in_buf, std::size_t len,
                                  std::size_t full) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU inf_bits = hn::Set(du, 0x7F800000U);
  BlockStats st;
  VU vmax = hn::Zero(du);
  for (std::size_t k = 0; k < full; k += lanes) vmax = hn::Max(vmax, hn::And(load_any(in_kind, xb, k), abs_mask));
  if (full != len) vmax = hn::Max(vmax, hn::And(load_any(in_kind, in_buf, 0), abs_mask));
  st.amax_bits = hn::GetLane(hn::MaxOfLanes(du, vmax));
  st.finite = st.amax_bits < 0x7F800000U;
  if (!st.finite) {
    VU vfin = hn::Zero(du);
    VU vinf = hn::Zero(du);
    for (std::size_t k = 0; k < len; k += lanes) {
      const VU a = hn::And(k == full ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k), abs_mask);
      vfin = hn::Max(vfin, hn::IfThenElseZero(hn::Lt(a, inf_bits), a));
      vinf = hn::Or(vinf, hn::VecFromMask(du, hn::Eq(a, inf_bits)));
    }
    st.has_nan = st.amax_bits > 0x7F800000U;
    st.has_inf = hn::GetLane(hn::MaxOfLanes(du, vinf)) != 0;
    st.amax_bits = hn::GetLane(hn::MaxOfLanes(du, vfin));
  }
  return st;
}

/// Whether a block with these statistics is all NaN under the policy (when the scale format has NaN).
HWY_INLINE bool nan_block(const BlockParams& p, const BlockStats& st) {
  switch (p.specials) {
    case SpecialsPolicy::BlockNan: return st.has_nan || (st.has_inf && !p.element_has_inf);
    case SpecialsPolicy::BlockNanAny: return st.has_nan || st.has_inf;
    default: return false;
  }
}

/// A block of NaN elements (NaN scale code, NaN outputs).
HWY_INLINE void nan_elements(const BlockParams& p, const BlockCall& call, CodeSink& sink, std::size_t start,
                             std::size_t len) {
  if (call.out == BlockOut::Packed) sink.put_repeated(p.nan_block_code, start, len);
  if (call.out == BlockOut::Fake) {
    std::fill(call.fake + start, call.fake + start + len, std::numeric_limits<float>::quiet_NaN());
  }
  if (call.metrics != nullptr) call.metrics->nan_outputs += static_cast<std::int64_t>(len);
}

/// Statistics of a group of consecutive blocks (the float-scale path reads a group, then casts its scales
/// in one vector operation, then runs its element passes).
struct BlockGroup {
  static constexpr std::size_t kSize = 64;
  std::int64_t first = 0;  ///< the group's first block
  std::size_t count = 0;   ///< blocks in the group
  BlockStats stats[kSize];
  std::size_t starts[kSize];
  std::size_t lens[kSize];
  HWY_ALIGN double amax[kSize + kMaxLanes];            ///< finite amax (padded with zeros for vector casts)
  HWY_ALIGN std::uint64_t codes[kSize + kMaxLanes];    ///< scale codes of the group's vector cast

  /// Block i's first input byte.
  const std::uint8_t* xb(const BlockCall& call, std::size_t i) const {
    return static_cast<const std::uint8_t*>(call.x) + starts[i] * (call.input == InputKind::F32 ? 4 : 2);
  }
};

/// Blocks [g0, min(g0 + kSize, b1)): their extents, statistics and amax, with the call's amax outputs and
/// tensor-wide flags.
HWY_INLINE void read_group(const BlockCall& call, BlockCursor& cursor, std::int64_t g0, BlockGroup& g) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const std::size_t in_bytes = call.input == InputKind::F32 ? 4 : 2;
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  g.first = g0;
  g.count = static_cast<std::size_t>(std::min<std::int64_t>(BlockGroup::kSize, call.b1 - g0));
  for (std::size_t i = 0; i < g.count; ++i) {
    cursor.next(&g.starts[i], &g.lens[i]);
    const std::uint8_t* xb = g.xb(call, i);
    const std::size_t full = g.lens[i] - g.lens[i] % lanes;
    if (full != g.lens[i]) {
      std::memset(in_buf, 0, sizeof(in_buf));
      std::memcpy(in_buf, xb + full * in_bytes, (g.lens[i] - full) * in_bytes);
    }
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      for (std::size_t k = 0; k < g.lens[i] * in_bytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
    }
    g.stats[i] = block_stats(call.input, xb, in_buf, g.lens[i], full);
    const float a = std::bit_cast<float>(g.stats[i].amax_bits);
    g.amax[i] = a;
    const auto b = static_cast<std::size_t>(g0) + i;
    if (call.amax != nullptr) call.amax[b] = a;
    if (call.tensor_amax != nullptr) *call.tensor_amax = std::max(*call.tensor_amax, a);
    if (call.tensor_nan != nullptr && g.stats[i].has_nan) *call.tensor_nan = true;
    if (call.tensor_inf != nullptr && g.stats[i].has_inf) *call.tensor_inf = true;
  }
}

/// Whether the call asks for the tensor-wide statistics alone (BlockKernel's first pass over a tensor).
HWY_INLINE bool tensor_facts_only(const BlockCall& call) {
  return call.out == BlockOut::None && call.metrics == nullptr && call.amax == nullptr && call.tensor_amax != nullptr;
}

/// The tensor-wide statistics of blocks [b0, b1) (their largest finite magnitude, NaN, Inf), as read_group
/// gathers them block by block, in one pass over the elements: the blocks of consecutive rows tile one
/// contiguous range.
HWY_NOINLINE inline void tensor_facts_loop(const BlockCall& call) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const std::size_t in_bytes = call.input == InputKind::F32 ? 4 : 2;
  const auto first_element = [&](std::int64_t b) {
    const std::int64_t r = b / call.blocks_per_row;
    return static_cast<std::size_t>(r * call.row +
                                    std::min((b - r * call.blocks_per_row) * call.block, call.row));
  };
  const std::size_t begin = first_element(call.b0);
  const std::size_t len = first_element(call.b1) - begin;
  const auto* xb = static_cast<const std::uint8_t*>(call.x) + begin * in_bytes;
  const std::size_t full = len - len % lanes;
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const VU inf_bits = hn::Set(du, 0x7F800000U);
  VU vfin = hn::Zero(du);
  VU vall = hn::Zero(du);
  VU vinf = hn::Zero(du);
  const auto add = [&](VU a) {
    vall = hn::Max(vall, a);
    vfin = hn::Max(vfin, hn::IfThenElseZero(hn::Lt(a, inf_bits), a));
    vinf = hn::Or(vinf, hn::VecFromMask(du, hn::Eq(a, inf_bits)));
  };
  for (std::size_t k = 0; k < full; k += lanes) add(hn::And(load_any(call.input, xb, k), abs_mask));
  if (full != len) {  // the last partial vector, zero-padded: zeros change nothing here
    HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4] = {};
    std::memcpy(in_buf, xb + full * in_bytes, (len - full) * in_bytes);
    add(hn::And(load_any(call.input, in_buf, 0), abs_mask));
  }
  const float amax = std::bit_cast<float>(hn::GetLane(hn::MaxOfLanes(du, vfin)));
  *call.tensor_amax = std::max(*call.tensor_amax, amax);
  if (call.tensor_nan != nullptr && hn::GetLane(hn::MaxOfLanes(du, vall)) > 0x7F800000U) *call.tensor_nan = true;
  if (call.tensor_inf != nullptr && hn::GetLane(hn::MaxOfLanes(du, vinf)) != 0) *call.tensor_inf = true;
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
