// Internal: image models sized for 28x28 inputs that have what the MX-SAFE paper's ImageNet models have and the
// small CNN lacks: a ResNet (basic residual blocks, batch normalisation, global average pooling), a MobileNetV2
// (inverted residuals: pointwise expansion, depthwise convolution, linear pointwise projection) and a vision
// transformer (DeiT's layout: patch embedding, class token, bidirectional pre-norm blocks); and an MLP-Mixer
// (patches mixed by MLPs across patches and across channels).
#pragma once

#include <optional>

#include "image_layers.hpp"
#include "models.hpp"

namespace mxlab::train::detail {

/// The formats of a named GEMM layer, owned by the model.
using FormatsOf = std::function<const LayerFormats*(const std::string&)>;

/// Activation floats a model keeps per image in one training step, counted from its layers' shapes (for the
/// memory estimate): each convolution's im2col columns with their quantized copies and gradient, and each
/// layer's outputs with their gradients.
struct FloatCount {
  double per_image = 0;
  void conv(const Dims& out, std::int64_t k, std::int64_t in_channels) {
    const double pixels = static_cast<double>(out.height * out.width);
    per_image += pixels * (5.0 * static_cast<double>(k * k * in_channels) + 4.0 * static_cast<double>(out.channels));
  }
  bool gelu = false;  ///< the activations are GELU, which keeps its tanh values too
  /// A non-GEMM layer: its saved input, output and gradient.
  void elementwise(const Dims& d) { per_image += 3.0 * static_cast<double>(d.height * d.width * d.channels); }
  /// An activation: a non-GEMM layer, and GELU's tanh values.
  void activation(const Dims& d) {
    elementwise(d);
    if (gelu) per_image += static_cast<double>(d.height * d.width * d.channels);
  }
};

/// The batch's images as NHWC rows, one per pixel ((batch * height * width) x channels).
template <typename T>
Mat<T> pixel_rows(const Batch& batch, const Dims& d) {
  const Mat<T> img = images_matrix<T>(batch);
  return Eigen::Map<const Mat<T>>(img.data(), d.batch * d.height * d.width, d.channels);
}

/// ResNet basic block (He et al. 2016): conv3x3 (stride) - BN - ReLU - conv3x3 - BN, plus the input (through
/// a 1x1 convolution of the stride and BN, `downsample`, when the shape changes), then ReLU. Names as
/// torchvision's: NAME.conv1, NAME.bn1, NAME.conv2, NAME.bn2, NAME.downsample.0, NAME.downsample.1.
template <typename T>
struct BasicBlock {
  Conv2d<T> conv1, conv2;
  BatchNorm<T> bn1, bn2;
  std::optional<Conv2d<T>> down;
  std::optional<BatchNorm<T>> down_bn;
  Activation<T> act1, act2;
  Dims in;

