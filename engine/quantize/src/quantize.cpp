// The scalar reference block quantizer (docs/quantization.md).
#include "mxlab/quantize/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "mxlab/core/bits.hpp"
#include "mxlab/core/exact_sum.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/formats/catalogue.hpp"
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

namespace {

// ---- Float32 readings of an amax or quotient (docs/profiles.md). All float arithmetic in this file is
// ---- IEEE binary32 (SSE on x86-64); the module is compiled with -ffp-contract=off so that no product
// ---- is fused into an addition.

constexpr int kMinusInfExponent = std::numeric_limits<int>::min() / 4;  // log2(0): clamps to the smallest scale
constexpr int kPlusInfExponent = std::numeric_limits<int>::max() / 4;   // log2(inf): clamps to the largest

/// fl32(log2 a) taken as the float32 rounding of the double log2 (AmaxLog2::Float32). Near a power of two,
/// where only the floor/ceil can change, this equals the correctly rounded float32 log2 (test_profiles
/// checks it against long double for 600 floats around every power of two).
float fl32_log2(float a) { return static_cast<float>(std::log2(static_cast<double>(a))); }

int floor_to_int(float v) {
  if (std::isinf(v)) return v < 0 ? kMinusInfExponent : kPlusInfExponent;
  return static_cast<int>(std::floor(v));
}
int ceil_to_int(float v) {
  if (std::isinf(v)) return v < 0 ? kMinusInfExponent : kPlusInfExponent;
  return static_cast<int>(std::ceil(v));
}

/// Exponent field of a float32 minus its bias: -127 for zero and subnormals, 128 for Inf.
int field_exponent(float a) { return static_cast<int>((float_bits(a) >> 23) & 0xFFU) - 127; }
bool field_mantissa_set(float a) { return (float_bits(a) & 0x7FFFFFU) != 0; }

/// floor(log2 a) for a > 0 under the reading m.
int floor_of(double a, AmaxLog2 m) {
  switch (m) {
    case AmaxLog2::Exact: return floor_log2(a);
    case AmaxLog2::Field: return field_exponent(static_cast<float>(a));
    case AmaxLog2::Float32: {
      const auto f = static_cast<float>(a);
      const std::uint32_t b = float_bits(f);
      const std::uint32_t field = (b >> 23) & 0xFFU;
      // A normal f = 2^e m with m < 2 - 2^-11 has log2 f in [e, e + 1 - 3.5e-4]: the double log2 (faithful,
      // exact at 2^e) and its float32 rounding (within 2^-17 for |e + 1| <= 128) stay in [e, e + 1), so the
      // floor is the exponent field and the logarithm need not be computed.
      if (field != 0 && field != 0xFFU && (b & 0x7FFFFFU) < 0x7FF000U) return static_cast<int>(field) - 127;
      return floor_to_int(fl32_log2(f));
    }
  }
  return floor_log2(a);
}

/// ceil(log2 a) for a > 0 under the reading m (Field: torchao CEIL adds 1 for any mantissa bit).
int ceil_of(double a, AmaxLog2 m) {
  switch (m) {
    case AmaxLog2::Exact: return is_pow2(a) ? floor_log2(a) : floor_log2(a) + 1;
    case AmaxLog2::Field: {
      const auto f = static_cast<float>(a);
      return field_exponent(f) + (field_mantissa_set(f) ? 1 : 0);
    }
    case AmaxLog2::Float32: return ceil_to_int(fl32_log2(static_cast<float>(a)));
  }
  return floor_log2(a);
}

/// Mantissa width the Even rule rounds amax to.
int even_precision(const Format& element) {
  const FormatSpec& s = element.spec();
  return s.kind == FormatKind::Float ? s.mantissa_bits : std::max(0, s.int_bits - 2);
}

/// The scale exponent under a non-exact reading (amax_log2 or rceil_quotient not Exact).
int peer_scale_exponent(const Format& element, double amax, const QuantOptions& o) {
  const int emax = element.emax();
  switch (o.rule) {
    case ScaleRule::Floor: return floor_of(amax, o.amax_log2) - emax;
    case ScaleRule::Ceil: return ceil_of(amax, o.amax_log2) - emax;
    case ScaleRule::Even: {
      const int p = even_precision(element);
      if (o.amax_log2 == AmaxLog2::Field && p < 23) {
        // torchao EVEN: (bits + (1 << (23 - mbits - 1))) & sign_and_exponent_mask, then the field.
        const std::uint32_t b = (float_bits(static_cast<float>(amax)) + (std::uint32_t{1} << (22 - p))) & 0xFF800000U;
        return static_cast<int>((b >> 23) & 0xFFU) - 127 - emax;
      }
      const int e = floor_of(amax, o.amax_log2);
      const double unit = std::ldexp(1.0, e - p);
      return floor_log2(std::nearbyint(amax / unit) * unit) - emax;
    }
    case ScaleRule::RCeil: {
      const double m = element.max_finite();
      if (o.rceil_quotient == RceilQuotient::Exact) {
        // Only reachable through direct calls (quantize rejects float32 log2 of an exact quotient): the
        // double quotient stands in for the exact one.
        return ceil_to_int(static_cast<float>(std::log2(amax / m)));
      }
      const auto a = static_cast<float>(amax);
      const float q = o.rceil_quotient == RceilQuotient::F32Div ? a / static_cast<float>(m)
                                                                : a * static_cast<float>(1.0 / m);
      if (o.amax_log2 == AmaxLog2::Float32) return ceil_to_int(fl32_log2(q));
      // Exact round-up of the float32 quotient (cvt.rp.ue8m0x2.f32), FP32 subnormals included.
      if (q == 0) return kMinusInfExponent;
      if (std::isinf(q)) return kPlusInfExponent;
      return ceil_of(static_cast<double>(q), AmaxLog2::Exact);
    }
    case ScaleRule::MidMax:
    case ScaleRule::Amax:
    case ScaleRule::FourOverSix: break;
  }
  return floor_of(amax, o.amax_log2) - emax;
}

}  // namespace

int scale_exponent(const Format& element, double amax, const QuantOptions& o) {
  if (o.amax_log2 != AmaxLog2::Exact || (o.rule == ScaleRule::RCeil && o.rceil_quotient != RceilQuotient::Exact))
    return peer_scale_exponent(element, amax, o);
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
      const int p = even_precision(element);
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

}  // namespace

