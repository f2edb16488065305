// ops::analyze: the kernels' fused exact metrics, chunk by chunk, plus, under --gaps, one pass over each chunk's
// input and values for the exponent-gap histogram and errors by gap. The scalar reference where a kernel refuses
// the format.
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "mxlab/core/bits.hpp"
#include "mxlab/core/ceil_div.hpp"
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
  return f.layout.tensor_scale.has_value() || scale_rule_traits(f.options.rule).float_scale;
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
  const std::int64_t per_row = ceil_div(row, k);
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
  std::vector<double> storage;
  const std::span<const double> x = detail::exact_values(input, storage);
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

/// One block format's analysis on the kernels, fed chunk by chunk: start() computes the tensor-level facts
/// (a pass over the input for two-level formats), chunk() adds elements [e0, e1) (on block boundaries, e0 a
/// multiple of 8), finish() merges the threads' gap statistics.
class KernelAnalysis {
 public:
  KernelAnalysis(BlockKernel kernel, BlockFormat f, const TensorSource& input, const AnalyzeOptions& o,
                 unsigned threads)
      : kernel_(std::move(kernel)), input_(input), o_(o), threads_(threads), br_{threads} {
    r_.format = std::move(f);
    r_.engine = detail::simd_engine();
    const auto& shape = input.shape();
    r_.bits_per_element = r_.format.stored_bits_per_element(shape);
    x_ = detail::kernel_input(input);
    blocks_ = kernel_.block_count(shape);
    row_ = shape.empty() ? 1 : shape.back();
    k_ = kernel_.block_size(row_);
    per_row_ = k_ > 0 ? ceil_div(row_, k_) : 0;
    // Errors by gap take the exact values: for float scales, decode(code) * s * g from the packed codes.
    exact_from_codes_ = o.gaps && float_scaled(r_.format) && r_.format.layout.scale.has_value();
    if (exact_from_codes_) {
      table_.resize(std::size_t{1} << r_.format.element.bits());
      for (std::size_t c = 0; c < table_.size(); ++c)
        table_[c] = r_.format.element.decode(static_cast<std::uint32_t>(c));
    }
    extra_.resize(o.gaps ? threads : 0);
  }

  const BlockFormat& format() const { return r_.format; }
  /// Elements per block along the last axis.
  std::int64_t block_size() const { return k_; }

  std::optional<Error> start(const Run& run) {
    auto got = detail::facts_for(kernel_, input_, x_, br_, run);
    if (!got) return got.error();
    facts_ = *got;
    br_.facts = &facts_;
    return std::nullopt;
  }

  /// Adds elements [e0, e1). Where the exact values are not code times scale, the rest is skipped and finish()
  /// runs the reference.
  std::optional<Error> chunk(std::int64_t e0, std::int64_t e1) {
    if (fallback_) return std::nullopt;
    const auto& shape = input_.shape();
    const std::int64_t b0 = block_at(e0), b1 = block_at(e1);
    br_.first_block = b0;
    br_.end_block = b1;
    if (!o_.gaps) {
      auto q = kernel_.metrics(x_, shape, br_);
      if (!q) return fail(q.error());
      detail::add_metrics(r_.total, *q);
      return std::nullopt;
    }
    deq_.resize(static_cast<std::size_t>(e1 - e0));
    BlockMetrics m;
    auto q = kernel_.fake_quantize(x_, shape, deq_, br_, &m);
    if (!q) return fail(q.error());
    detail::add_metrics(r_.total, m);
    amax_.resize(static_cast<std::size_t>(b1 - b0));
    auto a = kernel_.block_amax(x_, shape, amax_, br_);
    if (!a) return fail(a.error());
    if (exact_from_codes_ &&
        !exact_chunk_values(kernel_, r_.format, x_, shape, br_, r_.format.layout.tensor_scale ? facts_.scale.value : 1.0,
                            table_, e0, e1, b0, b1, deq_, deq64_)) {
      fallback_ = "reference (values other than code times scale)";
      return std::nullopt;
    }
    const std::int64_t len = e1 - e0;
    const auto parts = static_cast<unsigned>(std::min<std::int64_t>(threads_, std::max<std::int64_t>(1, len / 65536)));
    detail::run_parts(parts, [&](unsigned t) {
      const std::int64_t i0 = e0 + len * t / parts, i1 = e0 + len * (t + 1) / parts;
      if (exact_from_codes_)
        gap_pass(input_, deq64_.data(), e0, i0, i1, amax_.data(), row_, k_, per_row_, b0, extra_[t]);
      else
        gap_pass(input_, deq_.data(), e0, i0, i1, amax_.data(), row_, k_, per_row_, b0, extra_[t]);
    });
    return std::nullopt;
  }

