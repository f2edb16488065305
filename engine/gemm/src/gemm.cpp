// The exact reference and the accumulation models over quantized operands (docs/gemm.md). The models run in
// double arithmetic that is exact by construction (check_model_operands), each rounding done once from an exact
// value (arith.hpp); engine/gemm/src/definition.cpp is the same definition in rational arithmetic.
#include "mxlab/gemm/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>

#include "arith.hpp"
#include "fast.hpp"
#include "mxlab/core/threads.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/kernels/block_kernel.hpp"
#include "mxlab/quantize/pack.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab::gemm {
namespace detail {

Rounder make_rounder(const Format& f, Rounding r) {
  CastOptions o;
  o.rounding = r;
  auto resolved = resolve_options(f, o);
  return {f, resolved ? *resolved : o};
}

double round_sum(const Rounder& r, const ExactSum& s) {
  const double hi = s.to_double();
  if (!std::isfinite(hi)) return r(hi);
  ExactSum rest = s;
  rest.add(-hi);
  return r(odd_from_pair(hi, static_cast<double>(rest.sign())));
}

ExactSum scaled(const ExactSum& s, double factor) {
  const ExactSum::Parts p = s.parts();
  ExactSum out;
  for (std::size_t i = 0; i < p.limbs.size(); ++i) {
    if (p.limbs[i] == 0) continue;
    const double limb = std::ldexp(static_cast<double>(p.limbs[i]), p.exponent + 32 * static_cast<int>(i));
    out.add_product(p.negative ? -limb : limb, factor);
  }
  return out;
}

}  // namespace detail

namespace {

using detail::Rounder;

const Format& float32() {
  static const Format f = *parse_format("float32");
  return f;
}

int precision(const Format& f) { return f.spec().mantissa_bits + 1; }

}  // namespace

