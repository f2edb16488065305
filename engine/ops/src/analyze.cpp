// ops::analyze: the kernels' fused exact metrics, chunk by chunk, plus, under --gaps, one pass over each chunk's
// input and values for the exponent-gap histogram and errors by gap. The scalar reference where a kernel refuses
// the format.
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "mxlab/core/bits.hpp"
#include "mxlab/quantize/pack.hpp"
#include "ops_detail.hpp"

namespace mxlab::ops {
namespace {


/// What one thread's share of a chunk adds to the fused metrics under --gaps: the exponent-gap histogram and
/// errors by gap. A gap floor(log2 amax) - floor(log2 |x|) of float32 numbers lies in [0, kGaps).
struct GapExtra {
  static constexpr int kGaps = 280;
  std::vector<std::int64_t> histogram = std::vector<std::int64_t>(kGaps, 0);
  std::vector<ErrorStats> by_gap = std::vector<ErrorStats>(kGaps);
  std::map<int, std::int64_t> other_histogram;  ///< gaps outside [0, kGaps)
  std::map<int, ErrorStats> other_by_gap;
  bool beyond_float32 = false;  ///< a finite input whose float32 fake value is infinite
};

/// The gaps of elements [i0, i1) of the tensor (dequantized values from deq[0] = element e0; amax[b - b0] of
/// block b).
template <class V>
void gap_pass(const TensorSource& input, const V* deq, std::int64_t e0, std::int64_t i0, std::int64_t i1,
              const float* amax, std::int64_t row, std::int64_t block, std::int64_t per_row, std::int64_t b0,
              GapExtra& out) {
  const Tensor* t = input.tensor();
  const float* xf = t != nullptr && t->f32_is_exact() ? t->data().data() : nullptr;
  for (std::int64_t i = i0; i < i1; ++i) {
    // Kernel inputs are float32-exact, so x is a float.
    const float x = xf != nullptr ? xf[i] : static_cast<float>(input.value(static_cast<std::size_t>(i)));
    const V d = deq[i - e0];
    if (!std::isfinite(x) || x == 0) continue;
    if (std::isinf(d)) {
      out.beyond_float32 = true;
      continue;
    }
    const std::int64_t r = i / row;
    const std::int64_t b = r * per_row + (i - r * row) / block;
    const double a = amax[b - b0];
    if (!(a > 0)) continue;
    const int g = floor_log2(a) - floor_log2(x);
    if (g < 0 || g >= GapExtra::kGaps) {  // an amax below |x| (N:M sparsity prunes before the block maxima)
      ++out.other_histogram[g];
      out.other_by_gap[g].add(x, static_cast<double>(d), 0);
      continue;
    }
    ++out.histogram[static_cast<std::size_t>(g)];
    out.by_gap[static_cast<std::size_t>(g)].add(x, static_cast<double>(d), 0);
  }
}

/// Float block scales (and tensor scales): a value is decode(code) * s * g, whose float32 rounding the kernels'
/// fake values hold; the exact doubles come from the packed codes and scales of the same pass.
bool float_scaled(const BlockFormat& f) {
  return f.layout.tensor_scale.has_value() || f.options.rule == ScaleRule::Amax ||
         f.options.rule == ScaleRule::FourOverSix;
}

/// Exact values of a chunk (elements [e0, e1), blocks [b0, b1)) from its packed codes, checked against the
/// kernel's float32 values: false where a value is not decode(code) * s * g (the caller then uses the reference).
bool exact_chunk_values(const BlockKernel& kernel, const BlockFormat& f, const BlockInput& x,
                        const std::vector<std::int64_t>& shape, const BlockRun& br, double g,
                        const std::vector<double>& table, std::int64_t e0, std::int64_t e1, std::int64_t b0,
                        std::int64_t b1, const std::vector<float>& fake, std::vector<double>& out) {
  const auto n = static_cast<std::size_t>(e1 - e0);
  std::vector<std::uint8_t> el(kernel.packed_element_bytes(n));
  std::vector<std::uint8_t> sc(static_cast<std::size_t>(b1 - b0) * kernel.scale_bytes());
  TensorScale ts;
  if (!kernel.quantize_packed(x, shape, el, sc, br, nullptr, &ts).ok()) return false;
  const int bits = f.element.bits();
  std::vector<std::uint32_t> codes = unpack_codes(el, n, bits, f.options.nibble_order);
  const bool sm = f.options.int_encoding == IntEncoding::SignMagnitude && f.element.kind() == FormatKind::Integer &&
                  f.element.is_signed();
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t k = kernel.block_size(row);
  const std::int64_t per_row = (row + k - 1) / k;
  const std::size_t sb = kernel.scale_bytes();
  out.resize(n);
  for (std::int64_t b = b0; b < b1; ++b) {
    std::uint32_t scode = 0;
    for (std::size_t j = 0; j < sb; ++j) scode |= std::uint32_t{sc[static_cast<std::size_t>(b - b0) * sb + j]} << (8 * j);
    const double s = f.layout.scale->decode(scode);
    const std::int64_t r = b / per_row;
    const std::int64_t first = r * row + (b - r * per_row) * k;
    const std::int64_t last = std::min(first + k, (r + 1) * row);
    for (std::int64_t i = first; i < last; ++i) {
      const auto li = static_cast<std::size_t>(i - e0);
      const std::uint32_t c = sm ? from_sign_magnitude(codes[li], bits) : codes[li];
      const double e = table[c];
      const double v = s == 0 ? e : e * s * g;
      const float want = fake[li];
      if (std::bit_cast<std::uint32_t>(static_cast<float>(v)) != std::bit_cast<std::uint32_t>(want) &&
          !(std::isnan(v) && std::isnan(want)))
        return false;
      out[li] = v;
    }
  }
  return true;
}

/// The reference: mxlab::quantize and mxlab::analyze on the whole tensor's exact values.
Result<FormatAnalysis> analyze_reference(const BlockFormat& f, const TensorSource& input, const AnalyzeOptions& o,
                                         std::string engine) {
  std::vector<double> x(input.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = input.value(i);
  auto q = quantize(f, x, input.shape());
  if (!q) return make_error("format '" + f.name + "': " + q.error().message);
  Analysis a = analyze(f, x, *q);
  FormatAnalysis r;
  r.format = f;
  r.engine = std::move(engine);
  r.total = a.total;
  r.bits_per_element = a.bits_per_element;
  if (o.gaps) {
    r.gap_histogram = std::move(a.gap_histogram);
    r.by_gap = std::move(a.by_gap);
  }
  if (o.per_block) {
    r.blocks.resize(a.blocks.size());
    for (std::size_t b = 0; b < a.blocks.size(); ++b) {
      r.blocks[b].amax = q->block_amax[b];
      r.blocks[b].scale = q->scale_values[b] * q->tensor_scale;
      r.blocks[b].stats = std::move(a.blocks[b]);
    }
  }
  return r;
}

Result<FormatAnalysis> analyze_kernel(const BlockKernel& kernel, const BlockFormat& f, const TensorSource& input,
                                      const AnalyzeOptions& o, const Run& run) {
  FormatAnalysis r;
  r.format = f;
  r.engine = detail::simd_engine();
  const auto& shape = input.shape();
  const auto n = static_cast<std::int64_t>(input.size());
  r.bits_per_element = f.stored_bits_per_element(shape);
  const BlockInput x = detail::kernel_input(input);
  const unsigned threads = detail::resolve_threads(run.threads);
  BlockRun br{threads};
  auto got_facts = detail::facts_for(kernel, x, shape, br);
  if (!got_facts) return got_facts.error();
  const BlockTensorFacts facts = *got_facts;
  br.facts = &facts;
  const std::int64_t blocks = kernel.block_count(shape);
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t k = kernel.block_size(row);
  const std::int64_t per_row = k > 0 ? (row + k - 1) / k : 0;
  std::vector<float> deq;
  std::vector<double> deq64;
  std::vector<float> amax;
  // Errors by gap take the exact values: for float scales, decode(code) * s * g from the packed codes.
  const bool exact_from_codes = o.gaps && float_scaled(f) && f.layout.scale.has_value();
  std::vector<double> table;
  if (exact_from_codes) {
    table.resize(std::size_t{1} << f.element.bits());
    for (std::size_t c = 0; c < table.size(); ++c) table[c] = f.element.decode(static_cast<std::uint32_t>(c));
  }
  const double tensor_g = facts.scale.value;
  std::vector<GapExtra> extra(o.gaps ? threads : 0);
  for (std::int64_t b0 = 0; b0 < blocks;) {
    if (run.reporter.cancelled()) return make_error(kCancelled);
    const std::int64_t b1 = detail::chunk_end(kernel, shape, b0, run);
    br.first_block = b0;
    br.end_block = b1;
    const std::int64_t e0 = kernel.block_first_element(b0, row);
    const std::int64_t e1 = kernel.block_first_element(b1, row);
    deq.resize(static_cast<std::size_t>(e1 - e0));
    BlockMetrics m;
    auto q = kernel.fake_quantize(x, shape, deq, br, &m);
    if (!q) return make_error("format '" + f.name + "': " + q.error().message);
    detail::add_metrics(r.total, m);
    if (o.gaps) {
      amax.resize(static_cast<std::size_t>(b1 - b0));
      auto a = kernel.block_amax(x, shape, amax, br);
      if (!a) return make_error("format '" + f.name + "': " + a.error().message);
      if (exact_from_codes && !exact_chunk_values(kernel, f, x, shape, br, f.layout.tensor_scale ? tensor_g : 1.0,
                                                  table, e0, e1, b0, b1, deq, deq64))
        return analyze_reference(f, input, o, "reference (values other than code times scale)");
      const std::int64_t len = e1 - e0;
      const auto parts = static_cast<unsigned>(std::min<std::int64_t>(threads, std::max<std::int64_t>(1, len / 65536)));
      detail::run_parts(parts, [&](unsigned t) {
        const std::int64_t i0 = e0 + len * t / parts, i1 = e0 + len * (t + 1) / parts;
        if (exact_from_codes)
          gap_pass(input, deq64.data(), e0, i0, i1, amax.data(), row, k, per_row, b0, extra[t]);
        else
          gap_pass(input, deq.data(), e0, i0, i1, amax.data(), row, k, per_row, b0, extra[t]);
      });
    }
    input.release(static_cast<std::size_t>(e1));
    run.reporter.report(e1, n, f.name);
    b0 = b1;
  }
  for (GapExtra& e : extra) {
    if (e.beyond_float32) {
      // A fake value beyond the float32 range: only the reference's exact doubles measure its error.
      return analyze_reference(f, input, o, "reference (values beyond the float32 range)");
    }
    for (int g = 0; g < GapExtra::kGaps; ++g) {
      const auto gi = static_cast<std::size_t>(g);
      if (e.histogram[gi] == 0) continue;
      r.gap_histogram[g] += e.histogram[gi];
      r.by_gap[g].merge(e.by_gap[gi]);
    }
    for (const auto& [g, c] : e.other_histogram) r.gap_histogram[g] += c;
    for (const auto& [g, st] : e.other_by_gap) r.by_gap[g].merge(st);
  }
  if (o.per_block) {
    // Per-block summaries are a diagnostic whose size grows with the blocks: the reference supplies them.
    auto ref = analyze_reference(f, input, AnalyzeOptions{false, true}, r.engine);
    if (!ref) return ref.error();
    r.blocks = std::move(ref->blocks);
  }
  return r;
}

}  // namespace

Result<std::vector<FormatAnalysis>> analyze(const std::vector<BlockFormat>& formats, const TensorSource& input,
                                            const AnalyzeOptions& options, const Run& run) {
  std::vector<FormatAnalysis> out;
  out.reserve(formats.size());
  for (const BlockFormat& f : formats) {
    if (run.reporter.cancelled()) return make_error(kCancelled);
    if (auto e = detail::check_axis(f, input)) return *e;
    // 1-D blocks along another axis than the last: the same blocks, in the same element order, along the last
    // axis of the tensor with that axis moved last (stochastic rounding keys on element positions, so not then).
    const auto rank = static_cast<int>(input.shape().size());
    const int axis = f.layout.axis < 0 ? f.layout.axis + rank : f.layout.axis;
    if (f.layout.tiles.size() == 1 && f.layout.channel_axis == ScaleLayout::kNoAxis && rank > 1 && axis != rank - 1 &&
        f.options.element.rounding != Rounding::Stochastic && !options.per_block) {
      auto moved = block_axes_last(input, {axis});
      if (!moved) return moved.error();
      BlockFormat last = f;
      last.layout.axis = -1;
      std::string why;
      if (auto kernel = detail::kernel_for(last, *moved, &why)) {
        auto a = analyze_kernel(*kernel, last, *moved, options, run);
        if (!a) return a.error();
        a->format = f;
        out.push_back(std::move(*a));
        continue;
      }
    }
    std::string why;
    auto kernel = detail::kernel_for(f, input, &why);
    Result<FormatAnalysis> a = kernel ? analyze_kernel(*kernel, f, input, options, run)
                                      : analyze_reference(f, input, options, "reference (" + why + ")");
    if (!a) return a.error();
    out.push_back(std::move(*a));
  }
  return out;
}

}  // namespace mxlab::ops
