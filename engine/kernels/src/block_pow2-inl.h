// Block kernels, power-of-two block scales under the exact rules: the nearest-even fast path (one float32 add
// per element), the general vector cast, and the tight loop of the common MX case.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_POW2_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_POW2_INL_H_
#undef MXLAB_KERNELS_BLOCK_POW2_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_POW2_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "block_codebook-inl.h"
#include "block_io-inl.h"
#include "block_lanes-inl.h"
#include "block_rne-inl.h"
#include "block_metrics-inl.h"
#include "block_scale-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// The smallest scale exponent X of the nearest-even fast path, whose multiplier 2^-X is a float32 (scale
/// formats with smaller powers of two, as float32 ones, take the general element pass there).
constexpr int kFastMinExponent = -127;

/// Per-block constants of the element pass.
struct BlockScale {
  int xe;                 ///< the block's scale 2^xe
  std::uint32_t scode;    ///< its code
  double scale_d;         ///< its value
};

/// The element pass over one block of len elements at xb (rest > 0: the last partial vector is in in_buf).
template <class Round, BlockOut kOut, bool kFast, FastKind kKind = FastKind::Float>
HWY_INLINE void block_elements(const BlockParams& p, const BlockCall& call, const CastVectors& c,
                               const FastVectors& fv, CodeSink& sink, const std::uint8_t* xb,
                               const std::uint8_t* in_buf, std::size_t len, std::size_t full, std::size_t start,
                               const BlockScale& bs) {
  const DU du;
  const DF df;
  const DI di;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const bool want_metrics = call.metrics != nullptr;
  const VI minus_x = hn::Set(di, -bs.xe);
  const VF scale_v = hn::Set(df, p.pow2_value[static_cast<std::size_t>(bs.xe - p.x_min)]);
  const VF inverse = hn::Set(df, p.scale_inverse[static_cast<std::size_t>(bs.xe - p.x_min)]);
  HWY_ALIGN float out_buf[kMaxLanes];
  for (std::size_t k = 0; k < len; k += lanes) {
    const bool tail = k == full;  // only when len is not a multiple of lanes
    const std::size_t count = tail ? len - full : lanes;
    const VU u = tail ? load_any(in_kind, in_buf, 0) : load_any(in_kind, xb, k);
    MU over = hn::FirstN(du, 0);
    VU code;
    VF value;
    if constexpr (kFast) {
      VF r;
      code = fast_rne_lanes<kOut == BlockOut::Fake, kKind>(fv, u, inverse, &r, &over);
      if constexpr (kOut == BlockOut::Fake) value = fast_rne_values<kKind>(fv, u, r, over, scale_v);
    } else {
      VU random = hn::Zero(du);
      if (p.stochastic) random = stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(start) + k);
      code = cast_lanes<Round>(c, u, random, minus_x, want_metrics ? &over : nullptr);
      if constexpr (kOut == BlockOut::Fake) {
        value = hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::BitCast(di, code)), scale_v);
      }
    }
    if constexpr (kOut == BlockOut::Packed) sink.put(du, code, start + k, count);
    if constexpr (kOut == BlockOut::Fake) {
      float* dst = call.fake + start + k;
      if (!tail) {
        store_values(call, value, dst);
      } else {
        hn::Store(value, df, out_buf);
        std::memcpy(dst, out_buf, count * sizeof(float));
      }
    }
    if (want_metrics) add_lane_metrics(p, call, start + k, count, du, u, code, hn::VecFromMask(du, over), bs.scale_d);
  }
}

