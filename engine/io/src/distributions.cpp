// Seeded distributions with fixed algorithms, spec parsing and canonical spec text.
#include "mxlab/io/distributions.hpp"

#include "mxlab/core/memory.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>

#include "mxlab/core/random.hpp"
#include "mxlab/core/text.hpp"

namespace mxlab {
namespace {

// ---- Sampling. The order of draws from the Rng is part of the definition of every distribution.

class Sampler {
 public:
  explicit Sampler(std::uint64_t seed) : rng_(seed) {}

  /// U uniform on [0, 1): the top 53 bits of one Rng word times 2^-53 (Rng::uniform).
  double uniform() { return rng_.uniform(); }

  /// One Rng word.
  std::uint64_t word() { return rng_.next_u64(); }

  /// Uniform integer in [0, n), n >= 1, without modulo bias: words below 2^64 mod n are redrawn,
  /// leaving a range whose size is a multiple of n.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    for (;;) {
      const std::uint64_t r = rng_.next_u64();
      if (r >= threshold) return r % n;
    }
  }

  /// Standard normal by the Marsaglia polar method (Marsaglia and Bray 1964): u = 2U - 1, v = 2U - 1
  /// (u first), redrawn until 0 < s = u^2 + v^2 < 1; then u f and v f with f = sqrt(-2 ln(s) / s) are two
  /// independent normals, returned in that order (the second is kept for the next call).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u = 0.0, v = 0.0, s = 0.0;
    do {
      u = 2.0 * uniform() - 1.0;
      v = 2.0 * uniform() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double f = std::sqrt(-2.0 * std::log(s) / s);
    spare_ = v * f;
    has_spare_ = true;
    return u * f;
  }

  /// Student's t by Bailey's polar method (R. W. Bailey, Math. Comp. 62 (1994) 779-781): u, v, s as in
  /// normal(); t = u sqrt(dof (s^(-2/dof) - 1) / s). One variate per accepted pair.
  double student_t(double dof) {
    double u = 0.0, v = 0.0, s = 0.0;
    do {
      u = 2.0 * uniform() - 1.0;
      v = 2.0 * uniform() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    return u * std::sqrt(dof * (std::pow(s, -2.0 / dof) - 1.0) / s);
  }

 private:
  Rng rng_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

template <typename Out>
void fill(const Distribution& dist, std::uint64_t seed, Out* out, std::size_t n) {
  Sampler g(seed);
  auto put = [&](std::size_t i, double x) { out[i] = static_cast<Out>(x); };
  if (const auto* d = std::get_if<NormalDist>(&dist)) {
    for (std::size_t i = 0; i < n; ++i) put(i, d->mean + d->stddev * g.normal());
  } else if (const auto* l = std::get_if<LaplaceDist>(&dist)) {
    // One word r: E = -ln(1 - U) with U from its top 53 bits is Exp(1); bit 0 of r is the sign.
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t r = g.word();
      const double e = -std::log(1.0 - static_cast<double>(r >> 11) * 0x1.0p-53);
      put(i, l->loc + l->scale * ((r & 1U) != 0 ? -e : e));
    }
  } else if (const auto* t = std::get_if<StudentTDist>(&dist)) {
    for (std::size_t i = 0; i < n; ++i) put(i, g.student_t(t->dof));
  } else if (const auto* ln = std::get_if<LogNormalDist>(&dist)) {
    // Z first, then (with random_sign) one word whose top bit set means negative.
    for (std::size_t i = 0; i < n; ++i) {
      const double m = std::exp(ln->mu + ln->sigma * g.normal());
      put(i, ln->random_sign && (g.word() >> 63) != 0 ? -m : m);
    }
  } else if (const auto* u = std::get_if<UniformDist>(&dist)) {
    for (std::size_t i = 0; i < n; ++i) put(i, u->lo + (u->hi - u->lo) * g.uniform());
  } else if (const auto* o = std::get_if<OutlierDist>(&dist)) {
    // Z first, then U; U < rate makes the element an outlier.
    for (std::size_t i = 0; i < n; ++i) {
      const double z = g.normal();
      const bool outlier = g.uniform() < o->rate;
      put(i, o->mean + o->stddev * (outlier ? z * o->mag : z));
    }
  } else if (const auto* b = std::get_if<BlockExpDist>(&dist)) {
    // Per block: e = lo + below(hi - lo + 1), then one Z per element, scaled by ldexp (exact unless the
    // result is subnormal or overflows).
    const auto block = static_cast<std::size_t>(b->block);
    const auto span = static_cast<std::uint64_t>(static_cast<std::int64_t>(b->hi) - b->lo + 1);
    for (std::size_t start = 0; start < n; start += block) {
      const int e = b->lo + static_cast<int>(g.below(span));
      const std::size_t end = start + std::min(block, n - start);
      for (std::size_t i = start; i < end; ++i) put(i, std::ldexp(g.normal(), e));
    }
  }
}

// ---- Spec text.

/// A distribution's name and its parameters in positional order.
struct KindInfo {
  std::string_view name;
  std::array<std::string_view, 4> keys;
  std::size_t key_count;
};

constexpr std::array<KindInfo, 7> kKinds = {{
    {"normal", {"mean", "std"}, 2},
    {"laplace", {"loc", "scale"}, 2},
    {"student_t", {"dof"}, 1},
    {"lognormal", {"mu", "sigma", "sign"}, 3},
    {"uniform", {"lo", "hi"}, 2},
    {"outliers", {"rate", "mag", "mean", "std"}, 4},
    {"blockexp", {"block", "lo", "hi"}, 3},
}};

std::string key_list(const KindInfo& k) {
  std::string s;
  for (std::size_t i = 0; i < k.key_count; ++i) s += (i ? ", " : "") + std::string(k.keys[i]);
  return s;
}

class SpecParser {
 public:
  explicit SpecParser(std::string_view text) : text_(text) {}

