// BlockKernel: the reduction of a block format to BlockParams, and the split of a tensor's blocks over threads;
// the per-target kernels are in block_*_kernel.cpp (docs/kernels.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "block_params.hpp"
#include "grid_params.hpp"
#include "parallel.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/core/transpose.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/kernels/block_kernel.hpp"
#include "mxlab/kernels/cast_kernel.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab {

enum class BlockKernel::Mode : std::uint8_t { Fake, Packed, Metrics, Amax, TensorAmax };

/// Where a run writes (null: not wanted).
struct BlockKernel::Outputs {
  float* fake = nullptr;
  std::uint8_t* elements = nullptr;
  std::uint8_t* scales = nullptr;
  float* amax = nullptr;
  BlockMetrics* metrics = nullptr;
  TensorScale* tensor_scale = nullptr;
  float* tensor_amax = nullptr;
  bool* tensor_nan = nullptr;
  bool* tensor_inf = nullptr;
  std::uint8_t* subtile_offsets = nullptr;
  const void* metrics_x = nullptr;  ///< N:M sparsity: x is the pruned copy, this the tensor itself
};

namespace {

using kernel_detail::BlockParams;
using kernel_detail::CastParams;
using kernel_detail::InputKind;
using kernel_detail::bf16_value;
using kernel_detail::half_value;
using kernel_detail::low_bits;

InputKind input_kind(BlockInputType t) {
  switch (t) {
    case BlockInputType::F32: return InputKind::F32;
    case BlockInputType::BF16: return InputKind::BF16;
    case BlockInputType::F16: return InputKind::F16;
    case BlockInputType::F64: break;  // the loops read float32: run narrows float64 into each thread's buffer
  }
  return InputKind::F32;
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

/// One thread's share of a run: blocks [b0, b1), its packed writer, metrics and tensor-wide findings.
struct RunPart {
  std::int64_t b0 = 0, b1 = 0;
  std::unique_ptr<kernel_detail::PackWriter> writer;
  std::unique_ptr<kernel_detail::MetricsAcc> acc;
  float tensor_amax = 0;
  bool tensor_nan = false;
  bool tensor_inf = false;
};

/// The parts of blocks [rb0, rb0 + nblocks) for the given number of threads, each with its packed writer
/// (elements non-null) and metrics accumulator.
std::vector<RunPart> make_parts(unsigned threads, std::int64_t rb0, std::int64_t nblocks, std::int64_t row,
                                std::int64_t k, std::uint8_t* elements, const BlockParams& p, bool metrics) {
  const std::int64_t per_row = ceil_div(row, k);
  std::vector<RunPart> parts(threads);
  for (unsigned t = 0; t < threads; ++t) {
    RunPart& part = parts[t];
    part.b0 = rb0 + nblocks * t / threads;
    part.b1 = rb0 + nblocks * (t + 1) / threads;
    const std::int64_t r = part.b0 / per_row;
    const std::int64_t first = r * row + (part.b0 - r * per_row) * k;
    if (elements != nullptr)
      part.writer = std::make_unique<kernel_detail::PackWriter>(
          elements, static_cast<std::size_t>(first) * static_cast<std::size_t>(p.bits), p.bits, p.low_first);
    if (metrics) part.acc = std::make_unique<kernel_detail::MetricsAcc>();
  }
  return parts;
}

/// Fake-quantized values of zero whose input is negative become -0 (each part's elements, in parallel).
void negative_zeros(const BlockParams& p, const std::vector<RunPart>& parts, std::int64_t row, std::int64_t k,
                    BlockInput x, bool any_nan, float* fake) {
  const std::int64_t per_row = ceil_div(row, k);
  auto first = [&](std::int64_t b) { return b / per_row * row + std::min((b % per_row) * k, row); };
  kernel_detail::run_parts(static_cast<unsigned>(parts.size()), [&](unsigned t) {
    for (std::int64_t b = parts[t].b0; b < parts[t].b1; ++b) {
      const std::int64_t i0 = first(b), i1 = b % per_row == per_row - 1 ? (b / per_row + 1) * row : first(b + 1);
      int divisor = 0;
      bool planned = false;
      for (std::int64_t i = i0; i < i1; ++i) {
        const double v = x.value(static_cast<std::size_t>(i));
        if (fake[i] != 0.0F || !(v < 0)) continue;
        if (!planned && p.float_scales) {
          divisor = QuantizedTensor::kNoExponent;  // as the reference: no power-of-two divisor to consult
          planned = true;
        }
        if (!planned) {
          // The block's plan, as the reference makes it: its divisor decides whether the float32 quotient was -0.
          double amax = 0;
          bool nan = false, inf = false;
          for (std::int64_t j = i0; j < i1; ++j) {
            const double a = std::fabs(x.value(static_cast<std::size_t>(j)));
            if (std::isnan(a)) nan = true;
            else if (std::isinf(a)) inf = true;
            else amax = std::max(amax, a);
          }
          divisor = pow2_block_plan(*p.owner, amax, nan, inf, any_nan, p.x_min, p.x_max).divisor_exponent;
          planned = true;
        }
        if (negative_zero_value(*p.owner, v, divisor)) fake[i] = -0.0F;
      }
    }
  });
}

/// Bytes shared by two parts (or the tensor's last partial byte): zero, then OR every contribution.
void merge_packed_edges(const std::vector<RunPart>& parts, std::uint8_t* elements) {
  for (const RunPart& part : parts)
    for (const auto& e : part.writer->edge) elements[e.index] = 0;
  for (const RunPart& part : parts)
    for (const auto& e : part.writer->edge) elements[e.index] = static_cast<std::uint8_t>(elements[e.index] | e.bits);
}

/// The tensor's largest finite magnitude and its NaN and Inf flags, from every part.
void merge_tensor_facts(const std::vector<RunPart>& parts, float* amax, bool* nan, bool* inf) {
  float m = 0;
  for (const RunPart& part : parts) m = std::max(m, part.tensor_amax);
  *amax = m;
  if (nan != nullptr)
    for (const RunPart& part : parts) *nan = *nan || part.tensor_nan;
  if (inf != nullptr)
    for (const RunPart& part : parts) *inf = *inf || part.tensor_inf;
}

/// The parts' exact metric sums, added into m.
void merge_metrics(const std::vector<RunPart>& parts, BlockMetrics* m) {
  for (const RunPart& part : parts) {
    const kernel_detail::MetricsAcc& a = *part.acc;
    m->count += a.count;
    m->nonzero_inputs += a.nonzero_inputs;
    m->underflows += a.underflows;
    m->saturations += a.saturations;
    m->nan_outputs += a.nan_outputs;
    a.sse.add_to(m->sse);
    m->sse.add(a.rare);
    a.signal.add_to(m->signal);
    a.error.add_to(m->error_sum);
    m->max_abs_error = std::max(m->max_abs_error, a.max_abs_error);
    m->max_rel_error = std::max(m->max_rel_error, a.max_rel_error);
    for (std::size_t i = 0; i < kernel_detail::MetricsAcc::kSlots; ++i) {
      m->sse.add(a.lane_sse.hi[i]);
      m->sse.add(a.lane_sse.lo[i]);
      m->signal.add(a.lane_signal.hi[i]);
      m->signal.add(a.lane_signal.lo[i]);
      m->error_sum.add(a.lane_error.hi[i]);
      m->error_sum.add(a.lane_error.lo[i]);
      m->max_abs_error = std::max(m->max_abs_error, a.lane_max_abs[i]);
      m->max_rel_error = std::max(m->max_rel_error, a.lane_max_rel[i]);
    }
  }
}

}  // namespace

double BlockInput::value(std::size_t i) const {
  switch (type) {
    case BlockInputType::F32: return static_cast<const float*>(data)[i];
    case BlockInputType::BF16: return bf16_value(static_cast<const std::uint16_t*>(data)[i]);
    case BlockInputType::F16: return half_value(static_cast<const std::uint16_t*>(data)[i]);
    case BlockInputType::F64: return static_cast<float>(static_cast<const double*>(data)[i]);
  }
  return 0;
}


BlockKernel::BlockKernel(BlockFormat f, std::shared_ptr<const kernel_detail::BlockParams> p)
    : format_(std::move(f)), params_(std::move(p)) {}

std::int64_t BlockKernel::block_size(std::int64_t row_length) const {
  return params_->block == 0 ? std::max<std::int64_t>(row_length, 1) : params_->block;
}

std::int64_t BlockKernel::block_count(const std::vector<std::int64_t>& shape) const {
  const std::int64_t n = element_count(shape);
  if (n <= 0) return 0;
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t k = block_size(row);
  return n / row * ceil_div(row, k);
}

std::int64_t BlockKernel::subtile_count(const std::vector<std::int64_t>& shape) const {
  const std::int64_t n = element_count(shape);
  if (n <= 0 || params_->subtile == 0) return 0;
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  return n / row * ceil_div(row, params_->subtile);
}

std::size_t BlockKernel::scale_bytes() const { return static_cast<std::size_t>(params_->scale_bytes); }

std::size_t BlockKernel::packed_element_bytes(std::size_t elements) const {
  return ceil_div(elements * static_cast<std::size_t>(params_->bits), 8);
}

// One piece of about 120 lines: the range checks, the outputs shifted to tensor positions, the thread split and
// each thread's BlockCall share their locals; the parts' setup and merges are the functions above.
Result<std::size_t> BlockKernel::run(Mode mode, BlockInput x, const std::vector<std::int64_t>& shape,
                                     const Outputs& o, const BlockRun& br) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  const std::int64_t n = element_count(shape);
  if (static_cast<std::size_t>(n) != x.size)
    return make_error("tensor shape holds " + std::to_string(n) + " elements but " + std::to_string(x.size) +
                      " values were given");
  if (o.metrics != nullptr) *o.metrics = BlockMetrics{};
  const BlockParams& p = *params_;
  if (x.type == BlockInputType::F64 && format_.layout.sparse_m > 0 && o.metrics_x == nullptr && n > 0) {
    // N:M sparsity prunes a copy of the whole tensor: a float32 one, as the buffers below would read it.
    std::vector<float> narrowed(x.size);
    for (std::size_t i = 0; i < x.size; ++i) narrowed[i] = static_cast<float>(x.value(i));
    return run(mode, BlockInput(narrowed), shape, o, br);
  }
  if (format_.layout.sparse_m > 0 && o.metrics_x == nullptr && n > 0) {
    // N:M sparsity: the kernels quantize a pruned copy of the tensor; the metrics compare with the tensor.
    std::vector<std::uint8_t> pruned;
    const BlockInput px = prune_nm(x, shape.empty() ? 1 : shape.back(), br, &pruned);
    Outputs po = o;
    po.metrics_x = x.data;
    return run(mode, px, shape, po, br);
  }
  // Two-level formats: a first pass finds the tensor's largest finite magnitude, which sets the tensor scale;
  // NaN/Inf policy tensor-nan: a NaN anywhere makes every block NaN, so a first pass looks for one. Calls over
  // ranges of blocks take these from BlockRun::facts.
  const bool element_pass = mode == Mode::Fake || mode == Mode::Packed || mode == Mode::Metrics;
  BlockTensorFacts facts;
  if (element_pass && br.facts != nullptr) {
    facts = *br.facts;
  } else if (element_pass) {
    auto f = tensor_facts(x, shape, br);
    if (!f) return f.error();
    facts = *f;
  }
  const double g = p.two_level ? facts.scale.value : 1.0;
  if (p.two_level && o.tensor_scale != nullptr) *o.tensor_scale = facts.scale;
  const bool any_nan = facts.any_nan;
  const Nvfp4PeerTensor& peer_tensor = facts.peer;
  if (n == 0) return std::size_t{0};
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t k = block_size(row);
  const std::int64_t per_row = ceil_div(row, k);
  const std::int64_t all_blocks = n / row * per_row;
  const std::int64_t rb0 = br.first_block;
  const std::int64_t rb1 = br.end_block < 0 ? all_blocks : br.end_block;
  if (rb0 < 0 || rb0 > rb1 || rb1 > all_blocks)
    return make_error("block range [" + std::to_string(rb0) + ", " + std::to_string(rb1) + ") outside the tensor's " +
                      std::to_string(all_blocks) + " blocks");
  const std::int64_t nblocks = rb1 - rb0;
  const std::int64_t base = block_first_element(rb0, row);
  if (mode == Mode::Packed && (static_cast<std::size_t>(base) * static_cast<std::size_t>(p.bits)) % 8 != 0)
    return make_error("packed quantization of a block range must start on a byte boundary");
  // The outputs hold the range only; the loops index them by tensor position, so they see them shifted back by
  // the range's start (address arithmetic on integers: the shifted pointers are never dereferenced outside
  // the range).
  auto shift = [](auto* ptr, std::int64_t by) {
    using T = std::remove_pointer_t<decltype(ptr)>;
    if (ptr == nullptr) return ptr;
    return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(ptr) -
                                static_cast<std::uintptr_t>(by) * sizeof(T));
  };
  const std::int64_t subtiles_per_row = p.subtile > 0 ? (row + p.subtile - 1) / p.subtile : 0;
  const std::int64_t subtile_base =
      p.subtile > 0 ? rb0 / per_row * subtiles_per_row + (rb0 % per_row) * k / p.subtile : 0;
  float* const fake = shift(o.fake, base);
  std::uint8_t* const elements =
      shift(o.elements, static_cast<std::int64_t>(static_cast<std::size_t>(base) * static_cast<std::size_t>(p.bits) / 8));
  std::uint8_t* const scales = shift(o.scales, rb0 * static_cast<std::int64_t>(p.scale_bytes));
  float* const amax_out = shift(o.amax, rb0);
  std::uint8_t* const subtile_out = shift(o.subtile_offsets, subtile_base);

  const auto range_elements = static_cast<std::size_t>(block_first_element(rb1, row) - base);
  const unsigned threads = kernel_detail::useful_threads(range_elements, br.threads);

  kernel_detail::BlockOut out = kernel_detail::BlockOut::None;
  if (mode == Mode::Fake) out = kernel_detail::BlockOut::Fake;
  if (mode == Mode::Packed) out = kernel_detail::BlockOut::Packed;

  std::vector<RunPart> parts = make_parts(threads, rb0, nblocks, row, k, mode == Mode::Packed ? elements : nullptr, p,
                                         o.metrics != nullptr);
  // Outputs of this size are written with non-temporal stores (BlockCall::stream).
  constexpr std::size_t kStreamBytes = std::size_t{16} << 20;
  const std::size_t output_bytes = mode == Mode::Fake     ? range_elements * sizeof(float)
                                   : mode == Mode::Packed ? packed_element_bytes(range_elements)
                                                          : 0;
  auto work = [&](RunPart& part) {
    kernel_detail::BlockCall call;
    call.input = input_kind(x.type);
    call.x = x.data;
    call.row = row;
    call.block = k;
    call.blocks_per_row = per_row;
    call.b0 = part.b0;
    call.b1 = part.b1;
    call.out = out;
    call.fake = fake;
    call.writer = part.writer.get();
    call.elements = elements;
    call.scales = scales;
    call.amax = mode == Mode::Amax ? amax_out : nullptr;
    call.metrics = part.acc.get();
    call.stream = output_bytes >= kStreamBytes;
    call.g = g;
    call.tensor_amax = mode == Mode::TensorAmax ? &part.tensor_amax : nullptr;
    call.tensor_nan = mode == Mode::TensorAmax && o.tensor_nan != nullptr ? &part.tensor_nan : nullptr;
    call.tensor_inf = mode == Mode::TensorAmax && o.tensor_inf != nullptr ? &part.tensor_inf : nullptr;
    call.nvfp4 = p.nvfp4_peer ? &peer_tensor : nullptr;
    call.metrics_x = o.metrics_x;
    call.any_nan = any_nan;
    call.subtile_offsets = subtile_out;
    call.subtiles_per_row = subtiles_per_row;
    if (x.type != BlockInputType::F64) {
      kernel_detail::block_dispatch(p, call);
    } else {
      // float64: a few blocks at a time narrowed into this thread's buffer, which the loops see shifted to tensor
      // positions as the outputs are; a margin of the neighbouring elements on each side covers the loops'
      // whole-vector reads at a range's edges.
      constexpr std::int64_t kBufferElements = 8192, kMargin = 64;
      const std::int64_t step = std::max<std::int64_t>(1, kBufferElements / k);
      std::vector<float> buffer;
      const auto* xd = static_cast<const double*>(x.data);
      for (std::int64_t b = part.b0; b < part.b1; b += step) {
        call.b0 = b;
        call.b1 = std::min(part.b1, b + step);
        const std::int64_t e0 = std::max<std::int64_t>(0, block_first_element(call.b0, row) - kMargin);
        const std::int64_t e1 = std::min(n, block_first_element(call.b1, row) + kMargin);
        buffer.resize(static_cast<std::size_t>(e1 - e0));
        for (std::int64_t i = e0; i < e1; ++i) buffer[static_cast<std::size_t>(i - e0)] = static_cast<float>(xd[i]);
        call.x = shift(static_cast<const float*>(buffer.data()), e0);
        kernel_detail::block_dispatch(p, call);
      }
    }
    if (part.writer) part.writer->finish();
  };
  kernel_detail::run_parts(threads, [&](unsigned t) { work(parts[t]); });

  // Integer elements under ZeroSign::MinusZeroPlus: a negative input that became zero has the value -0.
  // (The planned path without subtiles does it in its loop.)
  if (mode == Mode::Fake && negative_zero_values(format_) && !(p.planned && p.plan_negative_zeros))
    negative_zeros(p, parts, row, k, x, any_nan, fake);
  if (mode == Mode::Packed) merge_packed_edges(parts, elements);
  if (mode == Mode::TensorAmax) merge_tensor_facts(parts, o.tensor_amax, o.tensor_nan, o.tensor_inf);
  if (o.metrics != nullptr) merge_metrics(parts, o.metrics);
  return range_elements;
}

