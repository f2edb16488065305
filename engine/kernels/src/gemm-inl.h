// The GEMM accumulation models in double lanes, a column of C per lane (gemm_kernel.hpp, docs/gemm.md "Speed"):
// error-free additions, rounding to odd, rounding to a float grid, the aligned adder. Included once per Highway
// target by gemm_kernel.cpp.

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(MXLAB_KERNELS_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MXLAB_KERNELS_GEMM_INL_H_
#undef MXLAB_KERNELS_GEMM_INL_H_
#else
#define MXLAB_KERNELS_GEMM_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <hwy/highway.h>

#include "mxlab/kernels/gemm_kernel.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE::gemm {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<double>;
using DU = hn::RebindToUnsigned<D>;
using V = hn::Vec<D>;
using VU = hn::Vec<DU>;
using M = hn::Mask<D>;

constexpr std::uint64_t kExponentMask = 0x7FF0000000000000ULL;
constexpr std::uint64_t kSignMask = 0x8000000000000000ULL;

/// 1 / x for a power of two x in [2^-1021, 2^1022], exactly, from its bits.
HWY_INLINE V reciprocal_pow2(V x) {
  const DU du;
  return hn::BitCast(D(), hn::Sub(hn::Set(du, 0x7FE0000000000000ULL), hn::BitCast(du, x)));
}

/// a + b = s + err exactly (Knuth's two-sum).
HWY_INLINE V two_sum(V a, V b, V& err) {
  const V s = hn::Add(a, b);
  const V bv = hn::Sub(s, a);
  err = hn::Add(hn::Sub(a, hn::Sub(s, bv)), hn::Sub(b, bv));
  return s;
}

/// hi + lo rounded to odd at 53 bits, where hi is the nearest double to hi + lo (arith.hpp's odd_from_pair).
HWY_INLINE V odd_from_pair(V hi, V lo) {
  const D d;
  const DU du;
  const VU bits = hn::BitCast(du, hi);
  const M even = hn::RebindMask(d, hn::Eq(hn::And(bits, hn::Set(du, 1)), hn::Zero(du)));
  const M away = hn::RebindMask(d, hn::Eq(hn::And(hn::Xor(bits, hn::BitCast(du, lo)), hn::Set(du, kSignMask)), hn::Zero(du)));
  const VU stepped = hn::IfThenElse(hn::RebindMask(du, away), hn::Add(bits, hn::Set(du, 1)), hn::Sub(bits, hn::Set(du, 1)));
  return hn::IfThenElse(hn::And(hn::Ne(lo, hn::Zero(d)), even), hn::BitCast(d, stepped), hi);
}

/// A GemmRounding in lanes.
struct Grid {
  V min_pow;   ///< 2^min_exponent
  V step;      ///< 2^(1 - precision)
  V max;       ///< max_finite
  bool saturate = false;
  Rounding mode = Rounding::NearestEven;

  explicit Grid(const GemmRounding& r)
      : min_pow(hn::Set(D(), std::ldexp(1.0, r.min_exponent))), step(hn::Set(D(), std::ldexp(1.0, 1 - r.precision))),
        max(hn::Set(D(), r.max_finite)), saturate(r.saturate), mode(r.mode) {}
};

/// The integer-valued double nearest u in the grid's rounding mode (|u| < 2^53).
HWY_INLINE V round_integer(Rounding mode, V u) {
  const D d;
  switch (mode) {
    case Rounding::NearestEven: return hn::Round(u);
    case Rounding::TowardZero: return hn::Trunc(u);
    case Rounding::Up: return hn::Ceil(u);
    case Rounding::Down: return hn::Floor(u);
    default: break;
  }
  const V t = hn::Trunc(u);
  const V away = hn::Add(t, hn::CopySign(hn::Set(d, 1.0), u));
  if (mode == Rounding::Odd) {
    // Codes of a float grid are consecutive integers of quanta: an inexact result takes the odd one.
    const V half = hn::Mul(t, hn::Set(d, 0.5));
    return hn::IfThenElse(hn::And(hn::Ne(u, t), hn::Eq(hn::Trunc(half), half)), away, t);
  }
  const V frac = hn::Abs(hn::Sub(u, t));
  const M up = mode == Rounding::NearestAway ? hn::Ge(frac, hn::Set(d, 0.5)) : hn::Gt(frac, hn::Set(d, 0.5));
  return hn::IfThenElse(up, away, t);
}

/// x (an exact value, or one rounded to odd at 53 bits) rounded to the grid; zero is +0. A result beyond the
/// grid's largest value saturates (the cast's overflow to the largest code, in every rounding mode) or, for grids
/// with infinities, joins `redo`, as does a lane whose x is not finite.
HWY_INLINE V round_grid(const Grid& g, V x, M& redo) {
  const D d;
  const DU du;
  V pow = hn::BitCast(d, hn::And(hn::BitCast(du, hn::Abs(x)), hn::Set(du, kExponentMask)));  // 2^floor(log2|x|)
  pow = hn::Max(pow, g.min_pow);
  const V quantum = hn::Mul(pow, g.step);
  V y = hn::Mul(round_integer(g.mode, hn::Mul(x, reciprocal_pow2(quantum))), quantum);
  if (g.saturate) {
    redo = hn::Or(redo, hn::Not(hn::Lt(hn::Abs(x), hn::Set(d, std::numeric_limits<double>::infinity()))));
    y = hn::Min(hn::Max(y, hn::Neg(g.max)), g.max);
  } else {
    redo = hn::Or(redo, hn::Not(hn::Le(hn::Abs(y), g.max)));
  }
  return hn::Add(y, hn::Zero(d));
}

/// x + y rounded to the grid (one rounding of the exact sum).
HWY_INLINE V round_add(const Grid& g, V x, V y, M& redo) {
  V lo;
  const V s = two_sum(x, y, lo);
  return round_grid(g, odd_from_pair(s, lo), redo);
}

/// hi + lo += t exactly (two two-sums); a lane whose second error is not zero joins `redo`.
HWY_INLINE void add_exact(V& hi, V& lo, V t, M& redo) {
  V e1, e2;
  hi = two_sum(hi, t, e1);
  lo = two_sum(lo, e1, e2);
  redo = hn::Or(redo, hn::Ne(e2, hn::Zero(D())));
}

/// One dot product per lane, in the words of docs/gemm.md "Definition" (special values are the caller's).
class PanelDot {
 public:
  PanelDot(const GemmKernelModel& m, const GemmPanelCall& c)
      : m_(m), c_(c), product_(m.product), sum_(m.sum), acc_grid_(m.acc_rounding), fp32_(m.fp32) {}

  void run() {
    const D d;
    const std::size_t lanes = hn::Lanes(d);
    const double* ae = m_.scale_product ? c_.a_scaled : c_.a_element;
    const double* be = m_.scale_product ? c_.b_scaled : c_.b_element;
    std::size_t k0 = 0;
    for (std::size_t g = 0; g < c_.groups; ++g) {
      const auto k1 = static_cast<std::size_t>(c_.group_end[g]);
      const V scales = m_.scale_product ? hn::Set(d, 1.0)
                                        : hn::Mul(hn::Set(d, c_.a_scale[k0]), hn::LoadU(d, c_.b_scale + k0 * lanes));
      if (m_.plain_group_sum) {
        // Every partial sum is a double (the caller's bound): the products' exact sum in plain arithmetic, in any
        // order, so in two independent chains.
        V sum0 = hn::Zero(d), sum1 = hn::Zero(d);
        std::size_t k = k0;
        for (; k + 1 < k1; k += 2) {
          sum0 = hn::MulAdd(hn::Set(d, ae[k]), hn::LoadU(d, be + k * lanes), sum0);
          sum1 = hn::MulAdd(hn::Set(d, ae[k + 1]), hn::LoadU(d, be + (k + 1) * lanes), sum1);
        }
        if (k < k1) sum0 = hn::MulAdd(hn::Set(d, ae[k]), hn::LoadU(d, be + k * lanes), sum0);
        add_group_value(hn::Mul(hn::Add(sum0, sum1), scales));
      } else {
        const std::size_t n = k1 - k0;
        for (std::size_t k = k0; k < k1; ++k) {
          V p = hn::Mul(hn::Set(d, ae[k]), hn::LoadU(d, be + k * lanes));  // exact (the caller's bound)
          if (m_.round_product) p = round_grid(product_, p, redo_);
          hn::StoreU(p, d, c_.scratch + (k - k0) * lanes);
        }
        if (m_.acc == GemmKernelModel::Acc::Aligned) aligned_step(n, scales);
        else if (m_.round_sum) add_group_value(hn::Mul(rounded_group_sum(n), scales));
        else exact_group(n, scales);
      }
      if (c_.promote_after != nullptr && c_.promote_after[g] != 0) {
        outer_ = m_.acc == GemmKernelModel::Acc::Exact ? promote_exact() : round_add(fp32_, outer_, acc_, redo_);
        acc_ = hn::Zero(d);
        lo_ = hn::Zero(d);
      }
      k0 = k1;
    }
    const V inf = hn::Set(d, std::numeric_limits<double>::infinity());
    redo_ = hn::Or(redo_, hn::Not(hn::Lt(hn::Abs(acc_), inf)));
    redo_ = hn::Or(redo_, hn::Not(hn::Lt(hn::Abs(lo_), inf)));
    redo_ = hn::Or(redo_, hn::Not(hn::Lt(hn::Abs(outer_), inf)));
    hn::StoreU(acc_, d, c_.acc);
    hn::StoreU(lo_, d, c_.lo);
    hn::StoreU(outer_, d, c_.outer);
    hn::StoreU(hn::BitCast(DU(), hn::VecFromMask(d, redo_)), DU(), c_.redo);
  }

 private:
  /// outer + acc + lo (the exact accumulator) rounded once to FP32: two-sums give the exact sum as s + t + f; when
  /// f is 0 (it is unless the three span more than about 106 bits; else the lane is marked) a last two-sum gives the
  /// nearest double to s + t and its remainder, which round to odd and then to FP32.
  V promote_exact() {
    V l, e, f, rest;
    const V h = two_sum(acc_, lo_, l);
    const V s = two_sum(outer_, h, e);
    const V t = two_sum(e, l, f);
    redo_ = hn::Or(redo_, hn::Ne(f, hn::Zero(D())));
    const V nearest = two_sum(s, t, rest);
    return round_grid(fp32_, odd_from_pair(nearest, rest), redo_);
  }

  /// A group's value t (its sum times the block scales, exact) into the accumulator.
  void add_group_value(V t) {
    if (m_.acc == GemmKernelModel::Acc::Exact) add_exact(acc_, lo_, t, redo_);
    else acc_ = round_add(acc_grid_, acc_, t, redo_);
  }

  /// The products in scratch summed exactly (times the scales, exact) into the accumulator: an exact one, or a
  /// float one rounded once from the exact sum of it and the products.
  void exact_group(std::size_t n, V scales) {
    const D d;
    const std::size_t lanes = hn::Lanes(d);
    // Two independent pairs (even and odd products), joined exactly at the end.
    V hi = acc_, lo = m_.acc == GemmKernelModel::Acc::Exact ? lo_ : hn::Zero(d);
    V hi1 = hn::Zero(d), lo1 = hn::Zero(d);
    std::size_t t = 0;
    for (; t + 1 < n; t += 2) {
      add_exact(hi, lo, hn::Mul(hn::LoadU(d, c_.scratch + t * lanes), scales), redo_);
      add_exact(hi1, lo1, hn::Mul(hn::LoadU(d, c_.scratch + (t + 1) * lanes), scales), redo_);
    }
    if (t < n) add_exact(hi, lo, hn::Mul(hn::LoadU(d, c_.scratch + t * lanes), scales), redo_);
    add_exact(hi, lo, hi1, redo_);
    add_exact(hi, lo, lo1, redo_);
    if (m_.acc == GemmKernelModel::Acc::Exact) {
      acc_ = hi;
      lo_ = lo;
      return;
    }
    V rest;
    const V nearest = two_sum(hi, lo, rest);
    acc_ = round_grid(acc_grid_, odd_from_pair(nearest, rest), redo_);
  }

  /// The products in scratch added in the model's order, each addition rounded to the sum format.
  V rounded_group_sum(std::size_t n) {
    const D d;
    const std::size_t lanes = hn::Lanes(d);
    double* s = c_.scratch;
    if (m_.sequential) {
      V acc = hn::LoadU(d, s);
      for (std::size_t t = 1; t < n; ++t) acc = round_add(sum_, acc, hn::LoadU(d, s + t * lanes), redo_);
      return acc;
    }
    while (n > 1) {
      std::size_t w = 0;
      for (std::size_t t = 0; t < n; t += 2, ++w) {
        const V x = hn::LoadU(d, s + t * lanes);
        hn::StoreU(t + 1 < n ? round_add(sum_, x, hn::LoadU(d, s + (t + 1) * lanes), redo_) : x, d, s + w * lanes);
      }
      n = w;
    }
    return hn::LoadU(d, s);
  }

  /// The accumulator and the group's products (times the scales) aligned to the largest exponent among them,
  /// aligned_bits kept, truncated or rounded to nearest-even, and summed exactly.
  void aligned_step(std::size_t n, V scales) {
    const D d;
    const DU du;
    const std::size_t lanes = hn::Lanes(d);
    double* s = c_.scratch;
    V largest = hn::Abs(acc_);
    for (std::size_t t = 0; t < n; ++t) {
      const V q = hn::Mul(hn::LoadU(d, s + t * lanes), scales);
      hn::StoreU(q, d, s + t * lanes);
      largest = hn::Max(largest, hn::Abs(q));
    }
    const V pow = hn::BitCast(d, hn::And(hn::BitCast(du, largest), hn::Set(du, kExponentMask)));
    V quantum = hn::Mul(pow, hn::Set(d, std::ldexp(1.0, 1 - m_.aligned_bits)));
    const M zero = hn::Eq(largest, hn::Zero(d));
    // Not finite, a subnormal double, or a quantum whose reciprocal is no double: the scalar definition.
    const M odd = hn::And(hn::Not(zero), hn::Or(hn::Not(hn::Le(quantum, hn::Set(d, std::ldexp(1.0, 1000)))),
                                                hn::Lt(quantum, hn::Set(d, std::ldexp(1.0, -1000)))));
    redo_ = hn::Or(redo_, odd);
    quantum = hn::IfThenElse(hn::Or(zero, odd), hn::Set(d, 1.0), quantum);
    const V inv = reciprocal_pow2(quantum);
    auto keep = [&](V x) {
      const V units = hn::Mul(x, inv);
      return m_.aligned_nearest ? hn::Round(units) : hn::Trunc(units);
    };
    // Exact in any order (at most aligned_bits + log2(n + 1) bits): two chains.
    V units = keep(acc_), units1 = hn::Zero(d);
    std::size_t t = 0;
    for (; t + 1 < n; t += 2) {
      units = hn::Add(units, keep(hn::LoadU(d, s + t * lanes)));
      units1 = hn::Add(units1, keep(hn::LoadU(d, s + (t + 1) * lanes)));
    }
    if (t < n) units = hn::Add(units, keep(hn::LoadU(d, s + t * lanes)));
    acc_ = hn::Add(hn::Mul(hn::Add(units, units1), quantum), hn::Zero(d));
  }

  const GemmKernelModel& m_;
  const GemmPanelCall& c_;
  Grid product_, sum_, acc_grid_, fp32_;
  V acc_ = hn::Zero(D()), lo_ = hn::Zero(D()), outer_ = hn::Zero(D());
  M redo_ = hn::FirstN(D(), 0);
};

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::gemm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