  BasicBlock(const std::string& n, std::int64_t cin, std::int64_t cout, std::int64_t stride, const FormatsOf& fmt)
      : conv1(n + ".conv1", cin, cout, 3, fmt(n + ".conv1"), stride, false),
        conv2(n + ".conv2", cout, cout, 3, fmt(n + ".conv2"), 1, false), bn1(n + ".bn1", cout), bn2(n + ".bn2", cout) {
    if (stride != 1 || cin != cout) {
      down.emplace(n + ".downsample.0", cin, cout, 1, fmt(n + ".downsample.0"), stride, false);
      down_bn.emplace(n + ".downsample.1", cout);
    }
  }
  /// d: the input's dimensions in, the output's out.
  Mat<T> forward(const Mat<T>& x, Dims& d, QuantContext& ctx) {
    in = d;
    const Dims mid = conv1.out_dims(d);
    Mat<T> h = act1.forward(bn1.forward(conv1.forward(x, d, ctx), ctx), ctx);
    h = bn2.forward(conv2.forward(h, mid, ctx), ctx);
    if (down) h += down_bn->forward(down->forward(x, d, ctx), ctx);
    else h += x;
    d = mid;
    return act2.forward(std::move(h), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) {
    const Mat<T> g = act2.backward(dy, ctx);
    Mat<T> dx = conv2.backward(bn2.backward(g, ctx), ctx);
    dx = conv1.backward(bn1.backward(act1.backward(dx, ctx), ctx), ctx);
    if (down) dx += down->backward(down_bn->backward(g, ctx), ctx);
    else dx += g;
    return dx;
  }
  void collect(std::vector<Param<T>*>& p) {
    conv1.lin.collect(p);
    bn1.collect(p);
    conv2.lin.collect(p);
    bn2.collect(p);
    if (down) down->lin.collect(p), down_bn->collect(p);
  }
  void collect_buffers(std::vector<Param<T>*>& p) {
    bn1.collect_buffers(p);
    bn2.collect_buffers(p);
    if (down_bn) down_bn->collect_buffers(p);
  }
  void count(const Dims& d, FloatCount& fc) const {
    const Dims mid = conv1.out_dims(d);
    fc.conv(mid, 3, d.channels);
    fc.conv(mid, 3, mid.channels);
    if (down) fc.conv(mid, 1, d.channels);
    for (int i = 0; i < 3; ++i) fc.elementwise(mid);  // the batch norms and the sum
    fc.activation(mid), fc.activation(mid);
  }
};

/// A ResNet-18 layout for small images (as the CIFAR ResNets of He et al. 2016, section 4.2): conv1 3x3 (width
/// w, stride 1) - bn1 - ReLU, four stages layer1..layer4 of two basic blocks (widths w, 2w, 4w, 8w; the first
/// block of stages 2-4 has stride 2: 28 -> 14 -> 7 -> 4), global average pooling, fc. Layer names follow
/// torchvision's resnet18 (layer2.1.conv2 is the layer of the paper's Fig. 2(b)).
template <typename T>
class ResNet final : public Model<T> {
 public:
  ResNet(const ModelConfig& c, std::int64_t rows, std::int64_t cols, std::int64_t channels, int classes,
         const FormatLookup& lookup, std::uint64_t seed)
      : stem_("conv1", channels, c.width, 3, this->formats(lookup, "conv1"), 1, false), bn_("bn1", c.width),
        fc_("fc", 8 * c.width, classes, this->formats(lookup, "fc")), rows_(rows), cols_(cols), channels_(channels) {
    const FormatsOf fmt = [&](const std::string& n) { return this->formats(lookup, n); };
    std::int64_t cin = c.width;
    Dims d{1, rows, cols, c.width};
    counted_.gelu = c.gelu;
    counted_.conv(d, 3, channels);
    counted_.elementwise(d);
    counted_.activation(d);
    blocks_.reserve(8);
    for (int stage = 0; stage < 4; ++stage)
      for (int j = 0; j < 2; ++j) {
        const std::int64_t cout = c.width << stage;
        blocks_.emplace_back("layer" + std::to_string(stage + 1) + "." + std::to_string(j), cin, cout,
                             stage > 0 && j == 0 ? 2 : 1, fmt);
        blocks_.back().count(d, counted_);
        d = blocks_.back().conv1.out_dims(d);
        cin = cout;
      }
    Normal n(seed);
    init_he(stem_.lin, c.init_gain, n);
    for (auto& b : blocks_) {
      init_he(b.conv1.lin, c.init_gain, n);
      init_he(b.conv2.lin, c.init_gain, n);
      if (b.down) init_he(b.down->lin, c.init_gain, n);
    }
    init_he(fc_, c.init_gain * std::sqrt(0.5), n);
    act_.gelu = c.gelu;
    for (auto& b : blocks_) b.act1.gelu = b.act2.gelu = c.gelu;
  }
  std::vector<Param<T>*> params() override {
    std::vector<Param<T>*> p;
    stem_.lin.collect(p);
    bn_.collect(p);
    for (auto& b : blocks_) b.collect(p);
    fc_.collect(p);
    return p;
  }
  std::vector<Param<T>*> buffers() override {
    std::vector<Param<T>*> p;
    bn_.collect_buffers(p);
    for (auto& b : blocks_) b.collect_buffers(p);
    return p;
  }
  Mat<T> forward(const Batch& batch, QuantContext& ctx) override {
    Dims d{batch.size, rows_, cols_, channels_};
    Mat<T> x = act_.forward(bn_.forward(stem_.forward(pixel_rows<T>(batch, d), d, ctx), ctx), ctx);
    d = stem_.out_dims(d);
    for (auto& b : blocks_) x = b.forward(x, d, ctx);
    return fc_.forward(pool_.forward(x, d, ctx), ctx);
  }
  void backward(const Mat<T>& dlogits, QuantContext& ctx) override {
    Mat<T> g = pool_.backward(fc_.backward(dlogits, ctx), ctx);
    for (std::size_t i = blocks_.size(); i-- > 0;) g = blocks_[i].backward(g, ctx);
    stem_.backward(bn_.backward(act_.backward(g, ctx), ctx), ctx, false);
  }
  /// Activation floats per image of a training step.
  double floats_per_image() const { return counted_.per_image; }