BlockKernel::RangeSize BlockKernel::range_size(const std::vector<std::int64_t>& shape, const BlockRun& br) const {
  RangeSize r;
  const std::int64_t all = block_count(shape);
  if (all <= 0) return r;
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t b0 = std::clamp<std::int64_t>(br.first_block, 0, all);
  const std::int64_t b1 = br.end_block < 0 ? all : std::clamp<std::int64_t>(br.end_block, b0, all);
  r.blocks = b1 - b0;
  r.elements = block_first_element(b1, row) - block_first_element(b0, row);
  if (params_->subtile > 0) {
    const std::int64_t k = block_size(row);
    const std::int64_t per_row = ceil_div(row, k);
    const std::int64_t spr = ceil_div(row, params_->subtile);
    auto first_subtile = [&](std::int64_t b) {
      return b / per_row * spr + std::min((b % per_row) * k / params_->subtile, spr);
    };
    r.subtiles = first_subtile(b1) - first_subtile(b0);
  }
  return r;
}

bool BlockKernel::needs_tensor_facts() const {
  const BlockParams& p = *params_;
  return p.two_level || p.nvfp4_peer ||
         ((p.planned || p.float_scales) && p.specials == SpecialsPolicy::TensorNan);
}

Result<BlockTensorFacts> BlockKernel::tensor_facts(BlockInput x, const std::vector<std::int64_t>& shape,
                                                   const BlockRun& br) const {
  const BlockParams& p = *params_;
  BlockRun whole = br;
  whole.first_block = 0;
  whole.end_block = -1;
  whole.facts = nullptr;
  BlockTensorFacts f;
  if (p.nvfp4_peer) {
    auto t = nvfp4_peer_tensor(x, shape, whole);
    if (!t) return t.error();
    f.peer = *t;
    f.scale = t->scale;
  } else if (p.two_level) {
    auto ts = tensor_scale(x, shape, whole);
    if (!ts) return ts.error();
    f.scale = *ts;
  }
  if ((p.planned || (p.float_scales && !p.nvfp4_peer)) && p.specials == SpecialsPolicy::TensorNan) {
    float unused = 0;
    Outputs first;
    first.tensor_amax = &unused;
    first.tensor_nan = &f.any_nan;
    auto r = run(Mode::TensorAmax, x, shape, first, whole);
    if (!r) return r.error();
  }
  return f;
}

