// Element casts without scales on the SIMD cast and decode kernels.
#include <cmath>

#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/quantize/quantize.hpp"
#include "ops_detail.hpp"

namespace mxlab::ops {

Result<std::size_t> fake_cast(const Format& f, const CastOptions& options, std::span<const float> x, std::span<float> out,
                              const Run& run, QuantizeResult* result) {
  if (out.size() < x.size()) return make_error("fake_cast: the output is shorter than the input");
  auto ck = CastKernel::make(f, options);
  if (!ck) return ck.error();
  auto dk = DecodeKernel::make(f);
  if (!dk) return make_error("format '" + f.name() + "': " + dk.error().message);
  std::vector<std::uint16_t> codes(x.size());
  KernelRun kr;
  kr.threads = run.threads;
  kr.seed = 0;
  if (auto n = ck->cast_f32(x, codes, kr); !n) return n.error();
  if (auto n = dk->decode(std::span<const std::uint16_t>(codes), out.first(x.size()), kr); !n) return n.error();
  if (result) {
    result->engine = detail::simd_engine();
    result->stats = ErrorStats{};
    const double max = f.max_finite();
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double xi = x[i];
      const std::uint8_t flags = std::isfinite(xi) && std::fabs(xi) > max ? QuantizedTensor::kOverflow : 0;
      result->stats.add(xi, out[i], flags);
    }
  }
  return x.size();
}

}  // namespace mxlab::ops
