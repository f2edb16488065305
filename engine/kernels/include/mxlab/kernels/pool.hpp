// The trainer's 2x2 pooling (engine/train Pool2d) as a SIMD kernel on the best target the CPU supports.
#pragma once

#include <cstdint>
#include <limits>

namespace mxlab {

/// One output row of 2x2 pooling with stride 2 over an image in NHWC layout. top and bottom are the window's two
/// input rows (2 ow pixels of c channels each); out receives ow x c values and at ow x c window indices. Each
/// window's inputs are taken in the order top-left, top-right, bottom-left, bottom-right (index 0 to 3): with max,
/// out is the largest (a NaN never wins) and at the index of its first occurrence, 4 when no input is above
/// -infinity (out is then -infinity); without, out is fl(fl(fl(fl(0 + v0) + v1) + v2) + v3) * 0.25 and at is as
/// with max. Every value is the scalar loop's bit for bit.
/// The window index of a window with no input above -infinity.
constexpr std::uint8_t kPoolNoMaximum = 4;

/// One output of pool_2x2_row, the definition its vector lanes follow (and the trainer's in double): v holds the
/// window's four input rows in index order, ch the channel.
template <typename T>
inline void pool_2x2_window(const T* const (&v)[4], std::int64_t ch, bool max, T& out, std::uint8_t& at) {
  T best = -std::numeric_limits<T>::infinity(), sum = 0;
  std::uint8_t first = kPoolNoMaximum;
  for (std::uint8_t q = 0; q < 4; ++q) {
    const T value = v[q][ch];
    sum += value;
    const bool above = value > best;  // a NaN is never above
    best = above ? value : best;
    first = above ? q : first;
  }
  out = max ? best : sum * T(0.25);
  at = first;
}

void pool_2x2_row(const float* top, const float* bottom, std::int64_t ow, std::int64_t c, bool max, float* out,
                  std::uint8_t* at);

/// The gradient a window's input q (index order) takes from its output's gradient g, its first input gradient: with
/// max, 0 + g when q is the window's first maximum `at`, else 0 (kPoolNoMaximum: none); without, 0 + g * 0.25.
template <typename T>
inline T pool_2x2_input_gradient(T g, std::uint8_t at, bool max, std::uint8_t q) {
  return max ? (at == q ? T(0) + g : T(0)) : T(0) + g * T(0.25);
}

/// The backward pass of one output row of pool_2x2_row: g and at hold ow x c gradients and window indices; the
/// window's inputs in top and bottom (2 ow pixels of c channels each) receive pool_2x2_input_gradient, bit for bit.
void pool_2x2_backward_row(const float* g, const std::uint8_t* at, std::int64_t ow, std::int64_t c, bool max,
                           float* top, float* bottom);

}  // namespace mxlab