std::int64_t BlockKernel::block_first_element(std::int64_t b, std::int64_t row_length) const {
  const std::int64_t k = block_size(row_length);
  const std::int64_t per_row = ceil_div(row_length, k);
  const std::int64_t r = b / per_row;
  return r * row_length + std::min((b - r * per_row) * k, row_length);
}

Result<TensorScale> BlockKernel::tensor_scale(BlockInput x, const std::vector<std::int64_t>& shape,
                                              const BlockRun& br) const {
  if (!params_->two_level) return make_error("format '" + format_.name + "' has no tensor scale");
  if (params_->nvfp4_peer) {
    auto t = nvfp4_peer_tensor(x, shape, br);
    if (!t) return t.error();
    return t->scale;
  }
  float amax = 0;
  Outputs o;
  o.tensor_amax = &amax;
  auto r = run(Mode::TensorAmax, x, shape, o, br);
  if (!r) return r.error();
  return choose_tensor_scale(*params_->owner, static_cast<double>(amax));
}

BlockInput BlockKernel::prune_nm(BlockInput x, std::int64_t row, const BlockRun& br,
                                 std::vector<std::uint8_t>* storage) const {
  const int keep = format_.layout.sparse_n;
  const auto m = static_cast<std::int64_t>(format_.layout.sparse_m);
  const std::size_t bytes = x.type == BlockInputType::F32 ? 4 : 2;
  storage->assign(static_cast<const std::uint8_t*>(x.data), static_cast<const std::uint8_t*>(x.data) + x.size * bytes);
  std::uint8_t* out = storage->data();
  const auto rows = static_cast<std::int64_t>(x.size) / row;
  const unsigned threads = kernel_detail::useful_threads(x.size, br.threads);
  kernel_detail::run_parts(threads, [&](unsigned t) {
    std::vector<double> group(static_cast<std::size_t>(m));
    for (std::int64_t r = rows * t / threads; r < rows * (t + 1) / threads; ++r) {
      for (std::int64_t g = 0; g < row; g += m) {
        const std::size_t first = static_cast<std::size_t>(r * row + g);
        const auto len = static_cast<std::size_t>(std::min(m, row - g));
        bool nan = false;
        for (std::size_t j = 0; j < len; ++j) {
          group[j] = x.value(first + j);
          nan = nan || std::isnan(group[j]);
        }
        if (nan) {
          // The reference's own selection (its comparisons with NaN decide the order).
          std::vector<double> kept(group.begin(), group.begin() + static_cast<std::ptrdiff_t>(len));
          apply_nm_sparsity(kept, static_cast<std::int64_t>(len), keep, static_cast<int>(m));
          for (std::size_t j = 0; j < len; ++j)
            if (std::bit_cast<std::uint64_t>(kept[j]) == 0 && std::bit_cast<std::uint64_t>(group[j]) != 0)
              std::memset(out + (first + j) * bytes, 0, bytes);
          continue;
        }
        // Element j survives when fewer than n elements rank before it: larger magnitudes, or equal ones at
        // lower indices (the reference's stable sort by decreasing magnitude).
        for (std::size_t j = 0; j < len; ++j) {
          const double a = std::fabs(group[j]);
          int before = 0;
          for (std::size_t i = 0; i < len; ++i) {
            const double b = std::fabs(group[i]);
            if (b > a || (b == a && i < j)) ++before;
          }
          if (before >= keep) std::memset(out + (first + j) * bytes, 0, bytes);
        }
      }
    }
  });
  BlockInput px = x;
  px.data = out;
  return px;
}

