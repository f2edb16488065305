// The trainer's elementwise transcendental functions as SIMD kernels (engine/train: GELU's tanh, attention's
// softmax), on the best target the CPU supports, with Highway's vector tanh and exp (hwy/contrib/math).
#pragma once

#include <span>

namespace mxlab {

/// GELU's tanh approximation (Hendrycks and Gimpel 2016, eq. 2) of every x[i]: t[i] = tanh(fl(c fl(x + fl(fl(fl(a x) x)
/// x)))) with c = sqrt(2 / pi) and a = 0.044715 in float32, the tanh Highway's (within 4 ULP of the exact value),
/// and y[i] = fl(fl(0.5 x) fl(1 + t)). t and y hold x.size() values each.
void gelu_tanh(std::span<const float> x, std::span<float> t, std::span<float> y);

/// GELU's derivative times dy from the saved x and t of gelu_tanh, as the scalar expression
/// 0.5 (1 + t) + 0.5 x (1 - t t) c (1 + 3 a x x), multiplied by dy[i], each operation rounded in that order.
void gelu_tanh_backward(std::span<const float> x, std::span<const float> t, std::span<const float> dy,
                        std::span<float> dx);

/// y[i] = exp(x[i]) for x[i] <= 88 (Highway's exp, within 1 ULP of the exact value); y may alias x.
void exp_values(std::span<const float> x, std::span<float> y);

}  // namespace mxlab