 private:
  Conv2d<T> stem_;
  BatchNorm<T> bn_;
  Activation<T> act_;
  std::vector<BasicBlock<T>> blocks_;
  GlobalAvgPool<T> pool_;
  Linear<T> fc_;
  std::int64_t rows_, cols_, channels_;
  FloatCount counted_;
};

/// The ResNet's and MobileNetV2's shared pieces: their width, their names and memory from the model built in float
/// without quantization (their sizes are fixed: a few megabytes), their gradient check's batch and parameters.
inline std::optional<Error> check_fixed_width(const ModelConfig& c) {
  if (c.width < 1 || c.width > 256) return make_error(std::string(c.kind.name()) + " width must be 1..256");
  return std::nullopt;
}

template <typename Net>
std::vector<std::string> fixed_layer_names(const TrainData& data, const ModelConfig& c) {
  std::vector<std::string> names;
  const Net net(c, data.rows, data.cols, data.channels, data.classes,
                [&](const std::string& layer) {
                  names.push_back(layer);
                  return LayerFormats{};
                },
                0);
  return names;
}

template <typename Net>
void estimate_fixed(const TrainData& data, const ModelConfig& c, double rows, MemoryShapes& s) {
  // Fixed sizes (a few megabytes of weights): built to count them.
  Net m(c, data.rows, data.cols, data.channels, data.classes, nullptr, 0);
  for (auto* p : m.params()) {
    s.param(static_cast<double>(p->value.size()));
    if (p->decay) s.weight_copies += 3 * static_cast<double>(p->value.size());
  }
  for (auto* b : m.buffers()) s.buffers.push_back(static_cast<double>(b->value.size()));
  s.floats += rows * (m.floats_per_image() + 2.0 * static_cast<double>(data.features()));
}

/// 16x16 images, so that the last stage (stride 8) still normalises 4 pixels per image (batch normalisation over
/// 3 values is close to singular); batch normalisation's gains and shifts start at 1 and 0: drawn around them.
template <typename Net>
std::unique_ptr<Model<double>> fixed_gradient_model(const ModelConfig& c, Batch& b, Rng& rng, Normal& nrm,
                                                    std::uint64_t seed) {
  gradient_images(b, rng, 16);
  auto m = std::make_unique<Net>(c, 16, 16, 1, 3, nullptr, seed);
  for (auto* p : m->params()) {
    if (p->decay) continue;
    fill_normal(p->value, 0.3, nrm);
    if (p->name.ends_with(".weight")) p->value.array() += 1.0;
  }
  return m;
}

/// The ResNet's and MobileNetV2's ModelDef.
template <template <typename> class Net>
struct FixedModelDef {
  static std::optional<Error> check(const TrainData&, const ModelConfig& c) { return check_fixed_width(c); }
  static std::vector<std::string> layer_names(const TrainData& data, const ModelConfig& c) {
    return fixed_layer_names<Net<float>>(data, c);
  }
  template <typename T>
  static std::unique_ptr<Model<T>> make(const ModelConfig& c, const TrainData& data, const FormatLookup& lookup,
                                        std::uint64_t seed) {
    return std::make_unique<Net<T>>(c, data.rows, data.cols, data.channels, data.classes, lookup, seed);
  }
  static void estimate(const TrainData& data, const ModelConfig& c, double rows, MemoryShapes& s) {
    estimate_fixed<Net<float>>(data, c, rows, s);
  }
  static constexpr bool kDeepCheck = true;
  static std::unique_ptr<Model<double>> gradient_model(const ModelConfig& c, Batch& b, Rng& rng, Normal& nrm,
                                                       std::uint64_t seed) {
    return fixed_gradient_model<Net<double>>(c, b, rng, nrm, seed);
  }
};

template <>
struct ModelDef<ModelKind::ResNet> : FixedModelDef<ResNet> {};

/// MobileNetV2's inverted residual (Sandler et al. 2018, table 1): a 1x1 expansion by t (omitted for t = 1) -
/// BN - ReLU6, a 3x3 depthwise convolution (stride) - BN - ReLU6, a linear 1x1 projection - BN, plus the input
/// when the stride is 1 and the widths agree. Names: NAME.expand, NAME.expand_bn, NAME.dw, NAME.dw_bn,
/// NAME.project, NAME.project_bn.
template <typename T>
struct InvertedResidual {
  std::optional<Conv2d<T>> expand;
  std::optional<BatchNorm<T>> expand_bn;
  DepthwiseConv2d<T> dw;
  BatchNorm<T> dw_bn;
  Conv2d<T> project;
  BatchNorm<T> project_bn;
  Activation<T> act1, act2;
  bool residual;
  Dims in;