  Result<Distribution> parse() {
    std::string_view s = text_;
    const auto colon = s.find(':');
    const std::string name = lower_trim(s.substr(0, colon));
    if (name.empty()) return fail(s.find_first_not_of(" \t") == std::string_view::npos ? "empty spec" : "no name");
    const KindInfo* kind = nullptr;
    for (const auto& k : kKinds)
      if (k.name == name) kind = &k;
    if (kind == nullptr) {
      std::string known;
      for (const auto& k : kKinds) known += (known.empty() ? "" : ", ") + std::string(k.name);
      return fail("unknown distribution '" + name + "' (known: " + known + ")");
    }
    kind_ = kind;
    if (colon != std::string_view::npos) {
      if (auto e = parse_args(s.substr(colon + 1))) return *e;
    }
    auto d = build();
    if (!d) return d.error();
    return validate_distribution(*d, text_);
  }

 private:
  Error fail(const std::string& problem) const {
    return make_error("distribution '" + std::string(text_) + "': " + problem);
  }

  std::optional<Error> parse_args(std::string_view args) {
    if (lower_trim(args).empty()) return fail("nothing after ':' (drop the ':' to use the defaults)");
    std::size_t positional = 0;
    bool keyed = false;
    for (std::size_t item = 1;; ++item) {
      const auto comma = args.find(',');
      const std::string_view arg = args.substr(0, comma);
      const auto eq = arg.find('=');
      const std::string value = lower_trim(eq == std::string_view::npos ? arg : arg.substr(eq + 1));
      std::size_t slot = 0;
      if (eq == std::string_view::npos) {
        if (value.empty()) return fail("argument " + std::to_string(item) + " is empty");
        if (keyed) return fail("positional value '" + value + "' follows key=value arguments");
        if (positional >= kind_->key_count)
          return fail("too many values: " + std::string(kind_->name) + " takes at most " +
                      std::to_string(kind_->key_count) + " (" + key_list(*kind_) + ")");
        slot = positional++;
      } else {
        keyed = true;
        const std::string key = lower_trim(arg.substr(0, eq));
        slot = kind_->key_count;
        for (std::size_t i = 0; i < kind_->key_count; ++i)
          if (kind_->keys[i] == key) slot = i;
        if (slot == kind_->key_count)
          return fail("unknown parameter '" + key + "' (" + std::string(kind_->name) + " takes " + key_list(*kind_) +
                      ")");
        if (value.empty()) return fail("no value for '" + key + "'");
      }
      if (values_[slot]) return fail("parameter '" + std::string(kind_->keys[slot]) + "' is given twice");
      values_[slot] = value;
      if (comma == std::string_view::npos) break;
      args.remove_prefix(comma + 1);
    }
    return std::nullopt;
  }