/// One block of the power-of-two scale path: statistics, scale, element codes, and the requested outputs.
template <class Round, BlockOut kOut>
HWY_INLINE void one_block(const BlockParams& p, const BlockCall& call, const CastVectors& c, const FastVectors& fv,
                          bool fast_ok, CodeSink& sink, std::uint8_t* in_buf, std::int64_t b, std::int64_t start,
                          std::size_t len) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const InputKind in_kind = call.input;
  const std::size_t in_bytes = in_kind == InputKind::F32 ? 4 : 2;
  const auto* xb = static_cast<const std::uint8_t*>(call.x) + static_cast<std::size_t>(start) * in_bytes;
  const std::size_t full = len - len % lanes;
  const std::size_t rest = len - full;
  if (rest != 0) {
    // The last partial vector through a zero-padded buffer: zeros change neither amax nor the flags.
    std::memset(in_buf, 0, kMaxLanes * 4);
    std::memcpy(in_buf, xb + full * in_bytes, rest * in_bytes);
  }
  // Every 64-byte line of the input, a little ahead: the hardware prefetcher alone leaves the loop waiting
  // on memory for tensors beyond the caches.
  if constexpr (HWY_TARGET != HWY_SCALAR) {
    for (std::size_t k = 0; k < len * in_bytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
  }
  const BlockStats st = block_stats(in_kind, xb, in_buf, len, full);
  if (call.amax != nullptr) call.amax[b] = std::bit_cast<float>(st.amax_bits);
  if (call.tensor_amax != nullptr) *call.tensor_amax = std::max(*call.tensor_amax, std::bit_cast<float>(st.amax_bits));
  if (kOut == BlockOut::None && call.metrics == nullptr) return;

  const auto out_index = static_cast<std::size_t>(start);
  if (nan_block(p, st) && p.scale_has_nan) {
    if constexpr (kOut == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), p.scale_nan_code);
    nan_elements(p, call, sink, out_index, len);
    return;
  }
  BlockScale bs;
  bs.xe = block_exponent(p, st.amax_bits);
  bs.scode = p.scale_code[static_cast<std::size_t>(bs.xe - p.x_min)];
  bs.scale_d = p.pow2_value_d[static_cast<std::size_t>(bs.xe - p.x_min)];
  if constexpr (kOut == BlockOut::Packed) write_scale(p, call.scales, b, bs.scode);
  if (p.codebook) {
    codebook_elements(p, call, sink, xb, len, out_index, bs.scale_d, 1.0);
  } else if (fast_ok && st.finite && bs.xe >= kFastMinExponent) {
    if constexpr (std::is_same_v<Round, RoundingTag<Rounding::NearestEven>>) {
      switch (fv.kind) {
        case FastKind::Float:
          block_elements<Round, kOut, true>(p, call, c, fv, sink, xb, in_buf, len, full, out_index, bs);
          break;
        case FastKind::Split:
          block_elements<Round, kOut, true, FastKind::Split>(p, call, c, fv, sink, xb, in_buf, len, full, out_index, bs);
          break;
        case FastKind::Integer:
          block_elements<Round, kOut, true, FastKind::Integer>(p, call, c, fv, sink, xb, in_buf, len, full, out_index,
                                                               bs);
          break;
      }
    }
  } else {
    block_elements<Round, kOut, false>(p, call, c, fv, sink, xb, in_buf, len, full, out_index, bs);
  }
}

/// The common MX case in a tight loop: nearest-even fast path, rule floor, no metrics, blocks of whole vectors.
/// Rows whose last block is partial (or shorter than a block) take their blocks from a BlockCursor. A block's
/// last partial vector is read as the block's last whole vector (lanes it shares with the vector before it
/// give the same values again, written over the same places), or, in a block shorter than a vector or for
/// packed codes, through masked loads and stores (AVX-512) or a zero-padded buffer (zeros change neither amax
/// nor the other lanes), as in one_block. A block holding NaN or Inf goes through one_block.
/// The blocks go in groups of kFastGroup: first every block's amax and scale (independent chains the core
/// overlaps), then the group's elements with those scales (the group's inputs still in L1).
constexpr std::int64_t kFastGroup = 64;
/// fast_floor_loop's marks of a block that holds NaN or Inf or has a scale below the fast range (one_block), and
/// of an all-zero block.
constexpr int kSpecialBlock = -1, kZeroBlock = -2;

/// fast_floor_loop's mark of each lane's block from its amax bits, rule floor: kZeroBlock, kSpecialBlock (NaN,
/// Inf, or a scale below kFastMinExponent), else the index X - x_min of its scale 2^X. Lane for lane the
/// scalar classification of fast_floor_loop (block_exponent, floor_log2_bits: a subnormal amax, below 2^23 as
/// an integer, converts to float32 exactly and its exponent field gives floor(log2) + 149).
HWY_INLINE VI floor_marks(const BlockParams& p, VU amax) {
  const DI di;
  const DF df;
  const VI a = hn::BitCast(di, amax);
  const VI biased = hn::ShiftRight<23>(a);
  const VI sub_e = hn::Sub(hn::ShiftRight<23>(hn::BitCast(di, hn::ConvertTo(df, a))), hn::Set(di, 127 + 149));
  VI e = hn::IfThenElse(hn::Eq(biased, hn::Zero(di)), sub_e, hn::Sub(biased, hn::Set(di, 127)));
  if (p.clamp == ClampSite::Amax) e = hn::Min(hn::Max(e, hn::Set(di, -126)), hn::Set(di, 127));
  const VI x = hn::Min(hn::Max(hn::Sub(e, hn::Set(di, p.emax)), hn::Set(di, p.x_min)), hn::Set(di, p.x_max));
  const auto special = hn::Or(hn::Gt(a, hn::Set(di, 0x7F7FFFFF)), hn::Lt(x, hn::Set(di, kFastMinExponent)));
  const VI marks = hn::IfThenElse(special, hn::Set(di, kSpecialBlock), hn::Sub(x, hn::Set(di, p.x_min)));
  return hn::IfThenElse(hn::Eq(a, hn::Zero(di)), hn::Set(di, kZeroBlock), marks);
}

