// The trainer's convolution columns (engine/train Conv2d::im2col) as a SIMD kernel on the best target the CPU
// supports.
#pragma once

#include <cstdint>

namespace mxlab {

/// One output row of a k x k convolution's columns over one image in NHWC layout (height h, width w, c channels),
/// zero padding pad and stride s: out receives, for each of the ow output pixels (x = 0 .. ow - 1) of output row y,
/// its window's k * k * c values in (ky, kx, c) order, the image's value at (y s + ky - pad, x s + kx - pad) and
/// zero outside the image. Copies only: every value is the image's bit for bit.
void im2col_row(const float* image, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k, std::int64_t s,
                std::int64_t pad, std::int64_t y, std::int64_t ow, float* out);

}  // namespace mxlab
