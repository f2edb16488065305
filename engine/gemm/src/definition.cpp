// docs/gemm.md "Definition", transcribed in exact rational arithmetic. Each numbered step of the text is the
// comment above the code that does it.
#include "mxlab/gemm/definition.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "mxlab/exact/exact.hpp"
#include "mxlab/formats/parse.hpp"

namespace mxlab::gemm {
namespace {

using exact::Rational;

/// A value of the arithmetic: a rational, an infinity or NaN; zeros are +0.
struct Val {
  enum class Kind : std::uint8_t { Finite, PosInf, NegInf, Nan };
  Kind kind = Kind::Finite;
  Rational v;

  static Val finite(const Rational& r) {
    Val x;
    if (!r.is_zero()) x.v = r;
    return x;
  }
  static Val of(Kind k) {
    Val x;
    x.kind = k;
    return x;
  }
  bool is_finite() const { return kind == Kind::Finite; }
};

Val add(const Val& x, const Val& y) {
  using K = Val::Kind;
  if (x.kind == K::Nan || y.kind == K::Nan) return Val::of(K::Nan);
  if (!x.is_finite() && !y.is_finite()) return x.kind == y.kind ? x : Val::of(K::Nan);
  if (!x.is_finite()) return x;
  if (!y.is_finite()) return y;
  return Val::finite(x.v + y.v);
}

Val mul(const Val& x, const Rational& y) {
  using K = Val::Kind;
  if (x.is_finite()) return Val::finite(x.v * y);
  if (x.kind == K::Nan || y.is_zero()) return Val::of(K::Nan);
  const bool neg = (x.kind == K::NegInf) != y.negative();
  return Val::of(neg ? K::NegInf : K::PosInf);
}

/// x rounded to format f under rounding r (the format's default overflow policy): exact::round_exact.
Val round_to(const Format& f, Rounding r, const Val& x) {
  using K = Val::Kind;
  if (x.kind == K::Nan) return x;
  exact::Number n;
  if (x.kind == K::PosInf) n.kind = exact::Number::Kind::PosInf;
  else if (x.kind == K::NegInf) n.kind = exact::Number::Kind::NegInf;
  else n = exact::Number::finite(x.v);
  CastOptions o;
  o.rounding = r;
  const CastResult c = exact::round_exact(f, n, o);
  const exact::CodeInfo info = exact::code_info(f, c.code);
  switch (info.number.kind) {
    case exact::Number::Kind::Nan: return Val::of(K::Nan);
    case exact::Number::Kind::PosInf: return Val::of(K::PosInf);
    case exact::Number::Kind::NegInf: return Val::of(K::NegInf);
    case exact::Number::Kind::Finite: break;
  }
  return Val::finite(info.number.value);
}

double to_double(const Val& x) {
  switch (x.kind) {
    case Val::Kind::Nan: return std::numeric_limits<double>::quiet_NaN();
    case Val::Kind::PosInf: return std::numeric_limits<double>::infinity();
    case Val::Kind::NegInf: return -std::numeric_limits<double>::infinity();
    case Val::Kind::Finite: break;
  }
  return x.v.to_double();
}

/// Special values of the two rows, from their exact values (OCP MX v1.0 6.3: a NaN scale makes its block NaN).
std::optional<Val> special(const Operand& a, std::int64_t ra, const Operand& b, std::int64_t rb) {
  bool pos = false, neg = false;
  for (std::int64_t k = 0; k < a.depth; ++k) {
    const double x = a.value[a.at(ra, k)], y = b.value[b.at(rb, k)];
    if (std::isnan(x) || std::isnan(y)) return Val::of(Val::Kind::Nan);
    if (!std::isinf(x) && !std::isinf(y)) continue;
    if (x == 0 || y == 0) return Val::of(Val::Kind::Nan);
    if (std::signbit(x) == std::signbit(y)) pos = true;
    else neg = true;
  }
  if (pos && neg) return Val::of(Val::Kind::Nan);
  if (pos) return Val::of(Val::Kind::PosInf);
  if (neg) return Val::of(Val::Kind::NegInf);
  return std::nullopt;
}

Rational r(double x) { return Rational::from_double(x); }

}  // namespace

double definition_exact_dot(const Operand& a, std::int64_t ra, const Operand& b, std::int64_t rb, const Format& out) {
  if (auto s = special(a, ra, b, rb)) return to_double(round_to(out, Rounding::NearestEven, *s));
  Rational sum;
  for (std::int64_t k = 0; k < a.depth; ++k) sum = sum + r(a.value[a.at(ra, k)]) * r(b.value[b.at(rb, k)]);
  return to_double(round_to(out, Rounding::NearestEven, Val::finite(sum)));
}

double definition_dot(const Model& m, const Operand& a, std::int64_t ra, const Operand& b, std::int64_t rb,
                      const Format& out) {
  const Format fp32 = *parse_format("float32");
  const Format int32 = *parse_format("int32");
  // 1. Special values decide the result before any arithmetic.
  if (auto s = special(a, ra, b, rb)) return to_double(round_to(out, Rounding::NearestEven, *s));
  const std::int64_t depth = a.depth;
  Val acc, outer;
  std::int64_t k = 0;
  while (k < depth) {
    // 2. The group starting at k ends before the next element that starts a block of A or of B, is a multiple
    //    of the group size, or is a multiple of the promotion interval.
    std::int64_t end = k + 1;
    for (; end < depth; ++end) {
      const bool starts = a.block_start[a.at(ra, end)] != 0 || b.block_start[b.at(rb, end)] != 0;
      if (starts || (m.group > 0 && end % m.group == 0) || (m.promote > 0 && end % m.promote == 0)) break;
    }
    const Rational sa = r(a.scale[a.at(ra, k)]), sb = r(b.scale[b.at(rb, k)]);
    const Rational block_scale = m.scale == ScaleSite::Block ? sa * sb : Rational::from_int(1);
    // 3. Products: of elements (scale=block) or of scaled elements (scale=product), rounded to the product format.
    std::vector<Val> p;
    for (std::int64_t t = k; t < end; ++t) {
      const std::size_t i = a.at(ra, t), j = b.at(rb, t);
      Rational x = r(a.element[i]) * r(b.element[j]);
      if (m.scale == ScaleSite::Product) x = x * r(a.scale[i]) * r(b.scale[j]);
      p.push_back(m.product ? round_to(*m.product, m.rounding, Val::finite(x)) : Val::finite(x));
    }
    if (m.acc == AccKind::Aligned) {
      // 4a. The accumulator and the group's products times the block scales are aligned to the exponent E of
      //     the largest; each keeps the bits of weight 2^(E - bits + 1) and above (truncated or rounded to
      //     nearest even); their sum, exact, is the new accumulator.
      std::vector<Val> addends = {acc};
      for (const auto& x : p) addends.push_back(mul(x, block_scale));
      bool finite = true;
      for (const auto& x : addends) finite = finite && x.is_finite();
      if (!finite) {
        Val s;
        for (const auto& x : addends) s = add(s, x);
        acc = s;
      } else {
        std::optional<int> e;
        for (const auto& x : addends)
          if (!x.v.is_zero()) e = std::max(e.value_or(x.v.ilog2()), x.v.ilog2());
        Rational s;
        if (e) {
          const int quantum = *e - m.aligned_bits + 1;
          CastOptions o;
          o.rounding = m.align_rounding == AlignRounding::Truncate ? Rounding::TowardZero : Rounding::NearestEven;
          for (const auto& x : addends) {
            const CastResult units = exact::round_exact(int32, x.v.ldexp(-quantum), o);
            s = s + exact::code_value(int32, units.code).ldexp(quantum);
          }
        }
        acc = Val::finite(s);
      }
    } else {
      // 4b. The group's sum: exact, or in the sum format in the model's order (one product: itself).
      Val g;
      if (!m.sum) {
        for (const auto& x : p) g = add(g, x);
      } else if (m.order == SumOrder::Sequential) {
        g = p[0];
        for (std::size_t t = 1; t < p.size(); ++t) g = round_to(*m.sum, m.rounding, add(g, p[t]));
      } else {
        std::vector<Val> level = p;
        while (level.size() > 1) {
          std::vector<Val> next;
          for (std::size_t t = 0; t < level.size(); t += 2)
            next.push_back(t + 1 < level.size() ? round_to(*m.sum, m.rounding, add(level[t], level[t + 1])) : level[t]);
          level = next;
        }
        g = level[0];
      }
      // 5. Times the block scales (scale=block), added to the accumulator: exactly or rounded to its format.
      const Val t = mul(g, block_scale);
      acc = m.acc == AccKind::Exact ? add(acc, t) : round_to(*m.acc_format, m.rounding, add(acc, t));
    }
    k = end;
    // 6. Promotion: every `promote` elements and after the last, the accumulator goes into an FP32 one.
    if (m.promote > 0 && (k % m.promote == 0 || k == depth)) {
      outer = round_to(fp32, Rounding::NearestEven, add(outer, acc));
      acc = Val();
    }
  }
  // 7. The tensor scales multiply the result, which is rounded once to the output format.
  const Val result = m.promote > 0 ? outer : acc;
  return to_double(round_to(out, Rounding::NearestEven, mul(result, r(a.tensor_scale) * r(b.tensor_scale))));
}

}  // namespace mxlab::gemm