/// The element step's inverse scale and scale of each lane's mark (floor_marks): 2^-X and 2^X, and 1 for an
/// all-zero block (its zeros cast and decode to the same codes and values under any scale) and a special one
/// (which goes through one_block).
HWY_INLINE void mark_scales(const BlockParams& p, VI marks, VF* inverse, VF* scale) {
  const DI di;
  const DF df;
  const auto scaled = hn::RebindMask(df, hn::Gt(marks, hn::Set(di, -1)));
  const VI xi = hn::Max(marks, hn::Zero(di));
  *inverse = hn::IfThenElse(scaled, hn::GatherIndex(df, p.scale_inverse.data(), xi), hn::Set(df, 1.0F));
  *scale = hn::IfThenElse(scaled, hn::GatherIndex(df, p.pow2_value.data(), xi), hn::Set(df, 1.0F));
}

/// Lane j of the result: the largest lane of vector j of the lanes vectors at v (lanes * lanes aligned words,
/// overwritten). Pairs of vectors fold their lanes' even and odd halves together, log2(lanes) times: one
/// vector of every block's amax from lanes - 1 folds, in place of a reduction across lanes per block.
HWY_INLINE VU transposed_max(std::uint32_t* v) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
#if HWY_TARGET != HWY_SCALAR
  for (std::size_t n = lanes; n > 1; n /= 2) {
    for (std::size_t i = 0; i < n / 2; ++i) {
      const VU lo = hn::Load(du, v + 2 * i * lanes);
      const VU hi = hn::Load(du, v + (2 * i + 1) * lanes);
      hn::Store(hn::Max(hn::ConcatEven(du, hi, lo), hn::ConcatOdd(du, hi, lo)), du, v + i * lanes);
    }
  }
#else
  (void)lanes;
#endif
  return hn::Load(du, v);
}