Result<Nvfp4PeerTensor> BlockKernel::nvfp4_peer_tensor(BlockInput x, const std::vector<std::int64_t>& shape,
                                                       const BlockRun& br) const {
  float amax = 0;
  bool nan = false;
  bool inf = false;
  Outputs o;
  o.tensor_amax = &amax;
  o.tensor_nan = &nan;
  o.tensor_inf = &inf;
  auto r = run(Mode::TensorAmax, x, shape, o, br);
  if (!r) return r.error();
  return mxlab::nvfp4_peer_tensor(*params_->owner, nan, inf, static_cast<double>(amax));
}

std::optional<Error> matrix_call_error(std::size_t x_size, std::int64_t rows, std::int64_t cols, std::size_t out_size) {
  if (rows < 0 || cols < 0) return Error{"negative dimension in the tensor shape"};
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (n != x_size)
    return Error{"tensor shape holds " + std::to_string(n) + " elements but " + std::to_string(x_size) +
                 " values were given"};
  if (out_size < n)
    return Error{"fake quantization: output holds " + std::to_string(out_size) + " values for " + std::to_string(n) +
                 " inputs"};
  return std::nullopt;
}

bool BlockKernel::columns_native() const {
  const BlockParams& p = *params_;
  if (p.float_scales) return float_columns_native();
  return !p.planned && !p.two_level && !p.codebook && p.subtile == 0 && !p.stochastic &&
         p.cast.rounding == Rounding::NearestEven && p.fast.on && p.rule == ScaleRule::Floor &&
         format_.layout.sparse_m == 0 && !negative_zero_values(format_) && !needs_tensor_facts();
}