std::vector<double> transpose(std::span<const double> x, std::int64_t rows, std::int64_t cols) {
  std::vector<double> t(x.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      t[static_cast<std::size_t>(c * rows + r)] = x[static_cast<std::size_t>(r * cols + c)];
  return t;
}

namespace {

/// x quantized by the SIMD block kernel, the engine of `mxlab quantize` (BlockKernel::quantize_packed, bit for bit
/// mxlab::pack of the reference quantizer), unpacked; nullopt where the kernel does not cover the format (2-D
/// tiles, channel scales and one scale over the whole tensor, elements of more than 16 bits:
/// BlockKernel::unsupported_reason) or x holds values that are not float32 numbers (the kernel reads float32),
/// and where it refuses the input: the reference then quantizes x, and reports any error in its own words.
std::optional<QuantizedTensor> kernel_quantize(const BlockFormat& f, std::span<const double> x,
                                               const std::vector<std::int64_t>& shape) {
  auto kernel = BlockKernel::make(f);
  if (!kernel) return std::nullopt;
  std::vector<float> xf(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    xf[i] = static_cast<float>(x[i]);
    if (static_cast<double>(xf[i]) != x[i] && !std::isnan(x[i])) return std::nullopt;
  }
  auto packed = kernel->quantize_packed(BlockInput(xf), shape);
  if (!packed) return std::nullopt;
  PackedTensor p;
  p.shape = shape;
  p.elements = std::move(packed->elements);
  p.scales = std::move(packed->scales);
  p.tensor_scale = std::move(packed->tensor_scale);
  p.subtile_offsets = std::move(packed->subtile_offsets);
  p.scale_grid = BlockIndexer(shape, f.layout).grid();
  if (!p.subtile_offsets.empty()) p.subtile_grid = BlockIndexer::subtiles(shape, f.layout).grid();
  auto q = unpack(f, p);
  if (!q) return std::nullopt;
  return std::move(*q);
}

}  // namespace

Result<Operand> quantize_operand(const BlockFormat& f, std::span<const double> x, std::int64_t rows, std::int64_t depth) {
  const std::vector<std::int64_t> shape = {rows, depth};
  std::optional<QuantizedTensor> kernel = kernel_quantize(f, x, shape);
  auto q = kernel ? Result<QuantizedTensor>(std::move(*kernel)) : quantize(f, x, shape);
  if (!q) return q.error();
  Operand op;
  op.format = f.name;
  op.rows = rows;
  op.depth = depth;
  const std::size_t n = x.size();
  op.element.resize(n);
  op.scale.assign(n, 1.0);
  op.block_start.assign(n, 0);
  op.value.resize(n);
  op.tensor_scale = q->tensor_scale;
  // One scale over the whole tensor (e4m3:float32) multiplies once at the end, as a tensor scale: FP8 GEMMs
  // with per-tensor scaling apply them to the result (cuBLAS's scale_a * scale_b).
  const bool per_tensor = f.layout.scale && f.layout.geometry().per_tensor() &&
                          !f.layout.tensor_scale && q->scale_values.size() == 1 && std::isfinite(q->scale_values[0]) &&
                          q->scale_values[0] > 0;
  if (per_tensor) {
    op.tensor_scale = q->scale_values[0];
    q->scale_values[0] = 1;
  }
  std::vector<std::int64_t> block_of, sub_of;
  if (f.layout.scale && !per_tensor) {
    block_of = BlockIndexer(shape, f.layout).block_of_all();
    if (!q->subtile_offsets.empty()) sub_of = BlockIndexer::subtiles(shape, f.layout).block_of_all();
  }
  if (per_tensor) block_of.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const double e = f.element.decode(q->codes[i]);
    op.element[i] = e;
    const auto k = static_cast<std::int64_t>(i) % std::max<std::int64_t>(depth, 1);
    if (!block_of.empty()) {
      double s = q->scale_values[static_cast<std::size_t>(block_of[i])];
      if (!sub_of.empty()) s = std::ldexp(s, -static_cast<int>(q->subtile_offsets[static_cast<std::size_t>(sub_of[i])]));
      op.scale[i] = s;
      op.block_start[i] = k == 0 || block_of[i] != block_of[i - 1] || (!sub_of.empty() && sub_of[i] != sub_of[i - 1]);
    } else {
      op.block_start[i] = k == 0;
    }
    // As mxlab::dequantize: a zero scale makes a finite element 0.
    const double s = op.scale[i];
    op.value[i] = (s == 0 && std::isfinite(e)) ? 0.0 : e * s * op.tensor_scale;
  }
  return op;
}

Operand plain_operand(std::string name, std::span<const double> x, std::int64_t rows, std::int64_t depth) {
  Operand op;
  op.format = std::move(name);
  op.rows = rows;
  op.depth = depth;
  op.element.assign(x.begin(), x.end());
  op.value.assign(x.begin(), x.end());
  op.scale.assign(x.size(), 1.0);
  op.block_start.assign(x.size(), 0);
  for (std::int64_t r = 0; r < rows && depth > 0; ++r) op.block_start[op.at(r, 0)] = 1;
  return op;
}

Operand values_operand(std::string name, const BlockFormat* f, std::span<const double> x, std::int64_t rows,
                       std::int64_t depth) {
  Operand op = plain_operand(std::move(name), x, rows, depth);
  if (f == nullptr || !f->layout.scale || depth <= 0) return op;
  const std::vector<std::int64_t> shape = {rows, depth};
  const std::vector<std::int64_t> block_of = BlockIndexer(shape, f->layout).block_of_all();
  const std::vector<std::int64_t> sub_of = BlockIndexer::subtiles(shape, f->layout).block_of_all();
  for (std::size_t i = 1; i < block_of.size(); ++i)
    if (block_of[i] != block_of[i - 1] || sub_of[i] != sub_of[i - 1]) op.block_start[i] = 1;
  return op;
}

