// Internal: the models (MLP, CNN, character-level transformer) built from the layers, templated on the scalar;
// the ResNet, MobileNetV2 and vision transformer are in image_models.hpp.
#pragma once

#include <cmath>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/train/data.hpp"
#include "mxlab/train/model_config.hpp"

namespace mxlab::train::detail {

/// A batch: images (size x features, float) or token windows (size x seq ids), and the targets (one per image,
/// or one per token).
struct Batch {
  std::int64_t size = 0;
  std::int64_t seq = 0;
  std::vector<float> x;
  std::vector<int> tokens;
  std::vector<int> targets;
};

/// The block formats of a named GEMM layer.
using FormatLookup = std::function<LayerFormats(const std::string& layer)>;

/// Standard normal values from a seeded stream (Box-Muller).
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : rng_(seed) {}
  double next() {
    const double u1 = 1.0 - rng_.uniform();
    const double u2 = rng_.uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  Rng rng_;
};

template <typename T>
void fill_normal(Mat<T>& m, double stddev, Normal& n) {
  for (std::int64_t i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(stddev * n.next());
}

template <typename T>
class Model {
 public:
  virtual ~Model() = default;
  /// Every parameter, in a fixed order.
  virtual std::vector<Param<T>*> params() = 0;
  /// State that is not trained but carried from step to step (batch normalisation's running statistics).
  virtual std::vector<Param<T>*> buffers() { return {}; }
  /// Logits, one row per target.
  virtual Mat<T> forward(const Batch& batch, QuantContext& ctx) = 0;
  /// Accumulates parameter gradients from d(loss)/d(logits).
  virtual void backward(const Mat<T>& dlogits, QuantContext& ctx) = 0;

  void zero_grad() {
    for (auto* p : params()) p->grad.setZero();
  }
  std::int64_t parameter_count() {
    std::int64_t n = 0;
    for (auto* p : params()) n += p->value.size();
    return n;
  }

 protected:
  /// Formats owned by the model (stable addresses for the layers).
  const LayerFormats* formats(const FormatLookup& lookup, const std::string& layer) {
    owned_.push_back(std::make_unique<LayerFormats>(lookup ? lookup(layer) : LayerFormats{}));
    return owned_.back().get();
  }

 private:
  std::vector<std::unique_ptr<LayerFormats>> owned_;
};

/// The memory a model takes, counted by its ModelDef::estimate: tensors, buffers and float32 temporaries.
struct MemoryShapes {
  std::vector<double> tensors;
  std::vector<double> buffers;  ///< state that is not trained (batch normalisation's running statistics)
  double weight_copies = 0;
  double floats = 0;
  void param(double n) { tensors.push_back(n); }
  /// A Linear layer over `rows` rows: weight and bias; the weight's quantized copies (along rows and down
  /// columns) and its gradient's temporary; per step its saved input, the input's quantized copies, the output
  /// and its gradient's copies, and the input gradient.
  void linear(double rows, double in, double out) {
    param(in * out);
    param(out);
    weight_copies += 3 * in * out;
    floats += 4 * rows * in + 3 * rows * out;
  }
};

/// What the trainer, its memory estimate and the gradient checks need of one model kind, specialised next to the
/// model's class (a kind without one does not compile). Each specialisation has:
/// - `check(data, config)`: the error of sizes that do not fit each other or the data (after the checks every
///   kind shares: a known kind, text or images as its kModelKinds row says), or nullopt;
/// - `layer_names(data, config)`: its GEMM layer names, without building it where its sizes allow;
/// - `make<T>(config, data, lookup, seed)`: the model;
/// - `estimate(data, config, rows, shapes)`: its tensors and one step's floats over `rows` rows;
/// - `gradient_model(config, batch, rng, normal, seed)`: the small double model of its gradient check, its batch
///   filled, and `kDeepCheck` (4 elements per tensor with the five-point stencil, for the deep models).
template <ModelKind K>
struct ModelDef;

/// f(ModelDef<kind>{}), for the kind of every kModelKinds row.
template <std::size_t I = 0, typename F>
decltype(auto) with_model_def(ModelKind kind, const F& f) {
  constexpr ModelKind k = kModelKinds[I].value;
  if constexpr (I + 1 < std::size(kModelKinds)) {
    if (kind != k) return with_model_def<I + 1>(kind, f);
  }
  return f(ModelDef<k>{});
}

/// Gradient checks: `side` x `side` images of 3 uniform pixels each, 3 targets.
inline void gradient_images(Batch& b, Rng& rng, std::int64_t side) {
  for (std::int64_t i = 0; i < 3 * side * side; ++i) b.x.push_back(static_cast<float>(rng.uniform()));
  b.targets = {1, 0, 2};
}

inline std::optional<Error> check_hidden(const ModelConfig& c) {
  for (auto h : c.hidden)
    if (h < 1) return make_error("MLP hidden widths must be positive");
  return std::nullopt;
}

inline std::optional<Error> check_heads(const ModelConfig& c) {
  if (c.d_model < 1 || c.heads < 1 || c.d_model % c.heads != 0)
    return make_error("transformer width " + std::to_string(c.d_model) + " must be a positive multiple of the heads");
  return std::nullopt;
}

/// The GEMM layer names of a transformer (vit: with its patch embedding).
inline std::vector<std::string> transformer_layer_names(const ModelConfig& c, bool vit) {
  std::vector<std::string> names;
  names.push_back("head");
  if (vit) names.push_back("patch_embed");
  for (std::int64_t i = 0; i < c.layers; ++i)
    for (const char* g : {".attn.qkv", ".attn.proj", ".attn.qk", ".attn.av", ".mlp.fc1", ".mlp.fc2"})
      names.push_back("blocks." + std::to_string(i) + g);
  return names;
}

/// The memory of a transformer (vit: the vision transformer, over patches and a class token).
inline void estimate_transformer(const TrainData& data, const ModelConfig& c, double rows, bool vit, MemoryShapes& s) {
  const double patches = vit ? static_cast<double>((data.rows / c.patch) * (data.cols / c.patch)) : 0.0;
  const auto d = static_cast<double>(c.d_model), t = vit ? patches + 1 : static_cast<double>(c.context),
             v = static_cast<double>(vit ? data.classes : data.vocabulary()), heads = static_cast<double>(c.heads);
  const double r = rows * t, dh = d / std::max(1.0, heads), units = rows * heads;
  if (vit) {
    s.floats += 2 * rows * static_cast<double>(data.features());  // the batch and its patches
    s.linear(rows * patches, static_cast<double>(c.patch * c.patch * data.channels), d);
    s.param(d);  // class token
  } else {
    s.param(v * d);
  }
  s.param(t * d);
  s.floats += 2 * r * d;  // embedded input and its gradient
  for (std::int64_t i = 0; i < c.layers; ++i) {
    for (int k = 0; k < 4; ++k) s.param(d);  // ln1, ln2 gain and bias
    s.floats += 2 * 5 * r * d;               // the two layer norms
    s.linear(r, d, 3 * d);
    s.floats += 3 * r * d * 2 + 2 * r * d;   // qkv output and its gradient, heads' output and gradient
    s.floats += units * (7 * t * t + 12 * t * dh);  // per (sequence, head): probabilities, Q K^T and P V operands
    s.linear(r, d, d);
    s.linear(r, d, 4 * d);
    s.floats += 4 * r * 4 * d;  // GELU: saved input, tanh values, output, gradient
    s.linear(r, 4 * d, d);
    s.floats += 2 * r * d;  // residual sums
  }
  s.param(d);
  s.param(d);
  s.floats += 5 * r * d;
  const double head_rows = vit ? rows : r;  // the vision transformer's head reads the class token only
  s.linear(head_rows, d, v);
  s.floats += 2 * head_rows * v;
}

template <typename T>
Mat<T> images_matrix(const Batch& b) {
  Mat<T> x(b.size, static_cast<std::int64_t>(b.x.size()) / std::max<std::int64_t>(b.size, 1));
  for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(b.x[static_cast<std::size_t>(i)]);
  return x;
}

/// He-normal initialisation (He et al. 2015, eq. 10): stddev = gain * sqrt(2 / fan_in); biases zero.
template <typename T>
void init_he(Linear<T>& l, double gain, Normal& n) {
  fill_normal(l.w.value, gain * std::sqrt(2.0 / static_cast<double>(l.w.value.cols())), n);
}

/// Multi-layer perceptron: (Linear, activation) per hidden width, then a Linear to the classes.
template <typename T>
class Mlp final : public Model<T> {
 public:
  Mlp(const ModelConfig& c, std::int64_t inputs, int classes, const FormatLookup& lookup, std::uint64_t seed) {
    Normal n(seed);
    std::int64_t width = inputs;
    std::vector<std::int64_t> widths = c.hidden;
    widths.push_back(classes);
    for (std::size_t i = 0; i < widths.size(); ++i) {
      const std::string name = "fc" + std::to_string(i + 1);
      layers_.emplace_back(name, width, widths[i], this->formats(lookup, name));
      init_he(layers_.back(), i + 1 < widths.size() ? c.init_gain : c.init_gain * std::sqrt(0.5), n);
      width = widths[i];
    }
    acts_.resize(c.hidden.size());
    for (auto& a : acts_) a.gelu = c.gelu;
  }
  std::vector<Param<T>*> params() override {
    std::vector<Param<T>*> p;
    for (auto& l : layers_) p.push_back(&l.w), p.push_back(&l.b);
    return p;
  }
  Mat<T> forward(const Batch& batch, QuantContext& ctx) override {
    Mat<T> x = images_matrix<T>(batch);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      x = layers_[i].forward(x, ctx);
      if (i < acts_.size()) x = acts_[i].forward(x, ctx);
    }
    return x;
  }
  void backward(const Mat<T>& dlogits, QuantContext& ctx) override {
    Mat<T> d = dlogits;
    for (std::size_t i = layers_.size(); i-- > 0;) {
      d = layers_[i].backward(d, ctx, i > 0);
      if (i > 0) d = acts_[i - 1].backward(d, ctx);
    }
  }

 private:
  std::vector<Linear<T>> layers_;
  std::vector<Activation<T>> acts_;
};

template <>
struct ModelDef<ModelKind::Mlp> {
  static std::optional<Error> check(const TrainData&, const ModelConfig& c) { return check_hidden(c); }
  static std::vector<std::string> layer_names(const TrainData&, const ModelConfig& c) {
    std::vector<std::string> names;
    for (std::size_t i = 0; i <= c.hidden.size(); ++i) names.push_back("fc" + std::to_string(i + 1));
    return names;
  }
  template <typename T>
  static std::unique_ptr<Model<T>> make(const ModelConfig& c, const TrainData& data, const FormatLookup& lookup,
                                        std::uint64_t seed) {
    return std::make_unique<Mlp<T>>(c, data.features(), data.classes, lookup, seed);
  }
  static void estimate(const TrainData& data, const ModelConfig& c, double rows, MemoryShapes& s) {
    double width = static_cast<double>(data.features());
    s.floats += 2 * rows * width;  // the batch and its matrix
    std::vector<std::int64_t> widths = c.hidden;
    widths.push_back(data.classes);
    for (std::size_t i = 0; i < widths.size(); ++i) {
      const auto out = static_cast<double>(widths[i]);
      s.linear(rows, width, out);
      // activation: saved input, output, gradient (GELU: and its tanh values)
      if (i + 1 < widths.size()) s.floats += (c.gelu ? 4 : 3) * rows * out;
      width = out;
    }
    s.floats += 2 * rows * width;  // logits and their gradient
  }
  static constexpr bool kDeepCheck = false;
  static std::unique_ptr<Model<double>> gradient_model(const ModelConfig& c, Batch& b, Rng& rng, Normal&,
                                                       std::uint64_t seed) {
    gradient_images(b, rng, 8);
    return std::make_unique<Mlp<double>>(c, 64, 3, nullptr, seed);
  }
};

/// Small CNN: conv1 3x3 - act - pool - conv2 3x3 - act - pool - fc1 - act - fc2 (NHWC activations).
template <typename T>
class Cnn final : public Model<T> {
 public:
  Cnn(const ModelConfig& c, std::int64_t rows, std::int64_t cols, std::int64_t channels, int classes,
      const FormatLookup& lookup, std::uint64_t seed)
      : conv1_("conv1", channels, c.conv1, 3, this->formats(lookup, "conv1")),
        conv2_("conv2", c.conv1, c.conv2, 3, this->formats(lookup, "conv2")),
        fc1_("fc1", (rows / 4) * (cols / 4) * c.conv2, c.fc, this->formats(lookup, "fc1")),
        fc2_("fc2", c.fc, classes, this->formats(lookup, "fc2")),
        rows_(rows), cols_(cols), channels_(channels) {
    Normal n(seed);
    init_he(conv1_.lin, c.init_gain, n);
    init_he(conv2_.lin, c.init_gain, n);
    init_he(fc1_, c.init_gain, n);
    init_he(fc2_, c.init_gain * std::sqrt(0.5), n);
    for (auto* a : {&act1_, &act2_, &act3_}) a->gelu = c.gelu;
    pool1_.max = pool2_.max = !c.avg_pool;
  }
  std::vector<Param<T>*> params() override {
    return {&conv1_.lin.w, &conv1_.lin.b, &conv2_.lin.w, &conv2_.lin.b, &fc1_.w, &fc1_.b, &fc2_.w, &fc2_.b};
  }
  Mat<T> forward(const Batch& batch, QuantContext& ctx) override {
    const Mat<T> img = images_matrix<T>(batch);
    Dims d{batch.size, rows_, cols_, channels_};
    Mat<T> x = Eigen::Map<const Mat<T>>(img.data(), d.batch * d.height * d.width, d.channels);
    x = act1_.forward(conv1_.forward(x, d, ctx), ctx);
    d.channels = conv1_.lin.w.value.rows();
    x = pool1_.forward(x, d, ctx);
    d.height /= 2, d.width /= 2;
    x = act2_.forward(conv2_.forward(x, d, ctx), ctx);
    d.channels = conv2_.lin.w.value.rows();
    x = pool2_.forward(x, d, ctx);
    d.height /= 2, d.width /= 2;
    flat_ = d;
    const Mat<T> f = Eigen::Map<const Mat<T>>(x.data(), d.batch, d.height * d.width * d.channels);
    return fc2_.forward(act3_.forward(fc1_.forward(f, ctx), ctx), ctx);
  }
  void backward(const Mat<T>& dlogits, QuantContext& ctx) override {
    Mat<T> d = act3_.backward(fc2_.backward(dlogits, ctx), ctx);
    d = fc1_.backward(d, ctx);
    Mat<T> g = Eigen::Map<const Mat<T>>(d.data(), flat_.batch * flat_.height * flat_.width, flat_.channels);
    g = act2_.backward(pool2_.backward(g, ctx), ctx);
    g = conv2_.backward(g, ctx);
    g = act1_.backward(pool1_.backward(g, ctx), ctx);
    conv1_.backward(g, ctx, false);
  }

