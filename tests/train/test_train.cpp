// Checks the training module against finite differences (gradients), against its own definition of
// determinism (bit-identical losses across thread counts), and the FP16 underflow that loss scaling exists
// to prevent (Micikevicius et al. 2018, section 3.2).
#include <catch2/catch.hpp>

#include <bit>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "mxlab/core/random.hpp"
#include "mxlab/core/transpose.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/train/gradient_check.hpp"
#include "mxlab/train/scaling.hpp"
#include "mxlab/train/trainer.hpp"

using namespace mxlab;
using namespace mxlab::train;

namespace {

/// Four classes of 8x8 images: a fixed random pattern per class plus noise (seeded).
TrainData synthetic_images(std::uint64_t seed, std::int64_t per_class) {
  TrainData d;
  d.name = "synthetic";
  d.rows = d.cols = 8;
  d.classes = 4;
  Rng rng(seed);
  std::vector<float> pattern(4 * 64);
  for (auto& p : pattern) p = static_cast<float>(rng.uniform());
  for (ImageSplit* s : {&d.train, &d.validation, &d.test}) {
    const std::int64_t n = s == &d.train ? per_class * 4 : per_class;
    for (std::int64_t i = 0; i < n; ++i) {
      const int label = static_cast<int>(i % 4);
      for (int j = 0; j < 64; ++j)
        s->x.push_back(0.5F * pattern[static_cast<std::size_t>(label * 64 + j)] + 0.5F * static_cast<float>(rng.uniform()));
      s->labels.push_back(label);
    }
  }
  return d;
}

TrainData synthetic_text(std::uint64_t seed) {
  TrainData d;
  d.name = "synthetic-text";
  d.is_text = true;
  d.alphabet = "abcdefgh";
  Rng rng(seed);
  // A repeating phrase with random insertions: learnable but not trivial.
  const int phrase[] = {0, 1, 2, 3, 4, 5, 6, 7, 6, 5};
  for (int i = 0; i < 6000; ++i) {
    const int t = rng.uniform() < 0.1 ? static_cast<int>(rng.next_u64() % 8) : phrase[i % 10];
    (i < 5000 ? d.train_tokens : d.validation_tokens).push_back(t);
  }
  return d;
}

/// A 64-32-4 MLP trained 150 steps of 32 images at learning rate 3e-3 (FP32 recipe).
TrainOptions small_mlp() {
  TrainOptions o;
  o.model.hidden = {32};
  o.steps = 150;
  o.batch = 32;
  o.optimizer.lr = 3e-3;
  return o;
}

double underflow_of(const std::vector<OperandMetric>& ops, const std::string& layer, Role role) {
  for (const auto& o : ops)
    if (o.layer == layer && o.role == role) return o.underflow_ratio();
  return -1;
}


/// The small models of the bit-identity checks: 4 steps of 8 examples, no final evaluation.
TrainOptions small_run(const char* model) {
  TrainOptions o;
  o.model.kind = model;
  o.model.hidden = {32};
  o.model.conv1 = 4, o.model.conv2 = 8, o.model.fc = 16;
  o.model.width = 2;
  o.model.d_model = 16, o.model.layers = 1, o.model.heads = 2, o.model.context = 16;
  o.steps = 4;
  o.batch = 8;
  o.final_eval = false;
  return o;
}

/// Trains o on d twice, with first(o) and then second(o) applied, and checks the two runs' losses, step by step,
/// bit for bit.
template <class First, class Second>
void check_same_losses(const TrainData& d, TrainOptions o, First&& first, Second&& second) {
  first(o);
  auto a = run_training(d, o);
  second(o);
  auto b = run_training(d, o);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(a->losses.size() == b->losses.size());
  for (std::size_t i = 0; i < a->losses.size(); ++i) CHECK(a->losses[i] == b->losses[i]);
}

}  // namespace

TEST_CASE("every layer's backward matches central differences in double", "[train]") {
  for (const auto& name : gradient_check_names()) {
    auto checks = check_gradients(name, 7);
    REQUIRE(checks);
    REQUIRE_FALSE(checks->empty());
    for (const auto& c : *checks) {
      INFO(c.layer << " " << c.tensor << ": max rel error " << c.max_rel_error << ", abs " << c.max_abs_error
                   << ", max |grad| " << c.max_abs_gradient);
      CHECK(c.checked > 0);
      CHECK(c.max_abs_gradient > 1e-4);  // the tensor really carries gradient: the check is not vacuous
      // Central differences in double with step 1e-5: truncation ~ step^2 * |f'''| ~ 1e-10 and cancellation
      // ~ 1e-16 * |L| / step ~ 1e-10, against gradients of order 1e-3..1: 1e-5 relative leaves a wide margin
      // while a wrong formula (off by a factor, a sign, a missing term) errs by order 1.
      CHECK(c.max_rel_error < 1e-5);
    }
  }
  CHECK_FALSE(check_gradients("no-such-layer", 1));
}

TEST_CASE("recipes: presets, files, overrides and bad input", "[train]") {
  for (const auto& p : recipe_presets()) {
    auto r = recipe_preset(p);
    REQUIRE(r);
    auto f = layer_formats(*r, "fc1");
    INFO(p);
    REQUIRE(f);
  }
  auto mx = recipe_preset("mxfp8");
  REQUIRE(mx);
  CHECK(mx->formats.a == "mxfp8_e4m3");
  CHECK(mx->formats.g == "mxfp8_e5m2");
  auto r = parse_recipe("preset = mxfp4\nname = mine\ng = mxfp8_e5m2\nlayer fc1 w = fp32\nlayer re:fc[23] a = mxint8\n"
                        "loss_scaling = dynamic\nloss_scale = 1024\ngrowth_interval = 10\nnongemm = bf16\n",
                        "test.recipe");
  REQUIRE(r);
  CHECK(r->name == "mine");
  CHECK(r->loss_scaling.mode == LossScaling::Mode::Dynamic);
  CHECK(r->loss_scaling.growth_interval == 10);
  CHECK(r->nongemm == "bf16");
  auto fc1 = layer_formats(*r, "fc1");
  REQUIRE(fc1);
  CHECK_FALSE((*fc1)[static_cast<std::size_t>(Role::W)].has_value());
  CHECK((*fc1)[static_cast<std::size_t>(Role::A)]->name == "mxfp4");
  CHECK((*fc1)[static_cast<std::size_t>(Role::G)]->name == "mxfp8_e5m2");
  auto fc2 = layer_formats(*r, "fc2");
  REQUIRE(fc2);
  CHECK((*fc2)[static_cast<std::size_t>(Role::A)]->name == "mxint8");
  CHECK((*fc2)[static_cast<std::size_t>(Role::W)]->name == "mxfp4");
  // Written text reads back to the same formats.
  auto again = parse_recipe(recipe_text(*r), "again");
  REQUIRE(again);
  CHECK(again->formats.g == r->formats.g);
  CHECK(again->overrides.size() == 2);
  CHECK(again->nongemm == "bf16");
  // FP16 as a per-tensor cast without scale that overflows to infinity (what loss scaling detects).
  auto h = role_format("fp16");
  REQUIRE(h);
  REQUIRE(h->has_value());
  CHECK_FALSE((*h)->layout.scale.has_value());
  CHECK((*h)->options.element.overflow == Overflow::Inf);
  CHECK_FALSE(parse_recipe("w = not-a-format\n", "bad"));
  CHECK_FALSE(parse_recipe("colour = blue\n", "bad"));
  CHECK_FALSE(parse_recipe("layer fc1 q = fp32\n", "bad"));
  CHECK_FALSE(load_recipe("no-such-recipe-or-file"));
  auto direct = load_recipe("mxfp8_e4m3@8x8");
  REQUIRE(direct);
  CHECK(direct->formats.w_bp == "mxfp8_e4m3@8x8");
}