bool BlockKernel::float_columns_native() const {
  // fast_float_call's conditions that do not depend on the call (the tensor scale is checked per call).
  const BlockParams& p = *params_;
  return p.float_scales && p.fast.on && p.fast.kind == kernel_detail::BlockParams::FastKind::Float && p.fast32 &&
         !p.four_over_six && !p.nvfp4_peer && !p.float_peer && !p.codebook && !p.planned && p.subtile == 0 &&
         !p.stochastic && p.cast.rounding == Rounding::NearestEven &&
         (p.zero_sign == ZeroSign::Keep || !p.has_negative_zero) && format_.layout.sparse_m == 0 &&
         !negative_zero_values(format_) && p.specials != SpecialsPolicy::TensorNan;
}

namespace {

/// The column kernels over panels of `block` rows of a rows x cols matrix (tile_width > 1: bands of 2-D tiles),
/// the panels split over the threads: float block scales (tensor scale g) or power-of-two scales.
void run_panels(const kernel_detail::BlockParams& p, std::span<const float> x, std::int64_t rows, std::int64_t cols,
                std::int64_t block, std::int64_t tile_width, double g, std::span<float> out, unsigned threads_asked) {
  const std::int64_t panels = ceil_div(rows, block);
  const unsigned threads =
      std::min<unsigned>(kernel_detail::useful_threads(x.size(), threads_asked), static_cast<unsigned>(panels));
  kernel_detail::run_parts(threads, [&](unsigned t) {
    kernel_detail::ColumnsCall call;
    call.x = x.data();
    call.out = out.data();
    call.rows = rows;
    call.cols = cols;
    call.block = block;
    call.tile_width = tile_width;
    call.g = g;
    call.p0 = panels * t / threads;
    call.p1 = panels * (t + 1) / threads;
    if (p.float_scales) kernel_detail::float_columns_dispatch(p, call);
    else kernel_detail::columns_dispatch(p, call);
  });
}

}  // namespace

