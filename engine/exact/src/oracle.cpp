// The oracle: the exact value of every code read from the format's columns, the exact value set
// (sorted table up to 16 bits, the binade formula above) and the steps of docs/casting.md applied to
// it. Written from the documentation; nothing here calls Format::decode or the reference cast.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "exact_detail.hpp"

namespace mxlab::exact {
namespace {

using detail::Exact;
using detail::Mag;

std::uint32_t low_mask(int bits) { return bits >= 32 ? 0xFFFFFFFFU : (std::uint32_t{1} << bits) - 1; }

/// A code as the columns define it: NaN, inf, or the finite value (-1)^negative * mant * 2^exp.
struct CodeRead {
  enum class Kind : std::uint8_t { Finite, Nan, Inf } kind = Kind::Finite;
  bool negative = false;
  std::uint64_t mant = 0;
  int exp = 0;
  bool subnormal = false;
  bool unused = false;
};

/// Sign, significand and exponent of a finite double, exactly (binary64: biased exponent 0 holds the
/// subnormals m * 2^-1074).
void decompose(double v, bool& negative, std::uint64_t& mant, int& exp) {
  const auto bits = std::bit_cast<std::uint64_t>(v);
  negative = (bits >> 63) != 0;
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  const std::uint64_t frac = bits & ((std::uint64_t{1} << 52) - 1);
  if (biased == 0) {
    mant = frac;
    exp = -1074;
  } else {
    mant = frac | (std::uint64_t{1} << 52);
    exp = biased - 1075;
  }
}

CodeRead read_code(const FormatSpec& s, std::uint32_t code) {
  CodeRead r;
  switch (s.kind) {
    case FormatKind::Float: {
      // [sign] exponent field e, mantissa field m (formats.md; IEEE 754 3.4).
      const int eb = s.exponent_bits;
      const int mb = s.mantissa_bits;
      r.negative = s.is_signed && ((code >> (eb + mb)) & 1U) != 0;
      const std::uint32_t e = (code >> mb) & low_mask(eb);
      const std::uint32_t m = code & low_mask(mb);
      const bool e_ones = e == low_mask(eb);
      // The specials column says where NaN and inf live; they are read on the primary fields.
      if (s.specials == Specials::Ieee && e_ones) {
        r.kind = m == 0 ? CodeRead::Kind::Inf : CodeRead::Kind::Nan;
        return r;
      }
      if (s.specials == Specials::AllOnesNan && e_ones && m == low_mask(mb)) {
        r.kind = CodeRead::Kind::Nan;
        return r;
      }
      if (s.specials == Specials::NegZeroNan && r.negative && e == 0 && m == 0) {
        r.kind = CodeRead::Kind::Nan;
        return r;
      }
      if (e == 0 && s.sub_exponent_bits > 0) {
        // MX-SAFE: field 0 re-read as a float with its own exponent, mantissa and bias, with IEEE
        // subnormals at its exponent field 0 (docs/casting.md, "Formats with special readings").
        const int sm_bits = s.sub_mantissa_bits;
        const std::uint32_t se = m >> sm_bits;
        const std::uint32_t sm = m & low_mask(sm_bits);
        if (se == 0) {
          r.mant = sm;
          r.exp = 1 - s.sub_bias - sm_bits;
          r.subnormal = sm != 0;
        } else {
          r.mant = (std::uint64_t{1} << sm_bits) | sm;
          r.exp = static_cast<int>(se) - s.sub_bias - sm_bits;
        }
      } else if (e == 0 && s.subnormals) {
        r.mant = m;  // 0.m * 2^(1 - bias)
        r.exp = 1 - s.bias - mb;
        r.subnormal = m != 0;
      } else {
        r.mant = (std::uint64_t{1} << mb) | m;  // 1.m * 2^(e - bias); without subnormals e = 0 is normal too
        r.exp = static_cast<int>(e) - s.bias - mb;
      }
      return r;
    }
    case FormatKind::Integer: {
      // Two's complement (or unsigned) k, value k * 2^-frac_bits.
      const int n = s.int_bits;
      auto k = static_cast<std::int64_t>(code);
      if (s.is_signed && ((code >> (n - 1)) & 1U) != 0) k -= std::int64_t{1} << n;
      r.negative = k < 0;
      r.mant = static_cast<std::uint64_t>(k < 0 ? -k : k);
      r.exp = -s.frac_bits;
      r.unused = s.is_signed && s.symmetric && k == -(std::int64_t{1} << (n - 1));
      return r;
    }
    case FormatKind::Codebook:
      decompose(s.codebook[code], r.negative, r.mant, r.exp);
      return r;
  }
  return r;
}

Exact exact_of(const CodeRead& r) {
  Exact x;
  x.negative = r.negative;
  x.mag = detail::mag_from_u64(r.mant, r.exp);
  return x;
}

/// Compares a * 2^ea with b * 2^eb exactly (a, b < 2^64).
int compare_dyadic(std::uint64_t a, int ea, std::uint64_t b, int eb) {
  if (a == 0 || b == 0) return a == b ? 0 : (a == 0 ? -1 : 1);
  const int la = 64 - std::countl_zero(a);
  const int lb = 64 - std::countl_zero(b);
  const long pa = static_cast<long>(ea) + la;
  const long pb = static_cast<long>(eb) + lb;
  if (pa != pb) return pa < pb ? -1 : 1;
  const std::uint64_t na = a << (64 - la);
  const std::uint64_t nb = b << (64 - lb);
  return na < nb ? -1 : (na > nb ? 1 : 0);
}

Rat pow2_rat(int e) { return e >= 0 ? Rat(Int(1) << e) : Rat(Int(1), Int(1) << -e); }

/// A value of the table: its magnitude on the common integer scale, sign, code and class.
struct Entry {
  Int mag;                  // |value| * 2^S, an even integer
  std::uint64_t mag64 = 0;  // the same when the table is small (every entry below 2^60)
  bool negative = false;
  std::uint32_t code = 0;
  bool zero = false;
  bool subnormal = false;
  bool beyond = false;  // a continued-grid point, not a value
  bool odd = false;
  int sign = 0;      // -1, 0, +1
  double value = 0;  // the same value as a double (format values are doubles)
};

/// An input on the table's scale: x * 2^S = sign * (n + f), 0 <= f < 1, frac == (f != 0). N is
/// std::uint64_t for tables whose scaled values stay below 2^60, cpp_int otherwise.
template <class N>
struct Key {
  int sign = 0;
  N n{};
  bool frac = false;
};

template <class N>
int compare_key(const Key<N>& x, const Entry& e) {
  const int se = e.sign;
  if (x.sign != se) return x.sign < se ? -1 : 1;
  if (x.sign == 0) return 0;
  const N* mag = nullptr;
  if constexpr (std::is_same_v<N, Int>) {
    mag = &e.mag;
  } else {
    mag = &e.mag64;
  }
  int c = 0;
  if (x.n < *mag) {
    c = -1;
  } else if (x.n > *mag) {
    c = 1;
  } else {
    c = x.frac ? 1 : 0;
  }
  return x.sign > 0 ? c : -c;
}

/// m * 2^s = n + f for a 64-bit significand: n, whether f != 0, f against 1/2, floor(f * 2^32).
struct SmallSplit {
  std::uint64_t n = 0;
  bool frac = false;
  int half = -1;
  std::uint64_t t32 = 0;
};

/// A nonzero exact magnitude: an odd 64-bit significand with an exponent (every double input, kept
/// in machine integers so the common case needs no multiprecision work), or a general Mag.
class MagRef {
 public:
  MagRef(std::uint64_t m, int e) : m_(m), e_(e) {}
  explicit MagRef(const Mag& g) : general_(&g) {}

