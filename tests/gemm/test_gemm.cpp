// Checks the exact GEMM reference against Boost.Multiprecision rational sums (exact::Rational), every accumulation
// model against its rational-arithmetic definition (gemm/definition.hpp), and known answers worked out by hand
// in docs/gemm.md.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "mxlab/core/random.hpp"
#include "mxlab/exact/exact.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/definition.hpp"
#include "mxlab/gemm/gemm.hpp"

using namespace mxlab;
using namespace mxlab::gemm;
using exact::Rational;

namespace {

const Format& fmt(const char* name) {
  static std::map<std::string, Format> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, *parse_format(name)).first;
  return it->second;
}

bool same(double x, double y) { return (std::isnan(x) && std::isnan(y)) || (x == y && std::signbit(x) == std::signbit(y)); }

/// Random values of several kinds: normal, with block-to-block exponent spread, and with outliers.
std::vector<double> random_values(Rng& rng, std::size_t n, int kind) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double u = (static_cast<double>(rng.next_u32()) + 0.5) / 4294967296.0;
    const double w = (static_cast<double>(rng.next_u32()) + 0.5) / 4294967296.0;
    double x = std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * w);  // Box-Muller
    if (kind == 1) x = std::ldexp(x, static_cast<int>(rng.next_u32() % 41) - 20);
    if (kind == 2 && rng.next_u32() % 16 == 0) x *= 1000;
    v[i] = static_cast<double>(static_cast<float>(x));
  }
  return v;
}

/// Two quantized operands of the same block format: A (rows x depth) and B's transpose (cols x depth).
std::pair<Operand, Operand> operands(const char* spec, const std::vector<double>& a, const std::vector<double>& bt,
                                     std::int64_t rows, std::int64_t cols, std::int64_t depth) {
  auto f = parse_block_format(spec);
  REQUIRE(f.ok());
  auto qa = quantize_operand(*f, a, rows, depth);
  auto qb = quantize_operand(*f, bt, cols, depth);
  REQUIRE(qa.ok());
  REQUIRE(qb.ok());
  return {*qa, *qb};
}

/// The rational sum of the rows' exact products.
Rational rational_dot(const Operand& a, std::int64_t i, const Operand& b, std::int64_t j) {
  Rational s;
  for (std::int64_t k = 0; k < a.depth; ++k)
    s = s + Rational::from_double(a.value[a.at(i, k)]) * Rational::from_double(b.value[b.at(j, k)]);
  return s;
}

/// r rounded to nearest-even in f by the rational oracle (zero as +0).
double rounded(const Format& f, const Rational& r) {
  const exact::CodeInfo info = exact::code_info(f, exact::round_exact(f, r, CastOptions{}).code);
  if (info.number.kind == exact::Number::Kind::PosInf) return std::numeric_limits<double>::infinity();
  if (info.number.kind == exact::Number::Kind::NegInf) return -std::numeric_limits<double>::infinity();
  const double v = info.number.value.to_double();
  return v == 0 ? 0.0 : v;
}

/// An operand of given elements and per-block scales (blocks of `block` along each row).
Operand blocked(std::vector<double> elements, std::vector<double> block_scales, std::int64_t rows, std::int64_t block,
                double tensor_scale = 1) {
  Operand op;
  op.format = "hand";
  op.rows = rows;
  op.depth = static_cast<std::int64_t>(elements.size()) / rows;
  op.element = elements;
  op.tensor_scale = tensor_scale;
  for (std::size_t i = 0; i < elements.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i) % op.depth;
    const auto blk = static_cast<std::size_t>(static_cast<std::int64_t>(i) / op.depth * ((op.depth + block - 1) / block) + k / block);
    op.scale.push_back(block_scales[blk]);
    op.block_start.push_back(k % block == 0);
    op.value.push_back(elements[i] * block_scales[blk] * tensor_scale);
  }
  return op;
}

double dot(const char* model, const Operand& a, const Operand& b, const char* out = "float32") {
  auto m = parse_model(model);
  REQUIRE(m.ok());
  REQUIRE(!check_model_operands(*m, a, b));
  const double fast = model_dot(*m, a, 0, b, 0, fmt(out));
  const double def = definition_dot(*m, a, 0, b, 0, fmt(out));
  CHECK(same(fast, def));
  return fast;
}

}  // namespace