 private:
  Conv2d<T> conv1_, conv2_;
  Linear<T> fc1_, fc2_;
  Activation<T> act1_, act2_, act3_;
  Pool2d<T> pool1_, pool2_;
  std::int64_t rows_, cols_, channels_;
  Dims flat_;
};

template <>
struct ModelDef<ModelKind::Cnn> {
  static std::optional<Error> check(const TrainData& data, const ModelConfig& c) {
    if (auto e = check_hidden(c)) return e;
    if (data.rows % 4 != 0 || data.cols % 4 != 0)
      return make_error("the CNN's two 2x2 poolings need image sides divisible by 4");
    if (c.conv1 < 1 || c.conv2 < 1 || c.fc < 1) return make_error("CNN widths must be positive");
    return std::nullopt;
  }
  static std::vector<std::string> layer_names(const TrainData&, const ModelConfig&) {
    return {"conv1", "conv2", "fc1", "fc2"};
  }
  template <typename T>
  static std::unique_ptr<Model<T>> make(const ModelConfig& c, const TrainData& data, const FormatLookup& lookup,
                                        std::uint64_t seed) {
    return std::make_unique<Cnn<T>>(c, data.rows, data.cols, data.channels, data.classes, lookup, seed);
  }
  static void estimate(const TrainData& data, const ModelConfig& c, double rows, MemoryShapes& s) {
    const auto h = static_cast<double>(data.rows), w = static_cast<double>(data.cols);
    const auto ch = static_cast<double>(data.channels), c1 = static_cast<double>(c.conv1),
               c2 = static_cast<double>(c.conv2), fc = static_cast<double>(c.fc);
    const double p1 = rows * h * w, p2 = p1 / 4, p3 = p2 / 4;  // pixels before each pooling, after the second
    const double act = c.gelu ? 4 : 3;  // an activation's saved input, output and gradient (GELU: its tanh values)
    s.floats += 2 * p1 * ch;  // the batch and its matrix
    s.floats += p1 * 9 * ch;  // im2col
    s.linear(p1, 9 * ch, c1);
    s.floats += act * p1 * c1 + 4 * p2 * c1 + p1 * c1;  // activation; pooling output, arg max (8 bytes), gradient
    s.floats += 2 * p2 * 9 * c1 + p2 * c1;  // im2col, its gradient, col2im
    s.linear(p2, 9 * c1, c2);
    s.floats += act * p2 * c2 + 4 * p3 * c2 + p2 * c2;
    s.linear(rows, (h / 4) * (w / 4) * c2, fc);
    s.floats += act * rows * fc;
    s.linear(rows, fc, data.classes);
    s.floats += 2 * rows * data.classes;
  }
  static constexpr bool kDeepCheck = false;
  static std::unique_ptr<Model<double>> gradient_model(const ModelConfig& c, Batch& b, Rng& rng, Normal&,
                                                       std::uint64_t seed) {
    gradient_images(b, rng, 8);
    return std::make_unique<Cnn<double>>(c, 8, 8, 1, 3, nullptr, seed);
  }
};

/// One pre-norm transformer block: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))).
template <typename T>
struct Block {
  LayerNorm<T> ln1, ln2;
  Attention<T> attn;
  Linear<T> fc1, fc2;
  Activation<T> act;
  Block(const std::string& n, std::int64_t d, std::int64_t heads, const LayerFormats* qkv, const LayerFormats* proj,
        const LayerFormats* qk, const LayerFormats* av, const LayerFormats* f1, const LayerFormats* f2)
      : ln1(n + ".ln1", d), ln2(n + ".ln2", d), attn(n + ".attn", d, heads, qkv, proj, qk, av),
        fc1(n + ".mlp.fc1", d, 4 * d, f1), fc2(n + ".mlp.fc2", 4 * d, d, f2) {
    act.gelu = true;
  }
};

/// The blocks of a transformer, blocks.0 .. blocks.L-1, with GPT-2's initialisation: N(0, 0.02), residual output
/// projections scaled by 1/sqrt(2 L). causal: each position attends to those before it only.
template <typename T>
struct BlockStack {
  std::vector<Block<T>> blocks;