bool BlockKernel::tiles_native() const { return columns_native() && !params_->float_scales; }

Result<std::size_t> BlockKernel::fake_quantize_tiles(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                                                     std::int64_t tile_rows, std::int64_t tile_cols,
                                                     std::span<float> out, const BlockRun& br) const {
  if (auto e = matrix_call_error(x.size(), rows, cols, out.size())) return *e;
  if (!tiles_native()) return make_error("fake quantization in 2-D tiles: format '" + format_.name + "' has no tile kernel");
  if (tile_rows <= 0 || tile_cols <= 0) return make_error("fake quantization in 2-D tiles: tiles of no rows or columns");
  if (x.empty()) return std::size_t{0};
  run_panels(*params_, x, rows, cols, tile_rows, tile_cols, 1.0, out, br.threads);
  return x.size();
}

Result<std::size_t> BlockKernel::fake_quantize_columns(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                                                       std::span<float> out, const BlockRun& br) const {
  if (auto e = matrix_call_error(x.size(), rows, cols, out.size())) return *e;
  const auto n = x.size();
  if (br.first_block != 0 || br.end_block >= 0)
    return make_error("fake quantization down columns covers the whole matrix (no block range)");
  if (n == 0) return std::size_t{0};
  const std::int64_t k = block_size(rows);
  // Float block scales: the tensor scale first (the whole tensor's amax, whatever its layout).
  double g = 1.0;
  bool native = columns_native();
  if (native && params_->two_level) {
    BlockTensorFacts facts;
    if (br.facts != nullptr) {
      facts = *br.facts;
    } else {
      auto f = tensor_facts(BlockInput(x), {rows, cols}, br);
      if (!f) return f.error();
      facts = *f;
    }
    g = facts.scale.value;
    // fast_float_call: decode * s * g rounded once, with g a float32.
    native = (params_->fast32_short_scales || g == 1.0) && static_cast<double>(static_cast<float>(g)) == g;
  }
  if (native) {
    run_panels(*params_, x, rows, cols, k, 1, g, out, br.threads);
    return n;
  }
  // Every other format: the transposed copy, quantized along its rows and transposed back.
  return along_columns_by_transposing(x.data(), rows, cols, out.data(), [&](const float* xt, float* qt) {
    return fake_quantize(BlockInput(std::span<const float>(xt, n)), {cols, rows}, std::span<float>(qt, n),
                         BlockRun{br.threads, 0, -1, br.facts});
  });
}

