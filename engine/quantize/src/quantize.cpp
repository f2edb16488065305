// The scalar reference block quantizer (docs/quantization.md).
#include "mxlab/quantize/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mxlab/core/exact_sum.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/formats/codepoints.hpp"

namespace mxlab {
namespace {

bool is_pow2(double d) {
  int e = 0;
  return d > 0 && std::frexp(d, &e) == 0.5;
}

/// The finite values adjacent to v in the format (NaN when there is none on that side).
void adjacent_values(const Format& f, double v, double* prev, double* next) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  *prev = nan;
  *next = nan;
  const auto table = f.sorted_values();
  if (!table.empty()) {
    const auto it = std::upper_bound(table.begin(), table.end(), v,
                                     [](double x, const Format::Entry& e) { return x < e.value; });
    if (it != table.end()) *next = it->value;
    const auto lo = std::lower_bound(table.begin(), table.end(), v,
                                     [](const Format::Entry& e, double x) { return e.value < x; });
    if (lo != table.begin()) *prev = (lo - 1)->value;
    return;
  }
  // Wide formats: step on the grid around v.
  const FormatSpec& s = f.spec();
  if (s.kind == FormatKind::Integer) {
    const double step = std::ldexp(1.0, -s.frac_bits);
    if (v + step <= f.max_finite()) *next = v + step;
    if (v - step >= f.lowest()) *prev = v - step;
    return;
  }
  const int emin = min_normal_exponent(s);
  auto gap_at = [&](double a) {  // spacing of the grid just above magnitude a
    const int e = a == 0 ? emin : std::max(floor_log2(a), emin);
    return std::ldexp(1.0, e - s.mantissa_bits);
  };
  const double a = std::fabs(v);
  const double up = gap_at(a);
  // Spacing below a: the same unless a is a power of two at or above the smallest normal.
  double down = up;
  if (a != 0 && is_pow2(a) && floor_log2(a) > emin) down = up / 2;
  if (v >= 0) {
    if (v + up <= f.max_finite()) *next = v + up;
    if (a != 0) *prev = v - down;
    else if (s.is_signed) *prev = -up;
  } else {
    *next = v + down;
    if (-(a + up) >= f.lowest()) *prev = v - up;
  }
}

}  // namespace

