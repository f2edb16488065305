// Block kernels, loads and stores: inputs of any kind widened to float32 bits, float32 stores of doubles,
// 4-bit code (un)packing, and CodeSink, where the element loops put their codes.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_IO_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_IO_INL_H_
#undef MXLAB_KERNELS_BLOCK_IO_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_IO_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "block_params.hpp"
#include "grid_cast-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// Codes buffered before they are bit-packed.
constexpr std::size_t kChunk = 4096;

/// A row's vector of columns in the column kernels (a lane per column): whole vectors, or, for a matrix of fewer
/// columns than lanes, one partial vector of its `cols` columns (the other lanes zero): masked loads and stores
/// under AVX-512, a zero-padded buffer elsewhere.
class ColumnVector {
 public:
  explicit ColumnVector(std::size_t cols) : cols_(cols), partial_(cols < hn::Lanes(DF())) {}
  bool partial() const { return partial_; }
  VF load(const float* src) {
    const DF df;
    if (!partial_) return hn::LoadU(df, src);
    if constexpr (kMaskedTail) {
      return hn::MaskedLoad(hn::FirstN(df, cols_), df, src);
    } else {
      std::memcpy(buf_, src, cols_ * sizeof(float));
      return hn::Load(df, buf_);
    }
  }
  void store(VF v, float* dst) {
    const DF df;
    if (!partial_) return hn::StoreU(v, df, dst);
    if constexpr (kMaskedTail) {
      hn::BlendedStore(v, hn::FirstN(df, cols_), df, dst);
    } else {
      hn::Store(v, df, buf_);
      std::memcpy(dst, buf_, cols_ * sizeof(float));
    }
  }

 private:
  std::size_t cols_;
  bool partial_;
  HWY_ALIGN float buf_[kMaxLanes] = {};
};

/// load_input for an input kind known at run time (one predictable branch per vector).
template <class D = DU>
HWY_INLINE hn::Vec<D> load_any(InputKind kind, const void* in, std::size_t i, D d = D()) {
  switch (kind) {
    case InputKind::F32: return load_input<InputKind::F32>(in, i, d);
    case InputKind::BF16: return load_input<InputKind::BF16>(in, i, d);
    case InputKind::F16: break;
  }
  return load_input<InputKind::F16>(in, i, d);
}

/// Elements [k, k + count) of xb as float32 bits in the lanes of d (count <= Lanes(d)); a partial vector is
/// read through the zero-padded buffer buf of kMaxLanes * 4 bytes.
template <class D = DU>
HWY_INLINE hn::Vec<D> load_part(InputKind kind, const std::uint8_t* xb, std::size_t k, std::size_t count,
                                std::uint8_t* buf, D d = D()) {
  if (count == hn::Lanes(d)) return load_any(kind, xb, k, d);
  const std::size_t bytes = kind == InputKind::F32 ? 4 : 2;
  std::memset(buf, 0, kMaxLanes * 4);
  std::memcpy(buf, xb + k * bytes, count * bytes);
  return load_any(kind, buf, 0, d);
}

/// Doubles rounded to float32 as static_cast<float> rounds them (nearest even, +-inf past the float32 range),
/// stored to out. Highway's DemoteTo does that on the SIMD targets but saturates on the portable ones (SCALAR
/// and EMU128 turn 2^128, and even an infinity, into the largest float32), so those cast lane by lane.
HWY_INLINE void store_as_float(VF64 v, float* out) {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  const DF64 df;
  HWY_ALIGN double lanes[kMaxLanes];
  hn::Store(v, df, lanes);
  for (std::size_t l = 0; l < hn::Lanes(df); ++l) out[l] = static_cast<float>(lanes[l]);
#else
  hn::StoreU(hn::DemoteTo(DFh(), v), DFh(), out);
#endif
}

/// Packs n 4-bit codes (n even) as byte pairs in the writer's nibble order, at a byte boundary.
HWY_INLINE void pack_nibbles(const std::uint8_t* codes, std::size_t n, bool low_first, std::uint8_t* out) {
  const hn::ScalableTag<std::uint16_t> d16;
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Rebind<std::uint8_t, decltype(d16)> d8h;
  const std::size_t l16 = hn::Lanes(d16);
  const auto low = hn::Set(d16, 0x000F);
  std::size_t i = 0;
  // A little-endian uint16 holds the pair (first code in its low byte).
  for (; i + 2 * l16 <= n; i += 2 * l16) {
    const auto w = hn::LoadU(d16, reinterpret_cast<const std::uint16_t*>(codes + i));
    const auto first = hn::And(w, low);
    const auto second = hn::And(hn::ShiftRight<8>(w), low);
    const auto byte = low_first ? hn::Or(first, hn::ShiftLeft<4>(second)) : hn::Or(hn::ShiftLeft<4>(first), second);
    hn::StoreU(hn::DemoteTo(d8h, hn::BitCast(di16, byte)), d8h, out + i / 2);
  }
  for (; i < n; i += 2) {
    const auto a = static_cast<unsigned>(codes[i] & 0xFU);
    const auto b = static_cast<unsigned>(codes[i + 1] & 0xFU);
    out[i / 2] = static_cast<std::uint8_t>(low_first ? (a | (b << 4)) : ((a << 4) | b));
  }
}

