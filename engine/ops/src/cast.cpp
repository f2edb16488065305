// Element casts without scales on the SIMD cast and decode kernels.
#include <algorithm>
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
    // Counts exactly; the squared errors (each exact in double, as a difference of two float32 values close in
    // magnitude or of a value and zero) summed in double per 4096 elements, then exactly: a metric for training
    // runs, not the exact analysis (that is ops::analyze).
    result->engine = detail::simd_engine();
    ErrorStats& st = result->stats;
    st = ErrorStats{};
    const double max = f.max_finite();
    for (std::size_t first = 0; first < x.size(); first += 4096) {
      const std::size_t last = std::min(x.size(), first + 4096);
      double sse = 0, signal = 0, esum = 0;
      for (std::size_t i = first; i < last; ++i) {
        const double xi = x[i], qi = out[i];
        if (std::isnan(qi)) {
          ++st.nan_outputs;
          continue;
        }
        if (!std::isfinite(xi) || !std::isfinite(qi)) continue;
        ++st.count;
        st.nonzero_inputs += xi != 0;
        st.underflows += xi != 0 && qi == 0;
        st.saturations += std::fabs(xi) > max;
        const double e = qi - xi;
        sse += e * e;
        signal += xi * xi;
        esum += e;
        st.max_abs_error = std::max(st.max_abs_error, std::fabs(e));
      }
      st.sse.add(sse);
      st.signal.add(signal);
      st.error_sum.add(esum);
    }
  }
  return x.size();
}

}  // namespace mxlab::ops
