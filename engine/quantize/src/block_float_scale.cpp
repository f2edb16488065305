// The reference's float block scales: the tensor scale of two-level formats, amax / (max g) rounded in the scale
// format, rule 4over6, and the element step under a float scale. SIMD twin: engine/kernels/src/
// block_float_scale-inl.h.
#include "block_float_scale.hpp"

#include <cmath>
#include <limits>
#include <optional>

#include "block_peer.hpp"
#include "block_quotient.hpp"
#include "mxlab/core/exact_sum.hpp"
#include "mxlab/formats/catalogue.hpp"

namespace mxlab {
namespace quantize_detail {
namespace {

/// The exact sum of squared errors of block b's finite inputs under block scale s (rule 4over6); none (an
/// infinite error) when the scale is NaN or one of them dequantizes to Inf or NaN (an infinite scale, or an
/// element overflow to a special value).
std::optional<ExactSum> block_sse(const Run& r, const std::vector<std::size_t>& members, double s) {
  ExactSum sse;
  if (std::isnan(s)) return std::nullopt;
  for (std::size_t i : members) {
    const double v = r.x[i];
    if (!std::isfinite(v)) continue;
    double deq = 0;
    if (s > 0) deq = r.f.element.decode(cast_quotient(r.f.element, v, s * r.g, r.elem_opts, r.random(i)).code) * s * r.g;
    if (!std::isfinite(deq)) return std::nullopt;
    sse.add_square(deq - v);  // exact: deq and v are within a factor of two or deq is 0 (docs)
  }
  return sse;
}

}  // namespace

/// Step 3 for a float scale (rules amax and 4over6): NaN blocks, then amax / (max * g) rounded in the scale
/// format; under 4over6 also the mapping to 2/3 max, kept when its squared error is lower (ties, and two
/// infinite errors, keep the mapping to max).
std::uint32_t float_block_scale(const Run& r, std::size_t b, const std::vector<std::size_t>& members) {
  const Format& e = r.f.element;
  const Format& sf = *r.f.layout.scale;
  const BlockStats& st = r.stats[b];
  auto scale_for = [&](double target) { return float_block_scale_code(r.f, r.scale_opts, st.amax, target, r.g); };
  const std::uint32_t code = scale_for(e.max_finite());
  if (r.f.options.rule != ScaleRule::FourOverSix || !(st.amax > 0)) return code;
  const std::uint32_t alt = scale_for(e.max_finite() * 2.0 / 3.0);
  if (alt == code) return code;
  const std::optional<ExactSum> sse_alt = block_sse(r, members, sf.decode(alt));
  const std::optional<ExactSum> sse_max = block_sse(r, members, sf.decode(code));
  bool lower = sse_alt.has_value() && !sse_max.has_value();
  if (sse_alt && sse_max) {
    ExactSum diff = *sse_alt;
    diff.subtract(*sse_max);
    lower = diff.sign() < 0;
  }
  return lower ? alt : code;
}

/// Step 5 for a float scale s (s * g the divisor): NaN scales give NaN codes, an infinity under block-nan is
/// kept, a zero scale zeros the block's finite elements, and the rest is the correctly rounded x / (s * g)
/// (or the peers' float32 quotient and element cast).
CastResult float_scale_element(const Run& r, std::size_t i, double s, double* value) {
  const Format& e = r.f.element;
  const QuantOptions& o = r.f.options;
  const double v = r.x[i];
  if (std::isnan(s)) {
    *value = std::numeric_limits<double>::quiet_NaN();
    CastResult c;
    c.code = e.has_nan() ? e.nan_code(false) : e.zero_code(false);
    return c;
  }
  if (std::isinf(v) && o.specials == SpecialsPolicy::BlockNan && e.has_inf()) {
    *value = v;  // kept as Inf (docs/quantization.md)
    CastResult c;
    c.code = e.inf_code(v < 0);
    return c;
  }
  if (s == 0 && std::isfinite(v)) {  // a zero float scale: every element of the block is zero
    *value = std::signbit(v) ? -0.0 : 0.0;
    CastResult c;
    c.code = e.zero_code(std::signbit(v));
    c.inexact = c.underflow = v != 0;
    return c;
  }
  CastResult c;
  if (o.input == InputPrecision::Float32) {
    // The peer's float32 divide: the exact quotient rounded once to float32.
    static const Format* f32 = find_catalogue_format("float32");
    CastOptions rne;
    rne.overflow = Overflow::Inf;
    const float vq = std::isfinite(v) ? static_cast<float>(f32->decode(cast_quotient(*f32, v, s * r.g, rne).code))
                                      : static_cast<float>(v / (s * r.g));
    c = peer_element_cast(e, vq, v, r.elem_opts, r.random(i), o);
  } else {
    c = s == 0 ? cast(e, v, r.elem_opts, r.random(i)) : cast_quotient(e, v, s * r.g, r.elem_opts, r.random(i));
    exact_zero_sign(e, v, c, o);
  }
  const double d = e.decode(c.code);
  *value = s == 0 ? d : d * s * r.g;
  return c;
}

}  // namespace quantize_detail

Result<TensorScale> choose_tensor_scale(const BlockFormat& f, double tensor_amax) {
  if (!f.layout.tensor_scale || !f.layout.scale) return make_error("format '" + f.name + "' has no tensor scale");
  const Format& tf = *f.layout.tensor_scale;
  const Format& sf = *f.layout.scale;
  const QuantOptions& o = f.options;
  auto to = resolve_options(tf, CastOptions{});
  if (!to) return make_error("tensor scale format: " + to.error().message);
  CastResult r;
  const double smax = o.tensor_scale_max > 0 ? o.tensor_scale_max : sf.max_finite();
  if (tensor_amax == 0 || !o.tensor_scale_from_amax) {
    r = cast(tf, 1.0, *to);  // an all-zero tensor keeps scale 1 (its codes are all zero)
  } else {
    r = cast_quotient(tf, tensor_amax, smax * f.element.max_finite(), *to);
  }
  TensorScale ts{r.code, tf.decode(r.code)};
  if (!(ts.value > 0) || !std::isfinite(ts.value)) ts = {cast(tf, 1.0, *to).code, 1.0};
  return ts;
}

std::uint32_t float_block_scale_code(const BlockFormat& f, const CastOptions& scale_opts, double amax, double target,
                                     double g) {
  const Format& sf = *f.layout.scale;
  const QuantOptions& o = f.options;
  CastResult r = cast_quotient(sf, amax, target * g, scale_opts);
  if (amax == 0 && o.zero_block == ZeroBlock::One) r = cast(sf, 1.0, scale_opts);
  if (o.min_block_scale > 0 && sf.decode(r.code) < o.min_block_scale) r = cast(sf, o.min_block_scale, scale_opts);
  return r.code;
}

}  // namespace mxlab