  Result<FormatAnalysis> finish() {
    if (fallback_) return analyze_reference(r_.format, input_, o_, *fallback_);
    for (GapExtra& e : extra_) {
      if (e.beyond_float32) {
        // A fake value beyond the float32 range: only the reference's exact doubles measure its error.
        return analyze_reference(r_.format, input_, o_, "reference (values beyond the float32 range)");
      }
      for (int g = 0; g < GapExtra::kGaps; ++g) {
        const auto gi = static_cast<std::size_t>(g);
        if (e.histogram[gi] == 0) continue;
        r_.gap_histogram[g] += e.histogram[gi];
        r_.by_gap[g].merge(e.by_gap[gi]);
      }
      for (const auto& [g, c] : e.other_histogram) r_.gap_histogram[g] += c;
      for (const auto& [g, st] : e.other_by_gap) r_.by_gap[g].merge(st);
    }
    if (o_.per_block) {
      // Per-block summaries are a diagnostic whose size grows with the blocks: the reference supplies them.
      AnalyzeOptions blocks_only;
      blocks_only.per_block = true;
      auto ref = analyze_reference(r_.format, input_, blocks_only, r_.engine);
      if (!ref) return ref.error();
      r_.blocks = std::move(ref->blocks);
    }
    return std::move(r_);
  }

 private:
  std::int64_t block_at(std::int64_t e) const {
    if (e >= static_cast<std::int64_t>(input_.size())) return blocks_;
    const std::int64_t r = e / row_;
    return r * per_row_ + (e - r * row_) / k_;
  }
  Error fail(const Error& e) const { return make_error("format '" + r_.format.name + "': " + e.message); }

  BlockKernel kernel_;
  const TensorSource& input_;
  AnalyzeOptions o_;
  unsigned threads_;
  BlockRun br_;
  BlockInput x_{std::span<const float>{}};
  BlockTensorFacts facts_;
  FormatAnalysis r_;
  std::int64_t blocks_ = 0, row_ = 1, k_ = 1, per_row_ = 0;
  bool exact_from_codes_ = false;
  std::vector<double> table_;
  std::vector<float> deq_, amax_;
  std::vector<double> deq64_;
  std::vector<GapExtra> extra_;
  std::optional<std::string> fallback_;
};

/// The end of the chunk that starts at element e0: about `target` elements on, at an element that starts a
/// block of every job and is a multiple of 8 (packed codes of every width start on a byte), or the tensor's end.
std::int64_t joint_chunk_end(const std::vector<KernelAnalysis*>& jobs, std::int64_t e0, std::int64_t n,
                             std::int64_t row, std::int64_t target) {
  // Offsets in a row that start a block of every job: multiples of the block sizes' least common multiple
  // (only the row's start where that exceeds the row).
  std::int64_t step = 1;
  for (const KernelAnalysis* j : jobs) {
    step = std::lcm(step, std::max<std::int64_t>(1, j->block_size()));
    if (step >= row) {
      step = row;
      break;
    }
  }
  std::int64_t e = std::min(n, e0 + std::max<std::int64_t>(1, target));
  while (e < n) {
    const std::int64_t o = e % row;
    if (o % step == 0 && e % 8 == 0) break;
    const std::int64_t next = (o / step + 1) * step;
    e += (next < row ? next : row) - o;
  }
  return std::min(e, n);
}

/// The jobs that take the kernels on the input as it is, in one pass: the input is read once for all of them
/// (plus a first pass per two-level format for its tensor scale), chunk by chunk.
std::optional<Error> run_jointly(std::vector<KernelAnalysis>& jobs, const TensorSource& input, const Run& run,
                                 std::vector<Result<FormatAnalysis>>& results) {
  std::string names;
  for (KernelAnalysis& j : jobs) {
    if (auto e = j.start(run)) return e;
    if (!names.empty()) names += ", ";
    names += j.format().name;
  }
  std::vector<KernelAnalysis*> ptrs;
  for (KernelAnalysis& j : jobs) ptrs.push_back(&j);
  const auto n = static_cast<std::int64_t>(input.size());
  const std::int64_t row = input.shape().empty() ? 1 : std::max<std::int64_t>(1, input.shape().back());
  const std::int64_t target = run.chunk_elements > 0 ? run.chunk_elements : detail::kChunkElements;
  for (std::int64_t e0 = 0; e0 < n;) {
    if (run.reporter.cancelled()) return make_error(kCancelled);
    const std::int64_t e1 = joint_chunk_end(ptrs, e0, n, row, target);
    for (KernelAnalysis& j : jobs)
      if (auto e = j.chunk(e0, e1)) return e;
    input.release(static_cast<std::size_t>(e1));
    run.reporter.report(e1, n, names);
    e0 = e1;
  }
  for (KernelAnalysis& j : jobs) results.push_back(j.finish());
  return std::nullopt;
}