  int ilog2() const { return general_ ? detail::ilog2(*general_) : e_ + 63 - std::countl_zero(m_); }

  /// Requires n < 2^64 (callers scale so that it is).
  SmallSplit split64(int s, bool with_t32) const {
    SmallSplit r;
    if (general_) {
      const detail::Split sp = detail::split(*general_, s);
      r.n = sp.n.convert_to<std::uint64_t>();
      r.frac = sp.frac;
      r.half = sp.half;
      if (with_t32) r.t32 = detail::fraction_t32(*general_, s);
      return r;
    }
    const long k = static_cast<long>(e_) + s;
    if (k >= 0) {
      r.n = m_ << k;
      return r;
    }
    // m is odd: any shifted-out bit leaves f != 0, and f == 1/2 only when just the last bit goes.
    const unsigned long sh = static_cast<unsigned long>(-k);
    r.frac = true;
    r.n = sh >= 64 ? 0 : m_ >> sh;
    r.half = sh - 1 >= 64 || ((m_ >> (sh - 1)) & 1U) == 0 ? -1 : (sh == 1 ? 0 : 1);
    if (with_t32) {
      if (sh >= 32) {
        r.t32 = sh - 32 >= 64 ? 0 : (m_ >> (sh - 32)) & 0xFFFFFFFFU;
      } else {
        r.t32 = (m_ & ((std::uint64_t{1} << sh) - 1)) << (32 - sh);
      }
    }
    return r;
  }

  /// Any size of n.
  detail::Split split_any(int s) const {
    if (general_) return detail::split(*general_, s);
    return detail::split(detail::mag_from_u64(m_, e_), s);
  }

  Exact exact(bool negative) const {
    Exact x;
    x.negative = negative;
    x.mag = general_ ? *general_ : detail::mag_from_u64(m_, e_);
    return x;
  }

 private:
  const Mag* general_ = nullptr;
  std::uint64_t m_ = 0;
  int e_ = 0;
};

Placement::Neighbour neighbour_of(const Entry& e) {
  Placement::Neighbour n;
  n.code = e.code;
  n.odd = e.odd;
  n.beyond = e.beyond;
  n.zero = e.zero;
  n.subnormal = e.subnormal;
  return n;
}

/// Rounding seen on magnitudes: the directed modes become toward or away from zero by the sign.
enum class Toward : std::uint8_t { NearestEven, NearestAway, NearestZero, Zero, Away, Odd, Stochastic };

Toward magnitude_rule(Rounding r, bool negative) {
  switch (r) {
    case Rounding::NearestEven: return Toward::NearestEven;
    case Rounding::NearestAway: return Toward::NearestAway;
    case Rounding::NearestZero: return Toward::NearestZero;
    case Rounding::TowardZero: return Toward::Zero;
    case Rounding::Up: return negative ? Toward::Zero : Toward::Away;
    case Rounding::Down: return negative ? Toward::Away : Toward::Zero;
    case Rounding::Odd: return Toward::Odd;
    case Rounding::Stochastic: return Toward::Stochastic;
  }
  return Toward::NearestEven;
}

}  // namespace

struct Oracle::Impl {
  Format format;
  Path path = Path::Table;
  bool codebook = false;
  bool negatives = false;  // negative inputs are rounded (signed formats and codebooks), not invalid
  // Canonical codes (docs/casting.md steps 1, 3, 5, 7).
  bool has_zero = false;
  bool has_nan = false;
  bool has_inf = false;
  std::uint32_t zero_code[2] = {0, 0};
  std::uint32_t nan_code[2] = {0, 0};
  std::uint32_t inf_code[2] = {0, 0};
  std::uint32_t max_code = 0;     // largest value
  std::uint32_t lowest_code = 0;  // smallest value (most negative, or the smallest of an unsigned format)
  Exact max_value;
  Exact continued;  // first continued-grid point above max (codebooks: max itself)
  // Table path.
  int scale = 0;  // S: every entry times 2^S is an even integer
  int top = 0;    // every entry's magnitude is below 2^top
  bool small_table = false;  // entries and inputs fit std::uint64_t on the table's scale
  std::vector<Entry> table;  // values and continued points, ascending
  std::vector<Value> values;
  // Grid path, floats: max = nmax * 2^qmax.
  int mant_bits = 0;
  int bias = 0;
  int emin = 0;  // exponent of the smallest normal binade
  bool subnormals = true;
  std::uint64_t nmax = 0;
  int qmax = 0;
  // Grid path, integers.
  int frac_bits = 0;
  int int_bits = 0;
  std::uint64_t limit[2] = {0, 0};  // largest magnitude on the positive, negative side
  Placement zero_place[2];  // of +0 and -0, for flush-input

