// Block kernels, lane helpers shared by the element loops: the zero-sign rule, stochastic words and decoding in
// double lanes, powers of two as float32 lanes, and the floating-point environment the float32 steps assume.
// Included once per Highway target by the block kernels' translation units (docs/kernels.md has the map).

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_BLOCK_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_BLOCK_LANES_INL_H_
#undef MXLAB_KERNELS_BLOCK_LANES_INL_H_
#else
#define MXLAB_KERNELS_BLOCK_LANES_INL_H_
#endif

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "block_params.hpp"
#include "grid_cast-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::block {

/// The zero-sign rule (QuantOptions::zero_sign): the code of a lane whose zero value (a peer's scaled value,
/// or the input under exact arithmetic) has the float32 bits z.
template <class D = DU>
HWY_INLINE hn::Vec<D> apply_zero_sign(const BlockParams& p, hn::Vec<D> code, hn::Vec<D> z, D d = D()) {
  if (p.zero_sign == ZeroSign::Keep || !p.has_negative_zero) return code;
  const auto zero = hn::Eq(hn::And(z, hn::Set(d, 0x7FFFFFFFU)), hn::Zero(d));
  if (p.zero_sign == ZeroSign::ZeroMinus) return hn::IfThenElse(zero, hn::Set(d, p.zero_code_neg), code);
  const auto negative = hn::Ne(hn::And(z, hn::Set(d, 0x80000000U)), hn::Zero(d));
  return hn::IfThenElse(hn::And(zero, negative), hn::Set(d, p.zero_code_pos), code);
}

/// The reference's random words of elements [index, index + Lanes(D64)) in 64-bit lanes (zero unless
/// stochastic rounding).
HWY_INLINE V64 random_lanes64(const BlockParams& p, std::size_t index) {
  if (!p.stochastic) return hn::Zero(D64());
  return hn::PromoteTo(D64(), stochastic_bits_lanes(p.seed_key, static_cast<std::uint64_t>(index), DUh()));
}

/// The values of element codes held in 32-bit lanes, as doubles.
HWY_INLINE VF64 decode_lanes64(const BlockParams& p, hn::Vec<DUh> code) {
  return hn::PromoteTo(DF64(), hn::GatherIndex(DFh(), p.decode_f32.data(), hn::BitCast(hn::RebindToSigned<DUh>(), code)));
}

/// Whether the positive normal double d is a power of two (its quotients are exact).
HWY_INLINE bool power_of_two(double d) {
  return std::isfinite(d) && (std::bit_cast<std::uint64_t>(d) & ((std::uint64_t{1} << 52) - 1)) == 0;
}

/// 2^e as float32 in every lane, for e in [-149, 127] (subnormal powers included).
HWY_INLINE VF pow2_lanes(VI e) {
  const DU du;
  const DI di;
  const DF df;
  const VU normal = hn::ShiftLeft<23>(hn::BitCast(du, hn::Add(e, hn::Set(di, 127))));
  // Below 2^-126: the single fraction bit 2^(e + 149).
  const VI shift = hn::Min(hn::Max(hn::Add(e, hn::Set(di, 149)), hn::Zero(di)), hn::Set(di, 31));  // in range: no UB
  const VU sub_bits = hn::Set(du, 1U) << hn::BitCast(du, shift);
  return hn::BitCast(df, hn::IfThenElse(hn::RebindMask(du, hn::Lt(e, hn::Set(di, -126))), sub_bits, normal));
}

/// The default floating-point environment for a scope (round to nearest, exceptions masked, no flush-to-zero,
/// no denormals-are-zero), which the float32 steps of the peers' arithmetic assume; the caller's is restored.
class DefaultFpEnvironment {
 public:
#if HWY_ARCH_X86
  DefaultFpEnvironment() : csr_(_mm_getcsr()) { _mm_setcsr(0x1F80U); }
  ~DefaultFpEnvironment() { _mm_setcsr(csr_); }
#endif
  DefaultFpEnvironment(const DefaultFpEnvironment&) = delete;
  DefaultFpEnvironment& operator=(const DefaultFpEnvironment&) = delete;

 private:
#if HWY_ARCH_X86
  unsigned csr_;
#endif
};

/// Whether the floating-point environment is the default one the fast path relies on: round to nearest,
/// no flush-to-zero, no denormals-are-zero.
HWY_INLINE bool default_fp_environment() {
#if HWY_ARCH_X86
  return (_mm_getcsr() & 0xE040U) == 0;
#else
  return false;
#endif
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::block
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