Result<std::size_t> BlockKernel::fake_quantize(BlockInput x, const std::vector<std::int64_t>& shape,
                                               std::span<float> out, const BlockRun& br, BlockMetrics* metrics) const {
  const auto need = static_cast<std::size_t>(range_size(shape, br).elements);
  if (out.size() < need)
    return make_error("fake quantization: output holds " + std::to_string(out.size()) + " values for " +
                      std::to_string(need) + " inputs");
  Outputs o;
  o.fake = out.data();
  o.metrics = metrics;
  return run(Mode::Fake, x, shape, o, br);
}

Result<std::size_t> BlockKernel::quantize_packed(BlockInput x, const std::vector<std::int64_t>& shape,
                                                 std::span<std::uint8_t> elements, std::span<std::uint8_t> scales,
                                                 const BlockRun& br, BlockMetrics* metrics,
                                                 TensorScale* tensor_scale,
                                                 std::span<std::uint8_t> subtile_offsets) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  const RangeSize range = range_size(shape, br);
  const std::size_t element_need = packed_element_bytes(static_cast<std::size_t>(range.elements));
  if (elements.size() < element_need)
    return make_error("packed quantization: element output holds " + std::to_string(elements.size()) +
                      " bytes, " + std::to_string(element_need) + " needed");
  const std::size_t scale_need = static_cast<std::size_t>(range.blocks) * scale_bytes();
  if (scales.size() < scale_need)
    return make_error("packed quantization: scale output holds " + std::to_string(scales.size()) + " bytes, " +
                      std::to_string(scale_need) + " needed");
  if (subtile_offsets.size() < static_cast<std::size_t>(range.subtiles))
    return make_error("packed quantization: subtile output holds " + std::to_string(subtile_offsets.size()) +
                      " bytes, " + std::to_string(range.subtiles) + " needed");
  Outputs o;
  o.elements = elements.data();
  o.scales = scales.data();
  o.metrics = metrics;
  o.tensor_scale = tensor_scale;
  o.subtile_offsets = subtile_offsets.data();
  return run(Mode::Packed, x, shape, o, br);
}

Result<BlockPacked> BlockKernel::quantize_packed(BlockInput x, const std::vector<std::int64_t>& shape,
                                                 const BlockRun& br, BlockMetrics* metrics) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  BlockPacked out;
  out.elements.resize(packed_element_bytes(x.size));
  out.scales.resize(static_cast<std::size_t>(std::max<std::int64_t>(block_count(shape), 0)) * scale_bytes());
  out.subtile_offsets.resize(static_cast<std::size_t>(subtile_count(shape)));
  TensorScale ts;
  auto r = quantize_packed(x, shape, out.elements, out.scales, br, metrics, &ts, out.subtile_offsets);
  if (!r) return r.error();
  if (params_->two_level) {
    // Little-endian code bytes, as mxlab::pack stores the tensor scale.
    const int bytes = ceil_div(format_.layout.tensor_scale->bits(), 8);
    for (int i = 0; i < bytes; ++i) out.tensor_scale.push_back(static_cast<std::uint8_t>(ts.code >> (8 * i)));
  }
  return out;
}