TEST_CASE("model strings: presets, settings, errors", "[gemm][model]") {
  for (const auto& p : model_presets()) {
    INFO(p.name);
    auto m = parse_model(p.name);
    REQUIRE(m.ok());
    auto again = parse_model(describe(*m));
    REQUIRE(again.ok());
    CHECK(same_arithmetic(*m, *again));
    auto def = parse_model(p.definition);
    REQUIRE(def.ok());
    CHECK(same_arithmetic(*m, *def));
  }
  auto m = parse_model("tensorcore-trunc14,promote=256");
  REQUIRE(m.ok());
  CHECK(m->promote == 256);
  CHECK(m->aligned_bits == 14);
  CHECK(m->name == "tensorcore-trunc14,promote=256");
  const char* bad[] = {"", "nope", "product=e4m3,exact", "group=0", "acc=aligned:1", "acc=aligned:31", "acc=uint8",
                       "sum=int8", "round=stochastic", "colour=red", "acc=aligned:14,sum=fp16", "product=e9m99",
                       "acc=aligned:14:up", "promote=-1", "exact,,group=4"};
  for (const char* b : bad) {
    INFO(b);
    auto e = parse_model(b);
    REQUIRE(!e.ok());
    CHECK(e.error().message.find("model") != std::string::npos);
  }
}

TEST_CASE("the exact dot product equals the rational sum for every catalogue block format", "[gemm][exact]") {
  Rng rng(3001);
  const std::int64_t rows = 3, cols = 3, depth = 80;  // two full blocks of 32 and a partial one
  for (const auto& name : block_format_names()) {
    for (int kind = 0; kind < 3; ++kind) {
      INFO(name << " kind " << kind);
      const auto a = random_values(rng, static_cast<std::size_t>(rows * depth), kind);
      const auto bt = random_values(rng, static_cast<std::size_t>(cols * depth), kind);
      auto [qa, qb] = operands(name.c_str(), a, bt, rows, cols, depth);
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          const ExactDot d = exact_dot(qa, i, qb, j);
          REQUIRE(d.special == Special::None);
          const Rational r = rational_dot(qa, i, qb, j);
          REQUIRE(exact::from_parts(d.sum.parts()) == r);
          for (const char* out : {"float32", "bf16", "fp16", "e4m3"}) {
            CHECK(same(round_once(d, fmt(out)), rounded(fmt(out), r)));
            CHECK(same(round_once(d, fmt(out)), definition_exact_dot(qa, i, qb, j, fmt(out))));
          }
        }
      }
    }
  }
}

TEST_CASE("the exact dot product on adversarial inputs: cancellation, extremes, zero and NaN blocks", "[gemm][exact]") {
  const std::int64_t depth = 64;
  Rng rng(77);
  for (const char* spec : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp4", "nvfp4", "mxsf", "mxint8", "mxfp6_e3m2"}) {
    INFO(spec);
    // Cancellation: B's row is A's with the sign of its second half flipped and the halves equal.
    std::vector<double> a = random_values(rng, depth, 1);
    for (std::int64_t k = 0; k < depth / 2; ++k) a[static_cast<std::size_t>(k + depth / 2)] = a[static_cast<std::size_t>(k)];
    std::vector<double> b = a;
    for (std::int64_t k = depth / 2; k < depth; ++k) b[static_cast<std::size_t>(k)] = -b[static_cast<std::size_t>(k)];
    auto [qa, qb] = operands(spec, a, b, 1, 1, depth);
    ExactDot d = exact_dot(qa, 0, qb, 0);
    CHECK(d.sum.is_zero());
    CHECK(same(round_once(d, fmt("float32")), 0.0));
    // Extremes: the largest and smallest magnitudes the scales reach, in the same dot product.
    std::vector<double> x(depth), y(depth);
    for (std::int64_t k = 0; k < depth; ++k) {
      x[static_cast<std::size_t>(k)] = k < 32 ? 3.0e38 : 1.0e-38;
      y[static_cast<std::size_t>(k)] = (k % 2 ? -1 : 1) * (k < 32 ? 1.0e-30 : 2.5e37);
    }
    auto [xa, xb] = operands(spec, x, y, 1, 1, depth);
    d = exact_dot(xa, 0, xb, 0);
    REQUIRE(d.special == Special::None);
    CHECK(exact::from_parts(d.sum.parts()) == rational_dot(xa, 0, xb, 0));
    CHECK(same(round_once(d, fmt("float32")), definition_exact_dot(xa, 0, xb, 0, fmt("float32"))));
    // A zero block and a NaN in the other operand's block.
    std::vector<double> z(depth, 0.0), n = random_values(rng, depth, 0);
    for (std::int64_t k = 32; k < depth; ++k) z[static_cast<std::size_t>(k)] = 1.0 + static_cast<double>(k);
    auto [za, zb] = operands(spec, z, n, 1, 1, depth);
    CHECK(same(round_once(exact_dot(za, 0, zb, 0), fmt("float32")), definition_exact_dot(za, 0, zb, 0, fmt("float32"))));
    n[5] = std::numeric_limits<double>::quiet_NaN();
    auto [na, nb] = operands(spec, z, n, 1, 1, depth);
    CHECK(dot_special(na, 0, nb, 0) == Special::Nan);  // block-nan: the NaN's block is NaN, even against zeros
    CHECK(std::isnan(round_once(exact_dot(na, 0, nb, 0), fmt("float32"))));
    CHECK(std::isnan(definition_exact_dot(na, 0, nb, 0, fmt("float32"))));
  }
}