TEST_CASE("an MLP learns the synthetic classes in FP32 and in MXFP8", "[train]") {
  const TrainData d = synthetic_images(3, 100);
  TrainOptions o = small_mlp();
  for (const char* recipe : {"fp32", "mxfp8", "mxfp8+bf16"}) {
    o.recipe = *recipe_preset(std::string(recipe).substr(0, 5) == "mxfp8" ? "mxfp8" : recipe);
    if (std::string(recipe) == "mxfp8+bf16") o.recipe.nongemm = "bf16";
    auto r = run_training(d, o);
    REQUIRE(r);
    INFO(recipe);
    REQUIRE(r->test);
    CHECK(r->test->accuracy > 0.9);
    CHECK(r->losses.back() < r->losses.front());
  }
}

TEST_CASE("the ResNet, MobileNetV2, vision transformer and MLP-Mixer learn the synthetic classes; batch norm "
          "evaluates with running statistics", "[train]") {
  const TrainData d = synthetic_images(41, 30);
  for (const char* model : {"resnet", "mobilenet", "vit", "mixer"}) {
    for (const char* recipe : {"fp32", "mxint8"}) {
      INFO(model << " " << recipe);
      TrainOptions o;
      o.model.kind = model;
      o.model.width = 4;
      o.model.d_model = 16, o.model.heads = 2, o.model.layers = 1;
      o.recipe = *recipe_preset(recipe);
      o.steps = 100;
      o.batch = 16;
      o.optimizer.lr = 3e-3;
      auto r = run_training(d, o);
      REQUIRE(r);
      REQUIRE(r->validation);
      // Four classes (chance 0.25) of 8x8 images, which the ResNet's and MobileNetV2's strides bring down to
      // one pixel and the vision transformer and the mixer cut into four patches: well above chance in 100 steps.
      CHECK(r->validation->accuracy > 0.6);
      CHECK(r->losses.back() < 0.75 * r->losses.front());
    }
  }
  // Patches must tile the image.
  TrainOptions o;
  o.model.kind = "vit";
  o.model.patch = 3;
  o.steps = 1;
  auto refused = run_training(d, o);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message, Catch::Contains("patches of 3"));
  o.model.kind = "mixer";
  refused = run_training(d, o);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message, Catch::Contains("the mixer's patches of 3"));
  o.model.kind = "resnet";
  o.model.width = 0;
  CHECK_FALSE(run_training(d, o));
  CHECK(is_model_kind("mobilenet"));
  CHECK_FALSE(is_model_kind("resnet18"));
}

TEST_CASE("learning rate: linear warm-up, then cosine decay to zero; SGD with momentum also learns", "[train]") {
  const TrainData d = synthetic_images(14, 60);
  TrainOptions o;
  o.model.hidden = {32};
  o.steps = 100;
  o.batch = 32;
  o.optimizer.lr = 0.01;
  o.optimizer.warmup_steps = 4;
  std::vector<double> lr;
  auto r = run_training(d, o, [&](const StepMetrics& m) { lr.push_back(m.lr); });
  REQUIRE(r);
  REQUIRE(lr.size() == 100);
  CHECK(lr[0] == Approx(0.0025));  // (step + 1) / warmup * lr
  CHECK(lr[3] == Approx(0.01));
  for (std::size_t i = 4; i + 1 < lr.size(); ++i) CHECK(lr[i + 1] < lr[i]);
  // Cosine: halfway through the decay the rate is half the peak; the last step is close to zero.
  CHECK(lr[4 + 48] == Approx(0.005).epsilon(0.02));
  CHECK(lr.back() < 1e-4);
  o.optimizer.kind = "sgd";
  o.optimizer.lr = 0.05;
  o.optimizer.warmup_steps = 0;
  r = run_training(d, o);
  REQUIRE(r);
  REQUIRE(r->test);
  CHECK(r->test->accuracy > 0.9);
}

TEST_CASE("quantized operands are measured per layer and role; 2-D tiles are quantized once", "[train]") {
  const TrainData d = synthetic_images(4, 20);
  TrainOptions o;
  o.model.hidden = {16};
  o.steps = 2;
  o.batch = 16;
  o.final_eval = false;
  o.recipe = *recipe_preset("mxfp4");
  std::vector<OperandMetric> seen;
  auto r = run_training(d, o, [&](const StepMetrics& m) {
    if (m.step == 1) seen = m.operands;
  });
  REQUIRE(r);
  // Two linear layers x five roles, each with counts and a nonzero error, except fc1's w_bp: the first layer
  // computes no input gradient.
  CHECK(seen.size() == 9);
  CHECK(underflow_of(seen, "fc1", Role::WBp) == -1);
  CHECK(underflow_of(seen, "fc2", Role::WBp) >= 0);
  for (const auto& m : seen) {
    INFO(m.layer << "." << role_name(m.role));
    CHECK(m.count > 0);
    CHECK(m.mse > 0);
  }
  // 2-D tiles shared by forward and backward: W, X and dY are each quantized once and transposed for backward.
  o.recipe = *load_recipe("mxfp8_e4m3@8x8");
  r = run_training(d, o, [&](const StepMetrics& m) {
    if (m.step == 1) seen = m.operands;
  });
  REQUIRE(r);
  CHECK(seen.size() == 6);
  for (const auto& m : seen) CHECK((m.role == Role::W || m.role == Role::A || m.role == Role::G));
  // FP32 quantizes nothing and its losses differ from a quantized run.
  o.recipe = *recipe_preset("fp32");
  auto fp32 = run_training(d, o, [&](const StepMetrics& m) { CHECK(m.operands.empty()); });
  o.recipe = *recipe_preset("mxfp4");
  auto q = run_training(d, o);
  REQUIRE(fp32);
  REQUIRE(q);
  CHECK(fp32->losses[1] != q->losses[1]);
  // BF16 rounding of the non-GEMM outputs changes the losses too.
  o.recipe = *recipe_preset("fp32");
  o.recipe.nongemm = "bf16";
  auto bf = run_training(d, o);
  REQUIRE(bf);
  CHECK(fp32->losses[1] != bf->losses[1]);
}