CastResult cast_quotient(const Format& f, double n, double d, const CastOptions& o, std::uint32_t random) {
  if (!std::isfinite(n)) return cast(f, n, o, random);
  if (is_pow2(d)) {
    int e = 0;
    std::frexp(d, &e);
    double q = std::ldexp(n, 1 - e);
    if (q == 0 && n != 0) q = std::copysign(std::numeric_limits<double>::denorm_min(), n);
    return cast(f, q, o, random);
  }
  double q = n / d;
  if (std::isinf(q)) q = std::copysign(std::numeric_limits<double>::max(), n);
  if (q == 0 && n != 0) q = std::copysign(std::numeric_limits<double>::denorm_min(), n);
  // The cast of q decides like the cast of the exact n/d unless a rounding boundary lies between
  // them (|n/d - q| <= ulp(q)/2). Boundaries are format values and midpoints of neighbours; for each
  // one near q, the sign of n - b*d is found exactly with one fused multiply-add, and q is replaced by
  // b (exact quotient) or by the double next to b on the correct side.
  CastOptions nearest = o;
  nearest.rounding = Rounding::NearestEven;
  nearest.overflow = Overflow::Saturate;
  nearest.subnormals = SubnormalMode::Keep;
  const double v = f.decode(cast(f, q, nearest).code);
  double prev = 0, next = 0;
  adjacent_values(f, v, &prev, &next);
  double candidates[5] = {v, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN(),
                          std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  if (!std::isnan(next)) candidates[1] = (v + next) * 0.5;
  if (!std::isnan(prev)) candidates[2] = (prev + v) * 0.5;
  if (f.kind() != FormatKind::Codebook && (v == f.max_finite() || v == f.lowest())) {
    // The continued grid beyond the ends decides overflow: its first point and the midpoint to it.
    const FormatSpec& s = f.spec();
    const double step = s.kind == FormatKind::Integer ? std::ldexp(1.0, -s.frac_bits)
                                                      : std::ldexp(1.0, f.emax() - s.mantissa_bits);
    const double beyond = v > 0 ? v + step : v - step;
    candidates[3] = beyond;
    candidates[4] = (v + beyond) * 0.5;
  }
  const double tol = 4 * std::fabs(q) * std::numeric_limits<double>::epsilon() +
                     4 * std::numeric_limits<double>::denorm_min();
  for (double b : candidates) {
    if (std::isnan(b) || std::fabs(q - b) > tol) continue;
    const double r = std::fma(-b, d, n);  // n - b*d, rounded once: its sign is exact
    if (r == 0) {
      q = b;
    } else {
      q = std::nextafter(b, r > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity());
    }
    break;
  }
  return cast(f, q, o, random);
}

int scale_exponent(const Format& element, double amax, const QuantOptions& o) {
  const int emax = element.emax();
  int e = floor_log2(amax);
  if (o.clamp == ClampSite::Amax) e = std::clamp(e, -126, 127);
  switch (o.rule) {
    case ScaleRule::Floor: return e - emax;
    case ScaleRule::Ceil: return (is_pow2(amax) ? e : e + 1) - emax;
    case ScaleRule::RCeil: {
      // Smallest X with amax <= max_elem * 2^X (both sides exact: scaling by powers of two).
      const double m = element.max_finite();
      int x = e - floor_log2(m);
      while (amax > std::ldexp(m, x)) ++x;
      while (amax <= std::ldexp(m, x - 1)) --x;
      return x;
    }
    case ScaleRule::Even: {
      // Round amax to the element's significand width (ties to even), then take its exponent.
      const FormatSpec& s = element.spec();
      const int p = s.kind == FormatKind::Float ? s.mantissa_bits : std::max(0, s.int_bits - 2);
      const double unit = std::ldexp(1.0, e - p);
      const double r = std::nearbyint(amax / unit) * unit;  // amax/unit exact: power-of-two scaling
      return floor_log2(r) - emax;
    }
    case ScaleRule::MidMax: {
      const int x = e - emax;
      CastOptions co = o.element;
      co.overflow = Overflow::Saturate;
      const CastResult r = cast(element, std::ldexp(amax, -x), co);
      return r.overflow ? x + 1 : x;
    }
    case ScaleRule::Amax:
    case ScaleRule::FourOverSix: return e - emax;
  }
  return e - emax;
}

BlockIndexer::BlockIndexer(const std::vector<std::int64_t>& shape, const ScaleLayout& layout) : shape_(shape) {
  const auto n = static_cast<int>(shape_.size());
  tile_.assign(shape_.size(), 1);
  auto whole = [&](int a) { return std::max<std::int64_t>(shape_[static_cast<std::size_t>(a)], 1); };
  if (layout.channel_axis != ScaleLayout::kNoAxis) {
    const int c = layout.channel_axis < 0 ? layout.channel_axis + n : layout.channel_axis;
    for (int a = 0; a < n; ++a) tile_[static_cast<std::size_t>(a)] = a == c ? 1 : whole(a);
  } else if (layout.tiles.empty()) {
    for (int a = 0; a < n; ++a) tile_[static_cast<std::size_t>(a)] = whole(a);
  } else if (layout.tiles.size() == 1) {
    const int ax = layout.axis < 0 ? layout.axis + n : layout.axis;
    if (ax >= 0 && ax < n) {
      const std::int64_t t = layout.tiles[0].size;
      tile_[static_cast<std::size_t>(ax)] = t == 0 ? whole(ax) : t;
    }
  } else {
    for (int k = 0; k < 2; ++k) {
      const int ax = n - 2 + k;
      if (ax < 0) continue;  // a 1-D tensor under 2-D tiles: the missing axis has extent 1
      const std::int64_t t = layout.tiles[static_cast<std::size_t>(k)].size;
      tile_[static_cast<std::size_t>(ax)] = t == 0 ? whole(ax) : t;
    }
  }
  grid_.resize(shape_.size());
  blocks_ = 1;
  for (std::size_t a = 0; a < shape_.size(); ++a) {
    grid_[a] = (shape_[a] + tile_[a] - 1) / tile_[a];
    blocks_ *= std::max<std::int64_t>(grid_[a], 1);
  }
}

BlockIndexer BlockIndexer::subtiles(const std::vector<std::int64_t>& shape, const ScaleLayout& layout) {
  ScaleLayout sub = layout;
  for (auto& t : sub.tiles)
    if (t.subtile > 0) t.size = t.subtile;
  return BlockIndexer(shape, sub);
}

namespace {
bool has_subtiles(const ScaleLayout& l) {
  for (const auto& t : l.tiles)
    if (t.subtile > 0) return true;
  return false;
}
}  // namespace

std::vector<std::int64_t> BlockIndexer::block_of_all() const {
  std::int64_t total = 1;
  for (auto d : shape_) total *= d;
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max<std::int64_t>(total, 0)));
  if (total <= 0) return out;
  const std::size_t n = shape_.size();
  std::vector<std::int64_t> coord(n, 0);
  for (std::int64_t i = 0; i < total; ++i) {
    std::int64_t b = 0;
    for (std::size_t a = 0; a < n; ++a) b = b * grid_[a] + coord[a] / tile_[a];
    out[static_cast<std::size_t>(i)] = b;
    for (std::size_t a = n; a-- > 0;) {
      if (++coord[a] < shape_[a]) break;
      coord[a] = 0;
    }
  }
  return out;
}