void apply_nm_sparsity(std::span<double> x, std::int64_t last, int n_keep, int m) {
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

namespace {

struct BlockStats {
  double amax = 0;  // over finite values
  bool nan = false;
  bool inf = false;
};

/// The code PyTorch gives a NaN element: c10's FP8 casts return 0x7F | sign for E4M3 and E5M2 alike;
/// torchao's _f32_to_fpx_unpacked sends a NaN down its normal-number branch, so the FP4/FP6 code is
/// computed from the NaN's bits (the quiet NaN 0x7FC00000 gives the code of +1.5). Elements torchao has no
/// cast for (integers, codebooks) take the plain cast's NaN code: +0.
std::uint32_t torch_nan_code(const Format& e, float v) {
  const std::uint32_t bits = float_bits(v);
  const std::uint32_t sign = bits & 0x80000000U;
  const FormatSpec& s = e.spec();
  const int width = e.bits();
  if (e.has_nan()) return (sign ? std::uint32_t{1} << (width - 1) : 0U) | ((std::uint32_t{1} << (width - 1)) - 1);
  if (s.kind != FormatKind::Float || s.exponent_bits < 1) return e.has_zero() ? e.zero_code(false) : e.max_code(true);
  const int ebits = s.exponent_bits;
  const int mbits = s.mantissa_bits;
  const std::uint32_t x = bits ^ sign;
  const std::uint32_t mant_odd = (x >> (23 - mbits)) & 1U;
  const auto exp_bias = static_cast<std::int32_t>((1U << (ebits - 1)) - 1);
  // val_to_add = ((exp_bias - F32_EXP_BIAS) << MBITS_F32) + magic_adder, in int32 (two's complement).
  const auto val_to_add =
      static_cast<std::uint32_t>((exp_bias - 127) * (1 << 23)) + ((std::uint32_t{1} << (23 - mbits - 1)) - 1);
  const std::uint32_t normal = ((x + val_to_add + mant_odd) >> (23 - mbits)) & 0xFFU;  // .to(torch.uint8)
  const std::uint32_t sign_lp = (sign >> (23 + 8 - mbits - ebits)) & (std::uint32_t{1} << (ebits + mbits));
  return (normal | sign_lp) & ((std::uint32_t{1} << width) - 1);
}

/// microxcaling Python's _quantize_elemwise_core for nearest rounding, in float32 (NearestArith):
/// private_exp = max(floor(log2(|v| + (v == 0))), min_exp); A = |v| / 2^private_exp * 2^mbits;
/// nearest: floor(A + 0.5); even: floor(A + 0.5) - ((A - 0.5) % 2 == 0); back to v's scale. The result
/// lies on the element's (continued) grid, so the cast afterwards is exact or saturates.
float float32_add_half_round(const Format& e, float v, Rounding rounding) {
  const FormatSpec& s = e.spec();
  const float av = std::fabs(v);
  const int mbits = s.kind == FormatKind::Float ? s.mantissa_bits : s.frac_bits;
  int pe = 0;
  if (s.kind == FormatKind::Float) {
    pe = floor_to_int(fl32_log2(av + (av == 0 ? 1.0F : 0.0F)));
    pe = std::max(pe, min_normal_exponent(s));
  }
  const float a = std::ldexp(std::ldexp(av, -pe), mbits);  // x / 2**exp * 2**bits: exact scalings
  float r = std::floor(a + 0.5F);
  if (rounding == Rounding::NearestEven && std::fmod(a - 0.5F, 2.0F) == 0.0F) r = r - 1.0F;
  return std::copysign(std::ldexp(std::ldexp(r, -mbits), pe), v);
}

/// Element code of a peer's float32 scaled value v (InputPrecision::Float32 and the NVFP4 peer
/// arithmetic): NaN codes per policy, the cast otherwise, then the zero-sign rule. x is the input.
CastResult peer_cast(const Format& e, float v, double x, const CastOptions& co, std::uint32_t random,
                     const QuantOptions& o) {
  CastResult r;
  if (std::isnan(v)) {
    switch (o.specials) {
      case SpecialsPolicy::TorchaoFloor:
      case SpecialsPolicy::TorchaoRceil:
        r.code = torch_nan_code(e, v);
        r.invalid = !e.has_nan();
        return r;
      case SpecialsPolicy::IgnoreNan:
        // Transformer Engine runs on the GPU, where a NaN operand or an invalid product (Inf * 0) gives
        // the canonical NaN 0x7FFFFFFF; CUDA's conversion of it is the all-ones NaN code (E4M3 and E5M2
        // 0x7F). A format without NaN gets +0 (docs/profiles.md: not verified against the hardware).
        if (!e.has_nan()) return cast(e, static_cast<double>(v), co, random);
        r.code = (std::uint32_t{1} << (e.bits() - 1)) - 1;
        return r;
      case SpecialsPolicy::TensorNan:
        // torch.searchsorted puts NaN after every bound, and NaN < 0 is false: the largest positive code.
        r.code = e.max_code(false);
        r.invalid = true;
        return r;
      default: return cast(e, static_cast<double>(v), co, random);
    }
  }
  const bool add_half = o.nearest_arith == NearestArith::Float32AddHalf && std::isfinite(v) &&
                        (co.rounding == Rounding::NearestAway || co.rounding == Rounding::NearestEven);
  if (add_half) {
    const float w = float32_add_half_round(e, v, co.rounding);
    r = cast(e, static_cast<double>(w), co, random);  // on the grid: exact, or saturating beyond max
    if (w != v) r.inexact = true;
    if (w == 0 && v != 0) r.underflow = true;
  } else {
    r = cast(e, static_cast<double>(v), co, random);
  }
  if (v == 0 && x != 0 && std::isfinite(x)) r.inexact = r.underflow = true;  // lost in the float32 step
  if (v == 0 && e.has_negative_zero()) {
    if (o.zero_sign == ZeroSign::MinusZeroPlus && std::signbit(v)) r.code = e.zero_code(false);
    if (o.zero_sign == ZeroSign::ZeroMinus) r.code = e.zero_code(true);
  }
  return r;
}

/// The zero-sign rule on an exactly computed element (InputPrecision::Exact): the scaled value is zero
/// exactly when the input is.
void exact_zero_sign(const Format& e, double x, CastResult& r, const QuantOptions& o) {
  if (x != 0 || !e.has_negative_zero()) return;
  if (o.zero_sign == ZeroSign::MinusZeroPlus && std::signbit(x)) r.code = e.zero_code(false);
  if (o.zero_sign == ZeroSign::ZeroMinus) r.code = e.zero_code(true);
}

/// Scale exponent of a block whose amax is infinite (policies that let Inf into the amax): the
/// exponent field of Inf reads 128; every other reading gives +inf, which clamps to the largest scale.
int infinite_amax_exponent(const Format& element, const QuantOptions& o) {
  const bool field_rule = o.rule == ScaleRule::Floor || o.rule == ScaleRule::Ceil || o.rule == ScaleRule::Even;
  if (o.amax_log2 == AmaxLog2::Field && field_rule) return 128 - element.emax();
  return kPlusInfExponent;
}

/// Whether a block's amax counts as below the FP32 normal range under the reading that picks the scale
/// (AmaxSubnormal): floor(log2 amax) <= -127. A zero amax counts, unless the zero-block rule replaces it
/// by 2^-126 before the log2 (microxcaling Python).
bool amax_below_normal(double amax, const QuantOptions& o) {
  if (amax == 0) return o.zero_block != ZeroBlock::MinNormal;
  return floor_of(amax, o.amax_log2) <= -127;
}

bool policy_takes_inf(SpecialsPolicy p) {
  return p == SpecialsPolicy::IgnoreNan || p == SpecialsPolicy::TorchaoFloor || p == SpecialsPolicy::TorchaoRceil ||
         p == SpecialsPolicy::TensorNan || p == SpecialsPolicy::NanSmallest;
}

bool float_exact(double v) { return std::isfinite(v) && static_cast<double>(static_cast<float>(v)) == v; }

/// Combinations of options that no rule defines.
std::optional<Error> check_options(const BlockFormat& f, bool pow2_rule) {
  const QuantOptions& o = f.options;
  if (o.amax_log2 != AmaxLog2::Exact && o.rule == ScaleRule::MidMax)
    return make_error("amax log2 reading '" + std::string(to_string(o.amax_log2)) +
                      "' applies to the floor, ceil, even and rceil rules, not midmax");
  if (o.amax_log2 == AmaxLog2::Float32 && o.rule == ScaleRule::Even)
    return make_error("amax log2 reading 'float32' is not defined for the even rule (use 'field' or 'exact')");
  if (o.amax_log2 == AmaxLog2::Float32 && o.rule == ScaleRule::RCeil && o.rceil_quotient == RceilQuotient::Exact)
    return make_error("amax log2 reading 'float32' under the rceil rule needs a float32 quotient "
                      "(rceil quotient 'f32-div' or 'f32-mul-rcp')");
  const bool pow2_only = o.specials == SpecialsPolicy::TorchaoFloor || o.specials == SpecialsPolicy::TorchaoRceil ||
                         o.specials == SpecialsPolicy::NanSmallest;
  if (pow2_only && !pow2_rule)
    return make_error("NaN/Inf policy '" + std::string(to_string(o.specials)) + "' needs a power-of-two scale rule");
  if (o.zero_block == ZeroBlock::MinNormal && !pow2_rule)
    return make_error("zero-block scale 'min-normal' needs a power-of-two scale rule");
  if (o.amax_subnormal != AmaxSubnormal::Keep && !pow2_rule)
    return make_error("flushing blocks with a subnormal amax needs a power-of-two scale rule");
  if (o.four_over_six != FourOverSixMetric::ExactSse &&
      (o.rule != ScaleRule::FourOverSix || o.nvfp4_arith != Nvfp4Arith::Te))
    return make_error("4over6 metric '" + std::string(to_string(o.four_over_six)) +
                      "' is Transformer Engine's: it needs the 4over6 rule with NVFP4 arithmetic 'te'");
  if (o.nearest_arith != NearestArith::Exact && o.input != InputPrecision::Float32 && o.nvfp4_arith == Nvfp4Arith::Exact)
    return make_error("nearest-rounding arithmetic '" + std::string(to_string(o.nearest_arith)) +
                      "' works on float32 scaled values: it needs input precision 'float32'");
  const FormatSpec& es = f.element.spec();
  if (o.int_encoding == IntEncoding::SignMagnitude && es.kind == FormatKind::Integer && es.is_signed && !es.symmetric)
    return make_error("sign-magnitude integer encoding needs a symmetric integer element: '" + f.element.name() +
                      "' has the code -2^" + std::to_string(es.int_bits - 1) + ", which sign-magnitude cannot hold");
  if (o.tensor_scale_max < 0 || !std::isfinite(o.tensor_scale_max))
    return make_error("the tensor-scale maximum must be a finite non-negative number");
  if (o.nvfp4_arith != Nvfp4Arith::Exact) {
    const std::string what = "NVFP4 arithmetic '" + std::string(to_string(o.nvfp4_arith)) + "'";
    if (pow2_rule) return make_error(what + " needs the amax or 4over6 rule (a float block scale)");
    const Format* f32 = find_catalogue_format("float32");
    if (!f.layout.tensor_scale || f32 == nullptr || f.layout.tensor_scale->name() != f32->name())
      return make_error(what + " needs a float32 tensor scale over the block scales (as in nvfp4)");
    const double smax = o.tensor_scale_max > 0 ? o.tensor_scale_max : f.layout.scale->max_finite();
    if (!float_exact(f.element.max_finite()) || !float_exact(f.layout.scale->max_finite()) || !float_exact(smax) ||
        !float_exact(smax * f.element.max_finite()))
      return make_error(what + " needs element and scale maxima that are float32 numbers");
    if (o.rule == ScaleRule::FourOverSix && o.nvfp4_arith != Nvfp4Arith::Te)
      return make_error("the 4over6 rule is defined for NVFP4 arithmetic 'exact' and 'te' only");
  }
  for (const auto& t : f.layout.tiles)
    if (t.subtile > 0 && (o.code0_multiplier != Code0Multiplier::Exact || o.specials != SpecialsPolicy::BlockNan ||
                          o.amax_subnormal != AmaxSubnormal::Keep))
      return make_error("subtiles are defined for the exact code-0 multiplier, block-nan and no block flush only");
  return std::nullopt;
}

/// The state the element loops share.
struct ElementContext {
  const BlockFormat& f;
  const std::vector<double>& x;
  const std::vector<std::int64_t>& block_of;
  const std::vector<BlockStats>& stats;
  const CastOptions& elem_opts;
  const CastOptions& scale_opts;
  bool stochastic;
  std::uint32_t random(std::size_t i) const { return stochastic ? stochastic_bits(f.options.seed, i) : 0U; }
};

std::uint8_t flags_of(const CastResult& r) {
  return static_cast<std::uint8_t>((r.inexact ? QuantizedTensor::kInexact : 0) |
                                   (r.overflow ? QuantizedTensor::kOverflow : 0) |
                                   (r.underflow ? QuantizedTensor::kUnderflow : 0) |
                                   (r.invalid ? QuantizedTensor::kInvalid : 0));
}

/// NVFP4 under a peer's float32 arithmetic (Nvfp4Arith::Te or ModelOpt): tensor scale, block scales and
/// elements exactly as the float32 expressions in docs/profiles.md, in this order of roundings.
/// Whether a block with NaN (nan) or Inf (inf) is all NaN under the block NaN policies.
bool block_is_nan(const BlockFormat& f, bool nan, bool inf) {
  switch (f.options.specials) {
    case SpecialsPolicy::BlockNan: return nan || (inf && !f.element.has_inf());
    case SpecialsPolicy::BlockNanAny: return nan || inf;
    default: return false;
  }
}

/// The peer's amax of a block or tensor: TensorNan propagates NaN (torch.max), IgnoreNan skips it (fmaxf);
/// both take Inf. The other policies reduce over finite values.
float nvfp4_peer_amax(const QuantOptions& o, bool nan, bool inf, double amax) {
  if (o.specials == SpecialsPolicy::TensorNan && nan) return std::numeric_limits<float>::quiet_NaN();
  if ((o.specials == SpecialsPolicy::TensorNan || o.specials == SpecialsPolicy::IgnoreNan) && inf)
    return std::numeric_limits<float>::infinity();
  return static_cast<float>(amax);
}

Result<QuantizedTensor> quantize_nvfp4_peer(const ElementContext& c, QuantizedTensor q) {
  const BlockFormat& f = c.f;
  const Format& e = f.element;
  const Format& sf = *f.layout.scale;
  const auto nblocks = c.stats.size();
  bool any_nan = false, any_inf = false;
  double finite_amax = 0;
  for (const auto& st : c.stats) {
    any_nan = any_nan || st.nan;
    any_inf = any_inf || st.inf;
    finite_amax = std::max(finite_amax, st.amax);
  }
  auto t = nvfp4_peer_tensor(f, any_nan, any_inf, finite_amax);
  if (!t) return t.error();
  q.has_tensor_scale = true;
  q.tensor_scale_code = t->scale.code;
  q.tensor_scale = t->scale.value;

  std::vector<std::vector<std::size_t>> members(nblocks);
  for (std::size_t i = 0; i < c.x.size(); ++i) members[static_cast<std::size_t>(c.block_of[i])].push_back(i);
  std::vector<double> bx;
  std::vector<std::uint32_t> br;
  for (std::size_t b = 0; b < nblocks; ++b) {
    const BlockStats& st = c.stats[b];
    if (block_is_nan(f, st.nan, st.inf) && sf.has_nan()) {
      q.scale_codes[b] = sf.nan_code(false);
      q.scale_values[b] = std::numeric_limits<double>::quiet_NaN();
      for (std::size_t i : members[b]) {
        q.codes[i] = e.has_nan() ? e.nan_code(false) : e.zero_code(false);
        q.values[i] = std::numeric_limits<double>::quiet_NaN();
      }
      continue;
    }
    bx.clear();
    br.clear();
    for (std::size_t i : members[b]) {
      bx.push_back(c.x[i]);
      br.push_back(c.random(i));
    }
    const std::uint32_t code = nvfp4_peer_block_code(f, c.elem_opts, c.scale_opts, *t, st.amax, st.nan, st.inf, bx, br);
    q.scale_codes[b] = code;
    q.scale_values[b] = sf.decode(code);
    const float s = std::isnan(q.scale_values[b]) ? std::numeric_limits<float>::quiet_NaN()
                                                   : static_cast<float>(q.scale_values[b]);
    for (std::size_t i : members[b]) {
      const auto xf = static_cast<float>(c.x[i]);
      const CastResult r =
          peer_cast(e, nvfp4_peer_element_input(f.options, *t, xf, s), c.x[i], c.elem_opts, c.random(i), f.options);
      q.codes[i] = r.code;
      q.flags[i] = flags_of(r);
      q.values[i] = e.decode(r.code) * q.scale_values[b] * q.tensor_scale;
    }
  }
  return q;
}

}  // namespace

CastResult peer_element_cast(const Format& e, float v, double x, const CastOptions& element_opts, std::uint32_t random,
                             const QuantOptions& o) {
  return peer_cast(e, v, x, element_opts, random, o);
}

Result<Nvfp4PeerTensor> nvfp4_peer_tensor(const BlockFormat& f, bool any_nan, bool any_inf, double finite_amax) {
  const QuantOptions& o = f.options;
  const Format& sf = *f.layout.scale;
  const Format& tf = *f.layout.tensor_scale;
  const float flt_max = std::numeric_limits<float>::max();
  const auto emax_f = static_cast<float>(f.element.max_finite());  // 6
  const auto smax_f = static_cast<float>(o.tensor_scale_max > 0 ? o.tensor_scale_max : sf.max_finite());
  const float global_max = smax_f * emax_f;  // 448 * 6 = 2688, exact
  Nvfp4PeerTensor t;
  t.global_max = global_max;
  t.amax = o.tensor_scale_from_amax ? nvfp4_peer_amax(o, any_nan, any_inf, finite_amax) : global_max;
  if (o.nvfp4_arith == Nvfp4Arith::Te) {
    // compute_global_encode_scaling_factor_FP4: fp8_max * fp4_max / global_amax, FLT_MAX cap, 1 for 0.
    t.s_enc = std::fmin(global_max / t.amax, flt_max);
    if (t.amax == 0.0F || t.s_enc == 0.0F) t.s_enc = 1.0F;
    t.s_dec = 1.0F / t.s_enc;
  } else {
    // get_weights_scaling_factor_2: reduce_amax(input).float() / (6.0 * 448.0).
    t.s_dec = t.amax / global_max;
  }
  auto to = resolve_options(tf, CastOptions{});
  if (!to) return make_error("tensor scale format: " + to.error().message);
  t.scale.code = cast(tf, static_cast<double>(t.s_dec), *to).code;
  t.scale.value = static_cast<double>(t.s_dec);
  return t;
}

float nvfp4_peer_element_input(const QuantOptions& o, const Nvfp4PeerTensor& t, float xf, float s) {
  // Te: r = min(1 / (s * S_dec), FLT_MAX) and x * r; ModelOpt: x / (s * S_dec).
  if (o.nvfp4_arith == Nvfp4Arith::Te) return xf * std::fmin(1.0F / (s * t.s_dec), std::numeric_limits<float>::max());
  return xf / (s * t.s_dec);
}

namespace {

/// The E4M3 block scale code of the float32 value pre under the zero-block and minimum-scale rules.
std::uint32_t nvfp4_peer_scale_code(const BlockFormat& f, const CastOptions& scale_opts, float pre) {
  const QuantOptions& o = f.options;
  const Format& sf = *f.layout.scale;
  if (pre == 0.0F && o.zero_block == ZeroBlock::One) pre = 1.0F;  // per_block_scale[per_block_scale == 0] = 1.0
  CastResult r = cast(sf, static_cast<double>(pre), scale_opts);
  if (o.min_block_scale > 0 && sf.decode(r.code) < o.min_block_scale) r = cast(sf, o.min_block_scale, scale_opts);
  return r.code;
}

}  // namespace

std::pair<std::uint32_t, std::uint32_t> nvfp4_peer_4over6_candidates(const BlockFormat& f, const CastOptions& scale_opts,
                                                                      const Nvfp4PeerTensor& t, double amax, bool nan,
                                                                      bool inf) {
  // Transformer Engine 4over6 (quantize_4over6_kernel.cuh, compute_scale_pair and make_candidates):
  // base = block_amax / 6 * S_enc; map-to-6 E4M3(min(base, 448)), map-to-4 E4M3(min(1.5 base, 448)).
  const auto emax_f = static_cast<float>(f.element.max_finite());
  const auto scale_max = static_cast<float>(f.layout.scale->max_finite());
  const float base = nvfp4_peer_amax(f.options, nan, inf, amax) / emax_f * t.s_enc;
  return {nvfp4_peer_scale_code(f, scale_opts, std::fmin(base, scale_max)),
          nvfp4_peer_scale_code(f, scale_opts, std::fmin(base * 1.5F, scale_max))};
}

std::uint32_t nvfp4_peer_block_code(const BlockFormat& f, const CastOptions& element_opts, const CastOptions& scale_opts,
                                    const Nvfp4PeerTensor& t, double amax, bool nan, bool inf,
                                    std::span<const double> x, std::span<const std::uint32_t> random) {
  const QuantOptions& o = f.options;
  const Format& e = f.element;
  const Format& sf = *f.layout.scale;
  const float nanf = std::numeric_limits<float>::quiet_NaN();
  const auto emax_f = static_cast<float>(e.max_finite());
  auto scale_code = [&](float pre) { return nvfp4_peer_scale_code(f, scale_opts, pre); };
  auto decoded = [&](std::uint32_t code) {
    const double v = sf.decode(code);
    return std::isnan(v) ? nanf : static_cast<float>(v);
  };
  const float ab = nvfp4_peer_amax(o, nan, inf, amax);
  if (o.rule != ScaleRule::FourOverSix) {
    // Te compute_decoding_scaling_factor: block_amax * (S_enc * fp4_max_inv), cast to E4M3 (satfinite);
    // ModelOpt get_weights_scaling_factor: per_block_amax / (6.0 * weights_scaling_factor_2).
    if (o.nvfp4_arith == Nvfp4Arith::Te) return scale_code(ab * (t.s_enc * (1.0F / emax_f)));
    return scale_code(ab / (emax_f * t.s_dec));
  }
  const auto [map6, map4] = nvfp4_peer_4over6_candidates(f, scale_opts, t, amax, nan, inf);
  if (map4 == map6) return map6;
  // Candidate codes of the block's elements under block scale code sc.
  auto codes_of = [&](std::uint32_t sc) {
    const float s = decoded(sc);
    std::vector<std::uint32_t> codes;
    for (std::size_t k = 0; k < x.size(); ++k)
      codes.push_back(
          cast(e, static_cast<double>(nvfp4_peer_element_input(o, t, static_cast<float>(x[k]), s)), element_opts,
               random[k])
              .code);
    return codes;
  };
  // accumulate_dequant_error: val = dequant * sf * global_amax / (6 * E4M3_MAX), diff = val - x, and
  // err += |diff| (MAE) or diff * diff (MSE), in float32 and element order, starting from 0.
  auto float_error = [&](std::uint32_t sc) {
    const float s = decoded(sc);
    const auto codes = codes_of(sc);
    float err = 0.0F;
    for (std::size_t k = 0; k < codes.size(); ++k) {
      const auto xf = static_cast<float>(x[k]);
      const auto dq = static_cast<float>(e.decode(codes[k]));
      const float val = dq * s * t.amax / t.global_max;
      const float diff = val - xf;
      err = err + (o.four_over_six == FourOverSixMetric::Mse ? diff * diff : std::fabs(diff));
    }
    return err;
  };
  // The exact metric: the exact sum of (deq - x)^2 over finite inputs, deq = e * s * S_dec.
  auto exact_error = [&](std::uint32_t sc) {
    const double s = sf.decode(sc);
    const auto codes = codes_of(sc);
    ExactSum sse;
    for (std::size_t k = 0; k < codes.size(); ++k) {
      const double v = x[k];
      if (!std::isfinite(v)) continue;
      const double deq = e.decode(codes[k]) * s * static_cast<double>(t.s_dec);  // <= 31 significant bits
      sse.add_product(deq, deq);
      sse.add_product(deq, -2 * v);
      sse.add_product(v, v);
    }
    return sse;
  };
  bool pick_map4 = false;  // err_map4 < err_map6; ties (and NaN) select map-to-6
  if (o.four_over_six == FourOverSixMetric::ExactSse) {
    ExactSum diff = exact_error(map4);
    diff.subtract(exact_error(map6));
    pick_map4 = diff.sign() < 0;
  } else {
    pick_map4 = float_error(map4) < float_error(map6);
  }
  return pick_map4 ? map4 : map6;
}

std::optional<Error> check_block_options(const BlockFormat& f) {
  return check_options(f, f.options.rule != ScaleRule::Amax && f.options.rule != ScaleRule::FourOverSix);
}

int pow2_divisor_exponent(const QuantOptions& o, int exponent, int x_min) {
  if (exponent == x_min && o.code0_multiplier == Code0Multiplier::One) return 0;
  if (o.code0_multiplier == Code0Multiplier::MinNormal) return std::max(exponent, -126);
  return exponent;
}

Pow2BlockPlan pow2_block_plan(const BlockFormat& f, double amax, bool nan, bool inf, bool tensor_nan, int x_min,
                              int x_max) {
  const QuantOptions& o = f.options;
  const Format& sf = *f.layout.scale;
  Pow2BlockPlan plan;
  bool block_nan = false;
  switch (o.specials) {
    case SpecialsPolicy::BlockNan: block_nan = nan || (inf && !f.element.has_inf()); break;
    case SpecialsPolicy::BlockNanAny: block_nan = nan || inf; break;
    case SpecialsPolicy::TensorNan: block_nan = tensor_nan; break;
    default: break;
  }
  if (block_nan && sf.has_nan()) {
    plan.nan_scale = true;
    plan.kind = Pow2BlockPlan::Kind::NanCodes;
    return plan;
  }
  const bool torchao = o.specials == SpecialsPolicy::TorchaoFloor || o.specials == SpecialsPolicy::TorchaoRceil;
  if (torchao && nan && sf.has_nan()) {
    // Code 0xFF; FLOOR divides by the float32 with that exponent field (+inf), RCEIL multiplies by
    // exp2(127 - 255) = 2^-128. x / inf equals x * 0 for every float (and NaN stays NaN).
    plan.nan_scale = true;
    plan.kind = Pow2BlockPlan::Kind::Multiply;
    plan.factor = o.specials == SpecialsPolicy::TorchaoFloor ? 0.0 : std::ldexp(1.0, -128);
    return plan;
  }
  int xe = 0;
  const bool amax_nan = nan && o.specials == SpecialsPolicy::NanSmallest;
  const bool amax_inf = inf && policy_takes_inf(o.specials);
  if (amax_nan) {
    xe = x_min;  // torch.where(descale > 0, log2(descale), -127) is -127 for NaN
  } else if (amax_inf) {
    xe = infinite_amax_exponent(f.element, o);
  } else if (amax == 0) {
    switch (o.zero_block) {
      case ZeroBlock::Smallest: xe = x_min; break;
      case ZeroBlock::One: xe = 0; break;
      case ZeroBlock::MinNormal: xe = scale_exponent(f.element, std::ldexp(1.0, -126), o); break;
    }
  } else {
    xe = scale_exponent(f.element, amax, o);
  }
  if (xe > x_max && o.scale.overflow == Overflow::Nan && sf.has_nan() && !amax_inf) {
    // A scale exponent above the scale format's largest (a float32 log2 that rounds up to 2^128 for an amax
    // just below it, minus emax 0 of an integer element) under --scale-overflow nan: the block is NaN, as
    // microxcaling's shared_exp[shared_exp > scale_emax] = NaN.
    plan.nan_scale = true;
    plan.kind = Pow2BlockPlan::Kind::NanCodes;
    return plan;
  }
  xe = std::clamp(xe, x_min, x_max);
  plan.exponent = xe;
  plan.divisor_exponent = pow2_divisor_exponent(o, xe, x_min);
  if (o.specials == SpecialsPolicy::IgnoreNan && xe == x_max) {
    // Transformer Engine's exp2f_rcp builds 2^(127 - code) from bits; for code 0xFE that is the
    // pattern 0, so the block is multiplied by 0.0 (Inf becomes NaN, finite values +-0).
    plan.kind = Pow2BlockPlan::Kind::Multiply;
    plan.factor = 0.0;
  }
  if (o.amax_subnormal != AmaxSubnormal::Keep && !amax_nan && !amax_inf && amax_below_normal(amax, o)) {
    // flush_fp32_subnorms: Python multiplies the block by 0 (signed zeros), C++ stores +0.
    plan.kind = o.amax_subnormal == AmaxSubnormal::Flush ? Pow2BlockPlan::Kind::Multiply : Pow2BlockPlan::Kind::Zero;
    plan.factor = 0.0;
  }
  return plan;
}

CastResult pow2_element_cast(const BlockFormat& f, const CastOptions& element_opts, const Pow2BlockPlan& plan,
                             int offset, double x, std::uint32_t random) {
  const QuantOptions& o = f.options;
  const Format& e = f.element;
  CastResult r;
  switch (plan.kind) {
    case Pow2BlockPlan::Kind::Zero:
      r.code = e.zero_code(false);
      if (x != 0) r.inexact = r.underflow = true;
      return r;
    case Pow2BlockPlan::Kind::NanCodes:
      r.code = e.has_nan() ? e.nan_code(false) : e.zero_code(false);
      return r;
    default: break;
  }
  if (std::isinf(x) && o.specials == SpecialsPolicy::BlockNan && e.has_inf()) {
    r.code = e.inf_code(x < 0);  // kept as Inf (docs/quantization.md)
    return r;
  }
  const bool multiply = plan.kind == Pow2BlockPlan::Kind::Multiply;
  const double divisor = std::ldexp(1.0, plan.divisor_exponent - offset);
  if (o.input == InputPrecision::Float32) {
    // The peer's float32 multiply or divide by a power of two: the exact value rounded once to float32.
    const auto v = static_cast<float>(multiply ? x * plan.factor : x / divisor);
    return peer_cast(e, v, x, element_opts, random, o);
  }
  r = multiply ? cast(e, x * plan.factor, element_opts, random) : cast_quotient(e, x, divisor, element_opts, random);
  exact_zero_sign(e, x, r, o);
  return r;
}

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

namespace {

// The reference, step by step (docs/quantization.md, "The reference, step by step"): prepare_input, then
// either cast_elementwise (no scale) or block_statistics, choose_block_scales, choose_subtile_offsets and
// cast_block_elements, each recording the elements' flags as it casts them.

/// Step 1: the input as the quantizer sees it: the shape checked against the values, every value rounded to
/// float32 first under the peers' input precision (RNE; overflow gives +-inf), then N:M sparsity along the
/// last axis.
Result<std::vector<double>> prepare_input(const BlockFormat& f, std::span<const double> input,
                                          const std::vector<std::int64_t>& shape) {
  std::int64_t total = 1;
  for (auto d : shape) {
    if (d < 0) return make_error("negative dimension in the tensor shape");
    total *= d;
  }
  if (static_cast<std::size_t>(total) != input.size())
    return make_error("tensor shape holds " + std::to_string(total) + " elements but " + std::to_string(input.size()) +
                      " values were given");
  std::vector<double> x(input.begin(), input.end());
  if (f.options.input == InputPrecision::Float32)
    for (double& v : x) v = static_cast<double>(static_cast<float>(v));
  if (f.layout.sparse_m > 0 && !shape.empty()) apply_nm_sparsity(x, shape.back(), f.layout.sparse_n, f.layout.sparse_m);
  return x;
}

/// What the steps of one quantization share.
struct Run {
  Run(const BlockFormat& format, const std::vector<double>& input, const CastOptions& element_options)
      : f(format), x(input), elem_opts(element_options) {}
  const BlockFormat& f;
  const std::vector<double>& x;
  CastOptions elem_opts;
  CastOptions scale_opts;
  bool stochastic = false;
  bool pow2_rule = false;  ///< power-of-two block scales (every rule but amax and 4over6)
  std::vector<std::int64_t> block_of;  ///< the block of each element
  std::vector<BlockStats> stats;       ///< per block
  bool tensor_nan = false;
  double tensor_amax = 0;              ///< largest finite magnitude of the tensor
  double g = 1.0;                      ///< the tensor scale (1 without one)
  std::vector<Pow2BlockPlan> plans;    ///< per block (float rules use Divide and NanCodes)
  std::vector<std::int64_t> sub_of;    ///< the subtile of each element (subtile layouts)
  std::uint32_t random(std::size_t i) const { return stochastic ? stochastic_bits(f.options.seed, i) : 0U; }
};

/// Step 2 (no scale): every element cast on its own.
void cast_elementwise(const Run& r, QuantizedTensor& q) {
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    const CastResult c = cast(r.f.element, r.x[i], r.elem_opts, r.random(i));
    q.codes[i] = c.code;
    q.flags[i] = flags_of(c);
    q.values[i] = r.f.element.decode(c.code);
  }
}

/// Step 2: each block's largest finite magnitude and whether it holds NaN or Inf; the tensor's amax and NaN.
void block_statistics(Run& r, const BlockIndexer& ix, QuantizedTensor& q) {
  r.block_of = ix.block_of_all();
  const auto nblocks = static_cast<std::size_t>(ix.block_count());
  q.block_grid = ix.grid();
  r.stats.assign(nblocks, BlockStats{});
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    BlockStats& b = r.stats[static_cast<std::size_t>(r.block_of[i])];
    const double v = r.x[i];
    if (std::isnan(v)) {
      b.nan = true;
      r.tensor_nan = true;
    } else if (std::isinf(v)) {
      b.inf = true;
    } else {
      b.amax = std::max(b.amax, std::fabs(v));
      r.tensor_amax = std::max(r.tensor_amax, std::fabs(v));
    }
  }
  q.block_amax.resize(nblocks);
  for (std::size_t b = 0; b < nblocks; ++b) q.block_amax[b] = r.stats[b].amax;
  q.scale_codes.resize(nblocks);
  q.scale_values.resize(nblocks);
  q.shared_exponents.assign(nblocks, QuantizedTensor::kNoExponent);
}

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