  /// x is null for zero.
  Placement place_mag(bool negative, const MagRef* x, bool with_fraction) const;
  void place_table(bool negative, const MagRef* x, bool with_fraction, Placement& p) const;
  template <class N>
  std::pair<const Entry*, const Entry*> locate(const Key<N>& key, bool huge, bool negative, Placement& p) const;
  void place_grid_float(bool negative, const MagRef* x, bool with_fraction, Placement& p) const;
  void place_grid_integer(bool negative, const MagRef* x, bool with_fraction, Placement& p) const;
  Placement::Neighbour float_neighbour(std::uint64_t n, int q, bool negative) const;
  Placement::Neighbour zero_neighbour(bool negative) const;
};

namespace {

void build_canonical_codes(Oracle::Impl& m) {
  const FormatSpec& s = m.format.spec();
  if (s.kind == FormatKind::Float) {
    const int em = s.exponent_bits + s.mantissa_bits;
    const std::uint32_t sign_bit = s.is_signed ? std::uint32_t{1} << em : 0;
    const std::uint32_t e_field = low_mask(s.exponent_bits) << s.mantissa_bits;
    // Zeros: the code with every field 0, and its negative (absent where fnuz puts NaN there).
    const CodeRead pz = read_code(s, 0);
    m.has_zero = pz.kind == CodeRead::Kind::Finite && pz.mant == 0;
    m.zero_code[0] = m.zero_code[1] = 0;
    if (s.is_signed) {
      const CodeRead nz = read_code(s, sign_bit);
      if (nz.kind == CodeRead::Kind::Finite && nz.mant == 0) m.zero_code[1] = sign_bit;
    }
    // Canonical NaN (step 1): IEEE all-ones exponent with mantissa 10...0; fn the all-ones code;
    // fnuz the negative-zero code.
    for (int neg = 0; neg < 2; ++neg) {
      const std::uint32_t sign = neg ? sign_bit : 0;
      std::uint32_t c = 0;
      switch (s.specials) {
        case Specials::Ieee:
          c = s.mantissa_bits > 0 ? (sign | e_field | (std::uint32_t{1} << (s.mantissa_bits - 1))) : 0;
          m.inf_code[neg] = sign | e_field;
          m.has_inf = true;
          break;
        case Specials::AllOnesNan: c = sign | low_mask(em); break;
        case Specials::NegZeroNan: c = std::uint32_t{1} << em; break;
        case Specials::None: break;
      }
      m.nan_code[neg] = c;
    }
    m.has_nan = s.specials != Specials::None && read_code(s, m.nan_code[0]).kind == CodeRead::Kind::Nan;
    if (!m.has_nan) m.nan_code[0] = m.nan_code[1] = 0;
  } else if (s.kind == FormatKind::Integer) {
    m.has_zero = true;
  } else {
    bool found[2] = {false, false};
    for (std::uint32_t c = 0; c < s.codebook.size(); ++c) {
      const CodeRead r = read_code(s, c);
      if (r.mant != 0 || found[r.negative]) continue;
      found[r.negative] = true;
      m.zero_code[r.negative] = c;
    }
    m.has_zero = found[0] || found[1];
    // Where only one zero exists, both signs get it.
    if (found[0] && !found[1]) m.zero_code[1] = m.zero_code[0];
    if (found[1] && !found[0]) m.zero_code[0] = m.zero_code[1];
  }
}

Exact exact_from_rat_value(const Rat& v) { return detail::exact_from_rat(v, false); }

void build_table(Oracle::Impl& m) {
  const FormatSpec& s = m.format.spec();
  const std::uint64_t count = m.format.code_count();
  struct Item {
    Exact x;
    CodeRead r;
    std::uint32_t code;
  };
  std::vector<Item> items;
  items.reserve(count);
  for (std::uint64_t c = 0; c < count; ++c) {
    const auto code = static_cast<std::uint32_t>(c);
    const CodeRead r = read_code(s, code);
    if (r.kind != CodeRead::Kind::Finite || r.unused) continue;
    items.push_back({exact_of(r), r, code});
  }
  // Sort by signed value, -0 before +0, comparing exactly on a common power-of-two scale.
  int min_exp = std::numeric_limits<int>::max();
  for (const Item& it : items)
    if (!it.x.mag.is_zero()) min_exp = std::min(min_exp, it.x.mag.exp2);
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    const int sa = a.r.mant == 0 ? 0 : (a.r.negative ? -1 : 1);
    const int sb = b.r.mant == 0 ? 0 : (b.r.negative ? -1 : 1);
    if (sa != sb) return sa < sb;
    if (sa == 0) return a.r.negative && !b.r.negative;
    const int c = compare_dyadic(a.r.mant, a.r.exp, b.r.mant, b.r.exp);
    return sa > 0 ? c < 0 : c > 0;
  });
  if (items.empty()) throw std::invalid_argument("format '" + m.format.name() + "' has no finite value");