  // The value of parameter `slot` as a number, or `fallback` when it was not given.
  Result<double> number(std::size_t slot, std::optional<double> fallback) const {
    const std::string key(kind_->keys[slot]);
    if (!values_[slot]) {
      if (fallback) return *fallback;
      return fail("parameter '" + key + "' is required (e.g. \"" + std::string(kind_->name) + ":" + key + "=3\")");
    }
    std::string_view v = *values_[slot];
    if (!v.empty() && v.front() == '+') v.remove_prefix(1);
    double x = 0.0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
    if (r.ec == std::errc::result_out_of_range)
      return fail("parameter '" + key + "' value '" + *values_[slot] + "' is beyond the double range");
    if (r.ec != std::errc() || r.ptr != v.data() + v.size())
      return fail("parameter '" + key + "' value '" + *values_[slot] + "' is not a number");
    return x;
  }

  Result<std::int64_t> integer(std::size_t slot, std::int64_t fallback) const {
    auto x = number(slot, static_cast<double>(fallback));
    if (!x) return x.error();
    if (!(std::fabs(*x) < 0x1.0p62) || *x != std::trunc(*x))
      return fail("parameter '" + std::string(kind_->keys[slot]) + "' value '" + *values_[slot] +
                  "' is not an integer");
    return static_cast<std::int64_t>(*x);
  }

  Result<Distribution> build() const {
    // Defaults come from the structs in distributions.hpp.
    const std::string_view name = kind_->name;
    if (name == "normal") {
      NormalDist d;
      auto m = number(0, d.mean), s = number(1, d.stddev);
      if (!m) return m.error();
      if (!s) return s.error();
      return Distribution(NormalDist{*m, *s});
    }
    if (name == "laplace") {
      LaplaceDist d;
      auto m = number(0, d.loc), s = number(1, d.scale);
      if (!m) return m.error();
      if (!s) return s.error();
      return Distribution(LaplaceDist{*m, *s});
    }
    if (name == "student_t") {
      auto dof = number(0, std::nullopt);
      if (!dof) return dof.error();
      return Distribution(StudentTDist{*dof});
    }
    if (name == "lognormal") {
      LogNormalDist d;
      auto m = number(0, d.mu), s = number(1, d.sigma);
      if (!m) return m.error();
      if (!s) return s.error();
      bool random_sign = d.random_sign;
      if (values_[2]) {
        if (*values_[2] == "random") {
          random_sign = true;
        } else if (*values_[2] == "positive") {
          random_sign = false;
        } else {
          return fail("parameter 'sign' value '" + *values_[2] + "' is not 'positive' or 'random'");
        }
      }
      return Distribution(LogNormalDist{*m, *s, random_sign});
    }
    if (name == "uniform") {
      UniformDist d;
      auto lo = number(0, d.lo), hi = number(1, d.hi);
      if (!lo) return lo.error();
      if (!hi) return hi.error();
      return Distribution(UniformDist{*lo, *hi});
    }
    if (name == "outliers") {
      OutlierDist d;
      auto rate = number(0, d.rate), mag = number(1, d.mag), m = number(2, d.mean), s = number(3, d.stddev);
      if (!rate) return rate.error();
      if (!mag) return mag.error();
      if (!m) return m.error();
      if (!s) return s.error();
      return Distribution(OutlierDist{*rate, *mag, *m, *s});
    }
    BlockExpDist d;
    auto block = integer(0, d.block), lo = integer(1, d.lo), hi = integer(2, d.hi);
    if (!block) return block.error();
    if (!lo) return lo.error();
    if (!hi) return hi.error();
    // Exponent range checked here for the narrowing below; validate_distribution checks it again.
    if (*lo < -1074 || *lo > 1023 || *hi < -1074 || *hi > 1023)
      return fail("exponents lo and hi must lie in -1074..1023 (2^e must be a double)");
    return Distribution(BlockExpDist{*block, static_cast<int>(*lo), static_cast<int>(*hi)});
  }

