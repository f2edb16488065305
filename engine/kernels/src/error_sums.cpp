// plain_error_sums (error_sums.hpp): counts and the in-order sum of squared errors, a chunk of terms at a time.
// Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the dispatcher picks the
// best one the CPU supports at run time.
//
// The plain loop adds each term t = e * e to the running sum s, rounded. While s stays in one binade
// [2^(k-1), 2^k), every rounded sum is a multiple of u = 2^(k-53) = ulp(s), and s + t rounds to s plus the
// multiple of u nearest to t, whatever s is, unless t / u lies exactly halfway between two integers (then the
// even neighbour depends on s). So a chunk's terms, each divided by u (exact: a power of two) and rounded to an
// integer, add up in any order to the integer the plain loop adds to s / u, as long as no term is a tie and
// s / u plus that integer stays below 2^53 (the binade's end): the integers are then below 2^53, every partial
// sum exact. A chunk that breaks either condition, and the terms while s is zero or far from 1, run the plain
// loop itself.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "error_sums.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "mxlab/kernels/error_sums.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Terms per chunk: a multiple of every target's lanes.
constexpr std::size_t kChunk = 1024;

/// The plain loop's sum over [i, end) from s.
inline double plain_sum(double s, const float* x, const float* out, std::size_t i, std::size_t end) {
  for (; i < end; ++i) {
    const double e = static_cast<double>(out[i]) - static_cast<double>(x[i]);
    s += e * e;
  }
  return s;
}

/// Whether the chunk [i, i + kChunk) adds to s as a whole (see the file's comment); then *s is the plain loop's sum.
inline bool chunk_sum(double* s, const float* x, const float* out, std::size_t i) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> dh;
  const std::size_t lanes = hn::Lanes(d);
  int k = 0;
  std::frexp(*s, &k);  // s in [2^(k-1), 2^k)
  const double inv_u = std::ldexp(1.0, 53 - k);
  const auto inv = hn::Set(d, inv_u);
  const auto magic = hn::Set(d, 0x1p52);
  auto total = hn::Zero(d), q_max = hn::Zero(d), d_max = hn::Zero(d);
  for (std::size_t j = i; j < i + kChunk; j += lanes) {
    const auto e = hn::Sub(hn::PromoteTo(d, hn::LoadU(dh, out + j)), hn::PromoteTo(d, hn::LoadU(dh, x + j)));
    const auto q = hn::Mul(hn::Mul(e, e), inv);      // t / u, exact (or below 2^-1022: rounds to 0 either way)
    const auto r = hn::Sub(hn::Add(q, magic), magic);  // the nearest integer, ties to even, for q below 2^51
    total = hn::Add(total, r);
    q_max = hn::Max(q_max, q);
    d_max = hn::Max(d_max, hn::Abs(hn::Sub(q, r)));  // 1/2 only at a tie
  }
  const double base = *s * inv_u;  // an integer in [2^52, 2^53)
  const double sum = hn::GetLane(hn::SumOfLanes(d, total));
  // A NaN or infinite term makes sum NaN or infinite: the comparison fails.
  if (!(hn::GetLane(hn::MaxOfLanes(d, d_max)) < 0.5 && hn::GetLane(hn::MaxOfLanes(d, q_max)) < 0x1p51 &&
        sum < 0x1p53 - base))
    return false;
  *s = (base + sum) / inv_u;
  return true;
}

PlainErrorSums plain_error_sums_impl(const float* x, const float* out, std::size_t n) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  PlainErrorSums r;
  std::size_t i = 0;
  const auto zero = hn::Zero(df);
  for (; i + lanes <= n; i += lanes) {
    const auto nz = hn::Ne(hn::LoadU(df, x + i), zero);
    r.nonzero += static_cast<std::int64_t>(hn::CountTrue(df, nz));
    r.underflow += static_cast<std::int64_t>(hn::CountTrue(df, hn::And(nz, hn::Eq(hn::LoadU(df, out + i), zero))));
  }
  for (; i < n; ++i) {
    r.nonzero += x[i] != 0.0F ? 1 : 0;
    r.underflow += (x[i] != 0.0F && out[i] == 0.0F) ? 1 : 0;
  }
  double s = 0;
  i = 0;
  while (i < n) {
    if (!(s >= 0x1p-900 && s < 0x1p900)) {  // zero, tiny, huge or NaN: one term
      s = plain_sum(s, x, out, i, i + 1);
      ++i;
    } else if (i + kChunk <= n) {
      if (!chunk_sum(&s, x, out, i)) s = plain_sum(s, x, out, i, i + kChunk);
      i += kChunk;
    } else {
      s = plain_sum(s, x, out, i, n);
      i = n;
    }
  }
  r.sse = s;
  return r;
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(plain_error_sums_impl);

}  // namespace kernel_detail

PlainErrorSums plain_error_sums(std::span<const float> x, std::span<const float> out) {
  return HWY_DYNAMIC_DISPATCH(kernel_detail::plain_error_sums_impl)(x.data(), out.data(), x.size());
}

}  // namespace mxlab
#endif  // HWY_ONCE