/// Per-tensor scales and 2-D tiles (without gaps or per-block rows): the kernel of whole-row blocks
/// (detail::whole_row_format) over the tensor as one row, or over each tile's elements gathered into a row, one
/// class of tile shapes at a time; the classes' exact totals add up to the tensor's. The gathered copy costs
/// the input's size. nullopt where the reference has to run: no such kernel, gaps or per-block rows asked
/// for, or tensor-wide quantities (a tensor scale, tensor-nan) over tiles of several shapes. Tiles of several
/// shapes cost a second copy, class by class.
std::optional<Result<FormatAnalysis>> gathered_analysis(const BlockFormat& f, const TensorSource& input,
                                                       const AnalyzeOptions& o, const Run& run, unsigned threads) {
  if (o.gaps || o.per_block || input.size() == 0 || !input.float32_exact()) return std::nullopt;
  const auto rows_format = detail::whole_row_format(f);
  if (!rows_format) return std::nullopt;
  std::string why;
  const Tensor* t = input.tensor();
  auto value = [&](std::size_t i) { return t != nullptr ? t->data()[i] : static_cast<float>(input.value(i)); };
  std::vector<float> gathered(input.size());
  std::vector<detail::TileClass> classes{{1, static_cast<std::int64_t>(input.size())}};
  if (f.layout.geometry().two_d()) {
    std::size_t at = 0;
    classes = detail::for_each_tile_row(input.shape(), f.layout, [&](std::size_t first, std::size_t len) {
      for (std::size_t k = 0; k < len; ++k) gathered[at + k] = value(first + k);
      at += len;
    });
  } else {
    for (std::size_t i = 0; i < gathered.size(); ++i) gathered[i] = value(i);
  }
  FormatAnalysis total;
  total.format = f;
  total.bits_per_element = f.stored_bits_per_element(input.shape());
  std::size_t first = 0;
  for (const detail::TileClass& c : classes) {
    const auto len = static_cast<std::size_t>(c.count * c.size);
    // One class (whole tiles only, or the tensor as one row) takes the gathered values as they are.
    std::vector<float> values = classes.size() == 1
                                    ? std::move(gathered)
                                    : std::vector<float>(gathered.begin() + static_cast<std::ptrdiff_t>(first),
                                                         gathered.begin() + static_cast<std::ptrdiff_t>(first + len));
    first += len;
    auto part = Tensor::from_f32({c.count, c.size}, std::move(values));
    if (!part) return Result<FormatAnalysis>(part.error());
    const TensorSource source = TensorSource::of(std::move(*part));
    auto kernel = detail::kernel_for(*rows_format, source, &why);
    if (!kernel) return std::nullopt;
    if (kernel->needs_tensor_facts() && classes.size() > 1) return std::nullopt;
    std::vector<KernelAnalysis> one;
    one.emplace_back(std::move(*kernel), *rows_format, source, o, threads);
    std::vector<Result<FormatAnalysis>> r;
    if (auto e = run_jointly(one, source, run, r)) return Result<FormatAnalysis>(*e);
    if (!r[0]) return std::move(r[0]);
    total.engine = r[0]->engine;
    total.total.merge(r[0]->total);
  }
  return Result<FormatAnalysis>(std::move(total));
}

/// Per-block summaries streamed to the sink, block after block, with the totals merged from the blocks: the
/// reference's quantization of the whole tensor and two indexes per element, nothing per block.
Result<FormatAnalysis> stream_blocks(const BlockFormat& f, std::size_t index, const TensorSource& input,
                                     const BlockSink& sink) {
  std::vector<double> storage;
  const std::span<const double> x = detail::exact_values(input, storage);
  auto q = quantize(f, x, input.shape());
  if (!q) return make_error("format '" + f.name + "': " + q.error().message);
  FormatAnalysis r;
  r.format = f;
  r.engine = engine_for(f);
  r.bits_per_element = f.stored_bits_per_element(input.shape());
  if (!f.layout.scale) {  // no blocks: the totals alone
    r.total = analyze(f, x, *q).total;
    return r;
  }
  std::optional<Error> failed;
  for_each_block(f, x, *q, [&](std::size_t b, const ErrorStats& s) {
    r.total.merge(s);
    failed = sink(index, b, BlockSummary{q->block_amax[b], q->scale_values[b] * q->tensor_scale, s});
    return !failed;
  });
  if (failed) return *failed;
  return r;
}

}  // namespace