TEST_CASE("infinities: kept by E5M2, infinity times zero and opposite infinities are NaN", "[gemm][exact]") {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> a(32, 1.0), b(32, 1.0);
  a[3] = inf;
  auto [qa, qb] = operands("mxfp8_e5m2", a, b, 1, 1, 32);
  CHECK(dot_special(qa, 0, qb, 0) == Special::PosInf);
  CHECK(round_once(exact_dot(qa, 0, qb, 0), fmt("float32")) == inf);
  CHECK(round_once(exact_dot(qa, 0, qb, 0), fmt("e4m3")) == 448);  // E4M3 has no infinity: saturates
  b[3] = 0;
  auto [za, zb] = operands("mxfp8_e5m2", a, b, 1, 1, 32);
  CHECK(dot_special(za, 0, zb, 0) == Special::Nan);
  b[3] = 1;
  b[4] = -inf;
  auto [oa, ob] = operands("mxfp8_e5m2", a, b, 1, 1, 32);
  CHECK(dot_special(oa, 0, ob, 0) == Special::Nan);
  // E4M3 has no infinity: under block-nan an infinite input makes its block NaN.
  auto [ea, eb] = operands("mxfp8_e4m3", a, b, 1, 1, 32);
  CHECK(dot_special(ea, 0, eb, 0) == Special::Nan);
  for (const auto& p : model_presets()) {
    INFO(p.name);
    auto m = parse_model(p.name);
    CHECK(model_dot(*m, qa, 0, qb, 0, fmt("float32")) == inf);
    CHECK(std::isnan(model_dot(*m, oa, 0, ob, 0, fmt("float32"))));
  }
}

TEST_CASE("known answers: an alignment that drops bits", "[gemm][model]") {
  // Products 8, 0.75, 0.25, 0.125 (exact sum 9.125). Four bits from the leading bit of 8 keep multiples of 1:
  // truncated 8 + 0 + 0 + 0 = 8; rounded to nearest 8 + 1 + 0 + 0 = 9.
  const Operand a = blocked({8, 0.75, 0.25, 0.125}, {1}, 1, 4), b = blocked({1, 1, 1, 1}, {1}, 1, 4);
  CHECK(dot("exact", a, b) == 9.125);
  CHECK(dot("acc=aligned:4:trunc,group=4", a, b) == 8);
  CHECK(dot("acc=aligned:4:nearest,group=4", a, b) == 9);
  CHECK(dot("acc=aligned:6:trunc,group=4", a, b) == 9);     // keeps 2^-2: 8 + 0.75 + 0.25 + 0
  CHECK(dot("acc=aligned:7:trunc,group=4", a, b) == 9.125);  // keeps 2^-3: nothing dropped
  // Two groups of two: the accumulator joins the second group's alignment. 8 + 0.75 -> 8.75 at 2^-2 (6 bits);
  // then 8.75, 0.25, 0.125 aligned to 8: 8.75 + 0.25 + 0 = 9.
  CHECK(dot("acc=aligned:6:trunc,group=2", a, b) == 9);
}

TEST_CASE("known answers: a tie in the tree", "[gemm][model]") {
  // e3m1 holds 2 and 3 but not 2.5: the pairwise sum 2 + 0.5 is a tie.
  const Operand a = blocked({2, 0.5}, {1}, 1, 2), b = blocked({1, 1}, {1}, 1, 2);
  CHECK(dot("exact", a, b) == 2.5);
  CHECK(dot("group=2,sum=e3m1", a, b) == 2);                    // ties to even: 2 = 1.0b x 2^1
  CHECK(dot("group=2,sum=e3m1,round=nearest-away", a, b) == 3);
  CHECK(dot("group=2,sum=e3m1,round=zero", a, b) == 2);
  // Four products 0.5, 0.5, 2, 2.5 in e3m1: pairwise (0.5 + 0.5) + (2 + 2.5 -> 4) = 1 + 4 = 5 -> tie between 4
  // and 6 -> 4; sequential ((0.5 + 0.5) + 2) + 2.5 = 3 + 2.5 = 5.5 -> 6.
  const Operand c = blocked({0.5, 0.5, 2, 2.5}, {1}, 1, 4), d = blocked({1, 1, 1, 1}, {1}, 1, 4);
  CHECK(dot("group=4,sum=e3m1,order=pairwise", c, d) == 4);
  CHECK(dot("group=4,sum=e3m1,order=sequential", c, d) == 6);
}