  void build(const ModelConfig& c, bool causal, const std::function<const LayerFormats*(const std::string&)>& fmt,
             Normal& n) {
    const double std_res = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
    blocks.reserve(static_cast<std::size_t>(c.layers));
    for (std::int64_t i = 0; i < c.layers; ++i) {
      const std::string b = "blocks." + std::to_string(i);
      blocks.emplace_back(b, c.d_model, c.heads, fmt(b + ".attn.qkv"), fmt(b + ".attn.proj"), fmt(b + ".attn.qk"),
                          fmt(b + ".attn.av"), fmt(b + ".mlp.fc1"), fmt(b + ".mlp.fc2"));
      auto& blk = blocks.back();
      blk.attn.causal = causal;
      fill_normal(blk.attn.qkv.w.value, 0.02, n);
      fill_normal(blk.attn.proj.w.value, std_res, n);
      fill_normal(blk.fc1.w.value, 0.02, n);
      fill_normal(blk.fc2.w.value, std_res, n);
    }
  }
  void collect(std::vector<Param<T>*>& p) {
    for (auto& b : blocks)
      for (auto* q : {&b.ln1.gain, &b.ln1.bias, &b.attn.qkv.w, &b.attn.qkv.b, &b.attn.proj.w, &b.attn.proj.b,
                      &b.ln2.gain, &b.ln2.bias, &b.fc1.w, &b.fc1.b, &b.fc2.w, &b.fc2.b})
        p.push_back(q);
  }
  /// x (batch * seq rows) through every block: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))).
  void forward(Mat<T>& x, std::int64_t batch, std::int64_t seq, QuantContext& ctx) {
    for (auto& b : blocks) {
      x += b.attn.forward(b.ln1.forward(x, ctx), batch, seq, ctx);
      x += b.fc2.forward(b.act.forward(b.fc1.forward(b.ln2.forward(x, ctx), ctx), ctx), ctx);
    }
  }
  void backward(Mat<T>& dx, QuantContext& ctx) {
    for (std::size_t i = blocks.size(); i-- > 0;) {
      auto& b = blocks[i];
      dx += b.ln2.backward(b.fc1.backward(b.act.backward(b.fc2.backward(dx, ctx), ctx), ctx), ctx);
      dx += b.ln1.backward(b.attn.backward(dx, ctx), ctx);
    }
  }
};

/// Decoder-only character-level transformer (GPT-2 layout: learned positions, pre-norm blocks, final norm).
template <typename T>
class Transformer final : public Model<T> {
 public:
  Transformer(const ModelConfig& c, int vocab, const FormatLookup& lookup, std::uint64_t seed)
      : embed_("embed", vocab, c.context, c.d_model), ln_f_("ln_f", c.d_model),
        head_("head", c.d_model, vocab, this->formats(lookup, "head")) {
    Normal n(seed);
    fill_normal(embed_.token.value, 0.02, n);
    fill_normal(embed_.position.value, 0.01, n);
    blocks_.build(c, true, [&](const std::string& name) { return this->formats(lookup, name); }, n);
    fill_normal(head_.w.value, 0.02, n);
  }
  std::vector<Param<T>*> params() override {
    std::vector<Param<T>*> p = {&embed_.token, &embed_.position};
    blocks_.collect(p);
    for (auto* q : {&ln_f_.gain, &ln_f_.bias, &head_.w, &head_.b}) p.push_back(q);
    return p;
  }
  Mat<T> forward(const Batch& batch, QuantContext& ctx) override {
    Mat<T> x = embed_.forward(batch.tokens, batch.size, batch.seq);
    blocks_.forward(x, batch.size, batch.seq, ctx);
    return head_.forward(ln_f_.forward(x, ctx), ctx);
  }
  void backward(const Mat<T>& dlogits, QuantContext& ctx) override {
    Mat<T> dx = ln_f_.backward(head_.backward(dlogits, ctx), ctx);
    blocks_.backward(dx, ctx);
    embed_.backward(dx);
  }

