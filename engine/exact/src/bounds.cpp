// Worst-case error by exponent gap, twice: closed forms from the format's columns (docs/bounds.md)
// and an exhaustive walk over every element code and rounding boundary that evaluates the reference
// quantizer. All arithmetic is exact (cpp_rational); S_e = 0, so amax lies in [1, 2) and errors are
// already in units of 2^S_e.
#include "mxlab/exact/bounds.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "exact_detail.hpp"
#include "mxlab/core/bits.hpp"
#include "mxlab/quantize/quantize.hpp"

namespace mxlab::exact {
namespace {

Rational to_rational(Rat v) {
  auto impl = std::make_unique<Rational::Impl>();
  impl->v = std::move(v);
  return Rational(std::move(impl));
}
const Rat& rat_of(const Rational& r) { return r.impl().v; }

Rat p2(int e) { return e >= 0 ? Rat(Int(1) << e) : Rat(Int(1), Int(1) << -e); }

/// floor(log2 v) for v > 0.
int ilog2(const Rat& v) {
  const int e = static_cast<int>(mp::msb(mp::numerator(v))) - static_cast<int>(mp::msb(mp::denominator(v)));
  return v >= p2(e) ? e : e - 1;
}

/// floor(v) for v >= 0.
Int floor_int(const Rat& v) { return mp::numerator(v) / mp::denominator(v); }

double to_f64(const Rat& v) { return to_rational(v).to_double(); }
Rat from_f64(double d) { return rat_of(Rational::from_double(d)); }

/// The double holding v exactly; every sample point here is a short dyadic rational.
double exact_f64(const Rat& v) {
  const double d = to_f64(v);
  if (from_f64(d) != v) throw std::logic_error("bounds: sample point " + to_rational(v).to_decimal() + " is not a double");
  return d;
}

bool is_nearest(Rounding r) {
  return r == Rounding::NearestEven || r == Rounding::NearestAway || r == Rounding::NearestZero;
}

/// A supremum under construction: the largest value offered, and whether some admissible point
/// (rather than only a limit at an excluded end) reaches it.
struct Sup {
  Rat value{0};
  bool attained = false;
  bool any = false;
  void offer(const Rat& v, bool at_point) {
    if (!any || v > value) {
      value = v;
      attained = at_point;
      any = true;
    } else if (v == value) {
      attained = attained || at_point;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The element's value grid read from its columns (FormatSpec), for the closed forms.

struct ElementModel {
  bool integer = false;
  int m = 0;        ///< float: mantissa bits of the primary reading
  int emin = 0;     ///< float: smallest normal exponent of the primary reading
  bool sub = false; ///< float: exponent field 0 re-read as a second format (MX-SAFE)
  int split = 0;    ///< binades below 2^split use the second reading
  int sub_m = 0;
  int sub_emin = 0;
  int frac = 0;     ///< integer: fraction bits
  int emax = 0;
  Rat max{0};       ///< largest finite value M
  Rat top_step{0};  ///< continued-grid step above M
  Rat min_pos{0};
  bool max_odd = false;  ///< the code of M is odd (decides a rounding tie between M and the continued point)

  /// Spacing of the values in the binade [2^e, 2^(e+1)) (e <= emax); below the smallest positive
  /// value it is that value (the neighbours are 0 and min_pos).
  Rat step(int e) const {
    if (integer) return p2(-frac);
    if (sub && e < split) return p2(std::max(e, sub_emin) - sub_m);
    return p2(std::max(e, emin) - m);
  }
};

ElementModel element_model(const FormatSpec& s) {
  ElementModel em;
  if (s.kind == FormatKind::Integer) {
    em.integer = true;
    em.frac = s.frac_bits;
    const std::int64_t kmax = (std::int64_t{1} << (s.int_bits - 1)) - 1;
    int top = 0;
    while ((std::int64_t{2} << top) <= kmax) ++top;
    em.emax = top - s.frac_bits;
    em.max = Rat(kmax) * p2(-s.frac_bits);
    em.top_step = p2(-s.frac_bits);
    em.min_pos = p2(-s.frac_bits);
    em.max_odd = (kmax & 1) != 0;
    return em;
  }
  em.m = s.mantissa_bits;
  em.emin = 1 - s.bias;
  const int all_ones = (1 << s.exponent_bits) - 1;
  const bool ieee = s.specials == Specials::Ieee;
  const bool fn = s.specials == Specials::AllOnesNan;
  const int max_field = (ieee || (fn && s.mantissa_bits == 0)) ? all_ones - 1 : all_ones;
  const std::int64_t max_mant = (std::int64_t{1} << s.mantissa_bits) - ((fn && s.mantissa_bits > 0) ? 2 : 1);
  em.emax = max_field - s.bias;
  em.max = (Rat(1) + Rat(max_mant) * p2(-s.mantissa_bits)) * p2(em.emax);
  em.top_step = p2(em.emax - s.mantissa_bits);
  em.max_odd = s.mantissa_bits > 0 ? (max_mant & 1) != 0 : (max_field & 1) != 0;
  if (s.sub_exponent_bits > 0) {
    em.sub = true;
    em.split = 1 - s.bias;
    em.sub_m = s.sub_mantissa_bits;
    em.sub_emin = 1 - s.sub_bias;
    em.min_pos = p2(em.sub_emin - em.sub_m);
  } else {
    em.min_pos = p2(em.emin - em.m);
  }
  return em;
}

// ---------------------------------------------------------------------------------------------
// Support checks shared by both computations.

std::optional<Error> unsupported(const BlockFormat& f, const std::string& what) {
  return make_error("bounds for '" + f.name + "': " + what);
}

/// The float scale format's grid, for the amax rule.
struct ScaleModel {
  int m = 0;
  int emin = 0;  ///< smallest normal exponent
  int bias = 0;
  Rat min_normal{0};
  Rat max{0};
  Rat step(int e) const { return p2(std::max(e, emin) - m); }
  /// The last bit of the code of a positive value v of the grid.
  bool odd(const Rat& v) const {
    const int e = ilog2(v);
    if (m == 0) return ((std::max(e, emin) + bias) & 1) != 0;
    return (floor_int(v / step(e)) & 1) != 0;
  }
  Rat next(const Rat& v) const { return v + step(ilog2(v)); }
  Rat prev(const Rat& v) const {
    const int e = ilog2(v);
    return v - (v == p2(e) ? step(e - 1) : step(e));
  }
  /// v rounded to the grid under a nearest mode (v inside the normal range).
  Rat round(const Rat& v, Rounding r) const {
    const Rat h = step(ilog2(v));
    const Rat lo = Rat(floor_int(v / h)) * h;
    if (lo == v) return v;
    const Rat hi = lo + h;
    const Rat d = v - lo;
    if (d * 2 < h) return lo;
    if (d * 2 > h) return hi;
    if (r == Rounding::NearestAway) return hi;
    if (r == Rounding::NearestZero) return lo;
    return odd(lo) ? hi : lo;
  }
};

ScaleModel scale_model(const FormatSpec& s) {
  ScaleModel sm;
  sm.m = s.mantissa_bits;
  sm.bias = s.bias;
  sm.emin = s.subnormals ? 1 - s.bias : -s.bias;
  sm.min_normal = p2(sm.emin);
  sm.max = from_f64(max_finite(s));
  return sm;
}

bool pow2_rule(ScaleRule r) { return !scale_rule_traits(r).float_scale; }

}  // namespace

std::optional<Error> check_bounds_support(const BlockFormat& f) {
  if (!f.layout.scale) return unsupported(f, "the format has no block scale, so there is no shared exponent");
  if (f.layout.sparse_m > 0)
    return unsupported(f, "N:M sparsity zeroes elements by their rank in a group, so the error of x is not a "
                          "function of (amax, x)");
  if (f.layout.geometry().has_subtiles())
    return unsupported(f, "subtile microexponents make an element's scale depend on its subtile's amax");
  const QuantOptions& qo = f.options;
  // Peer arithmetic that rounds inputs, quotients or log2 in float32 changes q away from the
  // definitions the closed forms solve; the bound is defined for the exact defaults.
  if (qo.input != InputPrecision::Exact) return unsupported(f, "inputs rounded to float32 (use the exact default)");
  if (qo.amax_log2 == AmaxLog2::Float32)
    return unsupported(f, "log2 of amax rounded in float32 (use the exact default)");
  if (qo.rule == ScaleRule::RCeil && qo.rceil_quotient != RceilQuotient::Exact)
    return unsupported(f, "a float32 RCEIL quotient (use the exact default)");
  if (qo.nvfp4_arith != Nvfp4Arith::Exact) return unsupported(f, "float32 NVFP4 scale arithmetic (use the exact default)");
  const CastOptions& eo = f.options.element;
  if (!is_nearest(eo.rounding))
    return unsupported(f, "element rounding '" + std::string(to_string(eo.rounding)) +
                              "' (bounds are derived for nearest-even, nearest-away and nearest-zero)");
  const bool saturate = eo.overflow == Overflow::Saturate || (eo.overflow == Overflow::Default && !f.element.has_inf());
  if (!saturate) return unsupported(f, "element overflow must saturate (infinite or NaN results have no error bound)");
  if (eo.subnormals != SubnormalMode::Keep) return unsupported(f, "element subnormals must be kept (no flushing)");
  const FormatSpec& es = f.element.spec();
  if (es.kind == FormatKind::Codebook) return unsupported(f, "codebook elements are not supported");
  if (format_bits(es) > 16) return unsupported(f, "elements wider than 16 bits are not enumerable");
  if (es.kind == FormatKind::Integer) {
    if (!es.is_signed || !es.symmetric) return unsupported(f, "integer elements must be signed with a symmetric range");
  } else {
    if (!es.is_signed || !es.subnormals)
      return unsupported(f, "float elements must be signed with a zero and subnormals");
    if (es.sub_exponent_bits > 0) {
      // The re-read field must continue the primary reading's normal binades without a hole.
      const int sub_top = (1 << es.sub_exponent_bits) - 1 - es.sub_bias;
      if (sub_top != -es.bias) return unsupported(f, "the re-read exponent field 0 must end just below the smallest normal");
    }
  }
  const ElementModel em = element_model(es);
  const ScaleRule rule = f.options.rule;
  const Format& sf = *f.layout.scale;
  if (scale_rule_traits(rule).compares_candidates)
    return unsupported(f, "the " + std::string(to_string(rule)) +
                              " rule picks the scale from every element's error, not from amax alone");
  if (pow2_rule(rule)) {
    if (f.layout.tensor_scale) return unsupported(f, "a power-of-two rule cannot sit under a tensor scale");
    const int x_min = floor_log2(sf.min_positive());
    const int x_max = floor_log2(sf.max_finite());
    // The block scale 2^X for S_e = 0 is 2^-emax or 2^(1-emax) (2^(-1-emax) under rfloor); it must be stored
    // without clamping.
    const int lowest = rule == ScaleRule::RFloor ? -1 - em.emax : -em.emax;
    if (lowest < x_min || 1 - em.emax > x_max || sf.kind() != FormatKind::Float)
      return unsupported(f, "the scale format cannot hold 2^-emax and 2^(1-emax) of the element");
    return std::nullopt;
  }
  // amax rule: s = amax / max_elem rounded in the scale format (tensor scale 1).
  const FormatSpec& ss = sf.spec();
  if (ss.kind != FormatKind::Float || format_bits(ss) > 16 || ss.sub_exponent_bits > 0)
    return unsupported(f, "the amax rule needs a plain float scale format of at most 16 bits");
  if (!is_nearest(f.options.scale.rounding))
    return unsupported(f, "scale rounding '" + std::string(to_string(f.options.scale.rounding)) +
                              "' (nearest-even, nearest-away and nearest-zero are supported)");
  const ScaleModel sm = scale_model(ss);
  // amax / max_elem for amax in [1, 2) must lie in the scale format's normal range, so that the
  // bound does not depend on S_e (docs/bounds.md).
  const Rat lo = Rat(1) / em.max;
  const Rat hi = Rat(2) / em.max;
  if (lo < sm.min_normal || hi > sm.max)
    return unsupported(f, "amax / max_elem for amax in [1, 2) leaves the scale format's normal range");
  if (f.options.min_block_scale < 0 || !std::isfinite(f.options.min_block_scale))
    return unsupported(f, "the minimum block scale must be finite and non-negative");
  if (f.options.min_block_scale > 0) {
    const Rat mb = from_f64(f.options.min_block_scale);
    if (mb < sm.min_normal || mb > sm.max)
      return unsupported(f, "the minimum block scale must lie in the scale format's normal range");
  }
  if (f.layout.tensor_scale) {
    // The bound is taken with tensor scale 1 (docs/bounds.md), which the format must hold exactly.
    const Format& tf = *f.layout.tensor_scale;
    auto to = resolve_options(tf, CastOptions{});
    if (!to || tf.decode(cast(tf, 1.0, *to).code) != 1.0) return unsupported(f, "the tensor scale format cannot hold 1");
  }
  return std::nullopt;
}

namespace {

struct Piece {
  Rat scale;
  Rat lo, hi;
  bool lo_closed = true;
  bool hi_closed = false;
  int pow2_exponent = 0;
  bool is_pow2 = false;
};

std::vector<Piece> merge_pieces(const std::vector<Piece>& in) {
  std::vector<Piece> out;
  for (const Piece& p : in) {
    if (!out.empty() && out.back().scale == p.scale && out.back().hi == p.lo && (out.back().hi_closed != p.lo_closed)) {
      out.back().hi = p.hi;
      out.back().hi_closed = p.hi_closed;
      continue;
    }
    out.push_back(p);
  }
  for (Piece& p : out) {
    const int e = ilog2(p.scale);
    p.is_pow2 = p.scale == p2(e);
    p.pow2_exponent = e;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Analytic scale pieces: the rule's definition solved for the amax values where the scale changes.

std::vector<Piece> derive_pieces(const BlockFormat& f) {
  const ElementModel em = element_model(f.element.spec());
  const QuantOptions& o = f.options;
  const Rat one(1), two(2);
  auto piece = [](Rat s, Rat lo, bool lc, Rat hi, bool hc) {
    Piece p;
    p.scale = std::move(s);
    p.lo = std::move(lo);
    p.lo_closed = lc;
    p.hi = std::move(hi);
    p.hi_closed = hc;
    return p;
  };
  const Rat s0 = p2(-em.emax);      // floor(log2 amax) - emax with amax in [1, 2)
  const Rat s1 = p2(1 - em.emax);   // one binade up
  std::vector<Piece> v;
  switch (o.rule) {
    case ScaleRule::Floor: v = {piece(s0, one, true, two, false)}; break;
    case ScaleRule::Ceil:
      // ceil(log2 amax) is 0 only at amax = 1.
      v = {piece(s0, one, true, one, true), piece(s1, one, false, two, false)};
      break;
    case ScaleRule::RCeil: {
      // amax <= max_elem * 2^X  <=>  amax <= mu with mu = max_elem * 2^-emax in [1, 2).
      const Rat mu = em.max * p2(-em.emax);
      v = {piece(s0, one, true, mu, true), piece(s1, mu, false, two, false)};
      break;
    }
    case ScaleRule::RFloor: {
      // max_elem * 2^X <= amax  <=>  amax >= mu (X = -emax) with mu = max_elem * 2^-emax in [1, 2); below mu one
      // binade down.
      const Rat mu = em.max * p2(-em.emax);
      if (mu == one) {
        v = {piece(s0, one, true, two, false)};
      } else {
        v = {piece(p2(-1 - em.emax), one, true, mu, false), piece(s0, mu, true, two, false)};
      }
      break;
    }
    case ScaleRule::Even: {
      // amax rounded to p fraction bits reaches 2 from tau = 2 - 2^-(p+1) on (the tie goes to the
      // even neighbour 2).
      const int p = em.integer ? std::max(0, f.element.spec().int_bits - 2) : em.m;
      const Rat tau = two - p2(-(p + 1));
      v = {piece(s0, one, true, tau, false), piece(s1, tau, true, two, false)};
      break;
    }
    case ScaleRule::MidMax: {
      // The element cast of amax * 2^emax overflows beyond the midpoint T between max and the
      // continued point; at T only when the tie goes to the continued point.
      const Rat t = (em.max + em.top_step / 2) * p2(-em.emax);
      const Rounding r = o.element.rounding;
      const bool tie_over = r == Rounding::NearestAway || (r == Rounding::NearestEven && em.max_odd);
      v = {piece(s0, one, true, t, !tie_over), piece(s1, t, tie_over, two, false)};
      break;
    }
    case ScaleRule::Amax:
    case ScaleRule::FourOverSix: {
      // s = round(amax / max_elem) in the scale format: each grid value v of the scale format takes the
      // amax between max_elem times the midpoints to its neighbours; ties follow the scale rounding.
      const ScaleModel sm = scale_model(f.layout.scale->spec());
      const Rounding r = o.scale.rounding;
      Rat v0 = sm.round(one / em.max, r);
      for (Rat sv = v0;; sv = sm.next(sv)) {
        const Rat lo_b = (sm.prev(sv) + sv) / 2 * em.max;
        const Rat hi_b = (sv + sm.next(sv)) / 2 * em.max;
        if (lo_b >= two) break;
        const bool even = !sm.odd(sv);
        bool lc = r == Rounding::NearestAway || (r == Rounding::NearestEven && even);
        bool hc = r == Rounding::NearestZero || (r == Rounding::NearestEven && even);
        Rat lo = lo_b, hi = hi_b;
        if (lo <= one) lo = one, lc = true;
        if (hi >= two) hi = two, hc = false;
        if (lo < hi || (lo == hi && lc && hc)) v.push_back(piece(sv, lo, lc, hi, hc));
      }
      if (o.min_block_scale > 0) {
        // Smaller scales are replaced by the scale format's rounding of the minimum.
        const Rat mb = from_f64(o.min_block_scale);
        const Rat smin = sm.round(mb, r);
        for (Piece& p : v)
          if (p.scale < mb) p.scale = smin;
      }
      break;
    }
  }
  return merge_pieces(v);
}

// ---------------------------------------------------------------------------------------------
// Analytic suprema.

/// The x interval of a piece at gap g: [2^-g, 2^(1-g)) and, at g = 0, x <= amax.
struct XRange {
  Rat lo, hi;
  bool lo_closed = true;
  bool hi_closed = false;
  bool empty = false;
};
XRange x_range(const Piece& p, int g, bool single) {
  XRange r;
  r.lo = p2(-g);
  r.hi = p2(1 - g);
  if (single && g > 0) {  // a one-element block: its element is its amax, at gap 0 only
    r.empty = true;
    return r;
  }
  if (single && p.lo >= r.lo) {  // x = amax, inside the piece
    r.lo = p.lo;
    r.lo_closed = p.lo_closed;
  }
  if (p.hi < r.hi) {
    r.hi = p.hi;
    r.hi_closed = p.hi_closed;
  }
  r.empty = r.hi < r.lo || (r.hi == r.lo && !(r.hi_closed && r.lo_closed));
  return r;
}

/// Sup of the distance to a uniform grid hZ over [a, b] (b excluded unless cb), scaled by s for the
/// absolute error; the relative error is scale-free. The distance is a sawtooth with peaks h/2 at the
/// midpoints; the relative error peaks at the first midpoint and may be larger at a (docs/bounds.md).
void sup_uniform(const Rat& a, const Rat& b, bool cb, const Rat& h, const Rat& s, Sup& abs, Sup& rel, bool ca = true) {
  auto dist = [&](const Rat& y) {
    const Rat lo = Rat(floor_int(y / h)) * h;
    return std::min(Rat(y - lo), Rat(lo + h - y));
  };
  Rat m1 = (Rat(floor_int(a / h)) + Rat(1, 2)) * h;
  if (m1 < a) m1 += h;
  abs.offer(dist(a) * s, ca);
  rel.offer(dist(a) / a, ca);
  if (m1 <= b) {
    const bool at = m1 < b || cb;
    abs.offer(h / 2 * s, at);
    rel.offer(h / 2 / m1, at);
  }
  abs.offer(dist(b) * s, cb);
  rel.offer(dist(b) / b, cb);
}

/// Sup of the error over x in [xlo, xhi> for one scale s, element binade by element binade, plus the
/// saturation range above max_elem where every x goes to max_elem and the error x/s - max grows.
void sup_interval(const ElementModel& em, const Rat& s, const XRange& xr, Sup& abs, Sup& rel) {
  const Rat ylo = xr.lo / s;
  const Rat yhi = xr.hi / s;
  if (yhi > em.max) {
    abs.offer((yhi - em.max) * s, xr.hi_closed);
    rel.offer((yhi - em.max) / yhi, xr.hi_closed);
  }
  if (ylo > em.max) return;
  const Rat top = std::min(yhi, em.max);
  const bool top_closed = yhi > em.max ? true : xr.hi_closed;
  for (int k = ilog2(ylo);; ++k) {
    const Rat a = std::max(ylo, p2(k));
    const Rat b = std::min(top, p2(k + 1));
    const bool cb = b == top ? top_closed : true;  // inner binade ends: the error is continuous there
    const bool ca = a == ylo ? xr.lo_closed : true;
    if (a < b || (a == b && cb && ca)) sup_uniform(a, b, cb, em.step(k), s, abs, rel, ca);
    if (p2(k + 1) >= top) break;
  }
}

GapBound finish(int g, const Sup& abs, const Sup& rel, bool underflow) {
  GapBound b;
  b.gap = g;
  b.max_abs = to_rational(abs.value);
  b.max_rel = to_rational(rel.value);
  b.abs_attained = abs.attained;
  b.rel_attained = rel.attained;
  b.full_underflow = underflow;
  b.max_abs_f64 = b.max_abs.to_double();
  b.max_rel_f64 = b.max_rel.to_double();
  return b;
}

/// Whether every block holds one element (its amax), so that only gap 0 exists.
bool single_element_blocks(const BlockFormat& f) { return f.block_elements() == 1; }

std::vector<GapBound> analytic(const BlockFormat& f, const std::vector<Piece>& pieces, int max_gap) {
  const ElementModel em = element_model(f.element.spec());
  const bool single = single_element_blocks(f);
  const bool tie_to_zero = f.options.element.rounding != Rounding::NearestAway;
  std::vector<GapBound> out;
  for (int g = 0; g <= max_gap; ++g) {
    Sup abs, rel;
    bool underflow = true;
    if (single && g > 0) underflow = false;  // no element at this gap
    for (const Piece& p : pieces) {
      const XRange xr = x_range(p, g, single);
      if (xr.empty) continue;
      const int e = -g - p.pow2_exponent;
      if (p.is_pow2 && g >= 1 && e < em.emax) {
        // A whole element binade e = -g - X below the top binade (so no saturation): spacing
        // hs = step(e) 2^X, binade start B = 2^-g.
        const Rat hs = em.step(e) * p.scale;
        const Rat bstart = p2(-g);
        if (hs <= bstart) {  // normal (or subnormal-spaced) binade: peaks at midpoints
          abs.offer(hs / 2, true);
          rel.offer(hs / 2 / (bstart + hs / 2), true);
          underflow = false;
        } else if (hs == 2 * bstart) {  // partial underflow: neighbours 0 and hs, tie at B
          abs.offer(bstart, true);
          rel.offer(Rat(1), true);
          underflow = false;
        } else {  // full underflow: every x < 2B <= hs/2 goes to 0
          abs.offer(2 * bstart, false);
          rel.offer(Rat(1), true);
        }
        continue;
      }
      sup_interval(em, p.scale, xr, abs, rel);
      const Rat half = em.min_pos * p.scale / 2;
      const bool all_zero = xr.hi < half || (xr.hi == half && (!xr.hi_closed || tie_to_zero));
      if (!all_zero) underflow = false;
    }
    out.push_back(finish(g, abs, rel, underflow));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Enumeration.

/// The format as the bound defines it: tensor scale 1.
BlockFormat bound_format(const BlockFormat& f) {
  BlockFormat b = f;
  b.options.tensor_scale_from_amax = false;
  return b;
}

struct Quantized {
  double q = 0;      ///< q(x)
  double q_neg = 0;  ///< q(-x)
  double scale = 0;  ///< block scale times tensor scale
};

/// The reference quantizer on x and -x, each in a block whose amax is `amax`: the block {amax, x, -x}, or with
/// blocks of two elements {amax, x} and {amax, -x} (with one-element blocks x is its own amax).
Quantized run_quantizer(const BlockFormat& f, double amax, double x) {
  if (f.block_elements() <= 2 && f.layout.geometry().one_d()) {
    const std::vector<double> t = {amax, x, amax, -x};
    auto r = quantize(f, t, {4});
    if (!r) throw std::logic_error("bounds: quantize failed: " + r.error().message);
    const std::size_t xb = f.block_elements() == 1 ? 1 : 0;  // the block of x
    return {r->values[1], r->values[3], r->scale_values[xb] * r->tensor_scale};
  }
  const std::vector<double> t = {amax, x, -x};
  auto r = quantize(f, t, {3});
  if (!r) throw std::logic_error("bounds: quantize failed: " + r.error().message);
  return {r->values[1], r->values[2], r->scale_values[0] * r->tensor_scale};
}

struct Enumerator {
  const BlockFormat& f;
  std::vector<Rat> boundaries;  ///< positive element values, midpoints, continued point and its midpoint
  std::vector<Piece> pieces;
  std::int64_t piece_inconsistencies = 0;

  explicit Enumerator(const BlockFormat& fmt) : f(fmt) {
    // Element values from the exact module's reading of the columns (not Format::decode).
    const Oracle eo(f.element, Oracle::Path::Table);
    std::vector<Rat> vals{Rat(0)};
    for (const auto& v : eo.values())
      if (!v.value.negative() && !v.value.is_zero()) vals.push_back(rat_of(v.value));
    std::sort(vals.begin(), vals.end());
    vals.erase(std::unique(vals.begin(), vals.end()), vals.end());
    const Rat m = rat_of(eo.max_value());
    const Rat c = rat_of(eo.continued_point());
    if (vals.back() != m) throw std::logic_error("bounds: largest value differs from the oracle's max");
    vals.push_back(c);
    for (std::size_t i = 0; i + 1 < vals.size(); ++i) {
      if (i > 0) boundaries.push_back(vals[i]);
      boundaries.push_back((vals[i] + vals[i + 1]) / 2);
    }
    boundaries.push_back(c);
    std::sort(boundaries.begin(), boundaries.end());
    find_pieces(m);
  }

  /// Candidate amax where some rule could change the scale: every element boundary moved into
  /// [1, 2) by a power of two (power-of-two rules compare amax with such points), and max_elem times
  /// every value and midpoint of the scale format (the amax rule rounds amax / max_elem there).
  void find_pieces(const Rat& max_elem) {
    const Rat one(1), two(2);
    std::vector<Rat> cand{one};
    for (const Rat& b : boundaries) cand.push_back(b * p2(-ilog2(b)));
    const Format& sf = *f.layout.scale;
    if (sf.bits() <= 16) {
      const Oracle so(sf, Oracle::Path::Table);
      std::vector<Rat> sv;
      for (const auto& v : so.values())
        if (!v.value.negative() && !v.value.is_zero()) sv.push_back(rat_of(v.value));
      std::sort(sv.begin(), sv.end());
      for (std::size_t i = 0; i < sv.size(); ++i) {
        cand.push_back(sv[i] * max_elem);
        if (i + 1 < sv.size()) cand.push_back((sv[i] + sv[i + 1]) / 2 * max_elem);
      }
    }
    std::vector<Rat> c;
    for (const Rat& x : cand)
      if (x >= one && x < two) c.push_back(x);
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    auto scale_at = [&](double a) { return from_f64(run_quantizer(f, a, a).scale); };
    std::vector<Piece> raw;
    for (std::size_t i = 0; i < c.size(); ++i) {
      Piece at;
      at.scale = scale_at(exact_f64(c[i]));
      at.lo = at.hi = c[i];
      at.lo_closed = at.hi_closed = true;
      raw.push_back(at);
      const Rat next = i + 1 < c.size() ? c[i + 1] : two;
      Piece open;
      open.lo = c[i];
      open.hi = next;
      open.lo_closed = open.hi_closed = false;
      open.scale = scale_at(exact_f64((c[i] + next) / 2));
      // The scale must be constant between candidates: check next to both ends too.
      const double l = std::nextafter(exact_f64(c[i]), 2.0);
      const double r = std::nextafter(exact_f64(next), 0.0);
      if (scale_at(l) != open.scale) ++piece_inconsistencies;
      if (scale_at(r) != open.scale) ++piece_inconsistencies;
      raw.push_back(open);
    }
    pieces = merge_pieces(raw);
  }

  GapBound gap_bound(int g) const {
    Sup abs, rel;
    bool underflow = true;
    std::int64_t bad = piece_inconsistencies;
    const bool single = single_element_blocks(f);
    if (single && g > 0) underflow = false;  // no element at this gap
    for (const Piece& p : pieces) {
      const XRange xr = x_range(p, g, single);
      if (xr.empty) continue;
      // An amax inside the piece (x <= amax matters only at g = 0).
      const Rat rep = p.lo == p.hi ? p.lo : (p.lo + p.hi) / 2;
      auto amax_for = [&](const Rat& x) -> Rat {
        const bool in_piece = x > p.lo || (x == p.lo && p.lo_closed);
        return (g == 0 && in_piece) ? x : rep;
      };
      auto eval = [&](const Rat& x) {
        const Quantized r = run_quantizer(f, exact_f64(amax_for(x)), exact_f64(x));
        if (from_f64(r.scale) != p.scale) ++bad;
        if (r.q_neg != -r.q) ++bad;
        if (r.q != 0) underflow = false;
        return from_f64(r.q);
      };
      // Every boundary of the rounding in scaled units, inside the x interval.
      std::vector<Rat> pts{xr.lo};
      const Rat ylo = xr.lo / p.scale;
      const Rat yhi = xr.hi / p.scale;
      auto it = std::upper_bound(boundaries.begin(), boundaries.end(), ylo);
      for (; it != boundaries.end() && *it < yhi; ++it) pts.push_back(*it * p.scale);
      if (xr.hi > xr.lo) pts.push_back(xr.hi);
      for (std::size_t i = 0; i < pts.size(); ++i) {
        const bool is_end = i + 1 == pts.size() && pts.size() > 1;
        if ((!is_end || xr.hi_closed) && (i > 0 || xr.lo_closed)) {
          const Rat q = eval(pts[i]);
          const Rat e = mp::abs(q - pts[i]);
          abs.offer(e, true);
          rel.offer(e / pts[i], true);
        }
        if (i + 1 == pts.size()) break;
        // Inside (pts[i], pts[i+1]) q is constant: take it at the midpoint, confirm it next to
        // both ends, and take the error's limits at the ends (linear in x, so extreme there).
        const Rat& a = pts[i];
        const Rat& b = pts[i + 1];
        const Rat q = eval((a + b) / 2);
        for (double near : {std::nextafter(exact_f64(a), 4.0), std::nextafter(exact_f64(b), 0.0)}) {
          const Rat xn = from_f64(near);
          if (!(xn > a && xn < b)) continue;
          const Rat qn = eval(xn);
          if (qn != q) ++bad;
          const Rat e = mp::abs(qn - xn);
          abs.offer(e, true);
          rel.offer(e / xn, true);
        }
        const Rat ea = mp::abs(q - a);
        const Rat eb = mp::abs(q - b);
        abs.offer(ea, false);
        rel.offer(ea / a, false);
        abs.offer(eb, false);
        rel.offer(eb / b, false);
      }
    }
    GapBound out = finish(g, abs, rel, underflow);
    out.inconsistent_samples = bad;
    return out;
  }
};

ScalePiece to_public(const Piece& p) {
  ScalePiece s;
  s.scale = to_rational(p.scale);
  s.amax_lo = to_rational(p.lo);
  s.amax_hi = to_rational(p.hi);
  s.lo_closed = p.lo_closed;
  s.hi_closed = p.hi_closed;
  return s;
}

std::optional<Error> check_gap(const BlockFormat& f, int max_gap) {
  if (max_gap < 0 || max_gap > kMaxBoundGap)
    return make_error("bounds for '" + f.name + "': the largest gap must be 0.." + std::to_string(kMaxBoundGap) +
                      " (got " + std::to_string(max_gap) + ")");
  return std::nullopt;
}

}  // namespace

Result<std::vector<ScalePiece>> analytic_scale_pieces(const BlockFormat& f) {
  if (auto e = check_bounds_support(f)) return *e;
  std::vector<ScalePiece> out;
  for (const Piece& p : derive_pieces(f)) out.push_back(to_public(p));
  return out;
}

Result<std::vector<ScalePiece>> enumerated_scale_pieces(const BlockFormat& f) {
  if (auto e = check_bounds_support(f)) return *e;
  const BlockFormat bf = bound_format(f);
  const Enumerator en(bf);
  std::vector<ScalePiece> out;
  for (const Piece& p : en.pieces) out.push_back(to_public(p));
  return out;
}

Result<std::vector<GapBound>> analytic_bounds(const BlockFormat& f, int max_gap) {
  if (auto e = check_bounds_support(f)) return *e;
  if (auto e = check_gap(f, max_gap)) return *e;
  return analytic(f, derive_pieces(f), max_gap);
}

Result<std::vector<GapBound>> enumerated_bounds(const BlockFormat& f, int max_gap) {
  if (auto e = check_bounds_support(f)) return *e;
  if (auto e = check_gap(f, max_gap)) return *e;
  const BlockFormat bf = bound_format(f);
  const Enumerator en(bf);
  std::vector<GapBound> out;
  for (int g = 0; g <= max_gap; ++g) out.push_back(en.gap_bound(g));
  return out;
}

Result<int> full_underflow_gap(const BlockFormat& f) {
  if (auto e = check_bounds_support(f)) return *e;
  const ElementModel em = element_model(f.element.spec());
  // x < 2^(1-g) <= min_pos * s / 2 rounds to zero; the smallest scale underflows last.
  int g_full = 0;
  for (const Piece& p : derive_pieces(f)) g_full = std::max(g_full, 2 - ilog2(em.min_pos * p.scale));
  return g_full;
}

bool same_bound(const GapBound& a, const GapBound& b) {
  return a.gap == b.gap && a.max_abs == b.max_abs && a.max_rel == b.max_rel && a.abs_attained == b.abs_attained &&
         a.rel_attained == b.rel_attained && a.full_underflow == b.full_underflow && a.inconsistent_samples == 0 &&
         b.inconsistent_samples == 0;
}

std::string exact_text(const Rational& x) {
  const Rat& v = rat_of(x);
  if (v.is_zero()) return "0";
  if (v > 0) {
    const int e = ilog2(v);
    if (v == p2(e)) return e == 0 ? "1" : "2^" + std::to_string(e);
  }
  return x.to_decimal();
}

Result<Table> bounds_table(const BlockFormat& a, const BlockFormat& b, int max_gap) {
  if (auto e = check_bounds_support(a)) return *e;
  if (auto e = check_bounds_support(b)) return *e;
  if (max_gap < 0) {
    auto ga = full_underflow_gap(a);
    auto gb = full_underflow_gap(b);
    if (!ga) return ga.error();
    if (!gb) return gb.error();
    max_gap = std::min(std::max(*ga, *gb), kMaxBoundGap);
  }
  auto aa = analytic_bounds(a, max_gap);
  if (!aa) return aa.error();
  auto ae = enumerated_bounds(a, max_gap);
  if (!ae) return ae.error();
  auto ba = analytic_bounds(b, max_gap);
  if (!ba) return ba.error();
  auto be = enumerated_bounds(b, max_gap);
  if (!be) return be.error();

  Table t;
  t.add_column("gap", true);
  t.add_column("max_abs_A");
  t.add_column("max_abs_B");
  t.add_column("abs_smaller");
  t.add_column("max_rel_A");
  t.add_column("max_rel_B");
  t.add_column("rel_smaller");
  t.add_column("max_abs_A_f64", true);
  t.add_column("max_abs_B_f64", true);
  t.add_column("max_rel_A_f64", true);
  t.add_column("max_rel_B_f64", true);
  t.add_column("attained_A");
  t.add_column("attained_B");
  t.add_column("analytic_eq_enumerated");
  auto smaller = [](const Rational& x, const Rational& y) {
    const int c = x.compare(y);
    return std::string(c < 0 ? "A" : (c > 0 ? "B" : "equal"));
  };
  auto attained = [](const GapBound& g) {
    if (g.abs_attained && g.rel_attained) return std::string("abs+rel");
    if (g.abs_attained) return std::string("abs");
    if (g.rel_attained) return std::string("rel");
    return std::string("none");
  };
  for (int g = 0; g <= max_gap; ++g) {
    const auto i = static_cast<std::size_t>(g);
    const GapBound& x = (*aa)[i];
    const GapBound& y = (*ba)[i];
    const bool ok_a = same_bound(x, (*ae)[i]);
    const bool ok_b = same_bound(y, (*be)[i]);
    std::string agree = ok_a && ok_b ? "yes" : (!ok_a && !ok_b ? "no (A, B)" : (!ok_a ? "no (A)" : "no (B)"));
    t.rows.push_back({std::to_string(g), exact_text(x.max_abs), exact_text(y.max_abs), smaller(x.max_abs, y.max_abs),
                      exact_text(x.max_rel), exact_text(y.max_rel), smaller(x.max_rel, y.max_rel), g17(x.max_abs_f64),
                      g17(y.max_abs_f64), g17(x.max_rel_f64), g17(y.max_rel_f64), attained(x), attained(y),
                      std::move(agree)});
  }
  return t;
}

}  // namespace mxlab::exact
