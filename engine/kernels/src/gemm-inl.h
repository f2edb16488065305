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

/// Vectors per panel: two independent dot products per lane position, so that the sequential roundings of one
/// overlap with the other's.
constexpr std::size_t kVectors = 2;

/// Doubles of one panel row: kVectors vectors of lanes.
HWY_INLINE std::size_t panel_width() { return kVectors * hn::Lanes(D()); }

/// One dot product per lane, in the words of docs/gemm.md "Definition" (special values are the caller's). A panel
/// row holds kVectors vectors; every step runs on each of them.
class PanelDot {
 public:
  PanelDot(const GemmKernelModel& m, const GemmPanelCall& c)
      : m_(m), c_(c), product_(m.product), sum_(m.sum), acc_grid_(m.acc_rounding), fp32_(m.fp32) {
    for (std::size_t u = 0; u < kVectors; ++u) {
      acc_[u] = lo_[u] = outer_[u] = hn::Zero(D());
      redo_[u] = hn::FirstN(D(), 0);
    }
  }

  void run() {
    const D d;
    const std::size_t lanes = hn::Lanes(d), width = panel_width();
    const double* ae = m_.scale_product ? c_.a_scaled : c_.a_element;
    const double* be = m_.scale_product ? c_.b_scaled : c_.b_element;
    std::size_t k0 = 0;
    V scales[kVectors];
    for (std::size_t g = 0; g < c_.groups; ++g) {
      const auto k1 = static_cast<std::size_t>(c_.group_end[g]);
      for (std::size_t u = 0; u < kVectors; ++u)
        scales[u] = m_.scale_product ? hn::Set(d, 1.0)
                                     : hn::Mul(hn::Set(d, c_.a_scale[k0]), hn::LoadU(d, c_.b_scale + k0 * width + u * lanes));
      if (m_.plain_group_sum) {
        // Every partial sum is a double (the caller's bound): the products' exact sum in plain arithmetic, in any
        // order.
        V sum[kVectors];
        for (std::size_t u = 0; u < kVectors; ++u) sum[u] = hn::Zero(d);
        for (std::size_t k = k0; k < k1; ++k) {
          const V a = hn::Set(d, ae[k]);
          for (std::size_t u = 0; u < kVectors; ++u) sum[u] = hn::MulAdd(a, hn::LoadU(d, be + k * width + u * lanes), sum[u]);
        }
        for (std::size_t u = 0; u < kVectors; ++u) add_group_value(u, hn::Mul(sum[u], scales[u]));
      } else {
        const std::size_t n = k1 - k0;
        for (std::size_t k = k0; k < k1; ++k) {
          const V a = hn::Set(d, ae[k]);
          for (std::size_t u = 0; u < kVectors; ++u) {
            V p = hn::Mul(a, hn::LoadU(d, be + k * width + u * lanes));  // exact (the caller's bound)
            if (m_.round_product) p = round_grid(product_, p, redo_[u]);
            hn::StoreU(p, d, c_.scratch + (k - k0) * width + u * lanes);
          }
        }
        if (m_.acc == GemmKernelModel::Acc::Aligned) {
          aligned_step(n, scales);
        } else if (m_.round_sum) {
          V t[kVectors];
          rounded_group_sum(n, t);
          for (std::size_t u = 0; u < kVectors; ++u) add_group_value(u, hn::Mul(t[u], scales[u]));
        } else {
          exact_group(n, scales);
        }
      }
      if (c_.promote_after != nullptr && c_.promote_after[g] != 0) {
        for (std::size_t u = 0; u < kVectors; ++u) {
          outer_[u] = m_.acc == GemmKernelModel::Acc::Exact ? promote_exact(u)
                                                            : round_add(fp32_, outer_[u], acc_[u], redo_[u]);
          acc_[u] = hn::Zero(d);
          lo_[u] = hn::Zero(d);
        }
      }
      k0 = k1;
    }
    const V inf = hn::Set(d, std::numeric_limits<double>::infinity());
    for (std::size_t u = 0; u < kVectors; ++u) {
      M& redo = redo_[u];
      redo = hn::Or(redo, hn::Not(hn::Lt(hn::Abs(acc_[u]), inf)));
      redo = hn::Or(redo, hn::Not(hn::Lt(hn::Abs(lo_[u]), inf)));
      redo = hn::Or(redo, hn::Not(hn::Lt(hn::Abs(outer_[u]), inf)));
      hn::StoreU(acc_[u], d, c_.acc + u * lanes);
      hn::StoreU(lo_[u], d, c_.lo + u * lanes);
      hn::StoreU(outer_[u], d, c_.outer + u * lanes);
      hn::StoreU(hn::BitCast(DU(), hn::VecFromMask(d, redo)), DU(), c_.redo + u * lanes);
    }
  }

 private:
  /// outer + acc + lo (the exact accumulator) rounded once to FP32: two-sums give the exact sum as s + t + f; when
  /// f is 0 (it is unless the three span more than about 106 bits; else the lane is marked) a last two-sum gives the
  /// nearest double to s + t and its remainder, which round to odd and then to FP32.
  V promote_exact(std::size_t u) {
    V l, e, f, rest;
    const V h = two_sum(acc_[u], lo_[u], l);
    const V s = two_sum(outer_[u], h, e);
    const V t = two_sum(e, l, f);
    redo_[u] = hn::Or(redo_[u], hn::Ne(f, hn::Zero(D())));
    const V nearest = two_sum(s, t, rest);
    return round_grid(fp32_, odd_from_pair(nearest, rest), redo_[u]);
  }

