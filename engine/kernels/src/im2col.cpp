// im2col_row (im2col.hpp). Highway dynamic dispatch: foreach_target.h re-includes this file once per target; the
// dispatcher picks the best one the CPU supports at run time. A window row's taps inside the image are
// neighbouring pixels, (last - first) * c contiguous values: whole vectors and, on AVX-512, one masked vector for
// the rest (a first layer's 3 x 1 channel taps are one masked load and store, not a library call); elsewhere a
// scalar remainder.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "im2col.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>

#include <hwy/highway.h>

#include "mxlab/kernels/im2col.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kMaskedRest = true;  // masked loads and stores touch no memory past the lanes kept
#else
constexpr bool kMaskedRest = false;
#endif

/// to[0, n) = from[0, n) (from null: zeros).
HWY_INLINE void copy_or_zero(const float* from, std::int64_t n, float* to) {
  const hn::ScalableTag<float> d;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(from != nullptr ? hn::LoadU(d, from + i) : hn::Zero(d), d, to + i);
  if (i == n) return;
  if constexpr (kMaskedRest) {
    const auto m = hn::FirstN(d, static_cast<std::size_t>(n - i));
    hn::BlendedStore(from != nullptr ? hn::MaskedLoad(m, d, from + i) : hn::Zero(d), m, d, to + i);
  } else {
    for (; i < n; ++i) to[i] = from != nullptr ? from[i] : 0.0F;
  }
}

void im2col_row_impl(const float* image, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k,
                     std::int64_t s, std::int64_t pad, std::int64_t y, std::int64_t ow, float* out) {
  const std::int64_t row = k * c;
  for (std::int64_t x = 0; x < ow; ++x) {
    float* o = out + x * k * row;
    const std::int64_t sx0 = x * s - pad;
    const std::int64_t first = std::clamp<std::int64_t>(-sx0, 0, k);
    const std::int64_t last = std::clamp<std::int64_t>(w - sx0, first, k);
    for (std::int64_t ky = 0; ky < k; ++ky, o += row) {
      const std::int64_t sy = y * s + ky - pad;
      if (sy < 0 || sy >= h) {
        copy_or_zero(nullptr, row, o);
        continue;
      }
      if (first > 0) copy_or_zero(nullptr, first * c, o);
      copy_or_zero(image + (sy * w + sx0 + first) * c, (last - first) * c, o + first * c);
      if (last < k) copy_or_zero(nullptr, (k - last) * c, o + last * c);
    }
  }
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(im2col_row_impl);

}  // namespace kernel_detail

void im2col_row(const float* image, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k, std::int64_t s,
                std::int64_t pad, std::int64_t y, std::int64_t ow, float* out) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::im2col_row_impl)(image, h, w, c, k, s, pad, y, ow, out);
}

}  // namespace mxlab
#endif  // HWY_ONCE
