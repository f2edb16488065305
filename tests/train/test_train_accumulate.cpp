// Checks the trainer's GEMMs under an accumulation model against the gemm module's scalar definition
// (docs/gemm.md) on the real block operands of the reference quantizer, and a hand-worked product.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include "layers.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/train/trainer.hpp"

using namespace mxlab;
using namespace mxlab::train;
using detail::Mat;

namespace {

const Format& float32() {
  static const Format f = *parse_format("float32");
  return f;
}

BlockFormat format_of(const char* name) { return **role_format(name); }

std::vector<double> doubles(const Mat<float>& m) { return {m.data(), m.data() + m.size()}; }

/// C = A B^T under the model by the scalar definition, A (rows x depth) and Bt quantized with f along their rows
/// by the reference quantizer (gemm::quantize_operand).
std::vector<double> scalar_product(const gemm::Model& model, const BlockFormat& f, const std::vector<double>& a,
                                   std::int64_t m, const std::vector<double>& bt, std::int64_t n, std::int64_t depth) {
  auto qa = gemm::quantize_operand(f, a, m, depth);
  auto qb = gemm::quantize_operand(f, bt, n, depth);
  REQUIRE(qa);
  REQUIRE(qb);
  auto c = gemm::model_gemm(model, *qa, *qb, float32(), 1, nullptr, true);
  REQUIRE(c);
  return c->values;
}

}  // namespace

TEST_CASE("a quantized GEMM under tensorcore-trunc14: a hand-worked product drops the bits below its window",
          "[train][accumulate]") {
  // One MX block of 32: x = (256, 1, ..., 1), w = (256, 2^-3, ..., 2^-3), both MXFP8 E4M3 with block scale 1 (amax
  // 256 = 2^8, E4M3's emax 8). Products 2^16 and 31 of 2^-3: exact sum 65539.875. The aligned adder keeps 14 bits
  // below 2^16's leading bit, multiples of 2^(16 - 14 + 1) = 8: each 2^-3 is truncated to 0, C = 65536.
  const auto model = *gemm::parse_model("tensorcore-trunc14");
  detail::LayerFormats formats;
  for (auto& q : formats.by_role) q = std::make_shared<const ops::FakeQuantizer>(format_of("mxfp8_e4m3"));
  detail::QGemm<float> g;
  g.name = "fc";
  g.formats = &formats;
  Mat<float> x = Mat<float>::Ones(1, 32), w = Mat<float>::Constant(1, 32, 0.125F);
  x(0, 0) = 256;
  w(0, 0) = 256;
  detail::QuantContext ctx;
  ctx.training = false;
  const Mat<float> plain = g.forward(x, w, ctx);
  CHECK(plain(0, 0) == 65539.875F);  // Eigen's float32 product: every partial sum is a float32
  ctx.accumulate = &model;
  const Mat<float> y = g.forward(x, w, ctx);
  CHECK(y(0, 0) == 65536.0F);
  CHECK(doubles(y) == scalar_product(model, format_of("mxfp8_e4m3"), doubles(x), 1, doubles(w), 1, 32));
}

TEST_CASE("QGemm's forward, dX and dW under an accumulation model are gemm's scalar definition on the block operands",
          "[train][accumulate]") {
  // M = 32 rows (one MX block along the batch for dW), K = 64, N = 32 (one block along N for dX).
  const std::int64_t m = 32, k = 64, n = 32;
  Rng rng(11);
  auto normal = [&](std::int64_t r, std::int64_t c) {
    Mat<float> v(r, c);
    // Uniform in [-2, 2): entries of many binades, so that products fall below a narrow accumulator's window.
    for (std::int64_t i = 0; i < v.size(); ++i) v.data()[i] = static_cast<float>(4 * rng.uniform() - 2);
    return v;
  };
  const Mat<float> x = normal(m, k), w = normal(n, k), dy = normal(m, n);
  for (const char* name : {"tensorcore-trunc14", "fp32-seq", "acc=aligned:8,group=32,scale=product", "ocp-dot-fp32"}) {
    INFO(name);
    const auto model = *gemm::parse_model(name);
    const BlockFormat f = format_of("mxfp8_e4m3");
    detail::LayerFormats formats;
    for (auto& q : formats.by_role) q = std::make_shared<const ops::FakeQuantizer>(f);
    detail::QGemm<float> g;
    g.name = "fc";
    g.formats = &formats;
    detail::QuantContext ctx;
    ctx.accumulate = &model;
    const Mat<float> y = g.forward(x, w, ctx);
    Mat<float> dx, dw;
    g.backward(dy, x, w, &dx, &dw, ctx);
    const Mat<float> xt = x.transpose(), wt = w.transpose(), dyt = dy.transpose();
    CHECK(doubles(y) == scalar_product(model, f, doubles(x), m, doubles(w), n, k));
    CHECK(doubles(dx) == scalar_product(model, f, doubles(dy), m, doubles(wt), k, n));
    CHECK(doubles(dw) == scalar_product(model, f, doubles(dyt), n, doubles(xt), k, m));
    // The model acts: the float32 products of the same quantized operands differ somewhere.
    detail::QuantContext plain;
    const Mat<float> y0 = g.forward(x, w, plain);
    Mat<float> dx0, dw0;
    g.backward(dy, x, w, &dx0, &dw0, plain);
    if (std::string(name) == "acc=aligned:8,group=32,scale=product" || std::string(name) == "tensorcore-trunc14") {
      CHECK(y != y0);
      CHECK(dx != dx0);
      CHECK(dw != dw0);
    }
  }
}

TEST_CASE("training with an accumulation model runs, and its losses differ from float32 products", "[train][accumulate]") {
  TrainData d;
  d.name = "synthetic";
  d.rows = d.cols = 8;
  d.classes = 4;
  Rng rng(5);
  for (ImageSplit* s : {&d.train, &d.validation, &d.test}) {
    for (int i = 0; i < 64; ++i) {
      for (int j = 0; j < 64; ++j) s->x.push_back(static_cast<float>((i % 4) == j % 4) + 0.25F * static_cast<float>(rng.uniform()));
      s->labels.push_back(i % 4);
    }
  }
  TrainOptions o;
  o.model.hidden = {32};
  o.steps = 6;
  o.batch = 32;
  o.optimizer.lr = 3e-3;
  o.eval_every = 0;
  o.recipe = *recipe_preset("mxfp8");
  auto base = run_training(d, o);
  REQUIRE(base);
  o.recipe.accumulate = "acc=aligned:6,group=32,scale=product";
  auto narrow = run_training(d, o);
  REQUIRE(narrow);
  REQUIRE(narrow->losses.size() == base->losses.size());
  for (double l : narrow->losses) CHECK(std::isfinite(l));
  // The first step's loss is the forward pass of the same weights: the narrow accumulator changes it.
  CHECK(narrow->losses.front() != base->losses.front());
  o.recipe.accumulate = "bogus";
  auto bad = run_training(d, o);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("accumulate: model 'bogus'"));
}