/// Step 3: every block's scale: the tensor scale first (two-level formats), then per block the power-of-two
/// plan (pow2_block_plan) or the float scale (float_block_scale), NaN scales for NaN blocks.
std::optional<Error> choose_block_scales(Run& r, QuantizedTensor& q) {
  const BlockFormat& f = r.f;
  const QuantOptions& o = f.options;
  const Format& sf = *f.layout.scale;
  if (f.layout.tensor_scale) {
    auto ts = choose_tensor_scale(f, r.tensor_amax);
    if (!ts) return ts.error();
    q.has_tensor_scale = true;
    q.tensor_scale_code = ts->code;
    q.tensor_scale = r.g = ts->value;
  }
  const int x_min = floor_log2(sf.min_positive());
  const int x_max = floor_log2(sf.max_finite());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::size_t nblocks = r.stats.size();
  r.plans.assign(nblocks, Pow2BlockPlan{});
  // Members of each block, for the rules that quantize a block several ways (4over6).
  std::vector<std::vector<std::size_t>> members(o.rule == ScaleRule::FourOverSix ? nblocks : 0);
  if (o.rule == ScaleRule::FourOverSix)
    for (std::size_t i = 0; i < r.x.size(); ++i) members[static_cast<std::size_t>(r.block_of[i])].push_back(i);
  static const std::vector<std::size_t> kNone;
  for (std::size_t b = 0; b < nblocks; ++b) {
    const BlockStats& st = r.stats[b];
    Pow2BlockPlan& plan = r.plans[b];
    if (r.pow2_rule) {
      plan = pow2_block_plan(f, st.amax, st.nan, st.inf, r.tensor_nan, x_min, x_max);
      if (plan.nan_scale) {
        q.scale_codes[b] = sf.nan_code(false);
        q.scale_values[b] = nan;
      } else {
        q.shared_exponents[b] = plan.exponent;
        q.scale_codes[b] = cast(sf, std::ldexp(1.0, plan.exponent), r.scale_opts).code;
        q.scale_values[b] = sf.decode(q.scale_codes[b]);
      }
      continue;
    }
    const bool block_nan = o.specials == SpecialsPolicy::TensorNan ? r.tensor_nan : block_is_nan(f, st.nan, st.inf);
    if (block_nan && sf.has_nan()) {
      q.scale_codes[b] = sf.nan_code(false);
      q.scale_values[b] = nan;
      plan.kind = Pow2BlockPlan::Kind::NanCodes;
      continue;
    }
    q.scale_codes[b] = float_block_scale(r, b, members.empty() ? kNone : members[b]);
    q.scale_values[b] = sf.decode(q.scale_codes[b]);
  }
  return std::nullopt;
}