namespace {

/// The operand as the product reads it (depth = K last), its values as doubles, with its format's blocks along K.
Operand read_values(const ValuesMatrix& op, const std::string& name) {
  const std::int64_t rows = op.transposed ? op.cols : op.rows, depth = op.transposed ? op.rows : op.cols;
  std::vector<double> v(static_cast<std::size_t>(rows * depth));
  for (std::int64_t r = 0; r < op.rows; ++r)
    for (std::int64_t c = 0; c < op.cols; ++c) {
      const auto at = op.transposed ? c * op.rows + r : r * op.cols + c;
      v[static_cast<std::size_t>(at)] = static_cast<double>(op.data[r * op.cols + c]);
    }
  if (op.format == nullptr) return values_operand(name, nullptr, v, rows, depth);
  BlockFormat f = *op.format;
  if (op.transposed && f.layout.geometry().two_d()) std::swap(f.layout.tiles[0], f.layout.tiles[1]);
  return values_operand(name, &f, v, rows, depth);
}

}  // namespace

Result<std::vector<float>> values_product(const Model& m, const ValuesMatrix& a, const ValuesMatrix& bt,
                                          unsigned threads) {
  static const Format kFloat32 = *parse_format("float32");
  const Operand x = read_values(a, "A"), y = read_values(bt, "B");
  if (x.depth != y.depth)
    return make_error("the product's operands differ in depth: A reads " + std::to_string(x.rows) + " x " +
                      std::to_string(x.depth) + ", B^T " + std::to_string(y.rows) + " x " + std::to_string(y.depth));
  auto c = model_gemm(m, x, y, kFloat32, threads);
  if (!c) return c.error();
  // Each entry is rounded to float32: the conversion is exact.
  std::vector<float> out(c->values.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(c->values[i]);
  return out;
}

Special dot_special(const Operand& a, std::int64_t row_a, const Operand& b, std::int64_t row_b) {
  bool pos = false, neg = false;
  for (std::int64_t k = 0; k < a.depth; ++k) {
    const double x = a.value[a.at(row_a, k)], y = b.value[b.at(row_b, k)];
    if (std::isnan(x) || std::isnan(y)) return Special::Nan;
    const bool ix = std::isinf(x), iy = std::isinf(y);
    if (!ix && !iy) continue;
    if ((ix && y == 0) || (iy && x == 0)) return Special::Nan;
    (std::signbit(x) != std::signbit(y) ? neg : pos) = true;
  }
  if (pos && neg) return Special::Nan;
  return pos ? Special::PosInf : neg ? Special::NegInf : Special::None;
}

namespace {

double special_value(Special s) {
  switch (s) {
    case Special::Nan: return std::numeric_limits<double>::quiet_NaN();
    case Special::PosInf: return std::numeric_limits<double>::infinity();
    case Special::NegInf: return -std::numeric_limits<double>::infinity();
    case Special::None: break;
  }
  return 0;
}

}  // namespace

ExactDot exact_dot(const Operand& a, std::int64_t row_a, const Operand& b, std::int64_t row_b) {
  ExactDot d;
  d.special = dot_special(a, row_a, b, row_b);
  if (d.special != Special::None) return d;
  const double* x = a.value.data() + a.at(row_a, 0);
  const double* y = b.value.data() + b.at(row_b, 0);
  for (std::int64_t k = 0; k < a.depth; ++k) d.sum.add_product(x[k], y[k]);
  return d;
}

double round_once(const ExactDot& d, const Format& out, Rounding rounding) {
  const Rounder r = detail::make_rounder(out, rounding);
  if (d.special != Special::None) return r(special_value(d.special));
  return detail::round_sum(r, d.sum);
}

namespace {

/// Runs fn(i, t) for every row i of C on `threads` threads t (rows interleaved) while fn returns true.
template <typename Fn>
void for_rows(std::int64_t rows, unsigned threads, Fn&& fn) {
  const unsigned parts = std::max(1U, std::min<unsigned>(resolve_threads(threads), static_cast<unsigned>(std::max<std::int64_t>(rows, 1))));
  run_parts(parts, [&](unsigned t) {
    for (std::int64_t i = t; i < rows; i += parts)
      if (!fn(i, t)) break;
  });
}

std::optional<Error> check_shapes(const Operand& a, const Operand& b) {
  if (a.depth != b.depth)
    return make_error("operands: A has K = " + std::to_string(a.depth) + ", B has K = " + std::to_string(b.depth));
  return std::nullopt;
}

const Model& exact_model() {
  static const Model m = *parse_model("exact");
  return m;
}

/// Which rows of an operand hold a value that is not finite: their entries' special values are the scalar code's.
std::vector<std::uint8_t> special_rows(const Operand& op) {
  std::vector<std::uint8_t> r(static_cast<std::size_t>(op.rows), 0);
  for (std::size_t i = 0; i < op.value.size(); ++i)
    if (!std::isfinite(op.value[i])) r[i / static_cast<std::size_t>(std::max<std::int64_t>(op.depth, 1))] = 1;
  return r;
}

/// The exact value (hi + lo) g rounded by r.
double round_pair(const Rounder& r, double hi, double lo, double g) {
  if (g == 1) {
    double rest = 0;
    const double nearest = [&] {
      const double s = hi + lo;
      const double v = s - hi;
      rest = (hi - (s - v)) + (lo - v);
      return s;
    }();
    return r(detail::odd_from_pair(nearest, rest));
  }
  ExactSum s;
  s.add_product(hi, g);
  s.add_product(lo, g);
  return detail::round_sum(r, s);
}

/// Fills every entry of C (rows of a x rows of b): from_kernel(states, at) where the model's kernel holds the
/// entry, scalar(i, j) elsewhere (special values, lanes the kernel marked, or every entry when it cannot run).
/// Progress goes to `reporter` (entries of C, as `stage`); when it is cancelled the work stops early and C is
/// incomplete (the caller asks the reporter).
template <typename FromKernel, typename Scalar>
Matrix gemm_entries(const Model& m, const Operand& a, const Operand& b, unsigned threads, bool scalar_only,
                    GemmPath* path, const Reporter* reporter, const std::string& stage, FromKernel&& from_kernel,
                    Scalar&& scalar) {
  Matrix c{a.rows, b.rows, std::vector<double>(static_cast<std::size_t>(a.rows * b.rows))};
  detail::KernelStates st;
  detail::Ticker ticker(reporter, a.rows * b.rows, stage);
  const std::string why = scalar_only ? std::string("scalar only") : detail::kernel_states(m, a, b, threads, st, ticker);
  const bool kernel = why.empty();
  if (ticker.cancelled()) return c;
  // Without the kernel the scalar definition does the work: its rows tick instead.
  detail::Ticker scalar_ticker(kernel ? nullptr : reporter, a.rows * b.rows, stage);
  const std::vector<std::uint8_t> ra = special_rows(a), rb = special_rows(b);
  std::atomic<std::int64_t> scalar_count{0};
  for_rows(a.rows, threads, [&](std::int64_t i, unsigned t) {
    std::int64_t n = 0;
    for (std::int64_t j = 0; j < b.rows; ++j) {
      const auto at = static_cast<std::size_t>(i * b.rows + j);
      if (kernel && ra[static_cast<std::size_t>(i)] == 0 && rb[static_cast<std::size_t>(j)] == 0 && st.redo[at] == 0) {
        c.values[at] = from_kernel(st, at);
      } else {
        c.values[at] = scalar(i, j);
        ++n;
      }
    }
    scalar_count += n;
    return scalar_ticker.add(b.rows, t);
  });
  scalar_ticker.finish();
  if (path != nullptr) {
    path->scalar = scalar_count;
    path->kernel = static_cast<std::int64_t>(c.values.size()) - path->scalar;
    path->why_scalar = why;
  }
  return c;
}

}  // namespace

Result<Matrix> exact_gemm(const Operand& a, const Operand& b, const Format& out, unsigned threads, GemmPath* path,
                          const Reporter* reporter) {
  if (auto e = check_shapes(a, b)) return *e;
  const Rounder r = detail::make_rounder(out, Rounding::NearestEven);
  const double g = a.tensor_scale * b.tensor_scale;
  return gemm_entries(
      exact_model(), a, b, threads, false, path, reporter, "exact product",
      [&](const detail::KernelStates& st, std::size_t at) { return round_pair(r, st.acc[at], st.lo[at], g); },
      [&](std::int64_t i, std::int64_t j) { return round_once(exact_dot(a, i, b, j), out); });
}

Matrix exact_gemm_double(const Operand& a, const Operand& b, unsigned threads, GemmPath* path, const Reporter* reporter) {
  const double g = a.tensor_scale * b.tensor_scale;
  return gemm_entries(
      exact_model(), a, b, threads, false, path, reporter, "exact product of " + a.format + " and " + b.format,
      [&](const detail::KernelStates& st, std::size_t at) {
        if (g == 1) return st.acc[at] + st.lo[at];  // the nearest double to the exact sum of two doubles
        ExactSum s;
        s.add_product(st.acc[at], g);
        s.add_product(st.lo[at], g);
        return s.to_double();
      },
      [&](std::int64_t i, std::int64_t j) {
        const ExactDot d = exact_dot(a, i, b, j);
        return d.special != Special::None ? special_value(d.special) : d.sum.to_double();
      });
}

// ---- models

std::optional<Error> check_model_operands(const Model& m, const Operand& a, const Operand& b) {
  if (auto e = check_shapes(a, b)) return e;
  // The largest significand (in bits) of elements, scales and scaled elements of each operand.
  struct Bits {
    int element = 0, scale = 0, scaled = 0;
  };
  auto bits_of = [](const Operand& op) {
    Bits r;
    for (std::size_t i = 0; i < op.element.size(); ++i) {
      r.element = std::max(r.element, detail::significant_bits(op.element[i]));
      r.scale = std::max(r.scale, detail::significant_bits(op.scale[i]));
      r.scaled = std::max(r.scaled, detail::significant_bits(op.element[i] * op.scale[i]));
    }
    return r;
  };
  const Bits x = bits_of(a), y = bits_of(b);
  const int scales = x.scale + y.scale;
  int products = m.scale == ScaleSite::Product ? x.scaled + y.scaled : x.element + y.element;
  std::string what = m.scale == ScaleSite::Product ? "products of scaled elements" : "products of elements";
  if (products > 53)
    return make_error("model '" + m.name + "': the " + what + " of " + a.format + " and " + b.format + " need " +
                      std::to_string(products) + " significant bits, more than the model's double arithmetic holds");
  if (m.product) products = std::min(products, precision(*m.product));
  if (m.scale == ScaleSite::Block) {
    // A group's value (a product, a rounded sum, or an aligned addend) times the two block scales.
    const int group = m.sum && m.acc != AccKind::Aligned ? std::max(products, precision(*m.sum)) : products;
    const bool exact_group = !m.sum && m.acc != AccKind::Aligned;
    if (scales > 53 || (!exact_group && group + scales > 53))
      return make_error("model '" + m.name + "': a group's value times the block scales of " + a.format + " and " +
                        b.format + " needs " + std::to_string(group + scales) +
                        " significant bits, more than the model's double arithmetic holds");
  }
  return std::nullopt;
}

namespace {

/// One dot product under a model, in the words of docs/gemm.md "Definition".
class ModelDot {
 public:
  ModelDot(const Model& m, const Format& out) : m_(m), out_(detail::make_rounder(out, Rounding::NearestEven)),
        fp32_(detail::make_rounder(float32(), Rounding::NearestEven)) {
    if (m.product) product_.emplace(detail::make_rounder(*m.product, m.rounding));
    if (m.sum) sum_.emplace(detail::make_rounder(*m.sum, m.rounding));
    if (m.acc_format) acc_round_.emplace(detail::make_rounder(*m.acc_format, m.rounding));
  }

  double run(const Operand& a, std::int64_t ra, const Operand& b, std::int64_t rb) {
    const Special special = dot_special(a, ra, b, rb);
    if (special != Special::None) return out_(special_value(special));
    const std::int64_t depth = a.depth;
    const std::size_t a0 = a.at(ra, 0), b0 = b.at(rb, 0);
    reset_acc();
    double outer = 0;  // the FP32 accumulator of promotions
    std::int64_t k = 0;
    while (k < depth) {
      std::int64_t end = k + 1;
      while (end < depth && !boundary(a.block_start[a0 + static_cast<std::size_t>(end)] != 0 ||
                                          b.block_start[b0 + static_cast<std::size_t>(end)] != 0, end))
        ++end;
      const double sa = a.scale[a0 + static_cast<std::size_t>(k)], sb = b.scale[b0 + static_cast<std::size_t>(k)];
      const double block_scale = m_.scale == ScaleSite::Block ? sa * sb : 1.0;  // exact (check_model_operands)
      products_.clear();
      for (std::int64_t t = k; t < end; ++t) {
        const std::size_t i = a0 + static_cast<std::size_t>(t), j = b0 + static_cast<std::size_t>(t);
        double p = m_.scale == ScaleSite::Product ? (a.element[i] * a.scale[i]) * (b.element[j] * b.scale[j])
                                                  : a.element[i] * b.element[j];
        if (product_) p = (*product_)(p);
        products_.push_back(p == 0 ? 0.0 : p);
      }
      add_group(block_scale);
      k = end;
      if (m_.promote > 0 && (k % m_.promote == 0 || k == depth)) {
        outer = promote_into(outer);
        reset_acc();
      }
    }
    // The tensor scales multiply the final accumulator, exactly, before the one rounding to the output.
    const double g = a.tensor_scale * b.tensor_scale;  // two float32 values: exact
    if (m_.promote > 0) return detail::round_mul(out_, outer, g);
    if (overflowed_) return out_(*overflowed_ * g);
    if (m_.acc == AccKind::Exact) return detail::round_sum(out_, detail::scaled(exact_acc_, g));
    return detail::round_mul(out_, acc_, g);
  }

 private:
  bool boundary(bool block_start, std::int64_t k) const {
    return block_start || (m_.group > 0 && k % m_.group == 0) || (m_.promote > 0 && k % m_.promote == 0);
  }

  void reset_acc() {
    acc_ = 0;
    overflowed_.reset();
    if (m_.acc == AccKind::Exact) exact_acc_ = ExactSum();
  }

  double promote_into(double outer) const {
    if (overflowed_) return fp32_(outer + *overflowed_);
    if (m_.acc == AccKind::Exact) {
      if (!std::isfinite(outer)) return fp32_(outer);  // an infinite FP32 accumulator absorbs the finite one
      ExactSum s = exact_acc_;
      s.add(outer);
      return detail::round_sum(fp32_, s);
    }
    return detail::round_add(fp32_, outer, acc_);
  }

  /// The group's sum in the sum format, in the model's order (a group of one product is that product).
  double rounded_group_sum() {
    const Rounder& r = *sum_;
    if (m_.order == SumOrder::Sequential) {
      double s = products_[0];
      for (std::size_t t = 1; t < products_.size(); ++t) s = detail::round_add(r, s, products_[t]);
      return s;
    }
    level_ = products_;
    while (level_.size() > 1) {
      std::size_t w = 0;
      for (std::size_t t = 0; t < level_.size(); t += 2)
        level_[w++] = t + 1 < level_.size() ? detail::round_add(r, level_[t], level_[t + 1]) : level_[t];
      level_.resize(w);
    }
    return level_[0];
  }

  void add_group(double block_scale) {
    if (m_.acc == AccKind::Aligned) {
      aligned_step(block_scale);
      return;
    }
    if (!sum_) {
      // An exact group sum, scaled exactly (IEEE arithmetic when a product format overflowed).
      double special = 0;
      for (double p : products_) special += std::isfinite(p) ? 0.0 : p;
      if (special != 0 || std::isnan(special)) {
        if (m_.acc == AccKind::Exact) nonfinite_exact(special);
        else acc_ = (*acc_round_)(acc_ + special);
        return;
      }
      if (m_.acc == AccKind::Exact) {
        for (double p : products_) exact_acc_.add_product(p, block_scale);
        return;
      }
      if (std::isfinite(acc_)) {
        // Fast path: the scaled products are doubles and two levels of two-sums hold the sum exactly.
        addends_.assign(1, acc_);
        bool exact_terms = true;
        for (double p : products_) {
          const double q = p * block_scale;
          exact_terms = exact_terms && std::fma(p, block_scale, -q) == 0;
          addends_.push_back(q);
        }
        double hi = 0, lo = 0;
        if (exact_terms && detail::pair_sum(addends_.data(), addends_.size(), hi, lo)) {
          acc_ = (*acc_round_)(detail::odd_from_pair(hi, lo));
          return;
        }
      }
      ExactSum s;
      for (double p : products_) s.add_product(p, block_scale);
      if (std::isfinite(acc_)) {
        s.add(acc_);
        acc_ = detail::round_sum(*acc_round_, s);
      } else {
        acc_ = (*acc_round_)(acc_);
      }
      return;
    }
    const double t = rounded_group_sum();
    if (m_.acc == AccKind::Exact) {
      if (std::isfinite(t)) exact_acc_.add_product(t, block_scale);
      else nonfinite_exact(t);
      return;
    }
    // Float accumulator: acc = round(acc + t * scales), t * scales exact unless t overflowed.
    if (!std::isfinite(t)) {
      acc_ = (*acc_round_)(acc_ + t);
      return;
    }
    const double scaled = t * block_scale;
    acc_ = detail::round_add(*acc_round_, acc_, scaled);
  }

  /// An exact accumulator cannot hold an infinity or NaN from an overflowed sum format: the result is it.
  void nonfinite_exact(double t) { overflowed_ = overflowed_ ? *overflowed_ + t : t; }

  /// acc and the group's scaled products aligned to the largest exponent among them, `aligned_bits` kept.
  void aligned_step(double block_scale) {
    addends_.clear();
    addends_.push_back(acc_);
    for (double p : products_) addends_.push_back(p * block_scale);  // exact (check_model_operands)
    double largest = 0;
    bool finite = true;
    for (double x : addends_) {
      finite = finite && std::isfinite(x);
      largest = std::max(largest, std::fabs(x));
    }
    if (!finite) {
      double s = 0;
      for (double x : addends_) s += x;
      acc_ = s;
      return;
    }
    if (largest == 0) {
      acc_ = 0;
      return;
    }
    const int e = std::ilogb(largest);
    const int quantum = e - m_.aligned_bits + 1;  // the weight of the last bit kept
    double s = 0;  // exact: at most aligned_bits + log2(addends) bits, all multiples of 2^quantum
    for (double x : addends_) {
      const double units = std::ldexp(x, -quantum);
      const double kept = m_.align_rounding == AlignRounding::Truncate ? std::trunc(units) : std::nearbyint(units);
      s += std::ldexp(kept, quantum);
    }
    acc_ = s == 0 ? 0.0 : s;
  }

  const Model& m_;
  Rounder out_, fp32_;
  std::optional<Rounder> product_, sum_, acc_round_;
  double acc_ = 0;
  ExactSum exact_acc_;
  std::optional<double> overflowed_;
  std::vector<double> products_, level_, addends_;
};

}  // namespace

double model_dot(const Model& m, const Operand& a, std::int64_t row_a, const Operand& b, std::int64_t row_b,
                 const Format& out) {
  ModelDot d(m, out);
  return d.run(a, row_a, b, row_b);
}

Result<Matrix> model_gemm(const Model& m, const Operand& a, const Operand& b, const Format& out, unsigned threads,
                          GemmPath* path, bool scalar_only, const Reporter* reporter) {
  if (auto e = check_model_operands(m, a, b)) return *e;
  const Rounder r = detail::make_rounder(out, Rounding::NearestEven);
  const double g = a.tensor_scale * b.tensor_scale;  // two float32 values: exact
  return gemm_entries(
      m, a, b, threads, scalar_only, path, reporter, "model " + m.name,
      [&](const detail::KernelStates& st, std::size_t at) {
        if (m.promote > 0) return detail::round_mul(r, st.outer[at], g);
        if (m.acc == AccKind::Exact) return round_pair(r, st.acc[at], st.lo[at], g);
        return detail::round_mul(r, st.acc[at], g);
      },
      [&](std::int64_t i, std::int64_t j) { return model_dot(m, a, i, b, j, out); });
}

}  // namespace mxlab::gemm
