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

template <InputKind kIn, BlockOut kOut, FastKind kKind>
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
  // A group's blocks: first element, length, and scale index (or kSpecialBlock, kZeroBlock).
  std::size_t starts[kFastGroup], lens[kFastGroup];
  int xis[kFastGroup];
  BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
  for (std::int64_t g0 = call.b0; g0 < call.b1; g0 += kFastGroup) {
    const std::int64_t g1 = std::min(call.b1, g0 + kFastGroup);
    for (std::int64_t b = g0; b < g1; ++b) {
      const auto i = static_cast<std::size_t>(b - g0);
      std::size_t start = static_cast<std::size_t>(b) * block;
      std::size_t len = block;
      if (!whole_blocks) cursor.next(&start, &len);
      starts[i] = start;
      lens[i] = len;
      const std::size_t full = len - len % lanes;
      const bool overlap = full != len && len >= lanes && kOut == BlockOut::Fake;
      const bool buffered = full != len && !overlap;
      const std::uint8_t* xb = in + start * kInBytes;
      if constexpr (HWY_TARGET != HWY_SCALAR) {
        for (std::size_t k = 0; k < len * kInBytes; k += 64) hwy::Prefetch(xb + k + call.prefetch);
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
      const std::uint32_t amax_bits = hn::GetLane(hn::MaxOfLanes(du, vmax));
      if (call.amax != nullptr) call.amax[b] = std::bit_cast<float>(amax_bits);
      if (amax_bits == 0) {
        xis[i] = kZeroBlock;
        continue;
      }
      const int xe = amax_bits >= 0x7F800000U ? 0 : block_exponent(p, amax_bits);
      if (amax_bits >= 0x7F800000U || xe < kFastMinExponent) {
        xis[i] = kSpecialBlock;
        continue;
      }
      xis[i] = xe - p.x_min;
    }
    for (std::int64_t b = g0; b < g1; ++b) {
      const auto i = static_cast<std::size_t>(b - g0);
      const std::size_t start = starts[i], len = lens[i];
      if (xis[i] == kSpecialBlock) {
        one_block<Rne, kOut>(p, call, c, fv, true, sink, in_buf, b, static_cast<std::int64_t>(start), len);
        continue;
      }
      const std::size_t full = len - len % lanes;
      const bool overlap = full != len && len >= lanes && kOut == BlockOut::Fake;
      const bool buffered = full != len && !overlap;
      const std::uint8_t* xb = in + start * kInBytes;
      // An all-zero block has its own exponent (BlockParams::zero_block_exponent), whose scale may lie below the
      // fast path's range; its zeros cast and decode to the same codes and values under any scale, so they take
      // the element step with scale 1.
      const bool zero = xis[i] == kZeroBlock;
      const auto xi = static_cast<std::size_t>(zero ? p.zero_block_exponent - p.x_min : xis[i]);
      const VF inverse = hn::Set(df, zero ? 1.0F : p.scale_inverse[xi]);
      const VF scale_v = hn::Set(df, zero ? 1.0F : p.pow2_value[xi]);
      if constexpr (kOut == BlockOut::Packed) write_scale(p, call.scales, static_cast<std::int64_t>(b), p.scale_code[xi]);
      if (buffered && !kMaskedTail) {
        std::memset(tail_buf, 0, sizeof(tail_buf));
        std::memcpy(tail_buf, xb + full * kInBytes, (len - full) * kInBytes);
      }
      for (std::size_t k = 0; k < len; k += lanes) {
        const bool tail = k == full;  // only when len is not a multiple of lanes
        const std::size_t at = tail && overlap ? len - lanes : k;
        const std::size_t count = tail && buffered ? len - full : lanes;
        VU u;
        if (!(tail && buffered)) u = load_input<kIn>(xb, at);
        else if constexpr (kMaskedTail) u = load_input_n<kIn>(xb, full, count);
        else u = load_input<kIn>(tail_buf, 0);
        MU over;
        VF r;
        const VU code = fast_rne_lanes<kOut == BlockOut::Fake, kKind>(fv, u, inverse, &r, &over);
        if constexpr (kOut == BlockOut::Packed) sink.put(du, code, start + k, count);
        if constexpr (kOut == BlockOut::Fake) {
          const VF value = fast_rne_values<kKind>(fv, u, r, over, scale_v);
          if (!tail) {
            store_values(call, value, call.fake + start + k);
          } else if (overlap) {
            hn::StoreU(value, df, call.fake + start + at);
          } else if constexpr (kMaskedTail) {
            hn::BlendedStore(value, hn::FirstN(df, count), df, call.fake + start + k);
          } else {
            hn::Store(value, df, out_buf);
            std::memcpy(call.fake + start + k, out_buf, count * sizeof(float));
          }
        }
      }
    }
  }
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
        switch (call.input) {
          case InputKind::F32: fast_floor_loop<InputKind::F32, kOut, kKind>(p, call, c, fv, sink); break;
          case InputKind::BF16: fast_floor_loop<InputKind::BF16, kOut, kKind>(p, call, c, fv, sink); break;
          case InputKind::F16: fast_floor_loop<InputKind::F16, kOut, kKind>(p, call, c, fv, sink); break;
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
