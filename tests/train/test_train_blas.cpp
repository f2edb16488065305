// Checks the trainer's float32 products (OpenBLAS SGEMM in pieces, engine/train/src/blas.cpp) against the exact
// product in double within the rounding bound of a float32 dot product (Higham, Accuracy and Stability of
// Numerical Algorithms, 2nd ed., eq. 3.5: |fl(x.y) - x.y| <= gamma_k |x|.|y|), and against its own definition of
// determinism: the same bits for any thread count, also in training steps whose products split into pieces.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "blas.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/train/trainer.hpp"

using namespace mxlab;
using namespace mxlab::train;

TEST_CASE("sgemm: every transposition within the float32 dot-product bound, the same bits on 1, 2 and 3 threads",
          "[train]") {
  struct Shape {
    std::int64_t m, n, k;
  };
  for (const Shape s : {Shape{300, 40, 700}, Shape{24, 260, 900}, Shape{7, 5, 3}, Shape{130, 130, 64}}) {
    const detail::GemmPieces pieces = detail::gemm_pieces(s.m, s.n, s.k);
    CHECK(pieces.count * pieces.step >= (pieces.by_rows ? s.m : s.n));
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        Rng rng(static_cast<std::uint64_t>(s.m * 1000 + s.n) * 4 + (ta ? 2 : 0) + (tb ? 1 : 0));
        std::vector<float> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>(s.k * s.n));
        for (float& v : a) v = static_cast<float>(rng.uniform() * 2 - 1);
        for (float& v : b) v = static_cast<float>(rng.uniform() * 2 - 1);
        // op(A)(i, p) and op(B)(p, j) in the stored layouts.
        const std::int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
        auto at = [&](std::int64_t i, std::int64_t p) { return a[static_cast<std::size_t>(ta ? p * lda + i : i * lda + p)]; };
        auto bt = [&](std::int64_t p, std::int64_t j) { return b[static_cast<std::size_t>(tb ? j * ldb + p : p * ldb + j)]; };
        std::vector<std::vector<float>> c(3, std::vector<float>(static_cast<std::size_t>(s.m * s.n)));
        for (unsigned t = 1; t <= 3; ++t)
          detail::sgemm(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c[t - 1].data(), s.n, t);
        INFO(s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb << " pieces=" << pieces.count);
        CHECK(std::memcmp(c[0].data(), c[1].data(), c[0].size() * sizeof(float)) == 0);
        CHECK(std::memcmp(c[0].data(), c[2].data(), c[0].size() * sizeof(float)) == 0);
        const double u = std::ldexp(1.0, -24), gamma = static_cast<double>(s.k) * u / (1 - static_cast<double>(s.k) * u);
        std::int64_t outside = 0;
        for (std::int64_t i = 0; i < s.m; ++i)
          for (std::int64_t j = 0; j < s.n; ++j) {
            double exact = 0, magnitude = 0;
            for (std::int64_t p = 0; p < s.k; ++p) {
              exact += static_cast<double>(at(i, p)) * static_cast<double>(bt(p, j));
              magnitude += std::fabs(static_cast<double>(at(i, p)) * static_cast<double>(bt(p, j)));
            }
            outside += std::fabs(static_cast<double>(c[0][static_cast<std::size_t>(i * s.n + j)]) - exact) > gamma * magnitude;
          }
        CHECK(outside == 0);
      }
  }
}

TEST_CASE("CNN steps at batch 64, whose products split into pieces, give the same losses on 1, 2 and 3 threads",
          "[train]") {
  // 28x28 images: conv1's product (50176 x 16 x 9) and conv2's (12544 x 32 x 144) split into pieces.
  CHECK(detail::gemm_pieces(50176, 16, 9).count > 1);
  CHECK(detail::gemm_pieces(12544, 32, 144).count > 1);
  TrainData d;
  d.name = "random images";
  d.rows = d.cols = 28;
  d.classes = 10;
  Rng rng(5);
  for (int i = 0; i < 64 * 28 * 28; ++i) d.train.x.push_back(static_cast<float>(rng.uniform()));
  for (int i = 0; i < 64; ++i) d.train.labels.push_back(static_cast<int>(rng.next_u64() % 10));
  TrainOptions o;
  o.model.kind = "cnn";
  o.batch = 64;
  o.steps = 2;
  o.eval_every = 0;
  o.final_eval = false;
  for (const char* recipe : {"fp32", "mxfp8"}) {
    o.recipe = *recipe_preset(recipe);
    std::vector<std::vector<double>> losses;
    for (const unsigned t : {1U, 2U, 3U}) {
      o.threads = t;
      auto r = run_training(d, o);
      REQUIRE(r);
      losses.push_back(r->losses);
    }
    INFO(recipe);
    CHECK(losses[0] == losses[1]);
    CHECK(losses[0] == losses[2]);
  }
}