  InvertedResidual(const std::string& n, std::int64_t cin, std::int64_t cout, std::int64_t t, std::int64_t stride,
                   const FormatsOf& fmt)
      : dw(n + ".dw", cin * t, 3, fmt(n + ".dw"), stride, false), dw_bn(n + ".dw_bn", cin * t),
        project(n + ".project", cin * t, cout, 1, fmt(n + ".project"), 1, false), project_bn(n + ".project_bn", cout),
        residual(stride == 1 && cin == cout) {
    if (t != 1) {
      expand.emplace(n + ".expand", cin, cin * t, 1, fmt(n + ".expand"), 1, false);
      expand_bn.emplace(n + ".expand_bn", cin * t);
    }
    act1.relu6 = act2.relu6 = true;
  }
  Mat<T> forward(const Mat<T>& x, Dims& d, QuantContext& ctx) {
    in = d;
    Dims e = d;
    Mat<T> h;
    if (expand) {
      h = act1.forward(expand_bn->forward(expand->forward(x, d, ctx), ctx), ctx);
      e.channels = expand->lin.w.value.rows();
    }
    const Dims mid = dw.out_dims(e);
    h = act2.forward(dw_bn.forward(dw.forward(expand ? h : x, e, ctx), ctx), ctx);
    h = project_bn.forward(project.forward(h, mid, ctx), ctx);
    if (residual) h += x;
    d = project.out_dims(mid);
    return h;
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) {
    Mat<T> g = project.backward(project_bn.backward(dy, ctx), ctx);
    g = dw.backward(dw_bn.backward(act2.backward(g, ctx), ctx), ctx);
    if (expand) g = expand->backward(expand_bn->backward(act1.backward(g, ctx), ctx), ctx);
    if (residual) g += dy;
    return g;
  }
  void collect(std::vector<Param<T>*>& p) {
    if (expand) expand->lin.collect(p), expand_bn->collect(p);
    dw.collect(p);
    dw_bn.collect(p);
    project.lin.collect(p);
    project_bn.collect(p);
  }
  void collect_buffers(std::vector<Param<T>*>& p) {
    if (expand_bn) expand_bn->collect_buffers(p);
    dw_bn.collect_buffers(p);
    project_bn.collect_buffers(p);
  }
  void count(const Dims& d, FloatCount& fc) const {
    Dims e = d;
    if (expand) {
      e.channels = expand->lin.w.value.rows();
      fc.conv(e, 1, d.channels);
      fc.elementwise(e), fc.activation(e);
    }
    const Dims mid = dw.out_dims(e);
    fc.conv(mid, 1, mid.channels);  // depthwise: input, its quantized copies, the output and their gradients
    fc.elementwise(mid), fc.activation(mid);
    const Dims out = project.out_dims(mid);
    fc.conv(out, 1, mid.channels);
    fc.elementwise(out), fc.elementwise(out);
  }
};

/// A MobileNetV2 for small images: stem 3x3 (32, stride 1) - BN - ReLU6, inverted residuals (t, c, n, s) =
/// (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1) (MobileNetV2's first five rows:
/// 28 -> 14 -> 7 -> 4), a 1x1 convolution to 320 - BN - ReLU6, global average pooling, fc. Widths are these
/// times width / 16 (at least 1). Layer names: stem, blocks.I.{expand,dw,project}, last, fc.
template <typename T>
class MobileNetV2 final : public Model<T> {
 public:
  MobileNetV2(const ModelConfig& c, std::int64_t rows, std::int64_t cols, std::int64_t channels, int classes,
              const FormatLookup& lookup, std::uint64_t seed)
      : stem_("stem", channels, scaled(32, c), 3, this->formats(lookup, "stem"), 1, false),
        stem_bn_("stem_bn", scaled(32, c)),
        last_("last", scaled(96, c), scaled(320, c), 1, this->formats(lookup, "last"), 1, false),
        last_bn_("last_bn", scaled(320, c)), fc_("fc", scaled(320, c), classes, this->formats(lookup, "fc")),
        rows_(rows), cols_(cols), channels_(channels) {
    const FormatsOf fmt = [&](const std::string& n) { return this->formats(lookup, n); };
    struct Row {
      std::int64_t t, c, n, s;
    };
    const Row rows_table[] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}};
    std::int64_t cin = scaled(32, c);
    Dims d{1, rows, cols, cin};
    counted_.gelu = c.gelu;
    counted_.conv(d, 3, channels);
    counted_.elementwise(d), counted_.activation(d);
    blocks_.reserve(13);
    for (const Row& r : rows_table)
      for (std::int64_t i = 0; i < r.n; ++i) {
        const std::int64_t cout = scaled(r.c, c);
        blocks_.emplace_back("blocks." + std::to_string(blocks_.size()), cin, cout, r.t, i == 0 ? r.s : 1, fmt);
        blocks_.back().count(d, counted_);
        d = blocks_.back().project.out_dims(blocks_.back().dw.out_dims(d));
        cin = cout;
      }
    d.channels = scaled(320, c);
    counted_.conv(d, 1, cin);
    counted_.elementwise(d), counted_.activation(d);
    Normal n(seed);
    init_he(stem_.lin, c.init_gain, n);
    for (auto& b : blocks_) {
      if (b.expand) init_he(b.expand->lin, c.init_gain, n);
      fill_normal(b.dw.w.value, c.init_gain * std::sqrt(2.0 / 9.0), n);
      init_he(b.project.lin, c.init_gain * std::sqrt(0.5), n);  // a linear layer: no ReLU after it
    }
    init_he(last_.lin, c.init_gain, n);
    init_he(fc_, c.init_gain * std::sqrt(0.5), n);
    for (auto* a : activations()) a->relu6 = !c.gelu, a->gelu = c.gelu;
  }
  std::vector<Param<T>*> params() override {
    std::vector<Param<T>*> p;
    stem_.lin.collect(p);
    stem_bn_.collect(p);
    for (auto& b : blocks_) b.collect(p);
    last_.lin.collect(p);
    last_bn_.collect(p);
    fc_.collect(p);
    return p;
  }
  std::vector<Param<T>*> buffers() override {
    std::vector<Param<T>*> p;
    stem_bn_.collect_buffers(p);
    for (auto& b : blocks_) b.collect_buffers(p);
    last_bn_.collect_buffers(p);
    return p;
  }
  Mat<T> forward(const Batch& batch, QuantContext& ctx) override {
    Dims d{batch.size, rows_, cols_, channels_};
    Mat<T> x = stem_act_.forward(stem_bn_.forward(stem_.forward(pixel_rows<T>(batch, d), d, ctx), ctx), ctx);
    d = stem_.out_dims(d);
    for (auto& b : blocks_) x = b.forward(x, d, ctx);
    x = last_act_.forward(last_bn_.forward(last_.forward(x, d, ctx), ctx), ctx);
    d = last_.out_dims(d);
    return fc_.forward(pool_.forward(x, d, ctx), ctx);
  }
  void backward(const Mat<T>& dlogits, QuantContext& ctx) override {
    Mat<T> g = pool_.backward(fc_.backward(dlogits, ctx), ctx);
    g = last_.backward(last_bn_.backward(last_act_.backward(g, ctx), ctx), ctx);
    for (std::size_t i = blocks_.size(); i-- > 0;) g = blocks_[i].backward(g, ctx);
    stem_.backward(stem_bn_.backward(stem_act_.backward(g, ctx), ctx), ctx, false);
  }
  double floats_per_image() const { return counted_.per_image; }

