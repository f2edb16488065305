// Block kernels, dequantization: packed codes unpacked per block, decoded by table and multiplied by the
// block scale (and the subtile offset or tensor scale).
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_DEQUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_DEQUANT_INL_H_
#undef MXLAB_KERNELS_BLOCK_DEQUANT_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_DEQUANT_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "block_io-inl.h"
#include "block_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// Codes of 9 to 16 bits of elements [first, first + count): three bytes hold each one at any bit offset.
HWY_INLINE void read_wide_codes(const BlockParams& p, const DequantCall& call, std::size_t first, std::size_t count,
                                std::uint32_t* wide) {
  const std::uint32_t mask = (1U << p.bits) - 1U;
  const auto bits = static_cast<std::size_t>(p.bits);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t bit = (first + i) * bits;
    const std::size_t byte = bit / 8;
    const auto off = static_cast<std::uint32_t>(bit % 8);
    std::uint32_t w = 0;  // the three bytes in stream order: little-endian or big-endian bits
    for (std::size_t j = 0; j < 3; ++j) {
      const std::uint32_t v = byte + j < call.element_bytes ? call.elements[byte + j] : 0U;
      w |= p.low_first ? v << (8 * j) : v << (16 - 8 * j);
    }
    const std::uint32_t code =
        p.low_first ? (w >> off) & mask : (w >> (24U - off - static_cast<std::uint32_t>(bits))) & mask;
    wide[i] = p.remap ? p.code_unmap[code] : code;
  }
}

/// Codes of at most 8 bits of elements [first, first + count), one per byte (after the writer's remap).
HWY_INLINE void read_codes(const BlockParams& p, const DequantCall& call, std::size_t first, std::size_t count,
                           std::uint8_t* codes) {
  const std::uint32_t mask = (1U << p.bits) - 1U;
  const auto bits = static_cast<std::size_t>(p.bits);
  if (bits == 8) {
    std::memcpy(codes, call.elements + first, count);
  } else if (bits == 4 && first % 2 == 0) {
    unpack_nibbles(call.elements + first / 2, count, p.low_first, codes);
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t k = (first + i) * bits;
      const std::size_t byte = k / 8;
      const std::uint32_t b0 = call.elements[byte];
      const std::uint32_t b1 = byte + 1 < call.element_bytes ? call.elements[byte + 1] : 0U;
      const auto off = static_cast<std::uint32_t>(k % 8);
      const std::uint32_t code = p.low_first ? ((b0 | (b1 << 8)) >> off) & mask
                                             : (((b0 << 8) | b1) >> (16U - off - static_cast<std::uint32_t>(bits))) & mask;
      codes[i] = static_cast<std::uint8_t>(code);
    }
  }
  if (p.remap)
    for (std::size_t i = 0; i < count; ++i) codes[i] = p.code_unmap[codes[i]];
}

/// The subtile offset d of element first + i (its subtile's shared microexponent).
struct SubtileOffsets {
  SubtileOffsets(const BlockParams& p, const DequantCall& call, std::size_t first)
      : offsets(call.subtile_offsets), sub(static_cast<std::size_t>(p.subtile)) {
    const auto r = static_cast<std::int64_t>(first) / call.row;
    pos = first - static_cast<std::size_t>(r * call.row);
    sub0 = static_cast<std::size_t>(r * call.subtiles_per_row);
  }
  int operator()(std::size_t i) const { return offsets[sub0 + (pos + i) / sub]; }
  const std::uint8_t* offsets;
  std::size_t sub, pos = 0, sub0 = 0;
};

/// Values of wide codes: decode(code) * s * g (a zero float scale gives +0 for finite codes), or decode(code)
/// * 2^(X - d) with subtile offsets, or decode(code) * 2^X; each rounded once to float32.
HWY_INLINE void wide_values(const BlockParams& p, const DequantCall& call, std::size_t first, std::size_t count,
                            const std::uint32_t* wide, double scale_d, float* out) {
  const double d = scale_d * call.g;
  const auto scale_f = static_cast<float>(scale_d);
  const SubtileOffsets offset(p, call, first);
  for (std::size_t i = 0; i < count; ++i) {
    const double e = p.decode_f64[wide[i]];
    if (p.float_scales) {
      out[i] = static_cast<float>((scale_d == 0 && std::isfinite(e)) ? 0.0 : e * d);
    } else if (p.subtile > 0) {
      out[i] = p.decode_f32[wide[i]] * std::ldexp(scale_f, -offset(i));
    } else {
      out[i] = p.decode_f32[wide[i]] * scale_f;
    }
  }
}