TEST_CASE("square 2-D tiles commute with the transpose (why backward may reuse forward's quantized copy)", "[train]") {
  // Oracle: quantizing X^T directly with the same tiles.
  auto f = parse_block_format("mxfp4@8x8");
  REQUIRE(f);
  const std::int64_t rows = 24, cols = 40;
  std::vector<float> x(static_cast<std::size_t>(rows * cols)), xt(x.size());
  Rng rng(13);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = static_cast<float>(std::ldexp(rng.uniform() - 0.5, static_cast<int>(rng.next_u64() % 12) - 6));
      x[static_cast<std::size_t>(r * cols + c)] = v;
      xt[static_cast<std::size_t>(c * rows + r)] = v;
    }
  std::vector<float> q(x.size()), qt(x.size());
  REQUIRE(ops::fake_quantize(*f, x, {rows, cols}, q));
  REQUIRE(ops::fake_quantize(*f, xt, {cols, rows}, qt));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      REQUIRE(q[static_cast<std::size_t>(r * cols + c)] == qt[static_cast<std::size_t>(c * rows + r)]);
}

TEST_CASE("FP16 without loss scaling loses gradients to underflow; dynamic loss scaling brings them back", "[train]") {
  // A deep narrow MLP with small initial weights: each layer shrinks the backward signal, so the output
  // gradients of the first layers fall below FP16's smallest subnormal (2^-24) unless the loss is scaled.
  const TrainData d = synthetic_images(5, 50);
  TrainOptions o;
  o.model.hidden = {32, 32, 32, 32, 32, 32};
  o.model.init_gain = 0.15;
  o.steps = 3;
  o.batch = 32;
  o.final_eval = false;
  auto first_layer_underflow = [&](const char* recipe, double* final_scale) {
    o.recipe = *recipe_preset(recipe);
    double ratio = -1;
    auto r = run_training(d, o, [&](const StepMetrics& m) {
      if (m.step == 1) ratio = underflow_of(m.operands, "fc1", Role::G);
    });
    REQUIRE(r);
    if (final_scale != nullptr) *final_scale = r->final_loss_scale;
    return ratio;
  };
  double scale = 0;
  const double plain = first_layer_underflow("fp16-noscale", nullptr);
  const double scaled = first_layer_underflow("fp16", &scale);
  INFO("fc1 output-gradient underflow: no scaling " << plain << ", dynamic scaling " << scaled);
  CHECK(plain > 0.5);
  CHECK(scaled < 0.01);
  CHECK(scale >= 65536.0);
}

TEST_CASE("dynamic loss scaling skips overflowing steps and backs off", "[train]") {
  const TrainData d = synthetic_images(6, 20);
  TrainOptions o;
  o.model.hidden = {16};
  o.steps = 6;
  o.batch = 16;
  o.final_eval = false;
  o.recipe = *recipe_preset("fp16");
  o.recipe.loss_scaling.initial = 1e30;  // dY * 1e30 overflows FP16 (max 65504) on the first steps
  std::vector<double> scales;
  std::vector<bool> skipped;
  auto r = run_training(d, o, [&](const StepMetrics& m) {
    scales.push_back(m.loss_scale);
    skipped.push_back(m.skipped);
  });
  REQUIRE(r);
  CHECK(r->skipped > 0);
  CHECK(skipped.front());
  CHECK(scales[1] == scales[0] * 0.5);
  CHECK(r->final_loss_scale < 1e30);
}

TEST_CASE("attention's units side by side give one thread's operand metrics, bit for bit", "[train]") {
  // On two threads the (sequence, head) units run side by side with their own logs of operand counts, replayed
  // in unit order: every count and squared-error sum (a double summed call by call) must be one thread's.
  const TrainData img = synthetic_images(8, 30);
  const TrainData txt = synthetic_text(9);
  for (const char* model : {"vit", "transformer"}) {
    TrainOptions o;
    o.model.kind = model;
    o.model.d_model = 16, o.model.layers = 1, o.model.heads = 2, o.model.context = 16;
    o.steps = 3;
    o.batch = 8;
    o.metrics_every = 1;
    o.final_eval = false;
    o.recipe = *recipe_preset("mxfp8");
    const TrainData& d = std::string(model) == "transformer" ? txt : img;
    std::vector<std::vector<OperandMetric>> by_threads[2];
    for (const unsigned threads : {1U, 2U}) {
      o.threads = threads;
      REQUIRE(run_training(d, o, [&](const StepMetrics& m) { by_threads[threads - 1].push_back(m.operands); }));
    }
    INFO(model);
    REQUIRE(by_threads[0].size() == 3);
    REQUIRE(by_threads[0].size() == by_threads[1].size());
    for (std::size_t step = 0; step < by_threads[0].size(); ++step) {
      const auto &one = by_threads[0][step], &two = by_threads[1][step];
      REQUIRE(one.size() == two.size());
      for (std::size_t i = 0; i < one.size(); ++i) {
        INFO("step " << step << ", " << one[i].layer << " " << role_name(one[i].role));
        CHECK(one[i].layer == two[i].layer);
        CHECK(one[i].role == two[i].role);
        CHECK(one[i].count == two[i].count);
        CHECK(one[i].nonzero == two[i].nonzero);
        CHECK(one[i].underflow == two[i].underflow);
        CHECK(std::bit_cast<std::uint64_t>(one[i].mse) == std::bit_cast<std::uint64_t>(two[i].mse));
      }
    }
    // The attention products' operands are among them.
    bool attention = false;
    for (const auto& m : by_threads[0][0]) attention = attention || m.layer == "blocks.0.attn.qk";
    CHECK(attention);
  }
}