Result<BlockMetrics> BlockKernel::metrics(BlockInput x, const std::vector<std::int64_t>& shape,
                                          const BlockRun& br) const {
  BlockMetrics m;
  Outputs o;
  o.metrics = &m;
  auto r = run(Mode::Metrics, x, shape, o, br);
  if (!r) return r.error();
  return m;
}

Result<std::size_t> BlockKernel::block_amax(BlockInput x, const std::vector<std::int64_t>& shape,
                                            std::span<float> amax, const BlockRun& br) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  const auto need = static_cast<std::size_t>(range_size(shape, br).blocks);
  if (amax.size() < need)
    return make_error("block amax: output holds " + std::to_string(amax.size()) + " values for " +
                      std::to_string(need) + " blocks");
  Outputs o;
  o.amax = amax.data();
  return run(Mode::Amax, x, shape, o, br);
}

Result<std::size_t> BlockKernel::dequantize(std::span<const std::uint8_t> elements,
                                            std::span<const std::uint8_t> scales,
                                            const std::vector<std::int64_t>& shape, std::span<float> out,
                                            const BlockRun& br, double tensor_scale,
                                            std::span<const std::uint8_t> subtile_offsets) const {
  for (auto d : shape)
    if (d < 0) return make_error("negative dimension in the tensor shape");
  const std::int64_t n = element_count(shape);
  if (out.size() < static_cast<std::size_t>(n))
    return make_error("dequantization: output holds " + std::to_string(out.size()) + " values for " +
                      std::to_string(n) + " elements");
  if (elements.size() < packed_element_bytes(static_cast<std::size_t>(n)))
    return make_error("dequantization: " + std::to_string(elements.size()) + " bytes of codes, " +
                      std::to_string(packed_element_bytes(static_cast<std::size_t>(n))) + " needed");
  if (scales.size() < static_cast<std::size_t>(block_count(shape)) * scale_bytes())
    return make_error("dequantization: " + std::to_string(scales.size()) + " bytes of scale codes for " +
                      std::to_string(block_count(shape)) + " blocks of " + std::to_string(scale_bytes()) + " bytes");
  if (subtile_offsets.size() < static_cast<std::size_t>(subtile_count(shape)))
    return make_error("dequantization: " + std::to_string(subtile_offsets.size()) + " subtile offsets for " +
                      std::to_string(subtile_count(shape)) + " subtiles");
  // The tensor scale as quantization reported it: NaN under the tensor-nan policy and 0 for ModelOpt's
  // all-zero tensor are values the reference dequantizes with.
  if (tensor_scale < 0) return make_error("dequantization: the tensor scale must not be negative");
  if (n == 0) return std::size_t{0};
  const std::int64_t row = shape.empty() ? 1 : shape.back();
  const std::int64_t k = block_size(row);
  const std::int64_t per_row = ceil_div(row, k);
  const std::int64_t nblocks = n / row * per_row;
  const unsigned threads = kernel_detail::useful_threads(static_cast<std::size_t>(n), br.threads);
  auto work = [&](unsigned t) {
    kernel_detail::DequantCall call;
    call.elements = elements.data();
    call.element_bytes = elements.size();
    call.scales = scales.data();
    call.out = out.data();
    call.row = row;
    call.block = k;
    call.blocks_per_row = per_row;
    call.b0 = nblocks * t / threads;
    call.b1 = nblocks * (t + 1) / threads;
    call.g = params_->two_level ? tensor_scale : 1.0;
    call.subtile_offsets = subtile_offsets.data();
    call.subtiles_per_row = params_->subtile > 0 ? ceil_div(row, params_->subtile) : 0;
    kernel_detail::dequant_dispatch(*params_, call);
  };
  kernel_detail::run_parts(threads, work);
  return static_cast<std::size_t>(n);
}

Result<BlockPacked> BlockKernel::reference_packed(const BlockFormat& f, BlockInput x,
                                                  const std::vector<std::int64_t>& shape) {
  std::vector<double> xd(x.size);
  for (std::size_t i = 0; i < x.size; ++i) xd[i] = x.value(i);
  auto q = quantize(f, xd, shape);
  if (!q) return q.error();
  PackedTensor p = pack(f, *q);
  BlockPacked out;
  out.elements = std::move(p.elements);
  out.scales = std::move(p.scales);
  out.tensor_scale = std::move(p.tensor_scale);
  out.subtile_offsets = std::move(p.subtile_offsets);
  return out;
}

}  // namespace mxlab