 private:
  static std::int64_t scaled(std::int64_t channels, const ModelConfig& c) {
    return std::max<std::int64_t>(1, channels * c.width / 16);
  }
  std::vector<Activation<T>*> activations() {
    std::vector<Activation<T>*> a = {&stem_act_, &last_act_};
    for (auto& b : blocks_) a.push_back(&b.act1), a.push_back(&b.act2);
    return a;
  }
  Conv2d<T> stem_;
  BatchNorm<T> stem_bn_;
  Activation<T> stem_act_;
  std::vector<InvertedResidual<T>> blocks_;
  Conv2d<T> last_;
  BatchNorm<T> last_bn_;
  Activation<T> last_act_;
  GlobalAvgPool<T> pool_;
  Linear<T> fc_;
  std::int64_t rows_, cols_, channels_;
  FloatCount counted_;
};

template <>
struct ModelDef<ModelKind::MobileNet> : FixedModelDef<MobileNetV2> {};

/// The batch's non-overlapping P x P patches, one row per patch (image by image, patches row by row): each
/// patch's pixels row by row (iy, then ix and the channels). nh x nw patches of images `cols` wide.
template <typename T>
Mat<T> patch_rows(const Batch& batch, std::int64_t patch, std::int64_t nh, std::int64_t nw, std::int64_t cols,
                  std::int64_t channels) {
  const Mat<T> img = images_matrix<T>(batch);
  const std::int64_t width = patch * channels;
  Mat<T> patches(batch.size * nh * nw, patch * width);
  for (std::int64_t b = 0; b < batch.size; ++b)
    for (std::int64_t py = 0; py < nh; ++py)
      for (std::int64_t px = 0; px < nw; ++px)
        for (std::int64_t iy = 0; iy < patch; ++iy)
          patches.row((b * nh + py) * nw + px).segment(iy * width, width) =
              img.row(b).segment(((py * patch + iy) * cols + px * patch) * channels, width);
  return patches;
}

/// The error of patches that do not tile the images ("MODEL's patches of P must divide the image sides").
inline std::optional<Error> check_patches(const TrainData& data, const ModelConfig& c, const std::string& model) {
  if (c.patch < 1 || data.rows % c.patch != 0 || data.cols % c.patch != 0)
    return make_error(model + "'s patches of " + std::to_string(c.patch) + " must divide the image sides (" +
                      std::to_string(data.rows) + "x" + std::to_string(data.cols) + ")");
  return std::nullopt;
}