  std::string_view text_;
  const KindInfo* kind_ = nullptr;
  std::array<std::optional<std::string>, 4> values_;
};

bool finite(double x) { return std::isfinite(x); }

}  // namespace

Result<Distribution> validate_distribution(const Distribution& d, std::string_view name) {
  auto fail = [&](const std::string& problem) -> Result<Distribution> {
    return make_error("distribution '" + std::string(name) + "': " + problem);
  };
  if (const auto* n = std::get_if<NormalDist>(&d)) {
    if (!finite(n->mean)) return fail("mean must be finite");
    if (!(finite(n->stddev) && n->stddev > 0)) return fail("std must be positive and finite");
  } else if (const auto* l = std::get_if<LaplaceDist>(&d)) {
    if (!finite(l->loc)) return fail("loc must be finite");
    if (!(finite(l->scale) && l->scale > 0)) return fail("scale must be positive and finite");
  } else if (const auto* t = std::get_if<StudentTDist>(&d)) {
    if (!(finite(t->dof) && t->dof > 0)) return fail("dof must be positive and finite");
  } else if (const auto* ln = std::get_if<LogNormalDist>(&d)) {
    if (!finite(ln->mu)) return fail("mu must be finite");
    if (!(finite(ln->sigma) && ln->sigma > 0)) return fail("sigma must be positive and finite");
  } else if (const auto* u = std::get_if<UniformDist>(&d)) {
    if (!finite(u->lo) || !finite(u->hi)) return fail("lo and hi must be finite");
    if (!(u->lo < u->hi)) return fail("lo must be less than hi");
    if (!finite(u->hi - u->lo)) return fail("hi - lo must be finite");
  } else if (const auto* o = std::get_if<OutlierDist>(&d)) {
    if (!(o->rate >= 0 && o->rate <= 1)) return fail("rate must lie in [0, 1]");
    if (!(finite(o->mag) && o->mag > 0)) return fail("mag must be positive and finite");
    if (!finite(o->mean)) return fail("mean must be finite");
    if (!(finite(o->stddev) && o->stddev > 0)) return fail("std must be positive and finite");
  } else if (const auto* b = std::get_if<BlockExpDist>(&d)) {
    if (b->block < 1) return fail("block must be at least 1");
    if (b->lo < -1074 || b->lo > 1023 || b->hi < -1074 || b->hi > 1023)
      return fail("exponents lo and hi must lie in -1074..1023 (2^e must be a double)");
    if (b->lo > b->hi) return fail("lo must not exceed hi");
  }
  return d;
}

Result<Distribution> parse_distribution(std::string_view text) { return SpecParser(text).parse(); }