/// kWholeVectors: every block is whole vectors (rows and blocks of multiples of lanes), with no partial
/// vector to handle.
template <InputKind kIn, BlockOut kOut, FastKind kKind, bool kWholeVectors>
HWY_NOINLINE void fast_floor_loop(const BlockParams& p, const BlockCall& call, const CastVectors& c,
                                  const FastVectors& fv, CodeSink& sink) {
  using Rne = RoundingTag<Rounding::NearestEven>;
  const DU du;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  constexpr std::size_t kInBytes = kIn == InputKind::F32 ? 4 : 2;
  const auto block = static_cast<std::size_t>(call.block);
  const bool whole_blocks = call.row % call.block == 0;
  const auto* in = static_cast<const std::uint8_t*>(call.x);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
  HWY_ALIGN std::uint8_t tail_buf[kMaxLanes * 4];
  HWY_ALIGN float out_buf[kMaxLanes];
  // A group's blocks: first element, length, scale index (or kSpecialBlock, kZeroBlock), and the element
  // step's inverse scale and scale. An all-zero block has its own exponent (BlockParams::zero_block_exponent),
  // whose scale may lie below the fast path's range; its zeros cast and decode to the same codes and values
  // under any scale, so they take the element step with scale 1.
  std::size_t starts[kFastGroup], lens[kFastGroup];
  HWY_ALIGN std::int32_t xis[kFastGroup];
  HWY_ALIGN float inverses[kFastGroup], scales[kFastGroup];
  const std::size_t prefetch = call.prefetch;
  static_assert(kFastGroup % kMaxLanes == 0);
  BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
  // Each block's vectors folded into one (their lane-wise largest magnitudes), a vector of blocks at a time
  // (lanes blocks), whose marks come from one transposed_max and floor_marks.
  HWY_ALIGN std::uint32_t folds[kMaxLanes * kMaxLanes];
  HWY_ALIGN float amax_out[kMaxLanes];
  const auto fold = [&](std::int64_t b, std::size_t i) {
    std::size_t start = static_cast<std::size_t>(b) * block;
    std::size_t len = block;
    if (!whole_blocks) cursor.next(&start, &len);
    starts[i] = start;
    lens[i] = len;
    const std::size_t full = kWholeVectors ? len : len - len % lanes;
    const bool overlap = full != len && len >= lanes && kOut == BlockOut::Fake;
    const bool buffered = full != len && !overlap;
    const std::uint8_t* xb = in + start * kInBytes;
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      for (std::size_t k = 0; k < len * kInBytes; k += 64) hwy::Prefetch(xb + k + prefetch);
    }
    VU vmax = hn::Zero(du);
    for (std::size_t k = 0; k < full; k += lanes) vmax = hn::Max(vmax, hn::And(load_input<kIn>(xb, k), abs_mask));
    if (overlap) vmax = hn::Max(vmax, hn::And(load_input<kIn>(xb, len - lanes), abs_mask));
    if (buffered && kMaskedTail) {
      vmax = hn::Max(vmax, hn::And(load_input_n<kIn>(xb, full, len - full), abs_mask));
    } else if (buffered) {
      std::memset(tail_buf, 0, sizeof(tail_buf));
      std::memcpy(tail_buf, xb + full * kInBytes, (len - full) * kInBytes);
      vmax = hn::Max(vmax, hn::And(load_input<kIn>(tail_buf, 0), abs_mask));
    }
    return vmax;
  };
  for (std::int64_t g0 = call.b0; g0 < call.b1; g0 += kFastGroup) {
    const std::int64_t g1 = std::min(call.b1, g0 + kFastGroup);
    for (std::int64_t c0 = g0; c0 < g1; c0 += static_cast<std::int64_t>(lanes)) {
      const auto nb = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(lanes), g1 - c0));
      const auto i0 = static_cast<std::size_t>(c0 - g0);
      for (std::size_t j = 0; j < lanes; ++j)
        hn::Store(j < nb ? fold(c0 + static_cast<std::int64_t>(j), i0 + j) : hn::Zero(du), du, folds + j * lanes);
      const VU amax = transposed_max(folds);
      // kFastGroup is a multiple of lanes: the group's marks hold every lane.
      const VI marks = floor_marks(p, amax);
      hn::Store(marks, DI(), xis + i0);
      VF inverse, scale;
      mark_scales(p, marks, &inverse, &scale);
      hn::Store(inverse, df, inverses + i0);
      hn::Store(scale, df, scales + i0);
      if (call.amax != nullptr) {
        hn::Store(hn::BitCast(df, amax), df, amax_out);
        std::memcpy(call.amax + c0, amax_out, nb * sizeof(float));
      }
    }
    for (std::int64_t b = g0; b < g1; ++b) {
      const auto i = static_cast<std::size_t>(b - g0);
      const std::size_t start = starts[i], len = lens[i];
      if (xis[i] == kSpecialBlock) {
        one_block<Rne, kOut>(p, call, c, fv, true, sink, in_buf, b, static_cast<std::int64_t>(start), len);
        continue;
      }
      const std::size_t full = kWholeVectors ? len : len - len % lanes;
      const bool overlap = full != len && len >= lanes && kOut == BlockOut::Fake;
      const bool buffered = full != len && !overlap;
      const std::uint8_t* xb = in + start * kInBytes;
      const VF inverse = hn::Set(df, inverses[i]);
      const VF scale_v = hn::Set(df, scales[i]);
      if constexpr (kOut == BlockOut::Packed) {
        const int xi = xis[i] == kZeroBlock ? p.zero_block_exponent - p.x_min : xis[i];
        write_scale(p, call.scales, static_cast<std::int64_t>(b), p.scale_code[static_cast<std::size_t>(xi)]);
      }
      if (buffered && !kMaskedTail) {
        std::memset(tail_buf, 0, sizeof(tail_buf));
        std::memcpy(tail_buf, xb + full * kInBytes, (len - full) * kInBytes);
      }
      // The whole vectors in a loop of their own (no tail tests in it), then the last partial one.
      const auto value_of = [&](VU u) { return fast_rne_fake<kKind>(fv, u, inverse, scale_v); };
      float* dst = kOut == BlockOut::Fake ? call.fake + start : nullptr;
      if constexpr (kOut == BlockOut::Fake) {
        if (call.stream) {
          for (std::size_t k = 0; k < full; k += lanes) store_values(call, value_of(load_input<kIn>(xb, k)), dst + k);
        } else {
          for (std::size_t k = 0; k < full; k += lanes) hn::StoreU(value_of(load_input<kIn>(xb, k)), df, dst + k);
        }
      } else {
        for (std::size_t k = 0; k < full; k += lanes) {
          MU over;
          VF r;
          sink.put(du, fast_rne_lanes<false, kKind>(fv, load_input<kIn>(xb, k), inverse, &r, &over), start + k, lanes);
        }
      }
      if (full == len) continue;
      const std::size_t count = len - full;
      VU u;
      if (overlap) u = load_input<kIn>(xb, len - lanes);
      else if constexpr (kMaskedTail) u = load_input_n<kIn>(xb, full, count);
      else u = load_input<kIn>(tail_buf, 0);
      if constexpr (kOut == BlockOut::Packed) {
        MU over;
        VF r;
        sink.put(du, fast_rne_lanes<false, kKind>(fv, u, inverse, &r, &over), start + full, count);
      } else {
        const VF value = value_of(u);
        if (overlap) {
          hn::StoreU(value, df, dst + len - lanes);
        } else if constexpr (kMaskedTail) {
          hn::BlendedStore(value, hn::FirstN(df, count), df, dst + full);
        } else {
          hn::Store(value, df, out_buf);
          std::memcpy(dst + full, out_buf, count * sizeof(float));
        }
      }
    }
  }
}