/// Vision transformer in DeiT's layout (Touvron et al. 2021; DeiT-tiny: width 192, 12 blocks, 3 heads of 64):
/// non-overlapping P x P patches (`patch_embed`, a Linear on each patch's pixels), a class token and learned
/// positions, pre-norm blocks with bidirectional attention (blocks.I.attn.{qkv,qk,av,proj},
/// blocks.I.mlp.{fc1,fc2}, GELU), a final norm of the class token, `head`. Width, depth and heads are the
/// transformer's options.
template <typename T>
class VisionTransformer final : public Model<T> {
 public:
  VisionTransformer(const ModelConfig& c, std::int64_t rows, std::int64_t cols, std::int64_t channels, int classes,
                    const FormatLookup& lookup, std::uint64_t seed)
      : patch_(c.patch), nh_(rows / c.patch), nw_(cols / c.patch), cols_(cols), channels_(channels),
        patch_embed_("patch_embed", c.patch * c.patch * channels, c.d_model, this->formats(lookup, "patch_embed")),
        ln_f_("ln_f", c.d_model), head_("head", c.d_model, classes, this->formats(lookup, "head")) {
    const std::int64_t tokens = nh_ * nw_ + 1;
    cls_ = Param<T>{"cls_token", Mat<T>::Zero(1, c.d_model), Mat<T>::Zero(1, c.d_model), false};
    pos_ = Param<T>{"pos_embed", Mat<T>::Zero(tokens, c.d_model), Mat<T>::Zero(tokens, c.d_model), false};
    Normal n(seed);
    init_he(patch_embed_, std::sqrt(0.5), n);
    fill_normal(cls_.value, 0.02, n);
    fill_normal(pos_.value, 0.02, n);
    blocks_.build(c, false, [&](const std::string& name) { return this->formats(lookup, name); }, n);
    fill_normal(head_.w.value, 0.02, n);
  }
  std::vector<Param<T>*> params() override {
    std::vector<Param<T>*> p = {&patch_embed_.w, &patch_embed_.b, &cls_, &pos_};
    blocks_.collect(p);
    for (auto* q : {&ln_f_.gain, &ln_f_.bias, &head_.w, &head_.b}) p.push_back(q);
    return p;
  }
  Mat<T> forward(const Batch& batch, QuantContext& ctx) override {
    const std::int64_t b_count = batch.size, np = nh_ * nw_, tokens = np + 1;
    const Mat<T> e = patch_embed_.forward(patch_rows<T>(batch, patch_, nh_, nw_, cols_, channels_), ctx);
    Mat<T> x(b_count * tokens, cls_.value.cols());
    for (std::int64_t b = 0; b < b_count; ++b) {
      x.row(b * tokens) = cls_.value.row(0) + pos_.value.row(0);
      x.middleRows(b * tokens + 1, np) = e.middleRows(b * np, np) + pos_.value.bottomRows(np);
    }
    blocks_.forward(x, b_count, tokens, ctx);
    Mat<T> cls(b_count, x.cols());
    for (std::int64_t b = 0; b < b_count; ++b) cls.row(b) = x.row(b * tokens);
    batch_ = b_count;
    return head_.forward(ln_f_.forward(cls, ctx), ctx);
  }
  void backward(const Mat<T>& dlogits, QuantContext& ctx) override {
    const std::int64_t np = nh_ * nw_, tokens = np + 1;
    const Mat<T> dcls = ln_f_.backward(head_.backward(dlogits, ctx), ctx);
    Mat<T> dx = Mat<T>::Zero(batch_ * tokens, dcls.cols());
    for (std::int64_t b = 0; b < batch_; ++b) dx.row(b * tokens) = dcls.row(b);
    blocks_.backward(dx, ctx);
    Mat<T> de(batch_ * np, dx.cols());
    for (std::int64_t b = 0; b < batch_; ++b) {
      cls_.grad.row(0) += dx.row(b * tokens);
      pos_.grad += dx.middleRows(b * tokens, tokens);
      de.middleRows(b * np, np) = dx.middleRows(b * tokens + 1, np);
    }
    patch_embed_.backward(de, ctx, false);
  }

 private:
  std::int64_t patch_, nh_, nw_, cols_, channels_;
  std::int64_t batch_ = 0;
  Linear<T> patch_embed_;
  Param<T> cls_, pos_;
  BlockStack<T> blocks_;
  LayerNorm<T> ln_f_;
  Linear<T> head_;
};

/// The gradient check's model of a patch model (the vision transformer, the mixer) over 8x8 images of three
/// classes, every tensor random of order one, so every path carries gradient well above the difference noise.
template <class Net>
std::unique_ptr<Model<double>> patch_gradient_model(const ModelConfig& c, Batch& b, Rng& rng, Normal& nrm,
                                                    std::uint64_t seed) {
  gradient_images(b, rng, 8);
  auto m = std::make_unique<Net>(c, 8, 8, 1, 3, nullptr, seed);
  for (auto* p : m->params()) fill_normal(p->value, 0.3, nrm);
  return m;
}

template <>
struct ModelDef<ModelKind::Vit> {
  static std::optional<Error> check(const TrainData& data, const ModelConfig& c) {
    if (auto e = check_patches(data, c, "the vision transformer")) return e;
    if (auto e = check_heads(c)) return e;
    if (c.layers < 1) return make_error("the vision transformer needs layers >= 1");
    return std::nullopt;
  }
  static std::vector<std::string> layer_names(const TrainData&, const ModelConfig& c) {
    return transformer_layer_names(c, true);
  }
  template <typename T>
  static std::unique_ptr<Model<T>> make(const ModelConfig& c, const TrainData& data, const FormatLookup& lookup,
                                        std::uint64_t seed) {
    return std::make_unique<VisionTransformer<T>>(c, data.rows, data.cols, data.channels, data.classes, lookup, seed);
  }
  static void estimate(const TrainData& data, const ModelConfig& c, double rows, MemoryShapes& s) {
    estimate_transformer(data, c, rows, true, s);
  }
  static constexpr bool kDeepCheck = false;
  /// Its weights start at 0.02: random values of order one instead.
  static std::unique_ptr<Model<double>> gradient_model(const ModelConfig& c, Batch& b, Rng& rng, Normal& nrm,
                                                       std::uint64_t seed) {
    return patch_gradient_model<VisionTransformer<double>>(c, b, rng, nrm, seed);
  }
};

/// Rows of `count` equal matrices stacked, each transposed in place: (count * r) x k to (count * k) x r. The
/// mixer's (image, patch) rows of channels to (image, channel) rows of patches, and back.
template <typename T>
Mat<T> transpose_each(const Mat<T>& m, std::int64_t count) {
  const std::int64_t r = m.rows() / std::max<std::int64_t>(count, 1), k = m.cols();
  Mat<T> out(count * k, r);
  for (std::int64_t b = 0; b < count; ++b) out.middleRows(b * k, k) = m.middleRows(b * r, r).transpose();
  return out;
}

