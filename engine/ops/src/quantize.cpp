// ops::quantize_fake, quantize_packed, dequantize: the kernels where they cover the format, the scalar
// reference where not; both give the reference's codes and values.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <optional>

#include "mxlab/core/ceil_div.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/core/threads.hpp"
#include "mxlab/core/transpose.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/kernels/scale_values.hpp"
#include "mxlab/kernels/simd_target.hpp"
#include "mxlab/quantize/pack.hpp"
#include "ops_detail.hpp"

namespace mxlab::ops {

std::string simd_target() { return active_simd_target(); }

namespace detail {

std::string simd_engine() { return "simd:" + active_simd_target(); }

std::optional<BlockKernel> kernel_for(const BlockFormat& f, const TensorSource& input, std::string* why_not) {
  if (!input.float32_exact()) {
    *why_not = "float64 input values that float32 cannot hold";
    return std::nullopt;
  }
  auto k = BlockKernel::make(f);  // checks unsupported_reason itself: the reason is asked for on refusal only
  if (!k) {
    const std::string reason = BlockKernel::unsupported_reason(f);
    *why_not = reason.empty() ? k.error().message : reason;
    return std::nullopt;
  }
  return std::move(*k);
}

BlockInput kernel_input(const TensorSource& input) {
  if (const Tensor* t = input.tensor()) return BlockInput(t->data());
  const MappedTensor& m = *input.mapped();
  const auto* bits = static_cast<const std::uint16_t*>(m.data());
  switch (m.type()) {
    case MappedType::F16: return BlockInput::f16({bits, m.size()});
    case MappedType::BF16: return BlockInput::bf16({bits, m.size()});
    case MappedType::F64: return BlockInput::f64({static_cast<const double*>(m.data()), m.size()});
    case MappedType::F32: break;
  }
  return BlockInput(std::span<const float>(static_cast<const float*>(m.data()), m.size()));
}

Result<BlockTensorFacts> facts_for(const BlockKernel& k, const TensorSource& input, const BlockInput& x,
                                   const BlockRun& br, const Run& run) {
  if (!k.needs_tensor_facts()) return BlockTensorFacts{};
  const BlockFormat& f = k.format();
  const auto& shape = input.shape();
  if (input.mapped() == nullptr || !f.layout.tensor_scale || f.options.nvfp4_arith != Nvfp4Arith::Exact ||
      f.options.specials == SpecialsPolicy::TensorNan || f.layout.sparse_m > 0)
    return k.tensor_facts(x, shape, br);
  const std::int64_t blocks = k.block_count(shape);
  std::vector<float> amax;
  float tensor_amax = 0;
  BlockRun part = br;
  for (std::int64_t b0 = 0; b0 < blocks;) {
    if (run.reporter.cancelled()) return make_error(kCancelled);
    const std::int64_t b1 = chunk_end(k, shape, b0, run);
    part.first_block = b0;
    part.end_block = b1;
    amax.resize(static_cast<std::size_t>(b1 - b0));
    auto a = k.block_amax(x, shape, amax, part);
    if (!a) return a.error();
    for (float v : amax) tensor_amax = std::max(tensor_amax, v);
    input.release(static_cast<std::size_t>(k.block_first_element(b1, shape.empty() ? 1 : shape.back())));
    b0 = b1;
  }
  auto ts = choose_tensor_scale(f, static_cast<double>(tensor_amax));
  if (!ts) return ts.error();
  BlockTensorFacts facts;
  facts.scale = *ts;
  return facts;
}

std::int64_t chunk_end(const BlockKernel& k, const std::vector<std::int64_t>& shape, std::int64_t b0, const Run& run) {
  const std::int64_t blocks = k.block_count(shape);
  if (k.format().layout.sparse_m > 0) return blocks;
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t per_block = std::max<std::int64_t>(1, k.block_size(row));
  std::int64_t b1 = std::min(blocks, b0 + std::max<std::int64_t>(1, (run.chunk_elements > 0 ? run.chunk_elements : kChunkElements) / per_block));
  while (b1 < blocks && k.block_first_element(b1, row) % 8 != 0) ++b1;
  return b1;
}

}  // namespace detail

std::string engine_for(const BlockFormat& f) {
  const std::string reason = BlockKernel::unsupported_reason(f);
  return reason.empty() ? detail::simd_engine() : "reference (" + reason + ")";
}

namespace {


std::optional<Error> cancelled(const Run& run) {
  if (run.reporter.cancelled()) return make_error(kCancelled);
  return std::nullopt;
}

/// The reference: the whole tensor quantized by mxlab::quantize on its exact values.
/// The reference's quantization of the whole tensor, with its error totals in *result when stats are wanted.
Result<QuantizedTensor> reference_quantize(const BlockFormat& f, const TensorSource& input, const std::string& why,
                                           bool stats, QuantizeResult* result) {
  result->engine = "reference (" + why + ")";
  std::vector<double> storage;
  const std::span<const double> x = detail::exact_values(input, storage);
  auto q = quantize(f, x, input.shape());
  if (q && stats) result->stats = analyze(f, x, *q).total;
  return q;
}

}  // namespace

Result<QuantizeResult> quantize_fake(const BlockFormat& f, const TensorSource& input, const QuantizeSink& sink,
                                     const Run& run, bool with_stats) {
  QuantizeResult result;
  if (auto e = detail::check_axis(f, input)) return *e;
  std::string why;
  auto kernel = detail::kernel_for(f, input, &why);
  const auto& shape = input.shape();
  const auto n = static_cast<std::int64_t>(input.size());
  if (!kernel && detail::whole_row_format(f) && input.float32_exact()) {
    // Per-tensor scales and 2-D tiles: FakeQuantizer's gathered rows on the kernels, the reference's values.
    // The tensor and its values are held in memory (with the gathered copies, four times the input).
    auto t = input.load();
    if (!t) return t.error();
    const FakeQuantizer fq(f);
    std::vector<float> values(input.size());
    auto r = fq.run(t->data(), shape, values, run, with_stats ? &result : nullptr);
    if (!r) return r.error();
    if (!with_stats) result.engine = detail::simd_engine();
    for (std::int64_t e0 = 0; e0 < n; e0 += detail::kChunkElements) {
      const std::int64_t e1 = std::min(n, e0 + detail::kChunkElements);
      const auto chunk = std::span<const float>(values).subspan(static_cast<std::size_t>(e0), static_cast<std::size_t>(e1 - e0));
      if (auto e = sink.fake(static_cast<std::size_t>(e0), chunk)) return *e;
      run.reporter.report(e1, n, f.name);
    }
    return result;
  }
  if (!kernel) {
    auto q = reference_quantize(f, input, why, with_stats, &result);
    if (!q) return q.error();
    std::vector<float> buf;
    for (std::int64_t e0 = 0; e0 < n; e0 += detail::kChunkElements) {
      const std::int64_t e1 = std::min(n, e0 + detail::kChunkElements);
      buf.resize(static_cast<std::size_t>(e1 - e0));
      for (std::int64_t i = e0; i < e1; ++i) buf[static_cast<std::size_t>(i - e0)] = static_cast<float>(q->values[static_cast<std::size_t>(i)]);
      detail::apply_fake_nan(f, buf);
      if (auto e = sink.fake(static_cast<std::size_t>(e0), buf)) return *e;
      run.reporter.report(e1, n, f.name);
    }
    return result;
  }
  result.engine = detail::simd_engine();
  const BlockInput x = detail::kernel_input(input);
  BlockRun br{detail::resolve_threads(run.threads)};
  auto got_facts = detail::facts_for(*kernel, input, x, br, run);
  if (!got_facts) return got_facts.error();
  const BlockTensorFacts facts = *got_facts;
  br.facts = &facts;
  const std::int64_t blocks = kernel->block_count(shape);
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  // Two buffers: the sink takes one chunk (a file write) on a thread of its own while the kernel fills the
  // other. The sink's calls stay one at a time and in order; every return waits for the call under way.
  std::vector<float> bufs[2];
  std::future<std::optional<Error>> pending;
  struct Wait {
    std::future<std::optional<Error>>& f;
    ~Wait() {
      if (f.valid()) f.wait();
    }
  } wait_pending{pending};
  auto finish_pending = [&]() -> std::optional<Error> { return pending.valid() ? pending.get() : std::nullopt; };
  int next = 0;
  for (std::int64_t b0 = 0; b0 < blocks;) {
    if (auto e = cancelled(run)) return *e;
    const std::int64_t b1 = detail::chunk_end(*kernel, shape, b0, run);
    br.first_block = b0;
    br.end_block = b1;
    const std::int64_t e0 = kernel->block_first_element(b0, row);
    const std::int64_t e1 = kernel->block_first_element(b1, row);
    std::vector<float>& buf = bufs[next];
    next ^= 1;
    buf.resize(static_cast<std::size_t>(e1 - e0));
    BlockMetrics m;
    auto r = kernel->fake_quantize(x, shape, buf, br, with_stats ? &m : nullptr);
    if (!r) return r.error();
    if (with_stats) detail::add_metrics(result.stats, m);
    detail::apply_fake_nan(f, buf);
    if (auto e = finish_pending()) return *e;
    const std::span<const float> chunk(buf);
    pending = std::async(std::launch::async, [&sink, e0, chunk] { return sink.fake(static_cast<std::size_t>(e0), chunk); });
    input.release(static_cast<std::size_t>(e1));
    run.reporter.report(e1, n, f.name);
    b0 = b1;
  }
  if (auto e = finish_pending()) return *e;
  return result;
}

namespace detail {

/// The same format with one block per row along the last axis, where running it over the tensor as one row (a
/// per-tensor scale) or over every 2-D tile's elements gathered into a row is the reference's computation of
/// the format itself. mxlab::quantize reads the layout only to give each element its block: a block's amax,
/// NaN and Inf, its scale and its elements' casts depend on the block's elements, not on where they lie, and
/// the metrics are exact sums and maxima, whatever their order. The exceptions:
///  - stochastic rounding takes the random word stochastic_bits(seed, element index). The tensor as one row
///    keeps every index (row-major order); gathered tiles do not, so 2-D tiles under stochastic element rounding
///    stay on the reference (scale casts take no random word);
///  - N:M sparsity groups elements along the tensor's last axis, and subtiles lie on the tile's own axes: both
///    stay on the reference;
///  - the peers' float32 sums in element order (Transformer Engine's 4over6 metrics): a gathered row takes each
///    tile's rows in order, so a block's elements keep their order.
/// Tensor-level quantities (a tensor scale over the block scales, the NaN of policy tensor-nan) come from the
/// whole gathered tensor, the same elements as the reference's.
std::optional<BlockFormat> whole_row_format(const BlockFormat& f) {
  const ScaleLayout& l = f.layout;
  const BlockGeometry geometry = l.geometry();
  if (!l.scale || geometry.per_channel() || l.sparse_m > 0 || geometry.one_d()) return std::nullopt;
  if (geometry.two_d() && (geometry.has_subtiles() || f.options.element.rounding == Rounding::Stochastic))
    return std::nullopt;
  BlockFormat g = f;
  g.layout.tiles = {TileDim{0, 0}};
  g.layout.axis = -1;
  if (!BlockKernel::supports(g)) return std::nullopt;
  return g;
}

}  // namespace detail

namespace {

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace

FakeQuantizer::FakeQuantizer(const BlockFormat& f) : format_(f) {
  if (BlockKernel::supports(f)) {
    if (auto kernel = BlockKernel::make(f)) kernel_ = std::make_shared<const BlockKernel>(std::move(*kernel));
  } else if (auto rows = detail::whole_row_format(f)) {
    if (auto kernel = BlockKernel::make(*rows)) rows_ = std::make_shared<const BlockKernel>(std::move(*kernel));
  }
  // A plain element cast (no scale, no N:M pruning, no -0 rule for integers) is the cast kernel's job; the
  // reference casts every element with cast(element, x, options, stochastic_bits(seed, i)), as it does.
  if (f.layout.scale || f.layout.sparse_m > 0 || negative_zero_values(f)) return;
  auto eo = resolve_options(f.element, f.options.element);
  if (!eo || !CastKernel::supports(f.element) || !DecodeKernel::supports(f.element)) return;
  auto cast = CastKernel::make(f.element, *eo);
  auto decode = DecodeKernel::make(f.element);
  if (!cast || !decode) return;
  element_options_ = *eo;
  cast_ = std::make_shared<const CastKernel>(std::move(*cast));
  decode_ = std::make_shared<const DecodeKernel>(std::move(*decode));
}

namespace {

/// Elements per chunk of an element cast: the chunk's codes (16 KiB) and a scaled chunk (32 KiB) stay in the
/// caches between the cast and the decode.
constexpr std::size_t kElementChunk = 8192;

/// fn(t, i0, len) for the chunks [i0, i0 + len) of n elements, each thread t a contiguous range of chunks; the
/// threads' first error, if any.
template <class Fn>
std::optional<Error> element_chunks(std::size_t n, unsigned threads, Fn&& fn) {
  const std::size_t chunks = ceil_div(n, kElementChunk);
  const auto parts = static_cast<unsigned>(std::min<std::size_t>(useful_threads(n, threads), chunks));
  std::vector<std::optional<Error>> errors(parts);
  run_parts(parts, [&](unsigned t) {
    for (std::size_t c = chunks * t / parts; c < chunks * (t + 1) / parts && !errors[t]; ++c) {
      const std::size_t i0 = c * kElementChunk;
      errors[t] = fn(t, i0, std::min(kElementChunk, n - i0));
    }
  });
  for (auto& e : errors)
    if (e) return e;
  return std::nullopt;
}

}  // namespace

Result<std::size_t> FakeQuantizer::run_elements(std::span<const float> x, std::span<float> out, const Run& run,
                                                QuantizeResult* result) const {
  // A chunk at a time, cast to codes and decoded while the codes are in the caches; element i takes the random
  // word of its own index, whichever chunk and thread it falls in.
  if (auto e = element_chunks(x.size(), run.threads, [&](unsigned, std::size_t i0, std::size_t len) -> std::optional<Error> {
        std::uint16_t codes[kElementChunk];
        const KernelRun kr{1, format_.options.seed, i0};
        if (auto r = cast_->cast_f32(x.subspan(i0, len), std::span(codes, len), kr); !r) return r.error();
        if (auto r = decode_->decode(std::span<const std::uint16_t>(codes, len), out.subspan(i0, len), kr); !r)
          return r.error();
        return std::nullopt;
      }))
    return *e;
  if (result == nullptr) return x.size();
  // Error totals. An overflow flag can only stand on a saturated or special output (the largest finite
  // magnitude, Inf or NaN); the reference's cast decides those few elements' flags.
  const Format& e = format_.element;
  const bool stochastic = element_options_.rounding == Rounding::Stochastic;
  *result = QuantizeResult{detail::simd_engine(), {}};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double v = out[i];
    std::uint8_t flags = 0;
    if (!(std::fabs(v) < e.max_finite())) {
      const CastResult c = cast(e, xi, element_options_, stochastic ? stochastic_bits(format_.options.seed, i) : 0U);
      if (c.overflow) flags = QuantizedTensor::kOverflow;
    }
    result->stats.add(xi, v, flags);
  }
  return x.size();
}

Result<std::size_t> FakeQuantizer::run(std::span<const float> x, const std::vector<std::int64_t>& shape,
                                       std::span<float> out, const Run& run, QuantizeResult* result) const {
  auto r = run_values(x, shape, out, run, result);
  if (r) detail::apply_fake_nan(format_, out.first(x.size()));
  return r;
}

Result<std::size_t> FakeQuantizer::run_values(std::span<const float> x, const std::vector<std::int64_t>& shape,
                                              std::span<float> out, const Run& run, QuantizeResult* result) const {
  if (out.size() < x.size())
    return make_error("fake quantization: output holds " + std::to_string(out.size()) + " values for " +
                      std::to_string(x.size()) + " inputs");
  if (cast_) return run_elements(x, out, run, result);
  if (rows_ && !x.empty() && element_count(shape) == static_cast<std::int64_t>(x.size())) {
    // A matrix in 2-D tiles without metrics: the tile kernel, a band of tile rows at a time, in place.
    if (result == nullptr && shape.size() == 2 && format_.layout.geometry().two_d() && rows_->tiles_native()) {
      const auto [th, tw] = format_.layout.geometry().tile_shape(shape[0], shape[1]);
      return rows_->fake_quantize_tiles(x, shape[0], shape[1], th, tw, out, BlockRun{detail::resolve_threads(run.threads)});
    }
    return run_gathered(x, shape, out, run, result);
  }
  if (kernel_) {
    const BlockKernel& kernel = *kernel_;
    BlockMetrics m;
    auto r = kernel.fake_quantize(BlockInput(x), shape, out, BlockRun{detail::resolve_threads(run.threads)},
                                  result != nullptr ? &m : nullptr);
    if (!r) return r.error();
    if (result != nullptr) {
      *result = QuantizeResult{detail::simd_engine(), {}};
      detail::add_metrics(result->stats, m);
    }
    return r;
  }
  const std::vector<double> xd(x.begin(), x.end());
  auto q = quantize(format_, xd, shape);
  if (!q) return q.error();
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(q->values[i]);
  if (result != nullptr) *result = QuantizeResult{engine_for(format_), analyze(format_, xd, *q).total};
  return x.size();
}

Result<std::size_t> FakeQuantizer::run_columns(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                                               std::span<float> out, const Run& run) const {
  if (auto e = matrix_call_error(x.size(), rows, cols, out.size())) return *e;
  const auto n = x.size();
  if (positionless()) return this->run(x, {rows, cols}, out, run);
  if (kernel_) {
    auto r = kernel_->fake_quantize_columns(x, rows, cols, out, BlockRun{detail::resolve_threads(run.threads)});
    if (r) detail::apply_fake_nan(format_, out.first(n));
    return r;
  }
  return along_columns_by_transposing(x.data(), rows, cols, out.data(), [&](const float* xt, float* qt) {
    return this->run(std::span<const float>(xt, n), {cols, rows}, std::span<float>(qt, n), run);
  });
}

bool FakeQuantizer::scaled_native(bool columns) const {
  return cast_ != nullptr && !(columns && format_.options.element.rounding == Rounding::Stochastic);
}

Result<FakeQuantizer::ScaledStats> FakeQuantizer::run_scaled(std::span<const float> x, float scale, float inverse,
                                                             float limit, std::span<float> out, const Run& run) const {
  if (!scaled_native(false))
    return make_error("fake quantization under a tensor scale: " + format_.name + " is not an element cast on the kernels");
  if (out.size() < x.size())
    return make_error("fake quantization: output holds " + std::to_string(out.size()) + " values for " +
                      std::to_string(x.size()) + " inputs");
  std::vector<ScaledStats> parts(std::max(1U, resolve_threads(run.threads)));
  auto e = element_chunks(x.size(), run.threads, [&](unsigned t, std::size_t i0, std::size_t len) -> std::optional<Error> {
    float scaled[kElementChunk];
    std::uint16_t codes[kElementChunk];
    const ScaleStats chunk = scale_values(x.subspan(i0, len), scale, limit, std::span(scaled, len));
    ScaledStats& st = parts[t];
    st.amax = std::max(st.amax, chunk.amax);
    st.above += chunk.above;
    const KernelRun kr{1, format_.options.seed, i0};
    const std::span<float> o = out.subspan(i0, len);
    // The cast's fast path where it has one and the chunk is finite; else cast, decode, the format's NaN, scale.
    if (cast_->fake_scaled(std::span<const float>(scaled, len), inverse, o)) return std::nullopt;
    if (auto r = cast_->cast_f32(std::span<const float>(scaled, len), std::span(codes, len), kr); !r) return r.error();
    if (auto r = decode_->decode(std::span<const std::uint16_t>(codes, len), o, kr); !r) return r.error();
    detail::apply_fake_nan(format_, o);
    for (float& v : o) v *= inverse;
    return std::nullopt;
  });
  if (e) return *e;
  ScaledStats total;
  for (const ScaledStats& st : parts) total.amax = std::max(total.amax, st.amax), total.above += st.above;
  return total;
}

bool FakeQuantizer::positionless() const {
  const ScaleLayout& l = format_.layout;
  return (!l.scale || (rows_ && l.geometry().tile_dims() == 0)) && l.sparse_m == 0 &&
         format_.options.element.rounding != Rounding::Stochastic;
}

bool FakeQuantizer::same_values(const FakeQuantizer& other) const {
  // The format text determines the element and the layout; the options may differ under the same text (a
  // profile, delayed scaling's saturation).
  return positionless() && other.positionless() && format_.name == other.format_.name &&
         format_.options == other.format_.options;
}

bool FakeQuantizer::rows_stand_alone() const {
  return kernel_ && !kernel_->needs_tensor_facts() && format_.options.element.rounding != Rounding::Stochastic;
}

Result<std::size_t> FakeQuantizer::run_rows_and_columns(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                                                        std::span<float> out, const FakeQuantizer& columns,
                                                        std::span<float> out_columns, const Run& run) const {
  if (auto e = matrix_call_error(x.size(), rows, cols, std::min(out.size(), out_columns.size()))) return *e;
  if (same_values(columns)) {
    auto r = this->run(x, {rows, cols}, out, run);
    if (r) std::copy_n(out.begin(), x.size(), out_columns.begin());
    return r;
  }
  // Chunks of whole column blocks (k rows each) of about 128 KiB: in the caches from one call to the next.
  const std::int64_t k = columns.kernel_ ? columns.kernel_->block_size(rows) : rows;
  if (!rows_stand_alone() || !columns.rows_stand_alone() || k >= rows || cols == 0) {
    auto r = this->run(x, {rows, cols}, out, run);
    if (!r) return r;
    return columns.run_columns(x, rows, cols, out_columns, run);
  }
  constexpr std::int64_t kChunkValues = 32768;
  const std::int64_t chunk = std::max<std::int64_t>(1, kChunkValues / cols / k) * k;
  const std::int64_t chunks = ceil_div(rows, chunk);
  // The threads take contiguous ranges of chunks, each chunk on one thread (one wake-up per call rather than two
  // per chunk); a chunk's values do not depend on the thread count.
  // As many threads as the kernels would start for the whole pass, at most one per chunk.
  const auto parts = static_cast<unsigned>(std::min<std::int64_t>(useful_threads(x.size(), run.threads), chunks));
  Run one = run;
  one.threads = 1;
  std::vector<std::optional<Error>> errors(parts);
  run_parts(parts, [&](unsigned t) {
    for (std::int64_t c = chunks * t / parts; c < chunks * (t + 1) / parts; ++c) {
      const std::int64_t r0 = c * chunk, n = std::min(chunk, rows - r0);
      const auto first = static_cast<std::size_t>(r0 * cols), len = static_cast<std::size_t>(n * cols);
      auto r = this->run(x.subspan(first, len), {n, cols}, out.subspan(first, len), parts > 1 ? one : run);
      if (r) r = columns.run_columns(x.subspan(first, len), n, cols, out_columns.subspan(first, len), parts > 1 ? one : run);
      if (!r) {
        errors[t] = r.error();
        return;
      }
    }
  });
  for (auto& e : errors)
    if (e) return *e;
  return x.size();
}

namespace {

/// Copies a tile row of len floats: the common widths as fixed-size copies the compiler inlines (a library call
/// per 8-float row cost more than the copy).
void copy_tile_row(const float* from, std::size_t len, float* to) {
  switch (len) {
    case 4: std::memcpy(to, from, 4 * sizeof(float)); return;
    case 8: std::memcpy(to, from, 8 * sizeof(float)); return;
    case 16: std::memcpy(to, from, 16 * sizeof(float)); return;
    case 32: std::memcpy(to, from, 32 * sizeof(float)); return;
    default: std::copy_n(from, len, to);
  }
}

}  // namespace

Result<std::size_t> FakeQuantizer::run_gathered(std::span<const float> x, const std::vector<std::int64_t>& shape,
                                                std::span<float> out, const Run& run, QuantizeResult* result) const {
  const BlockKernel& kernel = *rows_;
  const bool tiles = format_.layout.geometry().two_d();
  // A per-tensor scale: the tensor is one row as it lies. 2-D tiles: each tile's rows one after the other.
  std::span<const float> in = x;
  std::span<float> values = out.first(x.size());
  std::vector<detail::TileClass> classes{{1, static_cast<std::int64_t>(x.size())}};
  thread_local std::vector<float> gathered, gathered_values;
  if (tiles) {
    // Grown only: a resize down and up again would fill the values past the smaller size each call.
    if (gathered.size() < x.size()) gathered.resize(x.size()), gathered_values.resize(x.size());
    std::size_t at = 0;
    classes = detail::for_each_tile_row(shape, format_.layout, [&](std::size_t first, std::size_t len) {
      copy_tile_row(x.data() + first, len, gathered.data() + at);
      at += len;
    });
    in = std::span<const float>(gathered).first(x.size());
    values = std::span<float>(gathered_values).first(x.size());
  }
  BlockRun br{detail::resolve_threads(run.threads)};
  BlockTensorFacts facts;
  if (kernel.needs_tensor_facts()) {
    auto got = kernel.tensor_facts(BlockInput(in), {static_cast<std::int64_t>(in.size())}, br);
    if (!got) return got.error();
    facts = *got;
    br.facts = &facts;
  }
  ErrorStats stats;
  std::size_t first = 0;
  for (const detail::TileClass& c : classes) {
    const auto len = static_cast<std::size_t>(c.count * c.size);
    BlockMetrics m;
    auto r = kernel.fake_quantize(BlockInput(in.subspan(first, len)), {c.count, c.size}, values.subspan(first, len), br,
                                  result != nullptr ? &m : nullptr);
    if (!r) return r.error();
    if (result != nullptr) detail::add_metrics(stats, m);
    first += len;
  }
  if (tiles) {
    std::size_t at = 0;
    detail::for_each_tile_row(shape, format_.layout, [&](std::size_t first_out, std::size_t len) {
      copy_tile_row(gathered_values.data() + at, len, out.data() + first_out);
      at += len;
    });
  }
  if (result != nullptr) *result = QuantizeResult{detail::simd_engine(), std::move(stats)};
  return x.size();
}

Result<std::size_t> fake_quantize(const BlockFormat& f, std::span<const float> x, const std::vector<std::int64_t>& shape,
                                  std::span<float> out, const Run& run, QuantizeResult* result) {
  return FakeQuantizer(f).run(x, shape, out, run, result);
}

Result<PackedTensor> quantize_packed(const BlockFormat& f, const TensorSource& input, const Run& run,
                                     QuantizeResult* result) {
  QuantizeResult local;
  QuantizeResult& res = result != nullptr ? *result : local;
  res = QuantizeResult{};
  if (auto e = detail::check_axis(f, input)) return *e;
  std::string why;
  auto kernel = detail::kernel_for(f, input, &why);
  const auto& shape = input.shape();
  const auto n = static_cast<std::int64_t>(input.size());
  if (!kernel) {
    auto q = reference_quantize(f, input, why, result != nullptr, &res);
    if (!q) return q.error();
    run.reporter.report(n, n, f.name);
    return pack(f, *q);
  }
  res.engine = detail::simd_engine();
  const BlockInput x = detail::kernel_input(input);
  BlockRun br{detail::resolve_threads(run.threads)};
  auto got_facts = detail::facts_for(*kernel, input, x, br, run);
  if (!got_facts) return got_facts.error();
  const BlockTensorFacts facts = *got_facts;
  br.facts = &facts;
  PackedTensor p;
  p.shape = shape;
  p.scale_grid = BlockIndexer(shape, f.layout).grid();
  p.elements.resize(kernel->packed_element_bytes(input.size()));
  const std::int64_t blocks = kernel->block_count(shape);
  p.scales.resize(static_cast<std::size_t>(std::max<std::int64_t>(blocks, 0)) * kernel->scale_bytes());
  p.subtile_offsets.resize(static_cast<std::size_t>(kernel->subtile_count(shape)));
  if (!p.subtile_offsets.empty()) p.subtile_grid = BlockIndexer::subtiles(shape, f.layout).grid();
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  TensorScale ts = facts.scale;
  for (std::int64_t b0 = 0; b0 < blocks;) {
    if (auto e = cancelled(run)) return *e;
    const std::int64_t b1 = detail::chunk_end(*kernel, shape, b0, run);
    br.first_block = b0;
    br.end_block = b1;
    const auto e0 = static_cast<std::size_t>(kernel->block_first_element(b0, row));
    const auto e1 = static_cast<std::size_t>(kernel->block_first_element(b1, row));
    const auto before = kernel->range_size(shape, BlockRun{1, 0, b0});
    const auto range = kernel->range_size(shape, br);
    const std::size_t eb = kernel->packed_element_bytes(e0);
    const std::span<std::uint8_t> el(p.elements.data() + eb, kernel->packed_element_bytes(e1) - eb);
    const std::span<std::uint8_t> sc(p.scales.data() + static_cast<std::size_t>(b0) * kernel->scale_bytes(),
                                     static_cast<std::size_t>(b1 - b0) * kernel->scale_bytes());
    const std::span<std::uint8_t> st =
        p.subtile_offsets.empty() ? std::span<std::uint8_t>()
                                  : std::span<std::uint8_t>(p.subtile_offsets.data() + before.subtiles,
                                                            static_cast<std::size_t>(range.subtiles));
    BlockMetrics m;
    auto r = kernel->quantize_packed(x, shape, el, sc, br, result != nullptr ? &m : nullptr, &ts, st);
    if (!r) return r.error();
    if (result != nullptr) detail::add_metrics(res.stats, m);
    input.release(e1);
    run.reporter.report(static_cast<std::int64_t>(e1), n, f.name);
    b0 = b1;
  }
  if (f.layout.tensor_scale) {
    const int bytes = ceil_div(f.layout.tensor_scale->bits(), 8);
    for (int i = 0; i < bytes; ++i) p.tensor_scale.push_back(static_cast<std::uint8_t>(ts.code >> (8 * i)));
  }
  return p;
}

Result<std::vector<double>> dequantize(const BlockFormat& f, const PackedTensor& packed, const Run& run) {
  // The kernels dequantize to float32, exact unless a value lies beyond the float32 range; the reference
  // gives exact doubles. The kernel result is kept when no value can have left that range.
  auto reference = [&]() -> Result<std::vector<double>> {
    auto q = unpack(f, packed);
    if (!q) return q.error();
    return std::move(q->values);
  };
  // Float block scales: a value is decode(code) * s * g, which float32 does not always hold.
  const bool float_scaled = f.layout.tensor_scale.has_value() || scale_rule_traits(f.options.rule).float_scale;
  if (BlockKernel::unsupported_reason(f) != "" || f.layout.sparse_m > 0 || float_scaled) return reference();
  auto kernel = BlockKernel::make(f);
  if (!kernel) return reference();
  const auto& shape = packed.shape;
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(std::max<std::int64_t>(d, 0));
  if (packed.elements.size() != kernel->packed_element_bytes(n) ||
      packed.scales.size() != static_cast<std::size_t>(kernel->block_count(shape)) * kernel->scale_bytes() ||
      packed.subtile_offsets.size() != static_cast<std::size_t>(kernel->subtile_count(shape)))
    return reference();  // the reference's own checks name what is wrong
  double g = 1.0;
  if (f.layout.tensor_scale) {
    std::uint32_t code = 0;
    for (std::size_t i = 0; i < packed.tensor_scale.size(); ++i) code |= std::uint32_t{packed.tensor_scale[i]} << (8 * i);
    g = f.layout.tensor_scale->decode(code);
  }
  std::vector<float> out(n);
  auto r = kernel->dequantize(packed.elements, packed.scales, shape, out, BlockRun{detail::resolve_threads(run.threads)},
                              g, packed.subtile_offsets);
  if (!r) return reference();
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isinf(out[i])) return reference();  // possibly a finite value beyond float32
    values[i] = out[i];
  }
  run.reporter.report(static_cast<std::int64_t>(n), static_cast<std::int64_t>(n), f.name);
  return values;
}

}  // namespace mxlab::ops