namespace {

/// N:M sparsity along the last axis: in each group of M, the N largest magnitudes survive (ties keep
/// the lower index); the others become zero.
void apply_sparsity(std::vector<double>& x, std::int64_t last, int n_keep, int m) {
  if (m <= 0 || last <= 0) return;
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / last;
  std::vector<std::int64_t> idx;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < last; g += m) {
      const std::int64_t end = std::min<std::int64_t>(g + m, last);
      idx.clear();
      for (std::int64_t j = g; j < end; ++j) idx.push_back(r * last + j);
      std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
        return std::fabs(x[static_cast<std::size_t>(a)]) > std::fabs(x[static_cast<std::size_t>(b)]);
      });
      for (std::size_t k = static_cast<std::size_t>(n_keep); k < idx.size(); ++k) x[static_cast<std::size_t>(idx[k])] = 0.0;
    }
  }
}

struct BlockStats {
  double amax = 0;  // over finite values
  bool nan = false;
  bool inf = false;
};

}  // namespace

std::vector<double> dequantize(const BlockFormat& f, const QuantizedTensor& q) {
  std::vector<double> out(q.codes.size());
  const BlockIndexer ix(q.shape, f.layout);
  const auto block_of = ix.block_of_all();
  std::vector<std::int64_t> sub_of;
  if (has_subtiles(f.layout) && !q.subtile_offsets.empty())
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

Result<QuantizedTensor> quantize(const BlockFormat& f, std::span<const double> input,
                                 const std::vector<std::int64_t>& shape) {
  std::int64_t total = 1;
  for (auto d : shape) {
    if (d < 0) return make_error("negative dimension in the tensor shape");
    total *= d;
  }
  if (static_cast<std::size_t>(total) != input.size())
    return make_error("tensor shape holds " + std::to_string(total) + " elements but " + std::to_string(input.size()) +
                      " values were given");
  const QuantOptions& o = f.options;
  auto eo = resolve_options(f.element, o.element);
  if (!eo) return make_error("element format: " + eo.error().message);
  const CastOptions elem_opts = *eo;
  std::vector<double> x(input.begin(), input.end());
  if (f.layout.sparse_m > 0 && !shape.empty()) apply_sparsity(x, shape.back(), f.layout.sparse_n, f.layout.sparse_m);

  QuantizedTensor q;
  q.shape = shape;
  q.codes.resize(x.size());
  q.values.resize(x.size());
  q.flags.assign(x.size(), 0);
  auto flags_of = [](const CastResult& r) {
    return static_cast<std::uint8_t>((r.inexact ? QuantizedTensor::kInexact : 0) |
                                     (r.overflow ? QuantizedTensor::kOverflow : 0) |
                                     (r.underflow ? QuantizedTensor::kUnderflow : 0) |
                                     (r.invalid ? QuantizedTensor::kInvalid : 0));
  };
  const bool stochastic = elem_opts.rounding == Rounding::Stochastic;
  auto random_of = [&](std::size_t i) { return stochastic ? stochastic_bits(o.seed, i) : 0U; };

  if (!f.layout.scale) {  // plain elementwise cast
    for (std::size_t i = 0; i < x.size(); ++i) {
      const CastResult r = cast(f.element, x[i], elem_opts, random_of(i));
      q.codes[i] = r.code;
      q.flags[i] = flags_of(r);
      q.values[i] = f.element.decode(q.codes[i]);
    }
    return q;
  }
  const Format& sf = *f.layout.scale;
  auto so = resolve_options(sf, o.scale);
  if (!so) return make_error("scale format: " + so.error().message);
  const CastOptions scale_opts = *so;
  const bool pow2_rule = o.rule != ScaleRule::Amax && o.rule != ScaleRule::FourOverSix;
  if (pow2_rule && f.layout.tensor_scale)
    return make_error("scale rule '" + std::string(to_string(o.rule)) +
                      "' gives power-of-two block scales and cannot sit under a tensor scale; use 'amax'");

  const BlockIndexer ix(shape, f.layout);
  const auto block_of = ix.block_of_all();
  const auto nblocks = static_cast<std::size_t>(ix.block_count());
  q.block_grid = ix.grid();
  std::vector<BlockStats> stats(nblocks);
  q.block_amax.assign(nblocks, 0.0);
  double tensor_amax = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    BlockStats& b = stats[static_cast<std::size_t>(block_of[i])];
    const double v = x[i];
    if (std::isnan(v)) {
      b.nan = true;
    } else if (std::isinf(v)) {
      b.inf = true;
    } else {
      b.amax = std::max(b.amax, std::fabs(v));
      tensor_amax = std::max(tensor_amax, std::fabs(v));
    }
  }

  // Second level: the tensor scale g = amax / (max_scale * max_elem), rounded in its format.
  double g = 1.0;
  if (f.layout.tensor_scale) {
    const Format& tf = *f.layout.tensor_scale;
    auto to = resolve_options(tf, CastOptions{});
    if (!to) return make_error("tensor scale format: " + to.error().message);
    q.has_tensor_scale = true;
    CastResult r;
    if (tensor_amax == 0 || !o.tensor_scale_from_amax) {
      r = cast(tf, 1.0, *to);  // an all-zero tensor keeps scale 1 (its codes are all zero)
    } else {
      r = cast_quotient(tf, tensor_amax, sf.max_finite() * f.element.max_finite(), *to);
    }
    q.tensor_scale_code = r.code;
    g = tf.decode(r.code);
    if (!(g > 0) || !std::isfinite(g)) {
      r = cast(tf, 1.0, *to);
      q.tensor_scale_code = r.code;
      g = 1.0;
    }
    q.tensor_scale = g;
  }

  const int x_min = floor_log2(sf.min_positive());
  const int x_max = floor_log2(sf.max_finite());
  q.scale_codes.resize(nblocks);
  q.scale_values.resize(nblocks);
  q.shared_exponents.assign(nblocks, QuantizedTensor::kNoExponent);
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // Members of each block, for the rules that quantize a block several ways (4over6).
  std::vector<std::vector<std::size_t>> members;
  if (o.rule == ScaleRule::FourOverSix) {
    members.resize(nblocks);
    for (std::size_t i = 0; i < x.size(); ++i) members[static_cast<std::size_t>(block_of[i])].push_back(i);
  }
  auto block_sse = [&](std::size_t b, double s) {
    ExactSum sse;
    for (std::size_t i : members[b]) {
      const double v = x[i];
      if (!std::isfinite(v)) continue;
      double deq = 0;
      if (s > 0) deq = f.element.decode(cast_quotient(f.element, v, s * g, elem_opts, random_of(i)).code) * s * g;
      const double e = deq - v;  // exact: deq and v are within a factor of two or deq is 0 (docs)
      sse.add_square(e);
    }
    return sse;
  };

  for (std::size_t b = 0; b < nblocks; ++b) q.block_amax[b] = stats[b].amax;
  for (std::size_t b = 0; b < nblocks; ++b) {
    const BlockStats& st = stats[b];
    const bool block_nan = o.specials == SpecialsPolicy::BlockNan &&
                           (st.nan || (st.inf && !f.element.has_inf())) && sf.has_nan();
    if (block_nan) {
      q.scale_codes[b] = sf.nan_code(false);
      q.scale_values[b] = nan;
      continue;
    }
    if (pow2_rule) {
      int xe = 0;
      if (st.amax == 0) {
        xe = o.zero_block == ZeroBlock::Smallest ? x_min : 0;
      } else {
        xe = scale_exponent(f.element, st.amax, o);
      }
      xe = std::clamp(xe, x_min, x_max);
      q.shared_exponents[b] = xe;
      q.scale_codes[b] = cast(sf, std::ldexp(1.0, xe), scale_opts).code;
      q.scale_values[b] = sf.decode(q.scale_codes[b]);
      continue;
    }
    auto scale_for = [&](double target) {
      CastResult r = cast_quotient(sf, st.amax, target * g, scale_opts);
      if (o.min_block_scale > 0 && sf.decode(r.code) < o.min_block_scale) r = cast(sf, o.min_block_scale, scale_opts);
      return r.code;
    };
    std::uint32_t code = scale_for(f.element.max_finite());
    if (o.rule == ScaleRule::FourOverSix && st.amax > 0) {
      // Seed of "Four Over Six": also try mapping amax to 2/3 of max (4 for E2M1); keep the lower SSE.
      const std::uint32_t alt = scale_for(f.element.max_finite() * 2.0 / 3.0);
      if (alt != code) {
        ExactSum diff = block_sse(b, sf.decode(alt));
        diff.subtract(block_sse(b, sf.decode(code)));
        if (diff.sign() < 0) code = alt;  // ties keep the mapping to max
      }
    }
    q.scale_codes[b] = code;
    q.scale_values[b] = sf.decode(code);
  }

  // Shared microexponents: each subtile of a block with scale 2^X takes 2^(X - d), d in
  // 0..2^bits-1 as large as its own amax allows (the subtile's exponent under the same rule).
  std::vector<std::int64_t> sub_of;
  if (has_subtiles(f.layout)) {
    if (!pow2_rule) return make_error("subtiles need a power-of-two scale rule");
    const BlockIndexer sx = BlockIndexer::subtiles(shape, f.layout);
    sub_of = sx.block_of_all();
    q.subtile_grid = sx.grid();
    const auto nsub = static_cast<std::size_t>(sx.block_count());
    std::vector<double> sub_amax(nsub, 0.0);
    std::vector<std::int64_t> sub_block(nsub, 0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const auto k = static_cast<std::size_t>(sub_of[i]);
      sub_block[k] = block_of[i];
      if (std::isfinite(x[i])) sub_amax[k] = std::max(sub_amax[k], std::fabs(x[i]));
    }
    const int dmax = (1 << f.layout.subtile_bits) - 1;
    q.subtile_offsets.assign(nsub, 0);
    for (std::size_t k = 0; k < nsub; ++k) {
      const auto b = static_cast<std::size_t>(sub_block[k]);
      if (q.shared_exponents[b] == QuantizedTensor::kNoExponent || sub_amax[k] == 0) continue;
      const int xb = q.shared_exponents[b];
      const int xs = std::clamp(scale_exponent(f.element, sub_amax[k], o), std::max(xb - dmax, x_min), xb);
      q.subtile_offsets[k] = static_cast<std::uint32_t>(xb - xs);
    }
  }

  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto b = static_cast<std::size_t>(block_of[i]);
    double s = q.scale_values[b];
    if (!sub_of.empty() && std::isfinite(s))
      s = std::ldexp(s, -static_cast<int>(q.subtile_offsets[static_cast<std::size_t>(sub_of[i])]));
    if (std::isnan(s)) {
      q.codes[i] = f.element.has_nan() ? f.element.nan_code(false) : f.element.zero_code(false);
      q.values[i] = nan;
      continue;
    }
    if (std::isinf(x[i]) && o.specials == SpecialsPolicy::BlockNan && f.element.has_inf()) {
      q.codes[i] = f.element.inf_code(x[i] < 0);  // kept as Inf (docs/quantization.md)
      q.values[i] = x[i];
      continue;
    }
    if (s == 0) {  // a zero float scale: every element of the block is zero
      const double v = x[i];
      if (std::isfinite(v)) {
        q.codes[i] = f.element.zero_code(std::signbit(v));
        q.values[i] = std::signbit(v) ? -0.0 : 0.0;
        if (v != 0) q.flags[i] = QuantizedTensor::kInexact | QuantizedTensor::kUnderflow;
        continue;
      }
    }
    const CastResult r = s == 0 ? cast(f.element, x[i], elem_opts, random_of(i))
                                : cast_quotient(f.element, x[i], s * g, elem_opts, random_of(i));
    q.codes[i] = r.code;
    q.flags[i] = flags_of(r);
    const double e = f.element.decode(r.code);
    q.values[i] = (s == 0) ? e : e * s * g;
  }
  return q;
}

}  // namespace mxlab