std::int64_t block_count(const BlockFormat& f, const std::vector<std::int64_t>& shape) {
  if (!f.layout.scale) return 0;
  return BlockIndexer(shape, f.layout).block_count();
}

Result<std::vector<FormatAnalysis>> analyze(const std::vector<BlockFormat>& formats, const TensorSource& input,
                                            const AnalyzeOptions& options, const Run& run) {
  if (options.per_block && options.block_sink && !options.gaps) {
    std::vector<FormatAnalysis> out;
    for (std::size_t i = 0; i < formats.size(); ++i) {
      if (run.reporter.cancelled()) return make_error(kCancelled);
      if (auto e = detail::check_axis(formats[i], input)) return *e;
      auto r = stream_blocks(formats[i], i, input, options.block_sink);
      if (!r) return r.error();
      out.push_back(std::move(*r));
    }
    return out;
  }
  // Each format's result, in the order given: a job of the joint pass (index into `joint`) or a result.
  std::vector<std::optional<Result<FormatAnalysis>>> done(formats.size());
  std::vector<KernelAnalysis> joint;
  std::vector<std::size_t> joint_index;
  const unsigned threads = detail::resolve_threads(run.threads);
  for (std::size_t i = 0; i < formats.size(); ++i) {
    const BlockFormat& f = formats[i];
    if (run.reporter.cancelled()) return make_error(kCancelled);
    if (auto e = detail::check_axis(f, input)) return *e;
    // 1-D blocks along another axis than the last: the same blocks, in the same element order, along the last
    // axis of the tensor with that axis moved last (stochastic rounding keys on element positions, so not then).
    const auto rank = static_cast<int>(input.shape().size());
    const BlockGeometry geometry = f.layout.geometry();
    const int axis = geometry.axis_in(rank);
    if (geometry.one_d() && !geometry.per_channel() && rank > 1 && axis != rank - 1 &&
        f.options.element.rounding != Rounding::Stochastic && !options.per_block) {
      auto moved = block_axes_last(input, {axis});
      if (!moved) return moved.error();
      BlockFormat last = f;
      last.layout.axis = -1;
      std::string why;
      if (auto kernel = detail::kernel_for(last, *moved, &why)) {
        std::vector<KernelAnalysis> one;
        one.emplace_back(std::move(*kernel), last, *moved, options, threads);
        std::vector<Result<FormatAnalysis>> r;
        if (auto e = run_jointly(one, *moved, run, r)) return *e;
        if (r[0]) r[0]->format = f;
        done[i] = std::move(r[0]);
        continue;
      }
    }
    std::string why;
    auto kernel = detail::kernel_for(f, input, &why);
    if (!kernel) {
      if (auto g = gathered_analysis(f, input, options, run, threads)) {
        done[i] = std::move(*g);
      } else {
        done[i] = analyze_reference(f, input, options, "reference (" + why + ")");
      }
    } else if (f.layout.sparse_m > 0) {
      // N:M sparsity prunes the whole tensor at once: a pass of its own.
      std::vector<KernelAnalysis> one;
      one.emplace_back(std::move(*kernel), f, input, options, threads);
      std::vector<Result<FormatAnalysis>> r;
      if (auto e = run_jointly(one, input, run, r)) return *e;
      done[i] = std::move(r[0]);
    } else {
      joint.emplace_back(std::move(*kernel), f, input, options, threads);
      joint_index.push_back(i);
    }
    if (done[i] && !*done[i]) return done[i]->error();
  }
  if (!joint.empty()) {
    std::vector<Result<FormatAnalysis>> r;
    if (auto e = run_jointly(joint, input, run, r)) return *e;
    for (std::size_t j = 0; j < r.size(); ++j) done[joint_index[j]] = std::move(r[j]);
  }
  std::vector<FormatAnalysis> out;
  out.reserve(formats.size());
  for (auto& d : done) {
    if (!*d) return d->error();
    out.push_back(std::move(**d));
  }
  return out;
}

}  // namespace mxlab::ops