/// A mixer block (Tolstikhin et al. 2021, eq. 1): token mixing, an MLP across the patches of each channel
/// (NAME.token_mixing.fc1, .fc2, width tokens_hidden, GELU), then channel mixing, an MLP across the channels of
/// each patch (NAME.channel_mixing.fc1, .fc2, width 4 C, GELU), each after a layer norm (NAME.ln1, NAME.ln2)
/// and with the block's input added. Activations are (image, patch) rows of C channels. token_mixing.fc2 has no
/// bias: its bias shifts each patch equally in every channel, which every layer norm after it (ln2, the later
/// blocks' ln1, ln_f) removes, so it would never have a gradient.
template <typename T>
struct MixerBlock {
  LayerNorm<T> ln1, ln2;
  Linear<T> token_fc1, token_fc2, channel_fc1, channel_fc2;
  Activation<T> token_act, channel_act;
  std::int64_t images = 0;

  MixerBlock(const std::string& n, std::int64_t tokens, std::int64_t width, std::int64_t tokens_hidden,
             const FormatsOf& fmt)
      : ln1(n + ".ln1", width), ln2(n + ".ln2", width),
        token_fc1(n + ".token_mixing.fc1", tokens, tokens_hidden, fmt(n + ".token_mixing.fc1")),
        token_fc2(n + ".token_mixing.fc2", tokens_hidden, tokens, fmt(n + ".token_mixing.fc2"), false),
        channel_fc1(n + ".channel_mixing.fc1", width, 4 * width, fmt(n + ".channel_mixing.fc1")),
        channel_fc2(n + ".channel_mixing.fc2", 4 * width, width, fmt(n + ".channel_mixing.fc2")) {
    token_act.gelu = true;
    channel_act.gelu = true;
  }
  Mat<T> forward(const Mat<T>& x, std::int64_t count, QuantContext& ctx) {
    images = count;
    const Mat<T> mixed = token_fc2.forward(
        token_act.forward(token_fc1.forward(transpose_each<T>(ln1.forward(x, ctx), count), ctx), ctx), ctx);
    const Mat<T> u = x + transpose_each<T>(mixed, count);
    return u + channel_fc2.forward(channel_act.forward(channel_fc1.forward(ln2.forward(u, ctx), ctx), ctx), ctx);
  }
  Mat<T> backward(const Mat<T>& dy, QuantContext& ctx) {
    const Mat<T> du =
        dy + ln2.backward(channel_fc1.backward(channel_act.backward(channel_fc2.backward(dy, ctx), ctx), ctx), ctx);
    const Mat<T> dmixed = token_fc1.backward(
        token_act.backward(token_fc2.backward(transpose_each<T>(du, images), ctx), ctx), ctx);
    return du + ln1.backward(transpose_each<T>(dmixed, images), ctx);
  }
  void collect(std::vector<Param<T>*>& p) {
    for (auto* q : {&ln1.gain, &ln1.bias}) p.push_back(q);
    token_fc1.collect(p);
    token_fc2.collect(p);
    for (auto* q : {&ln2.gain, &ln2.bias}) p.push_back(q);
    channel_fc1.collect(p);
    channel_fc2.collect(p);
  }
};

/// MLP-Mixer (Tolstikhin et al. 2021): a per-patch Linear on non-overlapping P x P patches (`stem`), `layers`
/// mixer blocks blocks.I of width C = d_model (token mixing of width C / 2 and channel mixing of width 4 C, the
/// ratios of Mixer-S and Mixer-B), a final layer norm `ln_f`, global average pooling over the patches, `head`.
/// Initialisation: LeCun normal weights (the paper's code), zero biases.
template <typename T>
class Mixer final : public Model<T> {
 public:
  Mixer(const ModelConfig& c, std::int64_t rows, std::int64_t cols, std::int64_t channels, int classes,
        const FormatLookup& lookup, std::uint64_t seed)
      : patch_(c.patch), nh_(rows / c.patch), nw_(cols / c.patch), cols_(cols), channels_(channels),
        stem_("stem", c.patch * c.patch * channels, c.d_model, this->formats(lookup, "stem")),
        ln_f_("ln_f", c.d_model), head_("head", c.d_model, classes, this->formats(lookup, "head")) {
    Normal n(seed);
    const double lecun = std::sqrt(0.5);  // He's gain times this: stddev sqrt(1 / fan_in)
    init_he(stem_, lecun, n);
    const FormatsOf fmt = [&](const std::string& name) { return this->formats(lookup, name); };
    blocks_.reserve(static_cast<std::size_t>(c.layers));
    for (std::int64_t i = 0; i < c.layers; ++i) {
      blocks_.emplace_back("blocks." + std::to_string(i), nh_ * nw_, c.d_model, tokens_hidden(c), fmt);
      MixerBlock<T>& b = blocks_.back();
      for (Linear<T>* l : {&b.token_fc1, &b.token_fc2, &b.channel_fc1, &b.channel_fc2}) init_he(*l, lecun, n);
    }
    init_he(head_, lecun, n);
  }
  /// Token mixing's hidden width: C / 2.
  static std::int64_t tokens_hidden(const ModelConfig& c) { return std::max<std::int64_t>(1, c.d_model / 2); }
  std::vector<Param<T>*> params() override {
    std::vector<Param<T>*> p;
    stem_.collect(p);
    for (auto& b : blocks_) b.collect(p);
    for (auto* q : {&ln_f_.gain, &ln_f_.bias}) p.push_back(q);
    head_.collect(p);
    return p;
  }
  Mat<T> forward(const Batch& batch, QuantContext& ctx) override {
    Mat<T> x = stem_.forward(patch_rows<T>(batch, patch_, nh_, nw_, cols_, channels_), ctx);
    for (auto& b : blocks_) x = b.forward(x, batch.size, ctx);
    return head_.forward(pool_.forward(ln_f_.forward(x, ctx), Dims{batch.size, nh_, nw_, x.cols()}, ctx), ctx);
  }
  void backward(const Mat<T>& dlogits, QuantContext& ctx) override {
    Mat<T> dx = ln_f_.backward(pool_.backward(head_.backward(dlogits, ctx), ctx), ctx);
    for (auto b = blocks_.rbegin(); b != blocks_.rend(); ++b) dx = b->backward(dx, ctx);
    stem_.backward(dx, ctx, false);
  }