  // Extremes, and the continued grid beyond them (docs/casting.md, "The value set").
  const Item& hi_item = items.back();
  const Item& lo_item = items.front();
  m.max_code = hi_item.code;
  m.lowest_code = lo_item.code;
  m.max_value = hi_item.x;
  const Rat max_r = detail::to_rat(hi_item.x);
  const Rat lowest_r = detail::to_rat(lo_item.x);
  bool has_lower_continued = false;
  Rat lower_continued;
  if (s.kind == FormatKind::Float) {
    const int emax = detail::ilog2(hi_item.x.mag);
    m.continued = exact_from_rat_value(max_r + pow2_rat(emax - s.mantissa_bits));
    if (s.is_signed) {
      has_lower_continued = true;
      lower_continued = -detail::to_rat(m.continued);
    }
  } else if (s.kind == FormatKind::Integer) {
    m.continued = exact_from_rat_value(max_r + pow2_rat(-s.frac_bits));
    if (s.is_signed) {
      has_lower_continued = true;
      lower_continued = lowest_r - pow2_rat(-s.frac_bits);
    }
  } else {
    m.continued = hi_item.x;
  }
  Exact lower_exact;
  if (has_lower_continued) lower_exact = detail::exact_from_rat(lower_continued, false);
  if (!m.codebook) {
    min_exp = std::min(min_exp, m.continued.mag.exp2);
    if (has_lower_continued) min_exp = std::min(min_exp, lower_exact.mag.exp2);
  }
  if (min_exp == std::numeric_limits<int>::max()) min_exp = 0;  // only zeros
  m.scale = 1 - min_exp;

  auto scaled = [&](const Mag& mag) -> Int {
    if (mag.is_zero()) return Int(0);
    return mag.num << (mag.exp2 + m.scale);
  };
  m.table.reserve(items.size() + 2);
  m.values.reserve(items.size());
  auto continued_entry = [&](const Exact& x, const Entry& next_to) {
    Entry e;
    e.mag = scaled(x.mag);
    e.negative = x.negative;
    e.beyond = true;
    e.sign = x.negative ? -1 : 1;
    e.odd = !next_to.odd;  // the code sequence continues past the end code
    e.value = detail::to_rat(x).convert_to<double>();
    return e;
  };
  std::vector<Entry> real;
  real.reserve(items.size());
  for (const Item& it : items) {
    Entry e;
    e.mag = scaled(it.x.mag);
    e.negative = it.x.negative;
    e.code = it.code;
    e.zero = it.x.mag.is_zero();
    e.sign = e.zero ? 0 : (e.negative ? -1 : 1);
    e.subnormal = it.r.subnormal;
    e.odd = (it.code & 1U) != 0;
    e.value = std::ldexp(static_cast<double>(it.r.mant), it.r.exp);
    if (it.r.negative) e.value = -e.value;
    real.push_back(std::move(e));
    m.values.push_back({detail::to_rational(it.x), it.code});
  }
  if (has_lower_continued) m.table.push_back(continued_entry(lower_exact, real.front()));
  for (Entry& e : real) m.table.push_back(std::move(e));
  if (!m.codebook) m.table.push_back(continued_entry(m.continued, m.table.back()));

  int top = 0;
  for (const Entry& e : m.table)
    if (!e.mag.is_zero()) top = std::max(top, static_cast<int>(mp::msb(e.mag)) - m.scale + 2);
  m.top = top;
  // Scaled inputs below 2^top and entries then stay below 2^60: machine integers suffice.
  m.small_table = static_cast<long>(top) + m.scale <= 60;
  if (m.small_table)
    for (Entry& e : m.table) e.mag64 = e.mag.convert_to<std::uint64_t>();
}

void build_grid(Oracle::Impl& m) {
  const FormatSpec& s = m.format.spec();
  if (s.kind == FormatKind::Float) {
    m.mant_bits = s.mantissa_bits;
    m.bias = s.bias;
    m.subnormals = s.subnormals;
    m.emin = s.subnormals ? 1 - s.bias : -s.bias;
    // The largest finite code is the highest positive code that reads as a number: positive codes
    // of a float without a re-read field increase with their value. Specials sit at the top of the
    // all-ones binade (a few codes) or fill it (IEEE): after a few special codes, skip to the top of
    // the binade below.
    const int em = s.exponent_bits + s.mantissa_bits;
    std::uint32_t c = low_mask(em);
    for (int tried = 0; read_code(s, c).kind != CodeRead::Kind::Finite; ++tried) {
      const std::uint32_t field = c >> s.mantissa_bits;
      if (c == 0) throw std::invalid_argument("format '" + m.format.name() + "' has no finite value");
      if (tried >= 4 && field > 0) {
        c = ((field - 1) << s.mantissa_bits) | low_mask(s.mantissa_bits);
        tried = 0;
      } else {
        --c;
      }
    }
    const CodeRead r = read_code(s, c);
    m.max_code = c;
    m.nmax = r.mant;
    m.qmax = r.exp;
    m.lowest_code = s.is_signed ? (c | (std::uint32_t{1} << em)) : 0;
    m.max_value = exact_of(r);
    const int emax = detail::ilog2(m.max_value.mag);
    m.continued = exact_from_rat_value(detail::to_rat(m.max_value) + pow2_rat(emax - s.mantissa_bits));
  } else {
    const int n = s.int_bits;
    m.frac_bits = s.frac_bits;
    m.int_bits = n;
    const std::uint32_t mask = low_mask(n);
    if (s.is_signed) {
      m.limit[0] = (std::uint64_t{1} << (n - 1)) - 1;
      m.limit[1] = s.symmetric ? m.limit[0] : (std::uint64_t{1} << (n - 1));
      m.max_code = static_cast<std::uint32_t>(m.limit[0]);
      m.lowest_code = static_cast<std::uint32_t>((std::uint64_t{1} << n) - m.limit[1]) & mask;
    } else {
      m.limit[0] = (std::uint64_t{1} << n) - 1;
      m.limit[1] = 0;
      m.max_code = mask;
      m.lowest_code = 0;
    }
    m.max_value.mag = detail::mag_from_u64(m.limit[0], -s.frac_bits);
    m.continued.mag = detail::mag_from_u64(m.limit[0] + 1, -s.frac_bits);
  }
}

}  // namespace

