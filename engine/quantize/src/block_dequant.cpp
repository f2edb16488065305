// The reference's dequantization: element codes times their block scales (and subtile offsets), exactly.
// SIMD twin: engine/kernels/src/block_dequant-inl.h.
#include <cmath>

#include "block_layout.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

std::vector<double> dequantize(const BlockFormat& f, const QuantizedTensor& q) {
  std::vector<double> out(q.codes.size());
  const BlockIndexer ix(q.shape, f.layout);
  const auto block_of = ix.block_of_all();
  std::vector<std::int64_t> sub_of;
  if (quantize_detail::has_subtiles(f.layout) && !q.subtile_offsets.empty())
    sub_of = BlockIndexer::subtiles(q.shape, f.layout).block_of_all();
  for (std::size_t i = 0; i < q.codes.size(); ++i) {
    const double e = f.element.decode(q.codes[i]);
    if (!f.layout.scale) {
      out[i] = e;
      continue;
    }
    double s = q.scale_values[static_cast<std::size_t>(block_of[i])];
    if (!sub_of.empty()) s = std::ldexp(s, -static_cast<int>(q.subtile_offsets[static_cast<std::size_t>(sub_of[i])]));
    out[i] = (s == 0 && std::isfinite(e)) ? 0.0 : e * s * q.tensor_scale;
  }
  return out;
}

}  // namespace mxlab