/// Step 4 (subtile layouts): shared microexponents. Each subtile of a block with scale 2^X takes 2^(X - d), d in
/// 0..2^bits-1 as large as its own amax allows (the subtile's exponent under the same rule).
std::optional<Error> choose_subtile_offsets(Run& r, const std::vector<std::int64_t>& shape, QuantizedTensor& q) {
  const BlockFormat& f = r.f;
  if (!has_subtiles(f.layout)) return std::nullopt;
  if (!r.pow2_rule) return make_error("subtiles need a power-of-two scale rule");
  const BlockIndexer sx = BlockIndexer::subtiles(shape, f.layout);
  r.sub_of = sx.block_of_all();
  q.subtile_grid = sx.grid();
  const auto nsub = static_cast<std::size_t>(sx.block_count());
  std::vector<double> sub_amax(nsub, 0.0);
  std::vector<std::int64_t> sub_block(nsub, 0);
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    const auto k = static_cast<std::size_t>(r.sub_of[i]);
    sub_block[k] = r.block_of[i];
    if (std::isfinite(r.x[i])) sub_amax[k] = std::max(sub_amax[k], std::fabs(r.x[i]));
  }
  const int x_min = floor_log2(f.layout.scale->min_positive());
  const int dmax = (1 << f.layout.subtile_bits) - 1;
  q.subtile_offsets.assign(nsub, 0);
  for (std::size_t k = 0; k < nsub; ++k) {
    const auto b = static_cast<std::size_t>(sub_block[k]);
    if (q.shared_exponents[b] == QuantizedTensor::kNoExponent || sub_amax[k] == 0) continue;
    const int xb = q.shared_exponents[b];
    const int xs = std::clamp(scale_exponent(f.element, sub_amax[k], f.options), std::max(xb - dmax, x_min), xb);
    q.subtile_offsets[k] = static_cast<std::uint32_t>(xb - xs);
  }
  return std::nullopt;
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
    c = peer_cast(e, vq, v, r.elem_opts, r.random(i), o);
  } else {
    c = s == 0 ? cast(e, v, r.elem_opts, r.random(i)) : cast_quotient(e, v, s * r.g, r.elem_opts, r.random(i));
    exact_zero_sign(e, v, c, o);
  }
  const double d = e.decode(c.code);
  *value = s == 0 ? d : d * s * r.g;
  return c;
}