/// Rows shorter than a vector, each one block (call.row < lanes <= call.block), fake values of float32 inputs in
/// the common MX case of fast_floor_loop: lanes rows (n = call.row vectors) at a time. The rows' magnitudes,
/// one row to a vector, fold into one vector of every row's amax (transposed_max; gathering the tile's columns
/// instead made the whole pass 1.6x slower on AMD Zen 5); the elements then go through fast_rne_fake as they lie, lane l of vector v (element v * lanes + l,
/// row (v * lanes + l) / n) taking its row's inverse scale and scale by a table lookup. A tile with a block
/// that holds NaN or Inf or has a scale below the fast range, and the rows after the last whole tile, go
/// through fast_floor_loop.
template <FastKind kKind>
HWY_NOINLINE void fast_short_rows(const BlockParams& p, const BlockCall& call, const CastVectors& c,
                                  const FastVectors& fv, CodeSink& sink) {
  const DU du;
  const DF df;
  const DI di;
  const std::size_t lanes = hn::Lanes(du);
  const auto n = static_cast<std::size_t>(call.row);
  const auto* x = static_cast<const float*>(call.x);
  const float* end = x + static_cast<std::size_t>(call.b1) * n;
  const MU first_n = hn::FirstN(du, n);
  HWY_ALIGN float row_buf[kMaxLanes] = {};
  HWY_ALIGN std::uint32_t folds[kMaxLanes * kMaxLanes];
  HWY_ALIGN std::int32_t table[kMaxLanes * kMaxLanes];
  for (std::size_t e = 0; e < n * lanes; ++e) table[e] = static_cast<std::int32_t>(e / n);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFU);
  const auto by_blocks = [&](std::int64_t b0, std::int64_t b1) {
    BlockCall part = call;
    part.b0 = b0;
    part.b1 = b1;
    fast_floor_loop<InputKind::F32, BlockOut::Fake, kKind, false>(p, part, c, fv, sink);
  };
  const auto step = static_cast<std::int64_t>(lanes);
  std::int64_t r0 = call.b0;
  for (; r0 + step <= call.b1; r0 += step) {
    const float* tile = x + static_cast<std::size_t>(r0) * n;
    for (std::size_t i = 0; i < lanes; ++i) {
      // Row i's n values (a whole vector read where it stays inside the input, its other lanes cleared).
      const float* row = tile + i * n;
      VU v;
      if (row + lanes <= end) {
        v = hn::IfThenElseZero(first_n, hn::BitCast(du, hn::LoadU(df, row)));
      } else {
        std::memcpy(row_buf, row, n * sizeof(float));
        v = hn::BitCast(du, hn::Load(df, row_buf));
      }
      hn::Store(hn::And(v, abs_mask), du, folds + i * lanes);
    }
    const VU amax = transposed_max(folds);
    const VI marks = floor_marks(p, amax);
    if (!hn::AllFalse(di, hn::Eq(marks, hn::Set(di, kSpecialBlock)))) {
      by_blocks(r0, r0 + step);
      continue;
    }
    if (call.amax != nullptr) hn::StoreU(hn::BitCast(df, amax), df, call.amax + r0);
    VF inverses, scales;
    mark_scales(p, marks, &inverses, &scales);
    float* out = call.fake + static_cast<std::size_t>(r0) * n;
    for (std::size_t v = 0; v < n; ++v) {
      const auto rows = hn::SetTableIndices(df, table + v * lanes);
      const VU u = hn::BitCast(du, hn::LoadU(df, tile + v * lanes));
      hn::StoreU(fast_rne_fake<kKind>(fv, u, hn::TableLookupLanes(inverses, rows), hn::TableLookupLanes(scales, rows)),
                 df, out + v * lanes);
    }
  }
  if (r0 < call.b1) by_blocks(r0, call.b1);
}