Placement::Neighbour Oracle::Impl::zero_neighbour(bool negative) const {
  Placement::Neighbour z;
  z.code = zero_code[negative ? 1 : 0];
  z.zero = true;
  z.odd = (z.code & 1U) != 0;
  return z;
}

Placement::Neighbour Oracle::Impl::float_neighbour(std::uint64_t n, int q, bool negative) const {
  if (n == 0) return zero_neighbour(negative);
  Placement::Neighbour nb;
  if (compare_dyadic(n, q, nmax, qmax) > 0) {
    nb.beyond = true;
    nb.odd = (max_code & 1U) == 0;
    return nb;
  }
  const FormatSpec& s = format.spec();
  if (n == (std::uint64_t{2} << mant_bits)) {  // 2^(M+1) * 2^q is 1.0 of the next binade
    n >>= 1;
    ++q;
  }
  const int em = s.exponent_bits + s.mantissa_bits;
  const std::uint32_t sign = (negative && s.is_signed) ? std::uint32_t{1} << em : 0;
  std::uint32_t code = 0;
  if (n < (std::uint64_t{1} << mant_bits)) {  // below 1.0 * 2^emin: exponent field 0
    code = sign | static_cast<std::uint32_t>(n);
    nb.subnormal = true;
  } else {
    const auto field = static_cast<std::uint32_t>(q + mant_bits + bias);
    code = sign | (field << mant_bits) | static_cast<std::uint32_t>(n - (std::uint64_t{1} << mant_bits));
  }
  nb.code = code;
  nb.odd = (code & 1U) != 0;
  return nb;
}

void Oracle::Impl::place_grid_float(bool neg, const MagRef* x, bool with_fraction, Placement& p) const {
  if (!x) {
    if (has_zero) {
      p.exact = true;
      p.tz = zero_neighbour(neg);
    } else {
      p.below_smallest = true;
      p.tz = float_neighbour(std::uint64_t{1} << mant_bits, emin - mant_bits, neg);
    }
    return;
  }
  const int e = x->ilog2();
  if (!subnormals && e < emin) {  // below the smallest value of a format without zero
    p.below_smallest = true;
    p.tz = float_neighbour(std::uint64_t{1} << mant_bits, emin - mant_bits, neg);
    return;
  }
  // The grid quantum of the binade of |x| (of the subnormal range below 2^emin).
  const int q = std::max(e, emin) - mant_bits;
  const SmallSplit sp = x->split64(-q, with_fraction);  // n < 2^(M+1)
  p.tz = float_neighbour(sp.n, q, neg);
  p.az = float_neighbour(sp.n + 1, q, neg);
  p.exact = !sp.frac && !p.tz.beyond;
  p.half = sp.half;
  p.t32 = sp.t32;
  p.has_fraction = with_fraction;
}

void Oracle::Impl::place_grid_integer(bool neg, const MagRef* x, bool with_fraction, Placement& p) const {
  if (!x) {
    p.exact = true;
    p.tz = zero_neighbour(neg);
    return;
  }
  const std::uint64_t lim = limit[neg ? 1 : 0];
  const std::uint32_t mask = low_mask(int_bits);
  auto neighbour = [&](std::uint64_t n) {
    Placement::Neighbour nb;
    if (n == 0) return zero_neighbour(neg);
    nb.beyond = n > lim;
    nb.odd = (n & 1U) != 0;  // two's complement: -k has the last bit of k
    if (!nb.beyond) {
      nb.code = neg ? static_cast<std::uint32_t>(((std::uint64_t{1} << int_bits) - n) & mask)
                    : static_cast<std::uint32_t>(n);
    }
    return nb;
  };
  if (x->ilog2() + frac_bits >= int_bits + 1) {  // |x| * 2^frac >= 2^(bits+1): past every limit
    p.tz = neighbour(std::uint64_t{3} << int_bits);
    p.az = p.tz;
    return;
  }
  const SmallSplit sp = x->split64(frac_bits, with_fraction);  // n < 2^(bits+1)
  p.tz = neighbour(sp.n);
  p.az = neighbour(sp.n + 1);
  p.exact = !sp.frac && !p.tz.beyond;
  p.half = sp.half;
  p.t32 = sp.t32;
  p.has_fraction = with_fraction;
}