/// Step 5: every element cast under its block's scale (and subtile offset), with its flags: power-of-two
/// plans through pow2_element_cast, float scales through float_scale_element.
void cast_block_elements(const Run& r, QuantizedTensor& q) {
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    const auto b = static_cast<std::size_t>(r.block_of[i]);
    const double s = q.scale_values[b];
    CastResult c;
    if (r.pow2_rule) {
      const int off = r.sub_of.empty() ? 0 : static_cast<int>(q.subtile_offsets[static_cast<std::size_t>(r.sub_of[i])]);
      c = pow2_element_cast(r.f, r.elem_opts, r.plans[b], off, r.x[i], r.random(i));
      q.values[i] = r.f.element.decode(c.code) * std::ldexp(s, -off);
    } else {
      c = float_scale_element(r, i, s, &q.values[i]);
    }
    q.codes[i] = c.code;
    q.flags[i] = flags_of(c);
  }
}

Result<QuantizedTensor> quantize_codes(const BlockFormat& f, std::span<const double> input,
                                       const std::vector<std::int64_t>& shape) {
  const QuantOptions& o = f.options;
  auto eo = resolve_options(f.element, o.element);
  if (!eo) return make_error("element format: " + eo.error().message);
  auto x = prepare_input(f, input, shape);
  if (!x) return x.error();
  Run r(f, *x, *eo);
  r.stochastic = r.elem_opts.rounding == Rounding::Stochastic;
  QuantizedTensor q;
  q.shape = shape;
  q.codes.resize(r.x.size());
  q.values.resize(r.x.size());
  q.flags.assign(r.x.size(), 0);
  if (!f.layout.scale) {
    cast_elementwise(r, q);
    return q;
  }
  auto so = resolve_options(*f.layout.scale, o.scale);
  if (!so) return make_error("scale format: " + so.error().message);
  r.scale_opts = *so;
  r.pow2_rule = o.rule != ScaleRule::Amax && o.rule != ScaleRule::FourOverSix;
  if (r.pow2_rule && f.layout.tensor_scale)
    return make_error("scale rule '" + std::string(to_string(o.rule)) +
                      "' gives power-of-two block scales and cannot sit under a tensor scale; use 'amax'");
  if (auto err = check_options(f, r.pow2_rule)) return *err;
  block_statistics(r, BlockIndexer(shape, f.layout), q);
  if (o.nvfp4_arith != Nvfp4Arith::Exact) {
    const ElementContext c{f, r.x, r.block_of, r.stats, r.elem_opts, r.scale_opts, r.stochastic};
    return quantize_nvfp4_peer(c, std::move(q));
  }
  if (auto err = choose_block_scales(r, q)) return *err;
  if (auto err = choose_subtile_offsets(r, shape, q)) return *err;
  cast_block_elements(r, q);
  return q;
}

}  // namespace

