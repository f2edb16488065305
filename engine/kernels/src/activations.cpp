// gelu_tanh, gelu_tanh_backward and exp_values (activations.hpp). Highway dynamic dispatch: foreach_target.h
// re-includes this file once per target; the dispatcher picks the best one the CPU supports at run time. Compiled
// with -ffp-contract=off: every product and sum outside Highway's tanh and exp is rounded as written.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "activations.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cstddef>

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "mxlab/kernels/activations.hpp"

HWY_BEFORE_NAMESPACE();
namespace mxlab::kernel_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kGeluC = 0.7978845608028654F;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715F;

// Calls f(offset, inputs...) -> outputs over n elements a vector at a time; the last partial vector goes through
// zero-padded buffers, so every element takes the same vector code.
template <class D, class F>
HWY_INLINE void for_vectors(D d, std::size_t n, const F& f) {
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) f(i, lanes);
  if (i < n) f(i, n - i);
}

template <class D>
HWY_INLINE hn::Vec<D> load_n(D d, const float* p, std::size_t count) {
  if (count == hn::Lanes(d)) return hn::LoadU(d, p);
  HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
  for (std::size_t j = 0; j < count; ++j) buf[j] = p[j];
  return hn::Load(d, buf);
}

template <class D>
HWY_INLINE void store_n(D d, hn::Vec<D> v, float* p, std::size_t count) {
  if (count == hn::Lanes(d)) return hn::StoreU(v, d, p);
  HWY_ALIGN float buf[hn::MaxLanes(d)];
  hn::Store(v, d, buf);
  for (std::size_t j = 0; j < count; ++j) p[j] = buf[j];
}

template <class D, class V>
HWY_INLINE V gelu_arg(D d, V v) {
  return hn::Mul(hn::Set(d, kGeluC), hn::Add(v, hn::Mul(hn::Mul(hn::Mul(hn::Set(d, kGeluA), v), v), v)));
}

void gelu_tanh_impl(const float* x, std::size_t n, float* t, float* y) {
  const hn::ScalableTag<float> d;
  const auto half = hn::Set(d, 0.5F), one = hn::Set(d, 1.0F);
  for_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto v = load_n(d, x + i, count);
    const auto th = hn::Tanh(d, gelu_arg(d, v));
    store_n(d, th, t + i, count);
    store_n(d, hn::Mul(hn::Mul(half, v), hn::Add(one, th)), y + i, count);
  });
}

void gelu_tanh_backward_impl(const float* x, const float* t, const float* dy, std::size_t n, float* dx) {
  const hn::ScalableTag<float> d;
  const auto half = hn::Set(d, 0.5F), one = hn::Set(d, 1.0F), three_a = hn::Set(d, 3.0F * kGeluA);
  const auto c = hn::Set(d, kGeluC);
  for_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto v = load_n(d, x + i, count);
    const auto th = load_n(d, t + i, count);
    const auto g = load_n(d, dy + i, count);
    // 0.5 (1 + t) + 0.5 v (1 - t t) c (1 + 3 a v v), left to right as the scalar expression groups it.
    const auto first = hn::Mul(half, hn::Add(one, th));
    const auto second = hn::Mul(hn::Mul(hn::Mul(hn::Mul(half, v), hn::Sub(one, hn::Mul(th, th))), c),
                                hn::Add(one, hn::Mul(hn::Mul(three_a, v), v)));
    store_n(d, hn::Mul(g, hn::Add(first, second)), dx + i, count);
  });
}

void exp_values_impl(const float* x, std::size_t n, float* y) {
  const hn::ScalableTag<float> d;
  for_vectors(d, n, [&](std::size_t i, std::size_t count) {
    store_n(d, hn::Exp(d, load_n(d, x + i, count)), y + i, count);
  });
}

}  // namespace mxlab::kernel_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mxlab {
namespace kernel_detail {

HWY_EXPORT(gelu_tanh_impl);
HWY_EXPORT(gelu_tanh_backward_impl);
HWY_EXPORT(exp_values_impl);

}  // namespace kernel_detail

void gelu_tanh(std::span<const float> x, std::span<float> t, std::span<float> y) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::gelu_tanh_impl)(x.data(), x.size(), t.data(), y.data());
}

void gelu_tanh_backward(std::span<const float> x, std::span<const float> t, std::span<const float> dy,
                        std::span<float> dx) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::gelu_tanh_backward_impl)(x.data(), t.data(), dy.data(), x.size(), dx.data());
}

void exp_values(std::span<const float> x, std::span<float> y) {
  HWY_DYNAMIC_DISPATCH(kernel_detail::exp_values_impl)(x.data(), x.size(), y.data());
}

}  // namespace mxlab
#endif  // HWY_ONCE
