// Per-target SIMD code of the cast and decode kernels; dispatch.cpp re-includes this file once per
// Highway target (foreach_target.h). The rules are those of the scalar reference (docs/casting.md); the
// reduction of a format to CastParams/DecodeParams is explained in kernel_params.hpp.

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_CAST_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_CAST_KERNELS_INL_H_
#undef MXLAB_KERNELS_CAST_KERNELS_INL_H_
#else
#define MXLAB_KERNELS_CAST_KERNELS_INL_H_
#endif

#include <cstring>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "grid_cast-inl.h"
#include "kernel_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// How many elements ahead of the current vector the cast loop prefetches its input.
constexpr std::size_t kPrefetchAhead = 1024;

template <bool kOut16>
HWY_INLINE void store_codes(VU code, void* out, std::size_t i) {
  const DI di;
  if constexpr (kOut16) {
    const D16 d16;
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, code)), d16, static_cast<std::uint16_t*>(out) + i);
  } else {
    const D8 d8;
    hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, code)), d8, static_cast<std::uint8_t*>(out) + i);
  }
}

template <Rounding kRound, InputKind kIn, bool kOut16>
HWY_NOINLINE void cast_loop(const CastParams& p, const CastCall& call) {
  const DU du;
  const std::size_t lanes = hn::Lanes(du);
  const CastVectors c(p);
  const std::size_t n = call.n;
  std::size_t i = 0;
  constexpr std::size_t kInBytes = kIn == InputKind::F32 ? 4 : 2;
  for (; i + lanes <= n; i += lanes) {
    // The hardware prefetcher alone leaves the vector loops waiting on memory for arrays beyond the caches
    // (measured: AVX2 on 64 MB of float32 ran at half its in-cache speed without this).
    if constexpr (HWY_TARGET != HWY_SCALAR) {
      if (i % 16 == 0 && i + kPrefetchAhead < n) {  // once per 64-byte line of float32 (twice for 16-bit)
        hwy::Prefetch(static_cast<const std::uint8_t*>(call.in) + (i + kPrefetchAhead) * kInBytes);
      }
    }
    const VU u = load_input<kIn>(call.in, i);
    VU random = hn::Zero(du);
    if constexpr (kRound == Rounding::Stochastic) random = stochastic_bits_lanes(call.seed_key, call.first_index + i);
    store_codes<kOut16>(cast_lanes<RoundingTag<kRound>>(c, u, random, hn::Zero(DI()), nullptr), call.out, i);
  }
  if (i == n) return;
  // Last partial vector: through zero-padded buffers, so no load or store leaves the caller's arrays.
  constexpr std::size_t kOutBytes = kOut16 ? 2 : 1;
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 4] = {};
  HWY_ALIGN std::uint8_t out_buf[kMaxLanes * 2] = {};
  const std::size_t rest = n - i;
  std::memcpy(in_buf, static_cast<const std::uint8_t*>(call.in) + i * kInBytes, rest * kInBytes);
  const VU u = load_input<kIn>(in_buf, 0);
  VU random = hn::Zero(du);
  if constexpr (kRound == Rounding::Stochastic) random = stochastic_bits_lanes(call.seed_key, call.first_index + i);
  store_codes<kOut16>(cast_lanes<RoundingTag<kRound>>(c, u, random, hn::Zero(DI()), nullptr), out_buf, 0);
  std::memcpy(static_cast<std::uint8_t*>(call.out) + i * kOutBytes, out_buf, rest * kOutBytes);
}

template <Rounding kRound>
HWY_INLINE void cast_for_rounding(const CastParams& p, const CastCall& call) {
  switch (call.input) {
    case InputKind::F32:
      return call.out16 ? cast_loop<kRound, InputKind::F32, true>(p, call)
                        : cast_loop<kRound, InputKind::F32, false>(p, call);
    case InputKind::BF16:
      return call.out16 ? cast_loop<kRound, InputKind::BF16, true>(p, call)
                        : cast_loop<kRound, InputKind::BF16, false>(p, call);
    case InputKind::F16:
      return call.out16 ? cast_loop<kRound, InputKind::F16, true>(p, call)
                        : cast_loop<kRound, InputKind::F16, false>(p, call);
  }
}

/// Entry point of one target (exported by dispatch.cpp).
void cast_kernel_impl(const CastParams& p, const CastCall& call) {
  switch (p.rounding) {
    case Rounding::NearestEven:
      return cast_for_rounding<Rounding::NearestEven>(p, call);
    case Rounding::NearestAway:
      return cast_for_rounding<Rounding::NearestAway>(p, call);
    case Rounding::NearestZero:
      return cast_for_rounding<Rounding::NearestZero>(p, call);
    case Rounding::TowardZero:
      return cast_for_rounding<Rounding::TowardZero>(p, call);
    case Rounding::Up:
      return cast_for_rounding<Rounding::Up>(p, call);
    case Rounding::Down:
      return cast_for_rounding<Rounding::Down>(p, call);
    case Rounding::Odd:
      return cast_for_rounding<Rounding::Odd>(p, call);
    case Rounding::Stochastic:
      return cast_for_rounding<Rounding::Stochastic>(p, call);
  }
}


template <DecodeKind kKind, bool kIn16>
HWY_NOINLINE void decode_loop(const DecodeParams& p, const DecodeCall& call) {
  const DU du;
  const DF df;
  const std::size_t lanes = hn::Lanes(du);
  auto load = [](const void* in, std::size_t i) {
    if constexpr (kIn16) {
      return hn::PromoteTo(DU(), hn::LoadU(D16(), static_cast<const std::uint16_t*>(in) + i));
    } else {
      return hn::PromoteTo(DU(), hn::LoadU(D8(), static_cast<const std::uint8_t*>(in) + i));
    }
  };
  const std::size_t n = call.n;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::BitCast(df, decode_lanes<kKind>(p, load(call.in, i))), df, call.out + i);
  }
  if (i == n) return;
  constexpr std::size_t kInBytes = kIn16 ? 2 : 1;
  HWY_ALIGN std::uint8_t in_buf[kMaxLanes * 2] = {};
  HWY_ALIGN float out_buf[kMaxLanes] = {};
  const std::size_t rest = n - i;
  std::memcpy(in_buf, static_cast<const std::uint8_t*>(call.in) + i * kInBytes, rest * kInBytes);
  hn::Store(hn::BitCast(df, decode_lanes<kKind>(p, load(in_buf, 0))), df, out_buf);
  std::memcpy(call.out + i, out_buf, rest * sizeof(float));
}

void decode_kernel_impl(const DecodeParams& p, const DecodeCall& call) {
  switch (p.kind) {
    case DecodeKind::Float:
      return call.in16 ? decode_loop<DecodeKind::Float, true>(p, call) : decode_loop<DecodeKind::Float, false>(p, call);
    case DecodeKind::Integer:
      return call.in16 ? decode_loop<DecodeKind::Integer, true>(p, call)
                       : decode_loop<DecodeKind::Integer, false>(p, call);
    case DecodeKind::Table:
      return call.in16 ? decode_loop<DecodeKind::Table, true>(p, call) : decode_loop<DecodeKind::Table, false>(p, call);
  }
}

/// The target this copy of the code was compiled for (HWY_AVX2, ...).
std::int64_t target_impl() { return HWY_TARGET; }

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