/// One pass over blocks [b0, b1) of a power-of-two format under the exact rules (neither float scales nor
/// BlockParams::planned): block statistics, scale, element codes, and the requested outputs.
template <class Round, BlockOut kOut>
HWY_NOINLINE void pow2_loop(const BlockParams& p, const BlockCall& call) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const CastVectors c(p.cast);
  constexpr bool kRne = std::is_same_v<Round, RoundingTag<Rounding::NearestEven>>;
  const FastVectors fv(p.fast);
  const bool fast_ok = kRne && p.fast.on && default_fp_environment();
  CodeSink sink(p, call);
  const bool uniform = call.metrics == nullptr && p.rule == ScaleRule::Floor &&
                       static_cast<std::size_t>(call.block) % lanes == 0;
  if (kOut != BlockOut::None && fast_ok && uniform) {
    // Whole blocks of whole vectors from an even element: 4-bit codes go straight to the output.
    sink.direct4 = HWY_TARGET != HWY_SCALAR && p.bits == 4 && !p.remap && lanes % 2 == 0 && call.block % 2 == 0 &&
                   call.row % call.block == 0;
    if constexpr (kRne && kOut != BlockOut::None) {
      with_fast_kind(p.fast.kind, [&](auto kind) {
        constexpr FastKind kKind = decltype(kind)::value;
        const auto run = [&](auto whole) {
          constexpr bool kWhole = decltype(whole)::value;
          switch (call.input) {
            case InputKind::F32: fast_floor_loop<InputKind::F32, kOut, kKind, kWhole>(p, call, c, fv, sink); break;
            case InputKind::BF16: fast_floor_loop<InputKind::BF16, kOut, kKind, kWhole>(p, call, c, fv, sink); break;
            case InputKind::F16: fast_floor_loop<InputKind::F16, kOut, kKind, kWhole>(p, call, c, fv, sink); break;
          }
        };
        if (call.row % static_cast<std::int64_t>(lanes) == 0 && call.block % static_cast<std::int64_t>(lanes) == 0) {
          run(std::true_type());
        } else if (kOut == BlockOut::Fake && call.input == InputKind::F32 && lanes > 1 &&
                   call.row < static_cast<std::int64_t>(lanes)) {
          fast_short_rows<kKind>(p, call, c, fv, sink);
        } else {
          run(std::false_type());
        }
      });
    }
  } else {
    HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4];
    BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
    for (std::int64_t b = call.b0; b < call.b1; ++b) {
      std::size_t start = 0;
      std::size_t len = 0;
      cursor.next(&start, &len);
      one_block<Round, kOut>(p, call, c, fv, fast_ok, sink, in_buf, b, static_cast<std::int64_t>(start), len);
    }
  }
  if constexpr (kOut == BlockOut::Packed) sink.finish();
  if (call.stream) hwy::FlushStream();
}

template <class Round>
HWY_INLINE void block_for_output(const BlockParams& p, const BlockCall& call) {
  switch (call.out) {
    case BlockOut::None: return pow2_loop<Round, BlockOut::None>(p, call);
    case BlockOut::Fake: return pow2_loop<Round, BlockOut::Fake>(p, call);
    case BlockOut::Packed: return pow2_loop<Round, BlockOut::Packed>(p, call);
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