bool negative_zero_values(const BlockFormat& f) {
  return f.options.zero_sign == ZeroSign::MinusZeroPlus && f.element.kind() == FormatKind::Integer;
}

Result<QuantizedTensor> quantize(const BlockFormat& f, std::span<const double> input,
                                 const std::vector<std::int64_t>& shape) {
  auto q = quantize_codes(f, input, shape);
  if (!q || !negative_zero_values(f)) return q;
  // Integers have one zero code; under this rule the value of a negative input (after the float32 input
  // rounding and N:M pruning) that becomes zero is -0, as sign(x) * 0 is in microxcaling's fake values.
  std::vector<double> x(input.begin(), input.end());
  if (f.options.input == InputPrecision::Float32)
    for (double& v : x) v = static_cast<double>(static_cast<float>(v));
  if (f.layout.sparse_m > 0 && !shape.empty()) apply_nm_sparsity(x, shape.back(), f.layout.sparse_n, f.layout.sparse_m);
  const int x_min = floor_log2(f.layout.scale->min_positive());
  std::vector<std::int64_t> block_of;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (q->values[i] != 0 || !(x[i] < 0)) continue;
    if (block_of.empty()) block_of = BlockIndexer(shape, f.layout).block_of_all();
    const int xe = q->shared_exponents[static_cast<std::size_t>(block_of[i])];
    if (negative_zero_value(f, x[i], pow2_divisor_exponent(f.options, xe, x_min))) q->values[i] = -0.0;
  }
  return q;
}

bool negative_zero_value(const BlockFormat& f, double x, int divisor_exponent) {
  if (!(x < 0)) return false;
  if (f.options.input != InputPrecision::Float32 || divisor_exponent == QuantizedTensor::kNoExponent) return true;
  // fl32(|x| / 2^d) is 0 up to half the smallest float32 subnormal (2^-150, a tie that goes to 0).
  return -x > std::ldexp(1.0, divisor_exponent - 150);
}

}  // namespace mxlab