/// decode(code) * s * g for float scales, exact in double and rounded once (a zero scale gives +0 for finite
/// codes).
HWY_INLINE void float_scale_values(const BlockParams& p, const std::uint8_t* codes, std::size_t count, double s,
                                   double g, float* out) {
  const double d = s * g;
  std::size_t i = 0;
  if (s != 0 && !std::isnan(s)) {
    const DF64 df64;
    const DUh duh;
    const DFh dfh;
    const hn::Rebind<std::uint8_t, DUh> d8h;
    const std::size_t lh = hn::Lanes(df64);
    const VF64 dv = hn::Set(df64, d);
    for (; i + lh <= count; i += lh) {
      const auto idx = hn::BitCast(hn::RebindToSigned<DUh>(), hn::PromoteTo(duh, hn::LoadU(d8h, codes + i)));
      const VF64 e = hn::PromoteTo(df64, hn::GatherIndex(dfh, p.decode_f32.data(), idx));
      store_as_float(hn::Mul(e, dv), out + i);
    }
  }
  for (; i < count; ++i) {
    const double e = p.decode_f64[codes[i]];
    out[i] = static_cast<float>((s == 0 && std::isfinite(e)) ? 0.0 : e * d);
  }
}

/// decode(code) * scale for power-of-two scales (one float32 product, exact unless it leaves the range). Codes
/// of at most 4 bits index a table that fits one vector (16 float32 lanes or more): a permutation instead of a
/// gather. codes is padded to a whole vector past count.
HWY_INLINE void pow2_values(const BlockParams& p, const std::uint8_t* codes, std::size_t count, float scale,
                            float* out) {
  const DU du;
  const DF df;
  const DI di;
  const D8 d8;
  const std::size_t lanes = hn::Lanes(du);
  const VF scale_v = hn::Set(df, scale);
  std::size_t i = 0;
  if (p.bits <= 4 && lanes >= 16) {
    const VF table = hn::LoadU(df, p.decode_f32.data());
    for (; i + lanes <= count; i += lanes) {
      const VI idx = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, codes + i)));
      hn::StoreU(hn::Mul(hn::TableLookupLanes(table, hn::IndicesFromVec(df, idx)), scale_v), df, out + i);
    }
  }
  for (; i + lanes <= count; i += lanes) {
    const VI idx = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, codes + i)));
    hn::StoreU(hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), idx), scale_v), df, out + i);
  }
  if (i < count) {
    HWY_ALIGN float out_buf[kMaxLanes];
    const VI idx = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, codes + i)));  // padded buffer
    hn::Store(hn::Mul(hn::GatherIndex(df, p.decode_f32.data(), hn::And(idx, hn::Set(di, 255))), scale_v), df, out_buf);
    std::memcpy(out + i, out_buf, (count - i) * sizeof(float));
  }
}

/// Dequantization: codes unpacked per block in chunks, decoded by table and multiplied by the block scale.
inline void dequant_blocks(const BlockParams& p, const DequantCall& call) {
  HWY_ALIGN std::uint8_t codes[kChunk + kMaxLanes] = {};
  HWY_ALIGN std::uint32_t wide[kChunk];  // codes of more than 8 bits
  BlockCursor cursor(call.row, call.block, call.blocks_per_row, call.b0);
  for (std::int64_t b = call.b0; b < call.b1; ++b) {
    std::size_t start = 0;
    std::size_t len = 0;
    cursor.next(&start, &len);
    const double scale_d = p.scale_of(read_scale(p, call.scales, b));
    const auto scale_f = static_cast<float>(scale_d);  // exact: scale values are float32 numbers (or NaN)
    for (std::size_t done = 0; done < len; done += kChunk) {
      const std::size_t count = std::min(kChunk, len - done);
      const std::size_t first = start + done;
      float* out = call.out + first;
      if (p.wide_codes) {
        read_wide_codes(p, call, first, count, wide);
        wide_values(p, call, first, count, wide, scale_d, out);
        continue;
      }
      read_codes(p, call, first, count, codes);
      if (p.float_scales) {
        float_scale_values(p, codes, count, scale_d, call.g, out);
      } else if (p.subtile > 0) {
        // decode(code) * 2^(X - d) with each subtile's own offset d, rounded once (NaN under a NaN scale).
        const SubtileOffsets offset(p, call, first);
        for (std::size_t i = 0; i < count; ++i) out[i] = p.decode_f32[codes[i]] * std::ldexp(scale_f, -offset(i));
      } else {
        pow2_values(p, codes, count, scale_f, out);
      }
    }
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