 private:
  Embedding<T> embed_;
  BlockStack<T> blocks_;
  LayerNorm<T> ln_f_;
  Linear<T> head_;
};

template <>
struct ModelDef<ModelKind::Transformer> {
  static std::optional<Error> check(const TrainData&, const ModelConfig& c) {
    if (auto e = check_heads(c)) return e;
    if (c.layers < 1 || c.context < 2) return make_error("transformer needs layers >= 1 and context >= 2");
    return std::nullopt;
  }
  static std::vector<std::string> layer_names(const TrainData&, const ModelConfig& c) {
    return transformer_layer_names(c, false);
  }
  template <typename T>
  static std::unique_ptr<Model<T>> make(const ModelConfig& c, const TrainData& data, const FormatLookup& lookup,
                                        std::uint64_t seed) {
    return std::make_unique<Transformer<T>>(c, data.vocabulary(), lookup, seed);
  }
  static void estimate(const TrainData& data, const ModelConfig& c, double rows, MemoryShapes& s) {
    estimate_transformer(data, c, rows, false, s);
  }
  static constexpr bool kDeepCheck = false;
  static std::unique_ptr<Model<double>> gradient_model(const ModelConfig& c, Batch& b, Rng& rng, Normal& nrm,
                                                       std::uint64_t seed) {
    b.seq = 5;
    for (int i = 0; i < 15; ++i) {
      b.tokens.push_back(static_cast<int>(rng.next_u64() % 7));
      b.targets.push_back(static_cast<int>(rng.next_u64() % 7));
    }
    auto m = std::make_unique<Transformer<double>>(c, 7, nullptr, seed);
    // Larger weights than GPT-2's 0.02 so every path carries gradient well above the difference noise.
    for (auto* p : m->params()) fill_normal(p->value, 0.3, nrm);
    return m;
  }
};

}  // namespace mxlab::train::detail