TEST_CASE("the same seed gives bit-identical losses on 1 and 2 threads", "[train]") {
  const TrainData img = synthetic_images(8, 30);
  const TrainData txt = synthetic_text(9);
  for (const char* model : {"mlp", "cnn", "transformer", "mobilenet", "vit", "mixer"}) {
    TrainOptions o = small_run(model);
    const TrainData& d = std::string(model) == "transformer" ? txt : img;
    for (const char* recipe : {"fp8_delayed", "mxfp8"}) {  // mxfp8 last: the checks below run under it
      o.recipe = *recipe_preset(recipe);
      INFO(model << " " << recipe);
      check_same_losses(d, o, [](TrainOptions& t) { t.threads = 1; }, [](TrainOptions& t) { t.threads = 2; });
    }
    o.threads = 1;
    auto one = run_training(d, o);
    REQUIRE(one);
    if (std::string(model) == "transformer") {
      // Attention's products take both operands as activations: a and a_bp, never w or w_bp.
      std::vector<OperandMetric> ops;
      REQUIRE(run_training(d, o, [&](const StepMetrics& m) {
        if (m.step == 1) ops = m.operands;
      }));
      CHECK(underflow_of(ops, "blocks.0.attn.qk", Role::A) >= 0);
      CHECK(underflow_of(ops, "blocks.0.attn.av", Role::ABp) >= 0);
      CHECK(underflow_of(ops, "blocks.0.attn.qk", Role::W) == -1);
      CHECK(underflow_of(ops, "blocks.0.attn.av", Role::WBp) == -1);
      CHECK(underflow_of(ops, "blocks.0.attn.qkv", Role::W) >= 0);
    }
    o.seed = 1;
    auto other = run_training(d, o);
    REQUIRE(other);
    CHECK(other->losses[0] != one->losses[0]);
  }
}

TEST_CASE("element casts and per-tensor scales (current or delayed) of a convolution's pixels give its quantized columns, bit for bit",
          "[train]") {
  // A step that collects metrics quantizes the whole columns; the others quantize the pixels and copy them
  // (Conv2d::forward, QGemm::x_from_copies). Metrics every step against none: the same losses.
  const TrainData img = synthetic_images(8, 30);
  for (const char* model : {"cnn", "resnet"})
    for (const char* recipe : {"fp8_current", "fp8_delayed", "fp16", "bf16"}) {
      TrainOptions o = small_run(model);
      o.recipe = *recipe_preset(recipe);
      INFO(model << " " << recipe);
      check_same_losses(img, o, [](TrainOptions& t) { t.metrics_every = 1; }, [](TrainOptions& t) { t.metrics_every = 0; });
    }
}

TEST_CASE("a character transformer learns a repeating text", "[train][slow]") {
  const TrainData d = synthetic_text(10);
  TrainOptions o;
  o.model.kind = "transformer";
  o.model.d_model = 32, o.model.layers = 1, o.model.heads = 2, o.model.context = 32;
  o.steps = 200;
  o.batch = 16;
  o.optimizer.lr = 3e-3;
  auto r = run_training(d, o);
  REQUIRE(r);
  REQUIRE(r->validation);
  // 10% of the characters are uniform random (3 bits); the rest follow the phrase. A model that learned the
  // phrase is far below the unigram entropy.
  CHECK(r->validation->bpc < 0.7 * unigram_entropy_bits(d.validation_tokens, d.vocabulary()));
}

TEST_CASE("cancellation stops training after the current step", "[train]") {
  const TrainData d = synthetic_images(11, 10);
  TrainOptions o;
  o.model.hidden = {8};
  o.steps = 50;
  o.batch = 8;
  o.final_eval = false;
  std::atomic<bool> stop{false};
  Reporter rep;
  rep.cancel = &stop;
  rep.on_progress = [&](const Progress& p) {
    if (p.done == 3) stop = true;
  };
  auto r = run_training(d, o, {}, rep);
  REQUIRE(r);
  CHECK(r->cancelled);
  CHECK(r->steps_done == 3);
}

TEST_CASE("bad training options are errors that name them", "[train]") {
  const TrainData d = synthetic_images(12, 5);
  TrainOptions o;
  o.steps = 0;
  auto r = run_training(d, o);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("steps") != std::string::npos);
  o.steps = 1;
  o.model.kind = "transformer";
  r = run_training(d, o);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("text") != std::string::npos);
  o.model.kind = "mlp";
  o.optimizer.kind = "lion";
  CHECK_FALSE(run_training(d, o));
}