 private:
  std::int64_t patch_, nh_, nw_, cols_, channels_;
  Linear<T> stem_;
  std::vector<MixerBlock<T>> blocks_;
  LayerNorm<T> ln_f_;
  GlobalAvgPool<T> pool_;
  Linear<T> head_;
};

template <>
struct ModelDef<ModelKind::Mixer> {
  static std::optional<Error> check(const TrainData& data, const ModelConfig& c) {
    if (auto e = check_patches(data, c, "the mixer")) return e;
    if (c.d_model < 1) return make_error("the mixer needs d_model >= 1");
    if (c.layers < 1) return make_error("the mixer needs layers >= 1");
    return std::nullopt;
  }
  static std::vector<std::string> layer_names(const TrainData&, const ModelConfig& c) {
    std::vector<std::string> names = {"stem", "head"};
    for (std::int64_t i = 0; i < c.layers; ++i)
      for (const char* g : {".token_mixing.fc1", ".token_mixing.fc2", ".channel_mixing.fc1", ".channel_mixing.fc2"})
        names.push_back("blocks." + std::to_string(i) + g);
    return names;
  }
  template <typename T>
  static std::unique_ptr<Model<T>> make(const ModelConfig& c, const TrainData& data, const FormatLookup& lookup,
                                        std::uint64_t seed) {
    return std::make_unique<Mixer<T>>(c, data.rows, data.cols, data.channels, data.classes, lookup, seed);
  }
  static void estimate(const TrainData& data, const ModelConfig& c, double rows, MemoryShapes& s) {
    const auto d = static_cast<double>(c.d_model), dt = static_cast<double>(Mixer<float>::tokens_hidden(c));
    const auto tokens = static_cast<double>((data.rows / c.patch) * (data.cols / c.patch));
    const double r = rows * tokens;
    s.floats += 2 * rows * static_cast<double>(data.features());  // the batch and its patches
    s.linear(r, static_cast<double>(c.patch * c.patch * data.channels), d);
    for (std::int64_t i = 0; i < c.layers; ++i) {
      for (int k = 0; k < 4; ++k) s.param(d);  // ln1, ln2 gain and bias
      s.floats += 2 * 5 * r * d;               // the two layer norms
      s.floats += 4 * r * d;                   // the token mixing's transposed input and output gradient
      s.linear(rows * d, tokens, dt);
      s.floats += 4 * rows * d * dt;  // its GELU: saved input, tanh values, output, gradient
      s.param(dt * tokens);  // token_mixing.fc2: a Linear without bias
      s.weight_copies += 3 * dt * tokens;
      s.floats += 4 * rows * d * dt + 3 * rows * d * tokens;
      s.linear(r, d, 4 * d);
      s.floats += 4 * r * 4 * d;  // the channel mixing's GELU
      s.linear(r, 4 * d, d);
      s.floats += 2 * r * d;  // residual sums
    }
    s.param(d);
    s.param(d);
    s.floats += 5 * r * d + 3 * rows * d;  // ln_f and the pooling
    s.linear(rows, d, static_cast<double>(data.classes));
    s.floats += 2 * rows * static_cast<double>(data.classes);
  }
  static constexpr bool kDeepCheck = false;
  /// Biases and layer norms random too, not only the weights.
  static std::unique_ptr<Model<double>> gradient_model(const ModelConfig& c, Batch& b, Rng& rng, Normal& nrm,
                                                       std::uint64_t seed) {
    return patch_gradient_model<Mixer<double>>(c, b, rng, nrm, seed);
  }
};

}  // namespace mxlab::train::detail