  /// A group's value t (its sum times the block scales, exact) into vector u's accumulator.
  void add_group_value(std::size_t u, V t) {
    if (m_.acc == GemmKernelModel::Acc::Exact) add_exact(acc_[u], lo_[u], t, redo_[u]);
    else acc_[u] = round_add(acc_grid_, acc_[u], t, redo_[u]);
  }

  /// The products in scratch summed exactly (times the scales, exact) into the accumulators: exact ones, or float
  /// ones rounded once from the exact sum of the accumulator and the products.
  void exact_group(std::size_t n, const V* scales) {
    const D d;
    const std::size_t lanes = hn::Lanes(d), width = panel_width();
    V hi[kVectors], lo[kVectors];
    for (std::size_t u = 0; u < kVectors; ++u) {
      hi[u] = acc_[u];
      lo[u] = m_.acc == GemmKernelModel::Acc::Exact ? lo_[u] : hn::Zero(d);
    }
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t u = 0; u < kVectors; ++u)
        add_exact(hi[u], lo[u], hn::Mul(hn::LoadU(d, c_.scratch + t * width + u * lanes), scales[u]), redo_[u]);
    for (std::size_t u = 0; u < kVectors; ++u) {
      if (m_.acc == GemmKernelModel::Acc::Exact) {
        acc_[u] = hi[u];
        lo_[u] = lo[u];
        continue;
      }
      V rest;
      const V nearest = two_sum(hi[u], lo[u], rest);
      acc_[u] = round_grid(acc_grid_, odd_from_pair(nearest, rest), redo_[u]);
    }
  }

  /// The products in scratch added in the model's order, each addition rounded to the sum format, into out.
  void rounded_group_sum(std::size_t n, V* out) {
    const D d;
    const std::size_t lanes = hn::Lanes(d), width = panel_width();
    double* s = c_.scratch;
    if (m_.sequential) {
      for (std::size_t u = 0; u < kVectors; ++u) out[u] = hn::LoadU(d, s + u * lanes);
      for (std::size_t t = 1; t < n; ++t)
        for (std::size_t u = 0; u < kVectors; ++u)
          out[u] = round_add(sum_, out[u], hn::LoadU(d, s + t * width + u * lanes), redo_[u]);
      return;
    }
    while (n > 1) {
      std::size_t w = 0;
      for (std::size_t t = 0; t < n; t += 2, ++w)
        for (std::size_t u = 0; u < kVectors; ++u) {
          const V x = hn::LoadU(d, s + t * width + u * lanes);
          hn::StoreU(t + 1 < n ? round_add(sum_, x, hn::LoadU(d, s + (t + 1) * width + u * lanes), redo_[u]) : x, d,
                     s + w * width + u * lanes);
        }
      n = w;
    }
    for (std::size_t u = 0; u < kVectors; ++u) out[u] = hn::LoadU(d, s + u * lanes);
  }

  /// The accumulator and the group's products (times the scales) aligned to the largest exponent among them,
  /// aligned_bits kept, truncated or rounded to nearest-even, and summed exactly.
  void aligned_step(std::size_t n, const V* scales) {
    const D d;
    const DU du;
    const std::size_t lanes = hn::Lanes(d), width = panel_width();
    double* s = c_.scratch;
    V largest[kVectors], inv[kVectors], quantum[kVectors], units[kVectors];
    for (std::size_t u = 0; u < kVectors; ++u) largest[u] = hn::Abs(acc_[u]);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t u = 0; u < kVectors; ++u) {
        const V q = hn::Mul(hn::LoadU(d, s + t * width + u * lanes), scales[u]);
        hn::StoreU(q, d, s + t * width + u * lanes);
        largest[u] = hn::Max(largest[u], hn::Abs(q));
      }
    for (std::size_t u = 0; u < kVectors; ++u) {
      const V pow = hn::BitCast(d, hn::And(hn::BitCast(du, largest[u]), hn::Set(du, kExponentMask)));
      quantum[u] = hn::Mul(pow, hn::Set(d, std::ldexp(1.0, 1 - m_.aligned_bits)));
      const M zero = hn::Eq(largest[u], hn::Zero(d));
      // Not finite, a subnormal double, or a quantum whose reciprocal is no double: the scalar definition.
      const M odd = hn::And(hn::Not(zero), hn::Or(hn::Not(hn::Le(quantum[u], hn::Set(d, std::ldexp(1.0, 1000)))),
                                                  hn::Lt(quantum[u], hn::Set(d, std::ldexp(1.0, -1000)))));
      redo_[u] = hn::Or(redo_[u], odd);
      quantum[u] = hn::IfThenElse(hn::Or(zero, odd), hn::Set(d, 1.0), quantum[u]);
      inv[u] = reciprocal_pow2(quantum[u]);
    }
    auto keep = [&](V x, std::size_t u) {
      const V scaled = hn::Mul(x, inv[u]);
      return m_.aligned_nearest ? hn::Round(scaled) : hn::Trunc(scaled);
    };
    // Exact in any order (at most aligned_bits + log2(n + 1) bits).
    for (std::size_t u = 0; u < kVectors; ++u) units[u] = keep(acc_[u], u);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t u = 0; u < kVectors; ++u) units[u] = hn::Add(units[u], keep(hn::LoadU(d, s + t * width + u * lanes), u));
    for (std::size_t u = 0; u < kVectors; ++u) acc_[u] = hn::Add(hn::Mul(units[u], quantum[u]), hn::Zero(d));
  }

  const GemmKernelModel& m_;
  const GemmPanelCall& c_;
  Grid product_, sum_, acc_grid_, fp32_;
  V acc_[kVectors], lo_[kVectors], outer_[kVectors];
  M redo_[kVectors];
};

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE::gemm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