/// Finds the entries around the key and fills the placement; returns the neighbours toward and away
/// from zero when x lies strictly between two entries, else nulls.
template <class N>
std::pair<const Entry*, const Entry*> Oracle::Impl::locate(const Key<N>& key, bool huge, bool neg,
                                                           Placement& p) const {
  // idx: the number of entries <= x.
  std::size_t idx = 0;
  if (huge) {
    idx = neg ? 0 : table.size();
  } else {
    const auto it = std::partition_point(table.begin(), table.end(),
                                         [&](const Entry& e) { return compare_key(key, e) >= 0; });
    idx = static_cast<std::size_t>(it - table.begin());
  }
  if (!huge && idx > 0 && compare_key(key, table[idx - 1]) == 0) {
    const Entry& e = table[idx - 1];
    p.tz = neighbour_of(e);
    p.az = p.tz;
    p.exact = !e.beyond;  // at a continued point: beyond like everything past it
    return {nullptr, nullptr};
  }
  if (idx == 0 || idx == table.size()) {  // past an end of the table
    const Entry& end = idx == 0 ? table.front() : table.back();
    p.tz = neighbour_of(end);
    p.az = p.tz;
    if (codebook) {
      p.clamp = true;
    } else if (!end.beyond) {  // below the smallest value of a format without zero
      p.below_smallest = true;
    }
    return {nullptr, nullptr};
  }
  // The neighbour toward zero is the lower one for positive x; +0 counts as positive, -0 as negative
  // (codebooks without zero).
  const Entry& tz = neg ? table[idx] : table[idx - 1];
  const Entry& az = neg ? table[idx - 1] : table[idx];
  p.tz = neighbour_of(tz);
  p.az = neighbour_of(az);
  // |x - tz| * 2^S = |xs - tzs| + f and the entries are even, so comparing 2|xs - tzs| with the gap
  // decides unless they are equal, where f breaks the tie.
  int cmp = 0;
  if constexpr (std::is_same_v<N, Int>) {
    const Int xs = key.sign < 0 ? Int(-key.n) : key.n;
    const Int tzs = tz.negative ? Int(-tz.mag) : tz.mag;
    const Int azs = az.negative ? Int(-az.mag) : az.mag;
    const Int gap = mp::abs(azs - tzs);
    const Int twice = mp::abs(xs - tzs) << 1;
    cmp = twice < gap ? -1 : (twice > gap ? 1 : 0);
  } else {
    // Every magnitude is below 2^60, so these differences fit in 64 bits.
    auto signed_of = [](bool negative, std::uint64_t v) {
      return negative ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
    };
    const std::int64_t xs = signed_of(key.sign < 0, key.n);
    const std::int64_t tzs = signed_of(tz.negative, tz.mag64);
    const std::int64_t azs = signed_of(az.negative, az.mag64);
    const auto gap = static_cast<std::uint64_t>(azs > tzs ? azs - tzs : tzs - azs);
    const auto twice = static_cast<std::uint64_t>(xs > tzs ? xs - tzs : tzs - xs) << 1;
    cmp = twice < gap ? -1 : (twice > gap ? 1 : 0);
  }
  p.half = cmp != 0 ? cmp : (key.frac ? 1 : 0);
  return {&tz, &az};
}

void Oracle::Impl::place_table(bool neg, const MagRef* x, bool with_fraction, Placement& p) const {
  if (!x && has_zero) {
    p.exact = true;
    p.tz = zero_neighbour(neg);
    return;
  }
  const int sign = x ? (neg ? -1 : 1) : 0;
  const bool huge = x && x->ilog2() >= top;
  std::pair<const Entry*, const Entry*> around{nullptr, nullptr};
  if (small_table) {
    Key<std::uint64_t> key;
    key.sign = sign;
    if (x && !huge) {
      const SmallSplit sp = x->split64(scale, false);
      key.n = sp.n;
      key.frac = sp.frac;
    }
    around = locate(key, huge, neg, p);
  } else {
    Key<Int> key;
    key.sign = sign;
    if (x && !huge) {
      detail::Split sp = x->split_any(scale);
      key.n = std::move(sp.n);
      key.frac = sp.frac;
    }
    around = locate(key, huge, neg, p);
  }
  if (!around.first || !with_fraction) return;
  const Entry* tz = around.first;
  const Entry& az = *around.second;
  p.has_fraction = true;
  const Rat xr = x ? detail::to_rat(x->exact(neg)) : Rat(0);
  if (codebook) {
    // docs/casting.md step 6: in codebooks d = |x - tz| / |az - tz| is computed in double.
    const Rat tz_r = detail::to_rat(detail::exact_from_double(tz->value));
    const Rat az_r = detail::to_rat(detail::exact_from_double(az.value));
    const double num =
        std::fabs(detail::round_binary(detail::exact_from_rat(xr - tz_r, false), 52, -1022, 1023, nullptr));
    const double den =
        std::fabs(detail::round_binary(detail::exact_from_rat(az_r - tz_r, false), 52, -1022, 1023, nullptr));
    p.t32 = static_cast<std::uint64_t>(std::ldexp(num / den, 32));
  } else {
    // d exactly: |x * 2^S - tz * 2^S| / |az * 2^S - tz * 2^S|.
    const Int tzs = tz->negative ? Int(-tz->mag) : tz->mag;
    const Int azs = az.negative ? Int(-az.mag) : az.mag;
    const Int gap = mp::abs(azs - tzs);
    const Rat y = mp::abs(Rat(xr * pow2_rat(scale)) - Rat(tzs));
    const Int t = (mp::numerator(y) << 32) / (mp::denominator(y) * gap);
    p.t32 = t.convert_to<std::uint64_t>();
  }
}

Placement Oracle::Impl::place_mag(bool neg, const MagRef* x, bool with_fraction) const {
  Placement p;
  p.kind = Placement::Kind::Finite;
  p.negative = neg;
  p.zero = x == nullptr;
  if (x) {
    // Smallest normal exponents of the source types (docs/casting.md step 4): f64 -1022, f32 -126,
    // f16 -14, bf16 -126.
    const int e = x->ilog2();
    p.below_source_normal[static_cast<std::size_t>(SourceType::F64)] = e < -1022;
    p.below_source_normal[static_cast<std::size_t>(SourceType::F32)] = e < -126;
    p.below_source_normal[static_cast<std::size_t>(SourceType::F16)] = e < -14;
    p.below_source_normal[static_cast<std::size_t>(SourceType::BF16)] = e < -126;
  }
  if (neg && x && !negatives) return p;  // step 2 decides; no neighbours needed
  if (path == Path::Table) {
    place_table(neg, x, with_fraction, p);
  } else if (format.kind() == FormatKind::Float) {
    place_grid_float(neg, x, with_fraction, p);
  } else {
    place_grid_integer(neg, x, with_fraction, p);
  }
  return p;
}

