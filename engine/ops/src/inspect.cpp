// ops::cast_text, neighbours and block_detail: one value and one block, exactly.
#include "mxlab/ops/inspect.hpp"

#include <cmath>
#include <limits>

#include "mxlab/core/bits.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab::ops {

Result<ValueCast> cast_text(const Format& f, std::string_view text, const CastOptions& options, std::uint32_t random) {
  auto num = exact::parse_number(text);
  if (!num) return num.error();
  ValueCast c;
  switch (num->kind) {
    case exact::Number::Kind::Nan:
      c.input = num->nan_negative ? -std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::quiet_NaN();
      break;
    case exact::Number::Kind::PosInf: c.input = std::numeric_limits<double>::infinity(); break;
    case exact::Number::Kind::NegInf: c.input = -std::numeric_limits<double>::infinity(); break;
    case exact::Number::Kind::Finite: c.input = exact::round_to_source(num->value, options.source, &c.input_rounded); break;
  }
  c.input_exact = std::isfinite(c.input) ? exact::Rational::from_double(c.input).to_decimal() : g17(c.input);
  c.result = cast(f, c.input, options, random);
  c.value = f.decode(c.result.code);
  const CodeClass cls = f.classify(c.result.code);
  const bool finite = cls != CodeClass::Nan && cls != CodeClass::Inf;
  c.exact = finite ? exact::code_value(f, c.result.code).to_decimal() : g17(c.value);
  c.rel_error = std::numeric_limits<double>::quiet_NaN();
  if (finite && std::isfinite(c.input)) {
    const exact::Rational x = exact::Rational::from_double(c.input);
    const exact::Rational e = exact::error(f, c.result.code, x);
    c.error = e.to_double();
    c.error_exact = e.to_decimal();
    if (!x.is_zero()) {
      const exact::Rational r = e.abs() / x.abs();
      c.rel_error = r.to_double();
      c.rel_error_exact = r.to_decimal();
    }
  } else {
    c.error = c.value - c.input;  // IEEE arithmetic on the non-finite cases, as mxlab cast
  }
  return c;
}

Neighbours neighbours(const Format& f, std::uint32_t code) {
  Neighbours n;
  const CodeClass cls = f.classify(code);
  if (cls == CodeClass::Nan || cls == CodeClass::Unused) return n;
  if (cls == CodeClass::Inf) {
    if (f.decode(code) > 0) n.down = f.max_code(false);
    else n.up = f.max_code(true);
    return n;
  }
  // Every value of a format is a double, so two of them differ by at least 2^-1074: the value moved by 2^-1100
  // and rounded up (down) lands on the next value above (below), or stays where there is none.
  const exact::Rational v = exact::code_value(f, code);
  const exact::Rational step = exact::Rational::pow2(-1100);
  const double value = f.decode(code);
  auto toward = [&](const exact::Rational& x, Rounding r, bool above) -> std::optional<std::uint32_t> {
    CastOptions o;
    o.rounding = r;
    const CastResult c = exact::round_exact(f, x, o);
    if (c.invalid) return std::nullopt;
    const CodeClass k = f.classify(c.code);
    if (k == CodeClass::Nan || k == CodeClass::Unused) return std::nullopt;
    const double w = f.decode(c.code);
    if (above ? !(w > value) : !(w < value)) return std::nullopt;
    return c.code;
  };
  n.up = toward(v + step, Rounding::Up, true);
  n.down = toward(v - step, Rounding::Down, false);
  return n;
}

Result<BlockDetail> block_detail(const BlockFormat& f, const TensorSource& input, std::int64_t block, const Run& run) {
  if (!f.layout.scale) return make_error(f.name + " has no block scale: every element is cast alone, there is no block to show");
  const BlockIndexer indexer(input.shape(), f.layout);
  BlockDetail d;
  d.blocks = indexer.block_count();
  d.block_grid = indexer.grid();
  if (block < 0 || block >= d.blocks)
    return make_error("block " + std::to_string(block) + ": the tensor has " + std::to_string(d.blocks) + " blocks of " +
                      f.name + " (0 to " + std::to_string(d.blocks - 1) + ")");
  d.block = block;
  if (run.reporter.cancelled()) return make_error(kCancelled);
  // A block's values depend on its own elements only, unless a tensor-level quantity (NVFP4's tensor scale), N:M
  // groups or stochastic rounding's per-element random words (drawn by the element's index in the tensor) enter:
  // then the whole tensor is quantized; otherwise the block alone, as a tensor of its own extent (its one block).
  const bool alone = !f.layout.tensor_scale && f.layout.sparse_m == 0 &&
                     f.options.element.rounding != Rounding::Stochastic &&
                     f.options.scale.rounding != Rounding::Stochastic;
  std::vector<std::int64_t> shape = input.shape(), index;
  std::int64_t at = block;
  if (alone) index = indexer.elements_of(block, &shape), at = 0;
  std::vector<double> x(alone ? index.size() : input.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = input.value(alone ? static_cast<std::size_t>(index[i]) : i);
  run.reporter.report(0, 1, f.name);
  if (run.reporter.cancelled()) return make_error(kCancelled);
  auto q = quantize(f, x, shape);
  if (!q) return q.error();
  if (run.reporter.cancelled()) return make_error(kCancelled);  // stopped while quantizing: the result is dropped
  run.reporter.report(1, 1, f.name);
  d.engine = "reference";
  const auto b = static_cast<std::size_t>(at);
  d.has_scale = b < q->scale_codes.size();
  if (d.has_scale) {
    d.scale_code = q->scale_codes[b];
    d.scale = q->scale_values[b];
    d.scale_exact = std::isfinite(d.scale) ? exact::Rational::from_double(d.scale).to_decimal() : g17(d.scale);
    if (b < q->shared_exponents.size() && q->shared_exponents[b] != QuantizedTensor::kNoExponent)
      d.shared_exponent = q->shared_exponents[b];
  }
  if (b < q->block_amax.size()) d.amax = q->block_amax[b];
  d.has_tensor_scale = q->has_tensor_scale;
  d.tensor_scale_code = q->tensor_scale_code;
  d.tensor_scale = q->tensor_scale;
  const std::vector<std::int64_t> of = alone ? std::vector<std::int64_t>(x.size(), 0) : indexer.block_of_all();
  for (std::size_t i = 0; i < of.size(); ++i) {
    if (of[i] != at) continue;
    BlockElement e;
    e.index = alone ? index[i] : static_cast<std::int64_t>(i);
    e.x = x[i];
    e.q = q->values[i];
    e.code = q->codes[i];
    e.underflow = std::isfinite(e.x) && e.x != 0 && e.q == 0;
    e.saturated = (q->flags[i] & QuantizedTensor::kOverflow) != 0;
    e.rel_error = std::numeric_limits<double>::quiet_NaN();
    if (std::isfinite(e.x) && std::isfinite(e.q)) {
      const exact::Rational ex = exact::Rational::from_double(e.x);
      const exact::Rational err = exact::Rational::from_double(e.q) - ex;
      e.error = err.to_double();
      e.error_exact = err.to_decimal();
      if (!ex.is_zero()) e.rel_error = (err.abs() / ex.abs()).to_double();
    } else {
      e.error = e.q - e.x;
    }
    d.elements.push_back(std::move(e));
  }
  return d;
}

}  // namespace mxlab::ops
