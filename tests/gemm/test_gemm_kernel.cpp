// Checks the SIMD kernel of the accumulation models (mxlab/kernels/gemm_kernel.hpp) against the scalar definition
// (model_dot, exact_dot), bit for bit, on every compiled target and for 1 and 3 threads: every preset and models
// that use every rounding mode, format and order, on random and adversarial operands of the catalogue's block
// formats. Entries the kernel hands back (special values, lanes beyond its exact range) are counted, so a test
// whose operands never reach the kernel fails.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <atomic>
#include <limits>
#include <map>

#include "mxlab/core/random.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/kernels/simd_target.hpp"

using namespace mxlab;
using namespace mxlab::gemm;

namespace {

bool same_bits(double x, double y) {
  return (std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, sizeof x) == 0;
}

std::vector<double> random_values(Rng& rng, std::size_t n, int kind) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double u = (static_cast<double>(rng.next_u32()) + 0.5) / 4294967296.0;
    const double w = (static_cast<double>(rng.next_u32()) + 0.5) / 4294967296.0;
    double x = std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * w);
    if (kind == 1) x = std::ldexp(x, static_cast<int>(rng.next_u32() % 41) - 20);
    if (kind == 2 && rng.next_u32() % 16 == 0) x *= 1000;
    v[i] = static_cast<double>(static_cast<float>(x));
  }
  return v;
}

/// Operands of kind 3..6: adversarial. 3: B's rows are A's rows with the signs of their second halves flipped
/// (cancellation to zero); 4: magnitudes at float32's ends in the same dot product; 5: a NaN in one row of A and an
/// infinity in one row of B; 6: values that overflow a float32 accumulator.
std::vector<double> adversarial(Rng& rng, std::size_t rows, std::size_t depth, int kind, bool second) {
  std::vector<double> v = random_values(rng, rows * depth, 0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t k = 0; k < depth; ++k) {
      double& x = v[r * depth + k];
      if (kind == 3) x = (second && k >= depth / 2 ? -1 : 1) * std::ldexp(1.0 + static_cast<double>((k % (depth / 2)) % 7) / 8, static_cast<int>(k % 5));
      if (kind == 4) x = (k / 32) % 2 == 0 ? 3.0e38 * (k % 3 == 0 ? -1 : 1) : 1.0e-38 * static_cast<double>(k % 5);
      if (kind == 6) x = (k % 2 ? 1 : -1) * 3.0e19 * (1 + static_cast<double>(k % 3));
    }
  if (kind == 5) v[(second ? 2 : 1) * depth + 7] = second ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  return v;
}

const std::vector<std::string>& models() {
  static const std::vector<std::string> list = [] {
    std::vector<std::string> m;
    for (const auto& p : model_presets()) m.push_back(p.name);
    for (const char* extra :
         {"safe-mac,product=e4m5b14", "product=bf16,group=8,order=sequential,sum=bf16,acc=fp16",
          "product=fp16,group=16,sum=fp16,scale=product,acc=bf16,round=zero", "acc=aligned:10:nearest,group=8,promote=40",
          "group=3,sum=e3m4,acc=aligned:12,sum=exact", "ocp-dot-fp32,promote=64",
          "product=e4m3,group=4,sum=e5m2,acc=e5m7,round=nearest-away", "group=5,order=sequential,sum=e4m7b12,scale=product,acc=fp32,promote=16",
          "group=4,sum=e4m3,acc=bf16,round=odd", "product=e5m2,acc=fp16,round=up", "group=8,sum=fp16,acc=exact,round=down",
          "group=6,sum=e3m2,order=sequential,acc=fp32,round=nearest-zero", "scale=product,acc=exact",
          "product=e4m3,group=block,acc=exact", "acc=aligned:3,group=1", "acc=aligned:24:nearest,scale=product,promote=96", "exact,promote=48",
          "group=8,scale=product,acc=exact,promote=40"})
      m.emplace_back(extra);
    return m;
  }();
  return list;
}

}  // namespace