namespace {

/// The delayed scale of Transformer Engine's recipe written out from its definition: the largest (max) or the
/// latest (most_recent) of the last `len` amaxes, scale = fl32(fl32(fp8_max * 2^-margin) / amax) when that amax is
/// finite and positive, else the previous scale; 1 before the first update.
std::vector<float> expected_scales(const std::vector<float>& amaxes, std::size_t len, bool use_max, int margin,
                                   float fp8_max) {
  std::vector<float> out;
  float scale = 1.0F;
  const float scaled_max = fp8_max * std::ldexp(1.0F, -margin);
  for (std::size_t t = 0; t < amaxes.size(); ++t) {
    float amax = amaxes[t];
    if (use_max)
      for (std::size_t k = t + 1 - std::min(len, t + 1); k <= t; ++k) amax = std::fmax(amax, amaxes[k]);
    if (std::isfinite(amax) && amax > 0) scale = scaled_max / amax;
    out.push_back(scale);
  }
  return out;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// A small run of a model kind under a recipe preset and an optimizer.
struct Case {
  const char* model;
  const char* recipe;
  const char* optimizer;
};

/// The options of a Case: transformers of width 16 with 2 heads and context 16 (the caller sets the MLP's
/// widths, the blocks and the run's length).
TrainOptions case_options(const Case& c) {
  TrainOptions o;
  o.model.kind = c.model;
  o.model.d_model = 16, o.model.heads = 2, o.model.context = 16;
  o.model.width = 2;  // ResNet widths 2..16, MobileNetV2 at 1/8 of its widths
  o.recipe = *recipe_preset(c.recipe);
  o.optimizer.kind = c.optimizer;
  return o;
}

}  // namespace

TEST_CASE("delayed scaling: the scale follows Transformer Engine's formula on a crafted amax sequence", "[train]") {
  const float inf = std::numeric_limits<float>::infinity();
  // Growth, decay below the window, a zero amax (scale kept), an infinite one (scale kept while in the window).
  const std::vector<float> amaxes = {2.0F, 0.5F, 8.0F, 0.25F, 0.125F, 0.1F, 0.3F, 0.0F, 3.0F, inf, 0.7F,
                                     0.6F, 0.5F, 0.4F, 1e-3F, 5e-4F};
  for (const auto algo : {DelayedScaling::Algo::Max, DelayedScaling::Algo::MostRecent})
    for (std::int64_t len : {1, 3, 4, 1024})
      for (int margin : {0, 1, -2}) {
        DelayedScaling c;
        c.enabled = true;
        c.history_len = len;
        c.algo = algo;
        c.margin = margin;
        for (float fp8_max : {448.0F, 57344.0F}) {
          AmaxHistory h(c, fp8_max);
          CHECK(h.scale() == 1.0F);  // the first step: scale 1, as Transformer Engine initialises it
          const auto want = expected_scales(amaxes, static_cast<std::size_t>(len), algo == DelayedScaling::Algo::Max,
                                            margin, fp8_max);
          for (std::size_t t = 0; t < amaxes.size(); ++t) {
            // A step's casts record their amaxes; the step's amax is the largest.
            h.record(amaxes[t] * 0.5F);
            h.record(amaxes[t]);
            h.record(std::numeric_limits<float>::quiet_NaN());  // ignored, as fmaxf ignores it
            h.update();
            INFO("len " << len << " margin " << margin << " max " << (algo == DelayedScaling::Algo::Max) << " step " << t);
            CHECK(h.scale() == want[t]);
            CHECK(h.scale_inv() == 1.0F / want[t]);
          }
        }
      }
}

TEST_CASE("delayed scaling: a cast is the element cast of the scaled operand times the inverse scale", "[train]") {
  // delayed_cast against its definition written out: fl32(x * scale) through the saturating quantizer along the
  // rows or down the columns, times fl32(1 / scale), bit for bit; the amax (NaN ignored) and the saturations. The
  // kernels' one pass (run_scaled) serves every case but stochastic rounding down the columns, whose random words
  // follow the transposed positions (the three-pass path). 150 x 97 values cross the one pass's chunks.
  const std::int64_t rows = 150, cols = 97;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  Rng rng(44);
  for (float& v : x) v = static_cast<float>(std::ldexp(rng.uniform() - 0.5, static_cast<int>(rng.next_u64() % 30) - 12));
  x[7] = std::numeric_limits<float>::quiet_NaN();
  x[901] = -std::numeric_limits<float>::infinity();
  DelayedScaling c;
  c.enabled = true;
  c.history_len = 4;
  for (const Rounding rounding : {Rounding::NearestEven, Rounding::Stochastic}) {
    BlockFormat f;
    f.name = "e4m3";
    f.element = *parse_format("e4m3");
    f.options.element.rounding = rounding;
    f.options.element.overflow = Overflow::Saturate;
    f.options.seed = 3;
    const ops::FakeQuantizer q(f);
    for (const bool columns : {false, true}) {
      AmaxHistory h(c, 448.0);
      h.record(0.01F);  // scale 448 * 100: many scaled values saturate
      h.update();
      const float scale = h.scale();
      std::vector<float> scaled(x.size()), want(x.size()), got(x.size());
      float amax = 0.0F;
      std::int64_t saturated = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        scaled[i] = x[i] * scale;
        amax = std::fmax(amax, std::fabs(x[i]));
        saturated += std::fabs(scaled[i]) > 448.0F ? 1 : 0;
      }
      REQUIRE((columns ? q.run_columns(scaled, rows, cols, want) : q.run(scaled, {rows, cols}, want)).ok());
      for (float& v : want) v *= h.scale_inv();
      for (const unsigned threads : {1U, 2U}) {
        INFO(to_string(rounding) << (columns ? " down the columns" : " along the rows") << ", threads " << threads);
        ops::Run run;
        run.threads = threads;
        float got_amax = -1.0F;
        auto r = delayed_cast(q, x, rows, cols, got, h, false, run, columns, &got_amax);
        REQUIRE(r.ok());
        CHECK(*r == saturated);
        CHECK(*r > 0);
        CHECK(got_amax == amax);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("delayed scaling with history length 1 and most_recent uses the previous step's amax", "[train]") {
  DelayedScaling c;
  c.enabled = true;
  c.history_len = 1;
  c.algo = DelayedScaling::Algo::MostRecent;
  AmaxHistory recent(c, 448.0);
  c.algo = DelayedScaling::Algo::Max;
  AmaxHistory max1(c, 448.0);
  Rng rng(5);
  for (int t = 0; t < 50; ++t) {
    const auto a = static_cast<float>(std::ldexp(rng.uniform() + 0.5, static_cast<int>(rng.next_u64() % 40) - 20));
    recent.record(a);
    max1.record(a);
    recent.update();
    max1.update();
    CHECK(recent.scale() == 448.0F / a);
    CHECK(max1.scale() == recent.scale());  // a window of one: max and most_recent agree
  }
  // An amax the float32 quotient cannot hold gives FLT_MAX (Transformer Engine's compute_scale_from_amax).
  recent.record(1e-44F);
  recent.update();
  CHECK(recent.scale() == std::numeric_limits<float>::max());
}

TEST_CASE("FP8 hybrid recipes: current and delayed per-tensor scaling train close to FP32", "[train]") {
  const TrainData d = synthetic_images(3, 100);
  TrainOptions o = small_mlp();
  o.recipe = *recipe_preset("fp32");
  auto base = run_training(d, o);
  REQUIRE(base);
  REQUIRE(base->test);
  for (const char* recipe : {"fp8_current", "fp8_delayed"}) {
    o.recipe = *recipe_preset(recipe);
    std::vector<StepMetrics> steps;
    auto r = run_training(d, o, [&](const StepMetrics& m) { steps.push_back(m); });
    REQUIRE(r);
    REQUIRE(r->test);
    INFO(recipe << ": loss " << r->losses.back() << " vs " << base->losses.back() << ", test accuracy "
                << r->test->accuracy << " vs " << base->test->accuracy);
    // E4M3 keeps 3 significand bits (relative rounding error up to 2^-4 per operand) and E5M2 2 bits, so the
    // trajectory drifts from FP32's; on these separable classes both reach the same accuracy band. The bounds
    // are a third of the FP32 loss drop and 3 points of accuracy.
    CHECK(r->test->accuracy >= base->test->accuracy - 0.03);
    CHECK(std::fabs(r->losses.back() - base->losses.back()) < (base->losses.front() - base->losses.back()) / 3);
    const bool delayed = std::string(recipe) == "fp8_delayed";
    for (const auto& op : steps.front().operands) {
      CHECK(op.delayed == delayed);
      if (delayed) CHECK(op.scale == 1.0);  // the first step casts with scale 1
    }
    if (delayed)
      for (const auto& op : steps.back().operands) CHECK(op.scale > 1.0);  // the small gradients are scaled up
  }
  // A negative margin scales past the format: with the previous step's amax (history 1, most_recent) and margin
  // -4, the values above 1/16 of the previous step's amax saturate. The weights move little in one step, so most
  // of them do.
  o.recipe = *recipe_preset("fp8_delayed");
  o.recipe.delayed.history_len = 1;
  o.recipe.delayed.algo = DelayedScaling::Algo::MostRecent;
  o.steps = 3;
  for (int margin : {-4, 0}) {
    o.recipe.delayed.margin = margin;
    std::vector<OperandMetric> last;
    REQUIRE(run_training(d, o, [&](const StepMetrics& m) { last = m.operands; }));
    for (const auto& op : last) {
      INFO(op.layer << "." << role_name(op.role) << " margin " << margin);
      CHECK(op.saturation_ratio() >= 0);
      CHECK(op.saturation_ratio() <= 1);
      if (op.role == Role::W && margin < 0) CHECK(op.saturation_ratio() > 0.5);
    }
  }
}

TEST_CASE("delayed-scaling recipe keys read, write back and reject bad values", "[train]") {
  auto r = parse_recipe("preset = fp8_delayed\namax_history_len = 16\namax_compute_algo = most_recent\nmargin = 2\n", "t");
  REQUIRE(r);
  CHECK(r->delayed.enabled);
  CHECK(r->delayed.history_len == 16);
  CHECK(r->delayed.algo == DelayedScaling::Algo::MostRecent);
  CHECK(r->delayed.margin == 2);
  auto again = parse_recipe(recipe_text(*r), "again");
  REQUIRE(again);
  CHECK(again->delayed.enabled);
  CHECK(again->delayed.history_len == 16);
  CHECK(again->delayed.algo == DelayedScaling::Algo::MostRecent);
  CHECK(again->delayed.margin == 2);
  CHECK(again->formats.g == "e5m2");
  auto cur = recipe_preset("fp8_current");
  REQUIRE(cur);
  CHECK_FALSE(cur->delayed.enabled);
  auto f = layer_formats(*cur, "fc1");
  REQUIRE(f);
  CHECK((*f)[static_cast<std::size_t>(Role::G)]->layout.scale.has_value());  // one FP32 scale per tensor
  CHECK((*f)[static_cast<std::size_t>(Role::G)]->layout.tiles.empty());
  for (const char* bad : {"scaling = later\n", "amax_history_len = 0\n", "amax_history_len = 2.5\n",
                          "amax_compute_algo = mean\n", "margin = 1e20\n", "margin = x\n"}) {
    INFO(bad);
    auto e = parse_recipe(bad, "bad.recipe");
    REQUIRE_FALSE(e);
    CHECK(e.error().message.find("bad.recipe:1:") != std::string::npos);
  }
}

TEST_CASE("a run resumed from any checkpoint continues bit-identically", "[train]") {
  const TrainData img = synthetic_images(21, 20);
  const TrainData txt = synthetic_text(22);
  for (const Case c : {Case{"mlp", "fp8_delayed", "sgd"}, Case{"mlp", "fp16", "adamw"},
                       Case{"transformer", "fp8_delayed", "adamw"}, Case{"resnet", "mxfp8", "adamw"}}) {
    TrainOptions o = case_options(c);
    o.model.hidden = {16};
    o.model.layers = 1;
    o.steps = 24;  // over two epochs of the 80 training images at batch 8
    o.batch = 8;
    o.eval_every = 5;
    o.recipe.delayed.history_len = 4;  // short enough that the history rolls over
    o.recipe.loss_scaling.growth_interval = 3;
    const TrainData& d = std::string(c.model) == "transformer" ? txt : img;
    std::vector<StepMetrics> whole;
    std::map<std::int64_t, std::string> states;
    o.checkpoint_every = 5;
    o.on_checkpoint = [&](std::int64_t done, const std::string& state) -> std::optional<Error> {
      states[done] = state;
      return std::nullopt;
    };
    auto full = run_training(d, o, [&](const StepMetrics& m) { whole.push_back(m); });
    REQUIRE(full);
    REQUIRE(states.size() == 4);  // after steps 5, 10, 15, 20 (none after the last)
    for (const auto& [done, state] : states) {
      INFO(c.model << " " << c.recipe << " resumed after step " << done);
      TrainOptions r = o;
      r.resume_state = state;
      r.on_checkpoint = {};
      std::vector<StepMetrics> rest;
      auto resumed = run_training(d, r, [&](const StepMetrics& m) { rest.push_back(m); });
      REQUIRE(resumed);
      REQUIRE(rest.size() == static_cast<std::size_t>(o.steps - done));
      REQUIRE(resumed->losses.size() == full->losses.size());
      for (std::size_t i = 0; i < full->losses.size(); ++i) CHECK(resumed->losses[i] == full->losses[i]);
      for (std::size_t i = 0; i < rest.size(); ++i) {
        const StepMetrics& a = whole[static_cast<std::size_t>(done) + i];
        const StepMetrics& b = rest[i];
        CHECK(a.step == b.step);
        CHECK(a.loss_scale == b.loss_scale);
        CHECK(a.skipped_total == b.skipped_total);
        REQUIRE(a.operands.size() == b.operands.size());
        for (std::size_t k = 0; k < a.operands.size(); ++k) {
          CHECK(same_bits(a.operands[k].mse, b.operands[k].mse));  // FP16 overflow steps have NaN errors
          CHECK(a.operands[k].scale == b.operands[k].scale);
          CHECK(a.operands[k].saturated == b.operands[k].saturated);
        }
        CHECK(a.validation.has_value() == b.validation.has_value());
        if (a.validation && b.validation) CHECK(a.validation->loss == b.validation->loss);
      }
      REQUIRE(resumed->validation);
      CHECK(resumed->validation->loss == full->validation->loss);
      CHECK(resumed->final_loss_scale == full->final_loss_scale);
      CHECK(resumed->skipped == full->skipped);
    }
  }
  // A state from another model, or damaged, is an error naming the misfit.
  TrainOptions o;
  o.model.hidden = {16};
  o.steps = 4;
  o.batch = 8;
  o.checkpoint_every = 2;
  std::string state;
  o.on_checkpoint = [&](std::int64_t, const std::string& s) -> std::optional<Error> {
    state = s;
    return std::nullopt;
  };
  REQUIRE(run_training(img, o));
  o.on_checkpoint = {};
  o.model.hidden = {17};
  o.resume_state = state;
  auto wrong = run_training(img, o);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message.find("fc1.weight") != std::string::npos);
  o.model.hidden = {16};
  o.resume_state = state.substr(0, state.size() / 2);
  auto cut = run_training(img, o);
  REQUIRE_FALSE(cut);
  CHECK(cut.error().message.find("truncated") != std::string::npos);
  // An error from the checkpoint writer stops the run with it.
  o.resume_state.clear();
  o.on_checkpoint = [](std::int64_t, const std::string&) -> std::optional<Error> { return make_error("disk full"); };
  auto failed = run_training(img, o);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().message == "disk full");
}

TEST_CASE("mxlab::transpose equals the element-by-element transpose, with strides", "[train]") {
  // The transposes of the GEMM operands: whole and partial 32 x 32 tiles and 4 x 4 squares, single rows and
  // columns, the CNN's im2col shapes.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1, 1},  {1, 37},  {37, 1},    {3, 5},
                                                                     {4, 4},  {31, 33}, {64, 96},   {67, 9},
                                                                     {896, 9}, {50176, 9}, {12544, 144}};
  for (const auto& [rows, cols] : shapes) {
    for (const std::int64_t pad : {0, 3}) {  // source and destination rows longer than the matrix
      INFO(rows << " x " << cols << " pad " << pad);
      const std::int64_t src_stride = cols + pad, dst_stride = rows + pad;
      std::vector<float> x(static_cast<std::size_t>(rows * src_stride));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
      std::vector<float> out(static_cast<std::size_t>(cols * dst_stride), -1.0F);
      transpose(x.data(), rows, cols, src_stride, out.data(), dst_stride);
      std::int64_t mismatches = 0;
      for (std::int64_t j = 0; j < cols; ++j)
        for (std::int64_t i = 0; i < dst_stride; ++i) {
          const float want = i < rows ? x[static_cast<std::size_t>(i * src_stride + j)] : -1.0F;
          mismatches += out[static_cast<std::size_t>(j * dst_stride + i)] == want ? 0 : 1;
        }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("recipe files: empty, a folder, a device or a FIFO are refused; recipe.txt keeps every digit", "[train]") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("mxlab-test-recipes-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "folder");
  std::ofstream(dir / "empty.txt").close();
  std::ofstream(dir / "comments.txt") << "# nothing but comments\n\n";
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  fs::create_symlink("/dev/zero", dir / "zero");
  const std::pair<std::string, std::string> refused[] = {
      {"empty.txt", "holds no settings"}, {"comments.txt", "holds no settings"}, {"folder", "is a directory"},
      {"fifo", "is a FIFO"},             {"zero", "is a character device"}};
  for (const auto& [name, why] : refused) {
    INFO(name);
    auto r = load_recipe((dir / name).string());
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains(name) && Catch::Contains(why));
  }
  CHECK_FALSE(parse_recipe("", "text"));
  CHECK(parse_recipe("preset = fp32\n", "text"));
  // Loss-scaling values come back from recipe.txt exactly (shortest round-trip digits).
  auto r = parse_recipe("loss_scaling = dynamic\nloss_scale = 0.1\ngrowth = 1.2345678901234567\nbackoff = 0.3\n"
                        "min_scale = 1e-30\n", "digits");
  REQUIRE(r);
  const std::string text = recipe_text(*r);
  CHECK_THAT(text, Catch::Contains("loss_scale = 0.1\n") && Catch::Contains("growth = 1.2345678901234567\n"));
  auto back = parse_recipe(text, "recipe.txt");
  REQUIRE(back);
  CHECK(back->loss_scaling.initial == r->loss_scaling.initial);
  CHECK(back->loss_scaling.growth == r->loss_scaling.growth);
  CHECK(back->loss_scaling.backoff == r->loss_scaling.backoff);
  CHECK(back->loss_scaling.min_scale == r->loss_scaling.min_scale);
  CHECK(recipe_text(*back) == text);
  fs::remove_all(dir);
}

TEST_CASE("memory estimates count the built models' parameters, layers and checkpoint states; a run past the "
          "budget is refused before it allocates", "[train]") {
  const TrainData img = synthetic_images(31, 10);
  const TrainData txt = synthetic_text(32);
  for (const Case c : {Case{"mlp", "fp8_delayed", "adamw"}, Case{"cnn", "mxfp8", "sgd"},
                       Case{"transformer", "fp8_delayed", "adamw"}, Case{"transformer", "fp32", "sgd"},
                       Case{"resnet", "mxfp8", "adamw"}, Case{"mobilenet", "fp8_delayed", "sgd"},
                       Case{"vit", "mxfp8", "adamw"}, Case{"mixer", "fp8_delayed", "adamw"}}) {
    INFO(c.model << " " << c.recipe << " " << c.optimizer);
    TrainOptions o = case_options(c);
    o.model.hidden = {16, 8};
    o.model.layers = 2;
    o.steps = 6;
    o.batch = 4;
    o.final_eval = false;
    o.recipe.delayed.history_len = 5;
    o.checkpoint_every = 4;
    std::string state;
    o.on_checkpoint = [&](std::int64_t, const std::string& s) -> std::optional<Error> {
      state = s;
      return std::nullopt;
    };
    const TrainData& d = std::string(c.model) == "transformer" ? txt : img;
    auto estimate = estimate_memory(d, o);
    REQUIRE(estimate);
    std::set<std::string> quantized;
    auto run = run_training(d, o, [&](const StepMetrics& m) {
      for (const auto& op : m.operands) quantized.insert(op.layer);
    });
    REQUIRE(run);
    CHECK(estimate->parameters == static_cast<std::uint64_t>(run->parameters));
    CHECK(estimate->weight_bytes >= 8.0 * static_cast<double>(run->parameters));  // values, gradients, copies
    // The state after step 4 is the largest state but for the losses of the two steps after it.
    CHECK(state.size() + 8 * 2 == estimate->max_state_bytes);
    CHECK(estimate->checkpoint_bytes == 2.0 * static_cast<double>(estimate->max_state_bytes));
    auto names = gemm_layers(d, o.model);
    REQUIRE(names);
    if (std::string(c.recipe) != "fp32") CHECK(std::set<std::string>(names->begin(), names->end()) == quantized);
    // The state checks out against the run's options, and not against another model's.
    o.resume_state = state;
    auto done = check_resume_state(d, o);
    REQUIRE(done);
    CHECK(*done == 4);
    o.model.hidden = {16, 9};
    o.model.conv1 = 17;
    o.model.d_model = 18;
    o.model.width = 3;
    CHECK_FALSE(check_resume_state(d, o));
  }
  ::setenv("MXLAB_MEMORY_BUDGET", "1M", 1);
  TrainOptions big;
  big.model.hidden = {4096, 4096};
  big.steps = 1;
  auto refused = run_training(img, big);
  ::unsetenv("MXLAB_MEMORY_BUDGET");
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message, Catch::Contains("the mlp on synthetic") && Catch::Contains("memory budget of 1 MB"));
}

TEST_CASE("by default validation runs every steps/10 on the first 1000 examples, the whole split at the end", "[train]") {
  const TrainData d = synthetic_images(31, 75);  // 300 training, 75 validation examples
  TrainOptions o;
  o.model.hidden = {8};
  o.recipe = *recipe_preset("fp32");
  o.steps = 20;
  o.batch = 8;
  o.metrics_every = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> evals;  // step, examples
  auto r = run_training(d, o, [&](const StepMetrics& m) {
    if (m.validation) evals.emplace_back(m.step, m.validation->examples);
  });
  REQUIRE(r);
  const std::vector<std::pair<std::int64_t, std::int64_t>> want = {{2, 75},  {4, 75},  {6, 75},  {8, 75},  {10, 75},
                                                                    {12, 75}, {14, 75}, {16, 75}, {18, 75}, {20, 75}};
  CHECK(evals == want);  // 75 validation examples, fewer than the limit: every one
  const TrainData big = synthetic_images(32, 150);  // 150 validation examples
  o.eval_limit = 100;
  evals.clear();
  REQUIRE(run_training(big, o, [&](const StepMetrics& m) {
    if (m.validation) evals.emplace_back(m.step, m.validation->examples);
  }));
  REQUIRE(evals.size() == 10);
  CHECK(evals[0] == std::pair<std::int64_t, std::int64_t>{2, 100});  // the first 100 during training
  CHECK(evals.back() == std::pair<std::int64_t, std::int64_t>{20, 150});  // the whole split after the last step
  CHECK(TrainOptions{}.eval_limit == 1000);
}

TEST_CASE("gradient_fidelity: FP32 against itself is exact, the whole-model row sums the tensors, threads change nothing",
          "[train]") {
  const TrainData d = synthetic_images(11, 40);
  for (const char* model : {"mlp", "resnet"}) {
    INFO(model);
    TrainOptions o;
    o.model.kind = model;
    o.model.hidden = {32, 16};
    o.model.width = 4;
    o.steps = 6;
    o.batch = 16;
    o.eval_every = 0;
    o.final_eval = false;
    o.checkpoint_last = true;
    o.on_checkpoint = [&](std::int64_t, const std::string& s) -> std::optional<Error> {
      o.resume_state = s;
      return std::nullopt;
    };
    REQUIRE(run_training(d, o));
    REQUIRE_FALSE(o.resume_state.empty());
    std::vector<Recipe> recipes = {*load_recipe("fp32"), *load_recipe("mxint8"), *load_recipe("mxfp4")};
    auto rows = gradient_fidelity(d, o, recipes, 3);
    REQUIRE(rows);
    const std::size_t per = rows->size() / recipes.size();
    REQUIRE(rows->size() == per * recipes.size());
    std::map<std::string, double> all_error;
    for (std::size_t r = 0; r < recipes.size(); ++r) {
      double gg = 0, ee = 0;
      for (std::size_t k = 0; k < per; ++k) {
        const GradientFidelity& f = (*rows)[r * per + k];
        INFO(f.recipe << " " << f.param);
        CHECK(f.recipe == recipes[r].name);
        // Every recipe is set against the same FP32 gradients and halves.
        CHECK(f.param == (*rows)[k].param);
        CHECK(f.fp32_norm == (*rows)[k].fp32_norm);
        CHECK(f.batch_noise == (*rows)[k].batch_noise);
        if (r == 0) {
          CHECK(f.rel_error == 0);  // the same computation on the same weights and batch
          // The cosine divides a sum of products by the root of a product of two equal sums: a few roundings of double.
          if (f.fp32_norm > 0) CHECK(std::abs(f.cosine - 1) < 1e-12);
        }
        if (k + 1 == per) {
          CHECK(f.param == "(all)");
          CHECK_FALSE(f.weight);
          // The whole model's squares are the tensors' squares summed (1e-12: the ratios went through square roots).
          CHECK(std::abs(f.rel_error * f.rel_error * gg - ee) <= 1e-12 * std::max(gg, 1e-300));
          CHECK(std::abs(f.fp32_norm * f.fp32_norm - gg) <= 1e-12 * gg);
          CHECK(f.batch_noise > 0);
          all_error[f.recipe] = f.rel_error;
        } else {
          gg += f.fp32_norm * f.fp32_norm;
          ee += f.rel_error * f.rel_error * f.fp32_norm * f.fp32_norm;
        }
      }
    }
    // Four bits move the gradient further than eight.
    CHECK(all_error["mxint8"] > 0);
    CHECK(all_error["mxfp4"] > all_error["mxint8"]);
    o.threads = 2;
    auto again = gradient_fidelity(d, o, recipes, 3);
    REQUIRE(again);
    REQUIRE(again->size() == rows->size());
    for (std::size_t i = 0; i < rows->size(); ++i) {
      CHECK((*again)[i].rel_error == (*rows)[i].rel_error);
      CHECK((*again)[i].cosine == (*rows)[i].cosine);
      CHECK((*again)[i].batch_noise == (*rows)[i].batch_noise);
    }
    o.batch = 15;
    auto odd = gradient_fidelity(d, o, recipes, 3);
    REQUIRE_FALSE(odd);
    CHECK_THAT(odd.error().message, Catch::Contains("even"));
    o.batch = 16;
    CHECK_FALSE(gradient_fidelity(d, o, recipes, 0));
    // Beyond the memory budget it is refused before anything is allocated, as training is.
    ::setenv("MXLAB_MEMORY_BUDGET", "1K", 1);
    auto big = gradient_fidelity(d, o, recipes, 3);
    ::unsetenv("MXLAB_MEMORY_BUDGET");
    REQUIRE_FALSE(big);
    CHECK_THAT(big.error().message, Catch::Contains("memory budget") && Catch::Contains("gradients of the"));
  }
}
