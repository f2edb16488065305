// Internal: the models (MLP, CNN, character-level transformer) built from the layers, templated on the scalar;
// the ResNet, MobileNetV2 and vision transformer are in image_models.hpp.
#pragma once

#include <cmath>
#include <functional>
#include <memory>

#include "layers.hpp"
#include "mxlab/core/random.hpp"
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

}  // namespace mxlab::train::detail