TEST_CASE("the GEMM kernel equals the scalar definition bit for bit on every target", "[gemm][kernel]") {
  const std::int64_t rows = 4, cols = 11, depth = 200;  // a partial last panel, a partial last block of 32
  const Format out = *parse_format("float32");
  Rng rng(2026);
  std::int64_t compared = 0, kernel_entries = 0, redone = 0;
  for (const char* spec : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp4", "nvfp4", "mxsf", "mxint8", "mxfp6_e2m3", "mxfp4@16", "e4m3:float32"}) {
    auto f = parse_block_format(spec);
    REQUIRE(f.ok());
    for (int kind = 0; kind < 7; ++kind) {
      const auto xa = kind < 3 ? random_values(rng, static_cast<std::size_t>(rows * depth), kind)
                               : adversarial(rng, static_cast<std::size_t>(rows), static_cast<std::size_t>(depth), kind, false);
      const auto xb = kind < 3 ? random_values(rng, static_cast<std::size_t>(cols * depth), (kind + 1) % 3)
                               : adversarial(rng, static_cast<std::size_t>(cols), static_cast<std::size_t>(depth), kind, true);
      auto a = quantize_operand(*f, xa, rows, depth);
      auto b = quantize_operand(*f, xb, cols, depth);
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      // The scalar definition, once per model.
      std::vector<Matrix> want;
      std::vector<bool> runs;
      for (const auto& text : models()) {
        auto m = parse_model(text);
        REQUIRE(m.ok());
        runs.push_back(!check_model_operands(*m, *a, *b));
        want.push_back(runs.back() ? *model_gemm(*m, *a, *b, out, 1, nullptr, true) : Matrix{});
      }
      Matrix exact_want{rows, cols, {}}, exact_double_want{rows, cols, {}};
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
          const ExactDot d = exact_dot(*a, i, *b, j);
          exact_want.values.push_back(round_once(d, out));
          exact_double_want.values.push_back(d.special == Special::None ? d.sum.to_double()
                                             : d.special == Special::Nan ? std::numeric_limits<double>::quiet_NaN()
                                             : d.special == Special::PosInf ? std::numeric_limits<double>::infinity()
                                                                            : -std::numeric_limits<double>::infinity());
        }
      for (const SimdTarget& t : simd_targets()) {
        const ScopedSimdTarget forced(t);
        for (unsigned threads : {1U, 3U}) {
          INFO(spec << " kind " << kind << " target " << t.name << " threads " << threads);
          for (std::size_t mi = 0; mi < models().size(); ++mi) {
            if (!runs[mi]) continue;
            INFO(models()[mi]);
            GemmPath path;
            auto c = model_gemm(*parse_model(models()[mi]), *a, *b, out, threads, &path);
            REQUIRE(c.ok());
            CHECK(path.why_scalar.empty());
            for (std::size_t at = 0; at < c->values.size(); ++at) {
              CHECK(same_bits(c->values[at], want[mi].values[at]));
              ++compared;
            }
            kernel_entries += path.kernel;
            redone += path.scalar;
          }
          GemmPath path;
          auto e = exact_gemm(*a, *b, out, threads, &path);
          REQUIRE(e.ok());
          const Matrix ed = exact_gemm_double(*a, *b, threads);
          for (std::size_t at = 0; at < e->values.size(); ++at) {
            CHECK(same_bits(e->values[at], exact_want.values[at]));
            CHECK(same_bits(ed.values[at], exact_double_want.values[at]));
            compared += 2;
          }
          CHECK(path.why_scalar.empty());
          kernel_entries += path.kernel;
        }
      }
    }
  }
  // Most entries run on the kernel; the adversarial ones (special values, float32 overflow) also reach the
  // scalar definition.
  CHECK(kernel_entries > compared / 2);
  CHECK(redone > 0);
}

TEST_CASE("the GEMM kernel's reasons to run the scalar definition", "[gemm][kernel]") {
  Rng rng(7);
  const Format out = *parse_format("float32");
  const auto x = random_values(rng, 4 * 64, 0);
  auto f = parse_block_format("mxfp8_e4m3");
  auto a = quantize_operand(*f, x, 4, 64);
  REQUIRE(a.ok());
  // Sum and product formats of 11 exponent bits (bias 1030: normals down to 2^-1029, below the powers of two the
  // kernel forms) stay scalar, with the same bits.
  for (const char* text : {"group=4,sum=e11m4b1030", "product=e11m4b1030,acc=fp32"}) {
    INFO(text);
    auto m = parse_model(text);
    REQUIRE(m.ok());
    GemmPath path;
    auto c = model_gemm(*m, *a, *a, out, 2, &path);
    REQUIRE(c.ok());
    CHECK(!path.why_scalar.empty());
    CHECK(path.kernel == 0);
    CHECK(path.scalar == 16);
    auto s = model_gemm(*m, *a, *a, out, 1, nullptr, true);
    for (std::size_t at = 0; at < c->values.size(); ++at) CHECK(same_bits(c->values[at], s->values[at]));
  }
}

TEST_CASE("a GEMM reports its progress in entries of C and stops when cancelled", "[gemm][kernel]") {
  Rng rng(12);
  GemmRequest r;
  r.format_a = r.format_b = *parse_block_format("mxfp8_e4m3");
  r.models = {*parse_model("ocp-dot-fp32"), *parse_model("group=4,sum=e11m4b1030")};  // the kernel, and the scalar code
  r.m = 24, r.k = 128, r.n = 20;
  r.a = random_values(rng, 24 * 128, 0);
  r.b = random_values(rng, 128 * 20, 0);
  r.threads = 3;
  std::map<std::string, std::int64_t> last;
  bool monotone = true;
  r.reporter.on_progress = [&](const Progress& p) {
    monotone = monotone && p.done >= last[p.stage] && p.done <= p.total && p.total == 24 * 20;
    last[p.stage] = p.done;
  };
  auto whole = run(r);
  REQUIRE(whole.ok());
  CHECK(monotone);
  REQUIRE(last.size() == 4);  // the two exact products and the two models
  for (const auto& [stage, done] : last) {
    INFO(stage);
    CHECK(done == 24 * 20);
  }
  // Cancelled at the first report of any stage, or before anything runs: the request ends with "cancelled".
  std::atomic<bool> stop{false};
  r.reporter.cancel = &stop;
  r.reporter.on_progress = [&](const Progress&) { stop = true; };
  auto cut = run(r);
  REQUIRE(!cut.ok());
  CHECK(cut.error().message == "cancelled");
  r.reporter.on_progress = nullptr;
  auto before = run(r);
  REQUIRE(!before.ok());
  CHECK(before.error().message == "cancelled");
}