TEST_CASE("known answers: a promotion boundary", "[gemm][model]") {
  // Products 8, 8, 0.5, 0.5, 1, 1, 0.5, 0.5 (sum 20), groups of 2 in a 4-bit aligned accumulator.
  // Without promotion: 16; then 16 + 0.5 + 0.5 at 2^1 -> 16; 16 + 1 + 1 -> 16; 16 -> 16.
  // Promoting every 4: 16 + 0 (first four) -> FP32 16; then 0 + 1 + 1 = 2; 2 + 0.5 + 0.5 at 2^-2 -> 3; 16 + 3 = 19.
  const Operand a = blocked({8, 8, 0.5, 0.5, 1, 1, 0.5, 0.5}, {1}, 1, 8), b = blocked(std::vector<double>(8, 1.0), {1}, 1, 8);
  CHECK(dot("exact", a, b) == 20);
  CHECK(dot("acc=aligned:4,group=2", a, b) == 16);
  CHECK(dot("acc=aligned:4,group=2,promote=4", a, b) == 19);
  // A promotion interval that cuts a group: groups of 3 end at 3, 4 (promotion), 6 and 8.
  // [8, 8, 0.5] -> 16; [16, 0.5] -> 16 (at 2^1), promoted: 16; [1, 1] -> 2; [2, 0.5, 0.5] -> 3 (at 2^-2); 16 + 3.
  CHECK(dot("acc=aligned:4,group=3,promote=4", a, b) == 19);
  // An FP32 accumulator that overflows at a promotion stays infinite: 3e38 + 3e38 -> inf, then inf + 2 -> inf.
  const Operand big = blocked({3e38, 3e38, 1, 1}, {1}, 1, 4), ones = blocked({1, 1, 1, 1}, {1}, 1, 4);
  CHECK(dot("exact,promote=2", big, ones) == std::numeric_limits<double>::infinity());
  CHECK(dot("ocp-dot-fp32,promote=2", big, ones) == std::numeric_limits<double>::infinity());
}

TEST_CASE("known answers: block scales, FP32 across blocks, tensor scales", "[gemm][model]") {
  // Three blocks whose OCP Dot values are 2^24, 1 and 1: FP32 across blocks loses both ones (ties to even),
  // the exact sum is 2^24 + 2 (a float32).
  const Operand a = blocked({1, 1, 1, 1, 1, 1}, {std::ldexp(1.0, 12), 1, 1}, 1, 2);
  const Operand b = blocked({std::ldexp(1.0, 11), std::ldexp(1.0, 11), 0.5, 0.5, 0.5, 0.5}, {1, 1, 1}, 1, 2);
  CHECK(dot("exact", a, b) == 16777218);
  CHECK(dot("ocp-dot-fp32", a, b) == 16777216);
  CHECK(dot("fp32-seq", a, b) == 16777216);
  // Two-level scales: the tensor scales multiply once at the end.
  const Operand c = blocked({1.5, 3}, {0.75}, 1, 2, 0.1f), d = blocked({2, 4}, {1.25}, 1, 2, 3.0f);
  const double want = static_cast<double>(static_cast<float>((1.5 * 2 + 3 * 4) * 0.75 * 1.25 * static_cast<double>(0.1f) * 3));
  CHECK(dot("exact", c, d) == want);
  CHECK(dot("ocp-dot-fp32", c, d) == want);
}

TEST_CASE("fp32-seq is a sequence of float32 fused multiply-adds", "[gemm][model]") {
  Rng rng(11);
  auto m = parse_model("fp32-seq");
  for (int trial = 0; trial < 20; ++trial) {
    const auto x = random_values(rng, 100, 1), y = random_values(rng, 100, 2);
    const Operand a = plain_operand("float32", x, 1, 100), b = plain_operand("float32", y, 1, 100);
    float acc = 0;
    for (std::size_t k = 0; k < x.size(); ++k) acc = std::fmaf(static_cast<float>(x[k]), static_cast<float>(y[k]), acc);
    CHECK(model_dot(*m, a, 0, b, 0, fmt("float32")) == static_cast<double>(acc));
  }
}