Oracle::Oracle(const Format& f, Path path) {
  auto m = std::make_shared<Impl>();
  m->format = f;
  const FormatSpec& s = f.spec();
  const bool can_table = f.bits() <= 16;
  const bool can_grid = (s.kind == FormatKind::Float && s.sub_exponent_bits == 0) || s.kind == FormatKind::Integer;
  if (path == Path::Auto) path = can_table ? Path::Table : Path::Grid;
  if (path == Path::Table && !can_table)
    throw std::invalid_argument("format '" + f.name() + "': the value table needs at most 16 bits");
  if (path == Path::Grid && !can_grid)
    throw std::invalid_argument("format '" + f.name() + "': no grid formula (codebook or re-read exponent field)");
  m->path = path;
  m->codebook = s.kind == FormatKind::Codebook;
  m->negatives = s.is_signed || m->codebook;
  build_canonical_codes(*m);
  if (path == Path::Table) {
    build_table(*m);
  } else {
    build_grid(*m);
  }
  for (int neg = 0; neg < 2; ++neg) {
    m->zero_place[neg] = m->place_mag(neg != 0, nullptr, true);
  }
  impl_ = std::move(m);
}

const Format& Oracle::format() const { return impl_->format; }
Oracle::Path Oracle::path() const { return impl_->path; }
const std::vector<Oracle::Value>& Oracle::values() const { return impl_->values; }

Oracle::Properties Oracle::properties() const {
  const Impl& m = *impl_;
  if (m.path != Path::Table) throw std::logic_error("Oracle::properties needs the table path");
  Properties pr;
  pr.finite_count = m.values.size();
  pr.lowest = m.values.front().value;
  pr.max_finite = m.values.back().value;
  bool have_pos = false;
  bool have_normal = false;
  Rational largest_mag;
  for (std::size_t i = 0; i < m.values.size(); ++i) {
    const Rational& v = m.values[i].value;
    const Rational a = v.abs();
    if (a > largest_mag) largest_mag = a;
    if (v.is_zero() || v.negative()) continue;
    if (!have_pos) {
      pr.min_positive = v;
      have_pos = true;
    }
    const CodeRead r = read_code(m.format.spec(), m.values[i].code);
    if (!have_normal && !r.subnormal) {
      pr.min_normal = v;
      have_normal = true;
    }
  }
  // emax: the binade of the largest value (formats.md); a codebook's of its largest magnitude.
  const Rational& top = m.codebook ? largest_mag : pr.max_finite;
  pr.emax = (top.is_zero() || top.negative()) ? 0 : top.ilog2();
  return pr;
}

std::uint32_t Oracle::nan_code(bool negative) const {
  if (!impl_->has_nan) throw std::logic_error("format '" + impl_->format.name() + "' has no NaN");
  return impl_->nan_code[negative ? 1 : 0];
}
Rational Oracle::max_value() const { return detail::to_rational(impl_->max_value); }
Rational Oracle::continued_point() const { return detail::to_rational(impl_->continued); }

Placement Oracle::place(const Number& x, bool with_fraction) const {
  if (x.kind != Number::Kind::Finite) {
    Placement p;
    p.kind = x.kind == Number::Kind::Nan ? Placement::Kind::Nan : Placement::Kind::Inf;
    p.negative = x.negative();
    return p;
  }
  const Exact e = detail::exact_of(x.value);
  if (e.mag.is_zero()) return impl_->place_mag(e.negative, nullptr, with_fraction);
  const MagRef mag(e.mag);
  return impl_->place_mag(e.negative, &mag, with_fraction);
}

Placement Oracle::place(double x, bool with_fraction) const {
  if (std::isnan(x) || std::isinf(x)) {
    Placement p;
    p.kind = std::isnan(x) ? Placement::Kind::Nan : Placement::Kind::Inf;
    p.negative = std::signbit(x);
    return p;
  }
  bool negative = false;
  std::uint64_t m = 0;
  int e = 0;
  decompose(x, negative, m, e);
  if (m == 0) return impl_->place_mag(negative, nullptr, with_fraction);
  const int tz = std::countr_zero(m);  // an odd significand, as MagRef expects
  const MagRef mag(m >> tz, e + tz);
  return impl_->place_mag(negative, &mag, with_fraction);
}

