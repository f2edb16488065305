// Checks Tensor invariants against the IEEE 754 binary16 and bfloat16 value sets and float64-to-float32 rounding.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "mxlab/io/tensor.hpp"

using namespace mxlab;

TEST_CASE("from_f32 accepts exactly the values of the source dtype", "[io][tensor]") {
  // binary16: largest finite 65504 = (2 - 2^-10) 2^15, smallest subnormal 2^-24, 11 significant bits.
  const std::vector<float> f16_ok = {0.0f,
                                     -0.0f,
                                     65504.0f,
                                     -65504.0f,
                                     0x1p-24f,
                                     0x1p-14f,
                                     0x1.ff8p-15f /* largest subnormal 1023 * 2^-24 */,
                                     1.0009765625f,
                                     2048.0f,
                                     std::numeric_limits<float>::infinity(),
                                     NAN};
  auto ok = Tensor::from_f32({static_cast<std::int64_t>(f16_ok.size())}, f16_ok, DType::F16);
  REQUIRE(ok.ok());
  CHECK(ok->dtype() == DType::F16);
  for (float bad : {65520.0f, 0x1p-25f, 1.00048828125f, 2049.0f, 0x1.8p-24f}) {
    INFO(bad);
    auto t = Tensor::from_f32({1}, {bad}, DType::F16);
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.error().message, Catch::Contains("is not a f16 value"));
  }
  // bfloat16: the upper 16 bits of a binary32, 8 significant bits.
  REQUIRE(Tensor::from_f32({3}, {1.0078125f, 0x1.fep127f, 0x1p-133f}, DType::BF16).ok());
  auto bf = Tensor::from_f32({1}, {1.00390625f}, DType::BF16);
  REQUIRE_FALSE(bf.ok());
  CHECK(bf.error().message == "tensor of shape 1: value 0 (1.00390625) is not a bf16 value");
  auto f64 = Tensor::from_f32({1}, {1.0f}, DType::F64);
  REQUIRE_FALSE(f64.ok());
  CHECK_THAT(f64.error().message, Catch::Contains("use from_f64"));
}

TEST_CASE("from_f64 keeps the doubles and rounds the float32 view to nearest-even", "[io][tensor]") {
  // 1 + 2^-24 is halfway between the floats 1 and 1 + 2^-23: ties to even gives 1.
  // 1 + 3 * 2^-24 is halfway between 1 + 2^-23 and 1 + 2^-22: ties to even gives 1 + 2^-22.
  auto t = Tensor::from_f64({2, 2}, {1.0 + 0x1p-24, 1.0 + 3 * 0x1p-24, -1e39, 0.5});
  REQUIRE(t.ok());
  CHECK(t->dtype() == DType::F64);
  CHECK(t->data() == std::vector<float>{1.0f, 1.0f + 0x1p-22f, -std::numeric_limits<float>::infinity(), 0.5f});
  CHECK(t->exact(0) == 1.0 + 0x1p-24);
  CHECK(t->exact_values() == std::vector<double>{1.0 + 0x1p-24, 1.0 + 3 * 0x1p-24, -1e39, 0.5});
  CHECK_FALSE(t->f32_is_exact());
  auto e = Tensor::from_f64({2}, {0.5, NAN});
  REQUIRE(e.ok());
  CHECK(e->f32_is_exact());
  auto f = Tensor::from_f32({2}, {0.5f, 0.25f});
  REQUIRE(f.ok());
  CHECK(f->exact_values() == std::vector<double>{0.5, 0.25});
  CHECK(f->f64_data().empty());
}

TEST_CASE("shapes: element counts, text, reshape", "[io][tensor]") {
  CHECK(*shape_elements(std::vector<std::int64_t>{}, "x") == 1);
  CHECK(*shape_elements(std::vector<std::int64_t>{3, 0, 5}, "x") == 0);
  CHECK(format_shape(std::vector<std::int64_t>{1024, 1024}) == "1024x1024");
  CHECK(format_shape(std::vector<std::int64_t>{}) == "scalar");
  auto mismatch = Tensor::from_f32({2, 2}, {1.0f, 2.0f, 3.0f});
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.error().message == "tensor of shape 2x2: the shape needs 4 values, got 3");
  auto t = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
  REQUIRE(t.ok());
  auto r = t->reshaped({3, 2});
  REQUIRE(r.ok());
  CHECK(r->shape() == std::vector<std::int64_t>{3, 2});
  CHECK(r->data() == t->data());
  auto bad = t->reshaped({4, 2});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message == "reshape from 2x3 to 4x2: the new shape has 8 elements, the tensor 6");
  const Tensor empty;
  CHECK(empty.size() == 0);
  CHECK(empty.shape() == std::vector<std::int64_t>{0});
  CHECK(dtype_name(DType::BF16) == "bf16");
}
