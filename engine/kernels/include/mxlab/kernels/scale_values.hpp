// A tensor times a per-tensor scale, with its amax and saturation count (delayed scaling's first step,
// engine/ops FakeQuantizer::run_scaled, engine/train delayed_cast).
#pragma once

#include <cstdint>
#include <span>

namespace mxlab {

/// What scale_values reports of its input: the largest magnitude (NaN ignored, as fmax ignores it) and how many
/// scaled values exceed the limit in magnitude.
struct ScaleStats {
  float amax = 0.0F;
  std::int64_t above = 0;
};

/// scaled[i] = fl32(x[i] * scale) for every i < x.size() (scaled holds as many), with x's ScaleStats (above:
/// |scaled[i]| > limit), as a SIMD kernel on the best target the CPU supports; a maximum and a count do not
/// depend on the order they are taken in, so the results are a plain loop's.
ScaleStats scale_values(std::span<const float> x, float scale, float limit, std::span<float> scaled);

}  // namespace mxlab