CastResult Oracle::round(const Placement& p, const CastOptions& opt, std::uint32_t random) const {
  const Impl& m = *impl_;
  CastOptions o = opt;
  // The default policy: inf for formats with infinity (IEEE 754), saturate otherwise (OCP MX 6.3).
  if (o.overflow == Overflow::Default) o.overflow = m.has_inf ? Overflow::Inf : Overflow::Saturate;
  if ((o.overflow == Overflow::Inf && !m.has_inf) || (o.overflow == Overflow::Nan && !m.has_nan))
    throw std::invalid_argument("overflow policy needs a special value the format lacks");
  const bool neg = p.negative;
  const int sgn = neg ? 1 : 0;
  const bool flush_in = o.subnormals == SubnormalMode::FlushInput || o.subnormals == SubnormalMode::Flush;
  const bool flush_out = o.subnormals == SubnormalMode::FlushOutput || o.subnormals == SubnormalMode::Flush;
  CastResult r;
  // 1. NaN: the canonical NaN of the input's sign; without NaN, +0 (or the lowest value of a format
  // without zero) and `invalid`.
  if (p.kind == Placement::Kind::Nan) {
    if (m.has_nan) {
      r.code = m.nan_code[sgn];
    } else {
      r.code = m.has_zero ? m.zero_code[0] : m.lowest_code;
      r.invalid = true;
    }
    return r;
  }
  // 2. A negative input to an unsigned format.
  if (!m.negatives && neg && !p.zero) {
    r.invalid = true;
    r.inexact = true;
    r.code = o.overflow == Overflow::Nan ? m.nan_code[0] : m.lowest_code;
    return r;
  }
  const Toward rule = magnitude_rule(o.rounding, neg);
  // IEEE 754 7.4: which modes carry an overflow to the special value.
  const bool to_special = rule == Toward::NearestEven || rule == Toward::NearestAway ||
                          rule == Toward::NearestZero || rule == Toward::Stochastic || rule == Toward::Away;
  auto overflow_code = [&]() {
    if (o.overflow == Overflow::Saturate || !to_special) return neg ? m.lowest_code : m.max_code;
    return o.overflow == Overflow::Inf ? m.inf_code[sgn] : m.nan_code[sgn];
  };
  // 3. Infinite input.
  if (p.kind == Placement::Kind::Inf) {
    if (o.overflow == Overflow::Inf) {
      r.code = m.inf_code[sgn];
    } else {
      r.overflow = true;
      r.inexact = true;
      r.code = o.overflow == Overflow::Nan ? m.nan_code[sgn] : (neg ? m.lowest_code : m.max_code);
    }
    return r;
  }
  // 4. Flush input: read as a zero of its sign.
  if (flush_in && !p.zero && p.below_source_normal[static_cast<std::size_t>(o.source)]) {
    r = round(m.zero_place[sgn], o, random);
    r.underflow = true;
    r.inexact = true;
    return r;
  }
  // 5. Exact values (step 9 still flushes a subnormal result).
  if (p.exact) {
    r.code = p.tz.code;
    if (flush_out && p.tz.subnormal) {
      r.code = m.zero_code[sgn];
      r.underflow = true;
      r.inexact = true;
    }
    return r;
  }
  if (p.below_smallest) {
    r.code = p.tz.code;
    r.inexact = true;
    return r;
  }
  // 7. Codebooks clamp to their end value under every mode.
  if (p.clamp) {
    r.code = p.tz.code;
    r.overflow = true;
    r.inexact = true;
    return r;
  }
  // 6. Rounding between the neighbour toward zero and the one away from zero.
  bool away = false;
  switch (rule) {
    case Toward::NearestEven: away = p.half > 0 || (p.half == 0 && p.tz.odd && !p.az.odd); break;
    case Toward::NearestAway: away = p.half >= 0; break;
    case Toward::NearestZero: away = p.half > 0; break;
    case Toward::Zero: away = false; break;
    case Toward::Away: away = true; break;
    case Toward::Odd: away = !p.tz.odd && p.az.odd; break;
    case Toward::Stochastic: {
      if (p.tz.beyond) break;  // at or past the continued point both neighbours overflow: nothing to draw
      if (!p.has_fraction) throw std::logic_error("stochastic rounding needs a placement made with_fraction");
      const int bits = o.random_bits;
      const std::uint64_t t = p.t32 >> (32 - bits);
      const std::uint64_t rr = static_cast<std::uint64_t>(random) >> (32 - bits);
      away = t + rr >= (std::uint64_t{1} << bits);
      break;
    }
  }
  const Placement::Neighbour& c = away ? p.az : p.tz;
  r.inexact = true;
  // 7. Overflow.
  if (c.beyond) {
    r.overflow = true;
    r.code = overflow_code();
    return r;
  }
  // 8. Zero results.
  if (c.zero) {
    r.code = m.zero_code[sgn];
    r.underflow = true;
    return r;
  }
  // 9. Flush output.
  if (flush_out && c.subnormal) {
    r.code = m.zero_code[sgn];
    r.underflow = true;
    return r;
  }
  r.code = c.code;
  return r;
}

CastResult Oracle::round(const Number& x, const CastOptions& o, std::uint32_t random) const {
  return round(place(x, o.rounding == Rounding::Stochastic), o, random);
}

CodeInfo code_info(const Format& f, std::uint32_t code) {
  const CodeRead r = read_code(f.spec(), code);
  CodeInfo info;
  switch (r.kind) {
    case CodeRead::Kind::Nan:
      info.number.kind = Number::Kind::Nan;
      info.number.nan_negative = r.negative;
      break;
    case CodeRead::Kind::Inf: info.number.kind = r.negative ? Number::Kind::NegInf : Number::Kind::PosInf; break;
    case CodeRead::Kind::Finite: info.number.value = detail::to_rational(exact_of(r)); break;
  }
  info.subnormal = r.subnormal;
  info.unused = r.unused;
  return info;
}

Rational code_value(const Format& f, std::uint32_t code) {
  CodeInfo info = code_info(f, code);
  if (info.number.kind != Number::Kind::Finite)
    throw std::domain_error("code " + std::to_string(code) + " of format '" + f.name() + "' is not finite");
  return std::move(info.number.value);
}

namespace {

// Oracles built for round_exact(), keyed by everything that defines a format.
std::string format_key(const Format& f) {
  const FormatSpec& s = f.spec();
  std::string k = f.name();
  for (int v : {static_cast<int>(s.kind), static_cast<int>(s.is_signed), s.exponent_bits, s.mantissa_bits, s.bias,
                static_cast<int>(s.specials), static_cast<int>(s.subnormals), s.sub_exponent_bits,
                s.sub_mantissa_bits, s.sub_bias, s.int_bits, s.frac_bits, static_cast<int>(s.symmetric)})
    k += "|" + std::to_string(v);
  for (double v : s.codebook) k += "|" + std::to_string(std::bit_cast<std::uint64_t>(v));
  return k;
}

Oracle cached_oracle(const Format& f) {
  static std::mutex mutex;
  static std::unordered_map<std::string, Oracle> cache;
  const std::string key = format_key(f);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  Oracle o(f);
  const std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 64) cache.clear();
  cache.emplace(key, o);
  return o;
}

}  // namespace

CastResult round_exact(const Format& f, const Rational& x, const CastOptions& o) {
  return round_exact(f, Number::finite(x), o, 0);
}

CastResult round_exact(const Format& f, const Number& x, const CastOptions& o, std::uint32_t random) {
  return cached_oracle(f).round(x, o, random);
}

}  // namespace mxlab::exact