TEST_CASE("every model equals its definition in rational arithmetic on random operands", "[gemm][model]") {
  std::vector<std::string> models;
  for (const auto& p : model_presets()) models.push_back(p.name);
  for (const char* m : {"safe-mac,product=e4m5b14", "product=bf16,group=8,order=sequential,sum=bf16,acc=fp16",
                        "product=fp16,group=16,sum=fp16,scale=product,acc=bf16,round=zero",
                        "acc=aligned:10:nearest,group=8,promote=40", "group=3,sum=e3m4,acc=aligned:12,sum=exact",
                        "ocp-dot-fp32,promote=64", "product=e4m3,group=4,sum=e5m2,acc=e5m7,round=nearest-away",
                        "group=5,order=sequential,sum=e4m7b12,scale=product,acc=fp32,promote=16"})
    models.emplace_back(m);
  Rng rng(424242);
  const std::int64_t rows = 2, cols = 2, depth = 72;
  int checks = 0, rounded_away = 0;
  for (const char* spec : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp4", "nvfp4", "mxsf", "mxint8", "mxfp6_e2m3", "mxfp4@16", "e4m3:float32"}) {
    const auto a = random_values(rng, static_cast<std::size_t>(rows * depth), 2);
    const auto bt = random_values(rng, static_cast<std::size_t>(cols * depth), 1);
    auto [qa, qb] = operands(spec, a, bt, rows, cols, depth);
    for (const auto& text : models) {
      INFO(spec << " " << text);
      auto m = parse_model(text);
      REQUIRE(m.ok());
      REQUIRE(!check_model_operands(*m, qa, qb));
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
          const double c = model_dot(*m, qa, i, qb, j, fmt("float32"));
          CHECK(same(c, definition_dot(*m, qa, i, qb, j, fmt("float32"))));
          rounded_away += c != round_once(exact_dot(qa, i, qb, j), fmt("float32"));
          ++checks;
        }
    }
  }
  // The exact model is the exact reference.
  auto exact_model = parse_model("exact");
  const auto a = random_values(rng, 200, 1), bt = random_values(rng, 200, 1);
  auto [qa, qb] = operands("mxfp8_e5m2", a, bt, 2, 2, 100);
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 2; ++j)
      CHECK(same(model_dot(*exact_model, qa, i, qb, j, fmt("float32")), round_once(exact_dot(qa, i, qb, j), fmt("float32"))));
  CHECK(checks == 504);
  CHECK(rounded_away > checks / 3);  // the models' roundings show in most results
}

TEST_CASE("GEMMs: each entry is its dot product, whatever the thread count", "[gemm]") {
  Rng rng(5);
  const std::int64_t m = 5, n = 4, k = 96;
  const auto a = random_values(rng, static_cast<std::size_t>(m * k), 0), bt = random_values(rng, static_cast<std::size_t>(n * k), 0);
  auto [qa, qb] = operands("mxfp8_e4m3", a, bt, m, n, k);
  auto model = parse_model("tensorcore-trunc14-promote128");
  auto one = model_gemm(*model, qa, qb, fmt("float32"), 1);
  auto two = model_gemm(*model, qa, qb, fmt("float32"), 3);
  auto ex = exact_gemm(qa, qb, fmt("float32"), 2);
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  REQUIRE(ex.ok());
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const auto at = static_cast<std::size_t>(i * n + j);
      CHECK(one->values[at] == model_dot(*model, qa, i, qb, j, fmt("float32")));
      CHECK(two->values[at] == one->values[at]);
      CHECK(ex->values[at] == round_once(exact_dot(qa, i, qb, j), fmt("float32")));
    }
}

TEST_CASE("the GEMM job: the exact model has no error against the exact product", "[gemm]") {
  Rng rng(9);
  GemmRequest r;
  r.format_a = *parse_block_format("mxfp8_e4m3");
  r.format_b = *parse_block_format("mxfp8_e4m3");
  r.models = {*parse_model("exact"), *parse_model("fp32-seq")};
  r.m = 4, r.k = 64, r.n = 3;
  r.a = random_values(rng, 256, 0);
  r.b = random_values(rng, 192, 0);
  auto rep = run(r);
  REQUIRE(rep.ok());
  REQUIRE(rep->models.size() == 2);
  CHECK(rep->models[0].vs_exact.max_rel_error <= std::ldexp(1.0, -24));  // the float32 output rounding only
  CHECK(rep->models[0].vs_exact.count == 12);
  CHECK(rep->exact_vs_fp32.max_rel_error > 0);
  r.k = 65;
  CHECK(!run(r).ok());
}