/// Unpacks count 4-bit codes from byte pairs (a byte widened to 16 bits becomes (first code) | (second code)
/// << 8 in the writer's nibble order).
HWY_INLINE void unpack_nibbles(const std::uint8_t* src, std::size_t count, bool low_first, std::uint8_t* codes) {
  std::size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  {
    const hn::ScalableTag<std::uint16_t> d16;
    const hn::Rebind<std::uint8_t, decltype(d16)> d8b;
    const hn::Repartition<std::uint8_t, decltype(d16)> d8c;
    const std::size_t l16 = hn::Lanes(d16);
    const auto nibble = hn::Set(d16, 0x000F);
    for (; i + l16 <= count / 2; i += l16) {
      const auto w = hn::PromoteTo(d16, hn::LoadU(d8b, src + i));
      const auto lo = hn::And(w, nibble);
      const auto hi = hn::ShiftRight<4>(w);
      const auto two = low_first ? hn::Or(lo, hn::ShiftLeft<8>(hi)) : hn::Or(hi, hn::ShiftLeft<8>(lo));
      hn::StoreU(hn::BitCast(d8c, two), d8c, codes + 2 * i);
    }
  }
#endif
  for (std::size_t c = 2 * i; c < count; ++c) {
    const std::uint32_t byte = src[c / 2];
    const bool second = c % 2 == 1;
    codes[c] = static_cast<std::uint8_t>((second == low_first ? byte >> 4 : byte) & 0xFU);
  }
}

/// Where a block loop's element codes go: straight into the packed output (8-bit codes) or through a
/// buffer that is bit-packed when full.
struct CodeSink {
  const BlockParams& p;
  const BlockCall& call;
  bool direct8;
  std::size_t buffered = 0;
  HWY_ALIGN std::uint8_t codes[kChunk + kMaxLanes];
  HWY_ALIGN std::uint8_t packed[kChunk / 2 + kMaxLanes];
  HWY_ALIGN std::uint16_t codes16[kChunk + kMaxLanes];  ///< elements of more than 8 bits

  /// 4-bit codes stored straight into the packed output, two per byte (set by a loop whose every put is a
  /// whole vector at an even element index: fast_floor_loop).
  bool direct4 = false;

  CodeSink(const BlockParams& params, const BlockCall& c)
      : p(params), call(c), direct8(params.bits == 8 && !params.remap) {}

  void flush() {
    if (p.wide_codes) {
      if (p.remap)
        for (std::size_t i = 0; i < buffered; ++i) codes16[i] = p.code_map[codes16[i]];
      call.writer->write(codes16, buffered);
      buffered = 0;
      return;
    }
    if (p.remap)
      for (std::size_t i = 0; i < buffered; ++i) codes[i] = p.code_map[codes[i]];
    if (p.bits == 4 && call.writer->aligned() && buffered % 2 == 0) {
      pack_nibbles(codes, buffered, p.low_first, packed);
      call.writer->write_bytes(packed, buffered / 2);
    } else {
      call.writer->write(codes, buffered);
    }
    buffered = 0;
  }

  /// The codes of elements [index, index + count) of the tensor, in the uint32_t lanes of tag D (count <=
  /// Lanes(D); the other lanes are padding).
  template <class D>
  HWY_INLINE void put(D d, hn::Vec<D> code, std::size_t index, std::size_t count) {
    const hn::Rebind<std::uint8_t, D> d8;
    const std::size_t lanes = hn::Lanes(d);
    if (p.wide_codes) {
      const hn::Rebind<std::uint16_t, D> d16;
      if (buffered + lanes > kChunk) flush();
      hn::StoreU(hn::TruncateTo(d16, code), d16, codes16 + buffered);
      buffered += count;
      return;
    }
    const auto code8 = hn::TruncateTo(d8, code);
#if HWY_TARGET != HWY_SCALAR
    if (direct4) {
      // Pairs of codes as 16-bit lanes (first code in the low byte), each folded into one byte.
      const hn::Repartition<std::uint16_t, decltype(d8)> d16;
      const hn::Rebind<std::uint8_t, decltype(d16)> d8h;
      const auto w = hn::BitCast(d16, code8);
      const auto lo = hn::And(w, hn::Set(d16, 0x000F));
      const auto hi = hn::And(hn::ShiftRight<8>(w), hn::Set(d16, 0x000F));
      const auto byte = p.low_first ? hn::Or(lo, hn::ShiftLeft<4>(hi)) : hn::Or(hn::ShiftLeft<4>(lo), hi);
      hn::StoreU(hn::TruncateTo(d8h, byte), d8h, call.elements + index / 2);
      return;
    }
#endif
    if (direct8) {
      std::uint8_t* dst = call.elements + index;
      if (count == lanes) {
        if (call.stream && lanes >= 16 && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) {
          hn::Stream(code8, d8, dst);
        } else {
          hn::StoreU(code8, d8, dst);
        }
      } else {
        HWY_ALIGN std::uint8_t tail[kMaxLanes];
        hn::Store(code8, d8, tail);
        std::memcpy(dst, tail, count);
      }
      return;
    }
    if (buffered + lanes > kChunk) flush();
    hn::StoreU(code8, d8, codes + buffered);
    buffered += count;
  }

  void put_repeated(std::uint32_t code, std::size_t index, std::size_t count) {
    if (p.wide_codes) {
      for (std::size_t k = 0; k < count; ++k) {
        if (buffered == kChunk) flush();
        codes16[buffered++] = static_cast<std::uint16_t>(code);
      }
      return;
    }
    if (direct4) {
      std::memset(call.elements + index / 2, static_cast<int>((code & 0xFU) | ((code & 0xFU) << 4)), count / 2);
      return;
    }
    if (direct8) {
      std::memset(call.elements + index, static_cast<int>(code & 0xFFU), count);
      return;
    }
    for (std::size_t k = 0; k < count; ++k) {
      if (buffered == kChunk) flush();
      codes[buffered++] = static_cast<std::uint8_t>(code);
    }
  }

  void finish() {
    if (buffered != 0) flush();
  }
};

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
