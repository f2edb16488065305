// Training checked against finite differences (every layer's backward pass), against itself (bit-identical
// runs for any thread count) and against the FP16 underflow that loss scaling exists to prevent.
#include <catch2/catch.hpp>

#include <filesystem>

#include "mxlab/io/datasets.hpp"
#include "mxlab/train/train.hpp"

using namespace mxlab;

TEST_CASE("every layer's backward pass matches central differences (FP32)", "[train]") {
  const auto worst = train::gradient_check(5);
  for (const char* kind : {"linear", "relu", "gelu", "conv", "maxpool", "softmax_xent"}) {
    INFO(kind);
    REQUIRE(worst.count(kind));
    // Central differences in float32 with h = 1e-2: about 1e-3 for these layers (train.cpp says why); a wrong
    // backward pass is off by O(1).
    CHECK(worst.at(kind) < 2e-2);
  }
}

TEST_CASE("FP16 without loss scaling loses gradients to underflow; dynamic loss scaling brings them back", "[train]") {
  auto s = train::fp16_underflow_study(3);
  REQUIRE(s.ok());
  INFO("without scaling " << s->without_scaling << ", with dynamic scaling " << s->with_dynamic_scaling);
  CHECK(s->without_scaling > 0.05);
  CHECK(s->with_dynamic_scaling < s->without_scaling / 10);
}

TEST_CASE("recipes: presets, per-layer overrides, bad settings named", "[train]") {
  auto r = train::recipe("mxfp8");
  REQUIRE(r.ok());
  CHECK(r->roles.at("w") == "mxfp8_e4m3");
  CHECK(r->roles.at("g") == "mxfp8_e5m2");
  REQUIRE_FALSE(train::apply_setting(*r, "fc3:w=fp16"));
  REQUIRE_FALSE(train::apply_setting(*r, "a=mxfp4"));
  CHECK(r->for_layer("fc3").at("w") == "fp16");
  CHECK(r->for_layer("fc1").at("w") == "mxfp8_e4m3");
  CHECK(r->for_layer("fc1").at("a") == "mxfp4");
  CHECK_THAT(train::apply_setting(*r, "x=mxfp4")->message, Catch::Contains("unknown role 'x'"));
  CHECK_THAT(train::apply_setting(*r, "w=mxfp99")->message, Catch::Contains("mxfp99"));
  CHECK_FALSE(train::recipe("fp64").ok());
  for (const auto& n : train::recipe_names()) CHECK(train::recipe(n).ok());
}

TEST_CASE("the same seed gives bit-identical loss curves for any thread count", "[train][data]") {
  // Fashion-MNIST from its Debian package, installed into a scratch folder.
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_train_test_data";
  FetchOptions o;
  o.dir = dir.string();
  if (!fetch_data({"fashion-mnist"}, o).ok()) {
    WARN("skipped: the Debian package dataset-fashion-mnist is not installed");
    return;
  }
  train::Config c;
  c.data_dir = dir.string();
  c.recipe = *train::recipe("mxfp8");
  c.steps = 12;
  c.batch = 32;
  c.seed = 9;
  std::vector<double> losses[2];
  for (unsigned t : {1U, 2U}) {
    c.threads = t;
    auto r = train::run(c);
    REQUIRE(r.ok());
    for (const auto& s : r->steps) losses[t - 1].push_back(s.loss);
  }
  CHECK(losses[0] == losses[1]);
  c.seed = 10;
  auto other = train::run(c);
  REQUIRE(other.ok());
  CHECK(other->steps.back().loss != losses[0].back());
}