std::string distribution_text(const Distribution& d) {
  const auto& f = shortest_decimal;
  if (const auto* n = std::get_if<NormalDist>(&d)) return "normal:mean=" + f(n->mean) + ",std=" + f(n->stddev);
  if (const auto* l = std::get_if<LaplaceDist>(&d)) return "laplace:loc=" + f(l->loc) + ",scale=" + f(l->scale);
  if (const auto* t = std::get_if<StudentTDist>(&d)) return "student_t:dof=" + f(t->dof);
  if (const auto* ln = std::get_if<LogNormalDist>(&d))
    return "lognormal:mu=" + f(ln->mu) + ",sigma=" + f(ln->sigma) +
           ",sign=" + (ln->random_sign ? "random" : "positive");
  if (const auto* u = std::get_if<UniformDist>(&d)) return "uniform:lo=" + f(u->lo) + ",hi=" + f(u->hi);
  if (const auto* o = std::get_if<OutlierDist>(&d))
    return "outliers:rate=" + f(o->rate) + ",mag=" + f(o->mag) + ",mean=" + f(o->mean) + ",std=" + f(o->stddev);
  const auto& b = std::get<BlockExpDist>(d);
  return "blockexp:block=" + std::to_string(b.block) + ",lo=" + std::to_string(b.lo) + ",hi=" + std::to_string(b.hi);
}

Result<std::vector<std::int64_t>> parse_shape(std::string_view text) {
  auto fail = [&](const std::string& problem) -> Result<std::vector<std::int64_t>> {
    return make_error("shape '" + std::string(text) + "': " + problem);
  };
  const std::string s = lower_trim(text);
  if (s.empty()) return fail("empty (write e.g. 1024x1024, 4096 or scalar)");
  if (s == "scalar") return std::vector<std::int64_t>{};
  std::vector<std::int64_t> shape;
  std::string_view rest = s;
  for (std::size_t dim = 1;; ++dim) {
    const auto x = rest.find('x');
    const std::string part = lower_trim(rest.substr(0, x));
    if (part.empty()) return fail("dimension " + std::to_string(dim) + " is empty");
    std::int64_t v = 0;
    const auto r = std::from_chars(part.data(), part.data() + part.size(), v);
    if (r.ec == std::errc::result_out_of_range) return fail("dimension " + std::to_string(dim) + " is too large");
    if (r.ec != std::errc() || r.ptr != part.data() + part.size() || part.front() == '-')
      return fail("dimension " + std::to_string(dim) + " '" + part + "' is not a positive integer");
    if (v < 1) return fail("dimension " + std::to_string(dim) + " is 0; every dimension must be at least 1");
    shape.push_back(v);
    if (x == std::string_view::npos) break;
    rest.remove_prefix(x + 1);
  }
  auto n = shape_elements(shape, "shape '" + std::string(text) + "'");
  if (!n) return n.error();
  return shape;
}

Result<Tensor> generate(const Distribution& d, const std::vector<std::int64_t>& shape, std::uint64_t seed,
                        DType dtype) {
  const std::string spec = distribution_text(d);
  auto valid = validate_distribution(d, spec);
  if (!valid) return valid.error();
  const std::string what = "generate " + spec + " shape " + format_shape(shape);
  if (dtype != DType::F32 && dtype != DType::F64)
    return make_error(what + ": dtype " + std::string(dtype_name(dtype)) +
                      " is not generated; generate f32 or f64 and cast with the formats module");
  auto n = shape_elements(shape, what);
  if (!n) return n.error();
  if (auto e = check_memory(*n, dtype == DType::F64 ? 8 : 4, what)) return *e;
  try {
    if (dtype == DType::F64) {
      std::vector<double> v(*n);
      fill(d, seed, v.data(), v.size());
      return Tensor::from_f64(shape, std::move(v));
    }
    std::vector<float> v(*n);
    fill(d, seed, v.data(), v.size());
    return Tensor::from_f32(shape, std::move(v), DType::F32);
  } catch (const std::bad_alloc&) {
    return make_error(what + ": not enough memory for " + std::to_string(*n) + " values");
  } catch (const std::length_error&) {
    return make_error(what + ": too many values (" + std::to_string(*n) + ")");
  }
}

Result<Tensor> generate(std::string_view spec, std::string_view shape, std::uint64_t seed, DType dtype) {
  auto d = parse_distribution(spec);
  if (!d) return d.error();
  auto s = parse_shape(shape);
  if (!s) return s.error();
  return generate(*d, *s, seed, dtype);
}

}  // namespace mxlab
