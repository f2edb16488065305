// Models, quantized GEMMs, recipes, loss scaling, optimizers and the training loop.
#define EIGEN_DONT_PARALLELIZE  // one thread per GEMM: the same seed gives the same bits for any thread count
#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>

#include "mxlab/formats/parse.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/io/training_data.hpp"
#include "mxlab/io/weights.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/requests.hpp"
#include "mxlab/train/train.hpp"

namespace mxlab::train {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

// ---------------------------------------------------------------- operands

/// How one operand is cast.
struct Operand {
  enum class Kind { None, Block, Cast } kind = Kind::None;
  BlockFormat block;
  std::optional<Format> element;
  std::string text;
};

Result<Operand> parse_operand(const std::string& text) {
  Operand o;
  o.text = text;
  if (text.empty() || text == "fp32" || text == "f32" || text == "none") return o;
  if (auto b = parse_block_format(text)) {
    o.kind = Operand::Kind::Block;
    o.block = *b;
    return o;
  }
  auto f = parse_format(text);
  if (!f) return make_error("'" + text + "': neither a block format nor an element format (" + f.error().message + ")");
  o.kind = Operand::Kind::Cast;
  o.element = *f;
  return o;
}

/// Figures of one layer's roles over a step.
using Stats = std::map<std::string, RoleMetrics>;

struct Context {
  unsigned threads = 1;
  Stats* stats = nullptr;  ///< null: not recorded (evaluation)
  std::string engine;
};

/// Casts m in place, blocks along its rows' last axis (the GEMM's reduction axis).
Result<bool> cast(const Operand& op, Mat& m, Context& ctx, const std::string& layer, const std::string& role) {
  if (op.kind == Operand::Kind::None || m.size() == 0) return true;
  std::vector<float> out(static_cast<std::size_t>(m.size()));
  ops::Run run;
  run.threads = ctx.threads;
  ops::QuantizeResult res;
  std::span<const float> in(m.data(), static_cast<std::size_t>(m.size()));
  if (op.kind == Operand::Kind::Block) {
    auto n = ops::fake_quantize(op.block, in, {m.rows(), m.cols()}, out, run, ctx.stats ? &res : nullptr);
    if (!n) return make_error("layer " + layer + ", " + role + " = " + op.text + ": " + n.error().message);
  } else {
    CastOptions co;
    co.overflow = Overflow::Saturate;
    auto n = ops::fake_cast(*op.element, co, in, out, run, ctx.stats ? &res : nullptr);
    if (!n) return make_error("layer " + layer + ", " + role + " = " + op.text + ": " + n.error().message);
  }
  std::copy(out.begin(), out.end(), m.data());
  if (ctx.stats) {
    RoleMetrics& r = (*ctx.stats)[layer + "\n" + role];
    r.layer = layer;
    r.role = role;
    r.nonzero += res.stats.nonzero_inputs;
    r.underflows += res.stats.underflows;
    r.count += res.stats.count;
    r.sse += res.stats.sse.to_double();
    if (ctx.engine.empty()) ctx.engine = res.engine;
  }
  return true;
}

// ---------------------------------------------------------------- layers

struct Param {
  std::string name;
  Mat w, grad, m1, m2;
  bool decay = true;
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  virtual Result<Mat> forward(const Mat& x, Context& ctx) = 0;
  virtual Result<Mat> backward(const Mat& dy, Context& ctx) = 0;
  virtual std::vector<Param*> params() { return {}; }
  virtual std::string kind() const = 0;
  const std::string& name() const { return name_; }
  /// The operands' formats for this layer (GEMM layers).
  std::map<std::string, Operand> ops;

 private:
  std::string name_;
};

/// C = A B with A's rows and B's columns quantized along the reduction axis K: A [M, K] as is, B [K, N] through
/// its transpose [N, K].
Result<Mat> qgemm(Mat a, const Mat& b, const Operand& oa, const Operand& ob, Context& ctx, const std::string& layer,
                  const std::string& ra, const std::string& rb) {
  if (auto r = cast(oa, a, ctx, layer, ra); !r) return r.error();
  Mat bt = b.transpose();
  if (auto r = cast(ob, bt, ctx, layer, rb); !r) return r.error();
  Mat c = a * bt.transpose();
  return c;
}

/// The three GEMMs of a layer Y = X W.
struct Gemm {
  static Result<Mat> forward(const Mat& x, const Mat& w, Layer& l, Context& ctx) {
    return qgemm(x, w, l.ops["a"], l.ops["w"], ctx, l.name(), "a", "w");
  }
  /// dX = dY W^T (reduction over N) and dW = X^T dY (reduction over the batch M).
  static Result<std::pair<Mat, Mat>> backward(const Mat& x, const Mat& w, const Mat& dy, Layer& l, Context& ctx) {
    auto dx = qgemm(dy, w.transpose(), l.ops["g"], l.ops["w_bp"], ctx, l.name(), "g", "w_bp");
    if (!dx) return dx.error();
    auto dw = qgemm(x.transpose(), dy, l.ops["a_bp"], l.ops["g"], ctx, l.name(), "a_bp", "g");
    if (!dw) return dw.error();
    return std::pair{std::move(*dx), std::move(*dw)};
  }
};

class Linear : public Layer {
 public:
  Linear(std::string name, int in, int out, std::mt19937_64& rng) : Layer(std::move(name)) {
    w_.name = this->name() + ".w";
    b_.name = this->name() + ".b";
    b_.decay = false;
    // He initialisation for ReLU networks.
    std::normal_distribution<float> n(0.0f, std::sqrt(2.0f / static_cast<float>(in)));
    w_.w = Mat(in, out);
    for (Eigen::Index i = 0; i < w_.w.size(); ++i) w_.w.data()[i] = n(rng);
    b_.w = Mat::Zero(1, out);
  }
  Result<Mat> forward(const Mat& x, Context& ctx) override {
    x_ = x;
    auto y = Gemm::forward(x, w_.w, *this, ctx);
    if (!y) return y;
    y->rowwise() += b_.w.row(0);
    return y;
  }
  Result<Mat> backward(const Mat& dy, Context& ctx) override {
    auto g = Gemm::backward(x_, w_.w, dy, *this, ctx);
    if (!g) return g.error();
    w_.grad = g->second;
    b_.grad = dy.colwise().sum();
    return g->first;
  }
  std::vector<Param*> params() override { return {&w_, &b_}; }
  std::string kind() const override { return "linear"; }
  Param w_, b_;

 private:
  Mat x_;
};

class Relu : public Layer {
 public:
  using Layer::Layer;
  Result<Mat> forward(const Mat& x, Context&) override {
    x_ = x;
    return Mat(x.cwiseMax(0.0f));
  }
  Result<Mat> backward(const Mat& dy, Context&) override { return Mat(dy.array() * (x_.array() > 0).cast<float>()); }
  std::string kind() const override { return "relu"; }

 private:
  Mat x_;
};

/// GELU, tanh form (Hendrycks and Gimpel, eq. 2 of arXiv:1606.08415).
class Gelu : public Layer {
 public:
  using Layer::Layer;
  static constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  Result<Mat> forward(const Mat& x, Context&) override {
    x_ = x;
    return Mat(x.unaryExpr([](float v) { return 0.5f * v * (1.0f + std::tanh(kC * (v + 0.044715f * v * v * v))); }));
  }
  Result<Mat> backward(const Mat& dy, Context&) override {
    Mat d = x_.unaryExpr([](float v) {
      const float u = kC * (v + 0.044715f * v * v * v);
      const float t = std::tanh(u);
      return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kC * (1.0f + 3.0f * 0.044715f * v * v);
    });
    return Mat(dy.array() * d.array());
  }
  std::string kind() const override { return "gelu"; }

 private:
  Mat x_;
};

/// 3x3 convolution, stride 1, zero padding 1, on images stored as rows [B, H*W*C] (HWC order), as an im2col
/// GEMM: columns [B*H*W, 9*C] times the kernel [9*C, F] (HWIO flattened: blocks run along the input channels).
class Conv : public Layer {
 public:
  Conv(std::string name, int h, int w, int c, int f, std::mt19937_64& rng) : Layer(std::move(name)), h_(h), w_(w), c_(c), f_(f) {
    k_.name = this->name() + ".w";
    b_.name = this->name() + ".b";
    b_.decay = false;
    std::normal_distribution<float> n(0.0f, std::sqrt(2.0f / static_cast<float>(9 * c)));
    k_.w = Mat(9 * c, f);
    for (Eigen::Index i = 0; i < k_.w.size(); ++i) k_.w.data()[i] = n(rng);
    b_.w = Mat::Zero(1, f);
  }
  Result<Mat> forward(const Mat& x, Context& ctx) override {
    const Eigen::Index batch = x.rows();
    cols_ = Mat::Zero(batch * h_ * w_, 9 * c_);
    for (Eigen::Index b = 0; b < batch; ++b)
      for (int i = 0; i < h_; ++i)
        for (int j = 0; j < w_; ++j) {
          const Eigen::Index row = (b * h_ + i) * w_ + j;
          for (int di = 0; di < 3; ++di)
            for (int dj = 0; dj < 3; ++dj) {
              const int ii = i + di - 1, jj = j + dj - 1;
              if (ii < 0 || ii >= h_ || jj < 0 || jj >= w_) continue;
              for (int ch = 0; ch < c_; ++ch) cols_(row, (di * 3 + dj) * c_ + ch) = x(b, (ii * w_ + jj) * c_ + ch);
            }
        }
    auto y = Gemm::forward(cols_, k_.w, *this, ctx);
    if (!y) return y;
    y->rowwise() += b_.w.row(0);
    // [B*H*W, F] row-major is [B, H*W*F] row-major.
    return Mat(Eigen::Map<Mat>(y->data(), batch, static_cast<Eigen::Index>(h_) * w_ * f_));
  }
  Result<Mat> backward(const Mat& dy_img, Context& ctx) override {
    const Eigen::Index batch = dy_img.rows();
    Mat dy = Eigen::Map<const Mat>(dy_img.data(), batch * h_ * w_, f_);
    auto g = Gemm::backward(cols_, k_.w, dy, *this, ctx);
    if (!g) return g.error();
    k_.grad = g->second;
    b_.grad = dy.colwise().sum();
    const Mat& dcols = g->first;
    Mat dx = Mat::Zero(batch, static_cast<Eigen::Index>(h_) * w_ * c_);
    for (Eigen::Index b = 0; b < batch; ++b)
      for (int i = 0; i < h_; ++i)
        for (int j = 0; j < w_; ++j) {
          const Eigen::Index row = (b * h_ + i) * w_ + j;
          for (int di = 0; di < 3; ++di)
            for (int dj = 0; dj < 3; ++dj) {
              const int ii = i + di - 1, jj = j + dj - 1;
              if (ii < 0 || ii >= h_ || jj < 0 || jj >= w_) continue;
              for (int ch = 0; ch < c_; ++ch) dx(b, (ii * w_ + jj) * c_ + ch) += dcols(row, (di * 3 + dj) * c_ + ch);
            }
        }
    return dx;
  }
  std::vector<Param*> params() override { return {&k_, &b_}; }
  std::string kind() const override { return "conv"; }
  Param k_, b_;

 private:
  int h_, w_, c_, f_;
  Mat cols_;
};

/// 2x2 max pooling, stride 2, on [B, H*W*C] images.
class MaxPool : public Layer {
 public:
  MaxPool(std::string name, int h, int w, int c) : Layer(std::move(name)), h_(h), w_(w), c_(c) {}
  Result<Mat> forward(const Mat& x, Context&) override {
    const int ho = h_ / 2, wo = w_ / 2;
    Mat y(x.rows(), static_cast<Eigen::Index>(ho) * wo * c_);
    arg_.assign(static_cast<std::size_t>(y.size()), 0);
    for (Eigen::Index b = 0; b < x.rows(); ++b)
      for (int i = 0; i < ho; ++i)
        for (int j = 0; j < wo; ++j)
          for (int ch = 0; ch < c_; ++ch) {
            Eigen::Index best = ((2 * i) * w_ + 2 * j) * c_ + ch;
            for (int di = 0; di < 2; ++di)
              for (int dj = 0; dj < 2; ++dj) {
                const Eigen::Index k = ((2 * i + di) * w_ + 2 * j + dj) * c_ + ch;
                if (x(b, k) > x(b, best)) best = k;
              }
            const Eigen::Index o = (i * wo + j) * c_ + ch;
            y(b, o) = x(b, best);
            arg_[static_cast<std::size_t>(b * y.cols() + o)] = best;
          }
    in_cols_ = x.cols();
    return y;
  }
  Result<Mat> backward(const Mat& dy, Context&) override {
    Mat dx = Mat::Zero(dy.rows(), in_cols_);
    for (Eigen::Index b = 0; b < dy.rows(); ++b)
      for (Eigen::Index o = 0; o < dy.cols(); ++o) dx(b, arg_[static_cast<std::size_t>(b * dy.cols() + o)]) += dy(b, o);
    return dx;
  }
  std::string kind() const override { return "maxpool"; }

 private:
  int h_, w_, c_;
  Eigen::Index in_cols_ = 0;
  std::vector<Eigen::Index> arg_;
};

/// Mean softmax cross-entropy of logits [B, K]; returns the loss and dL/dlogits (scaled by `scale`).
double softmax_xent(const Mat& logits, const std::vector<int>& labels, double scale, Mat* grad, int* correct) {
  const Eigen::Index b = logits.rows();
  double loss = 0;
  if (grad) *grad = Mat(logits.rows(), logits.cols());
  int ok = 0;
  for (Eigen::Index i = 0; i < b; ++i) {
    const float mx = logits.row(i).maxCoeff();
    double sum = 0;
    for (Eigen::Index k = 0; k < logits.cols(); ++k) sum += std::exp(static_cast<double>(logits(i, k) - mx));
    const int y = labels[static_cast<std::size_t>(i)];
    loss += std::log(sum) - static_cast<double>(logits(i, y) - mx);
    Eigen::Index arg = 0;
    logits.row(i).maxCoeff(&arg);
    ok += arg == y;
    if (grad)
      for (Eigen::Index k = 0; k < logits.cols(); ++k) {
        const double p = std::exp(static_cast<double>(logits(i, k) - mx)) / sum;
        (*grad)(i, k) = static_cast<float>((p - (k == y ? 1.0 : 0.0)) / static_cast<double>(b) * scale);
      }
  }
  if (correct) *correct = ok;
  return loss / static_cast<double>(b);
}

// ---------------------------------------------------------------- models

struct Model {
  std::vector<std::unique_ptr<Layer>> layers;
  Result<Mat> forward(Mat x, Context& ctx) {
    for (auto& l : layers) {
      auto y = l->forward(x, ctx);
      if (!y) return y;
      x = std::move(*y);
    }
    return x;
  }
  Result<bool> backward(Mat g, Context& ctx) {
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      auto d = (*it)->backward(g, ctx);
      if (!d) return d.error();
      g = std::move(*d);
    }
    return true;
  }
  std::vector<Param*> params() {
    std::vector<Param*> out;
    for (auto& l : layers)
      for (Param* p : l->params()) out.push_back(p);
    return out;
  }
};

Result<Model> make_model(const std::string& kind, int h, int w, int classes, int hidden, std::mt19937_64& rng) {
  Model m;
  if (kind == "mlp") {
    m.layers.push_back(std::make_unique<Linear>("fc1", h * w, hidden, rng));
    m.layers.push_back(std::make_unique<Relu>("relu1"));
    m.layers.push_back(std::make_unique<Linear>("fc2", hidden, hidden / 2, rng));
    m.layers.push_back(std::make_unique<Relu>("relu2"));
    m.layers.push_back(std::make_unique<Linear>("fc3", hidden / 2, classes, rng));
    return m;
  }
  if (kind == "cnn") {
    m.layers.push_back(std::make_unique<Conv>("conv1", h, w, 1, 16, rng));
    m.layers.push_back(std::make_unique<Relu>("relu1"));
    m.layers.push_back(std::make_unique<MaxPool>("pool1", h, w, 16));
    m.layers.push_back(std::make_unique<Conv>("conv2", h / 2, w / 2, 16, 32, rng));
    m.layers.push_back(std::make_unique<Relu>("relu2"));
    m.layers.push_back(std::make_unique<MaxPool>("pool2", h / 2, w / 2, 32));
    m.layers.push_back(std::make_unique<Linear>("fc1", (h / 4) * (w / 4) * 32, 128, rng));
    m.layers.push_back(std::make_unique<Relu>("relu3"));
    m.layers.push_back(std::make_unique<Linear>("fc2", 128, classes, rng));
    return m;
  }
  return make_error("model '" + kind + "': expected mlp or cnn");
}

Result<bool> configure(Model& m, const Recipe& r) {
  for (auto& l : m.layers) {
    const RoleSpecs specs = r.for_layer(l->name());
    for (const char* role : kRoles) {
      auto it = specs.find(role);
      auto op = parse_operand(it == specs.end() ? "" : it->second);
      if (!op) return make_error("recipe '" + r.name + "', layer " + l->name() + ", role " + role + ": " + op.error().message);
      l->ops[role] = *op;
    }
  }
  return true;
}

bool glob(const std::string& pattern, const std::string& name) {
  auto p = NamePattern::parse(pattern);
  return p && p->matches(name);
}

// ---------------------------------------------------------------- data

struct Data {
  int h = 0, w = 0, classes = 10;
  Mat train_x, val_x, test_x;
  std::vector<int> train_y, val_y, test_y;
};

void to_rows(const ImageSet& s, std::size_t first, std::size_t count, Mat& x, std::vector<int>& y) {
  const std::size_t px = static_cast<std::size_t>(s.rows * s.cols);
  x = Mat(static_cast<Eigen::Index>(count), static_cast<Eigen::Index>(px));
  y.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t k = 0; k < px; ++k)
      x(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) =
          static_cast<float>(s.pixels[(first + i) * px + k]) / static_cast<float>(s.max_value);
    y[i] = s.labels[first + i];
  }
}

Result<Data> load_data(const Config& c) {
  if (c.data != "fashion-mnist" && c.data != "digits") return make_error("data '" + c.data + "': expected fashion-mnist or digits");
  auto tr = load_image_set(c.data, "train", c.data_dir);
  if (!tr) return tr.error();
  auto te = load_image_set(c.data, "test", c.data_dir);
  if (!te) return te.error();
  const ImageSet& train = *tr;
  const ImageSet& test = *te;
  Data d;
  d.h = static_cast<int>(train.rows);
  d.w = static_cast<int>(train.cols);
  const auto n = static_cast<std::size_t>(train.count);
  const auto n_val = static_cast<std::size_t>(static_cast<double>(n) * c.validation);
  to_rows(train, 0, n - n_val, d.train_x, d.train_y);
  to_rows(train, n - n_val, n_val, d.val_x, d.val_y);
  to_rows(test, 0, static_cast<std::size_t>(test.count), d.test_x, d.test_y);
  return d;
}

// ---------------------------------------------------------------- optimisation

double learning_rate(const Config& c, int step) {
  if (c.warmup > 0 && step < c.warmup) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  if (!c.cosine) return c.lr;
  const double t = static_cast<double>(step - c.warmup) / static_cast<double>(std::max(1, c.steps - c.warmup));
  return c.lr * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, t)));
}

void update(const Config& c, std::vector<Param*>& ps, double lr, int t) {
  for (Param* p : ps) {
    if (p->m1.size() == 0) p->m1 = Mat::Zero(p->w.rows(), p->w.cols()), p->m2 = Mat::Zero(p->w.rows(), p->w.cols());
    const float flr = static_cast<float>(lr);
    if (c.optimizer == "sgd") {
      p->m1 = static_cast<float>(c.momentum) * p->m1 + p->grad;
      if (p->decay && c.weight_decay > 0) p->w -= flr * static_cast<float>(c.weight_decay) * p->w;
      p->w -= flr * p->m1;
      continue;
    }
    // AdamW (Loshchilov and Hutter, algorithm 2): decoupled weight decay.
    constexpr float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    p->m1 = b1 * p->m1 + (1 - b1) * p->grad;
    p->m2 = b2 * p->m2 + (1 - b2) * p->grad.cwiseProduct(p->grad);
    const float c1 = 1 - std::pow(b1, static_cast<float>(t)), c2 = 1 - std::pow(b2, static_cast<float>(t));
    if (p->decay && c.weight_decay > 0) p->w -= flr * static_cast<float>(c.weight_decay) * p->w;
    p->w.array() -= flr * (p->m1.array() / c1) / ((p->m2.array() / c2).sqrt() + eps);
  }
}

Result<std::pair<double, double>> evaluate(Model& m, const Mat& x, const std::vector<int>& y, Context& ctx) {
  double loss = 0;
  int correct = 0;
  constexpr Eigen::Index kChunk = 1000;
  Context quiet = ctx;
  quiet.stats = nullptr;
  for (Eigen::Index i = 0; i < x.rows(); i += kChunk) {
    const Eigen::Index n = std::min(kChunk, x.rows() - i);
    auto out = m.forward(x.middleRows(i, n), quiet);
    if (!out) return out.error();
    int ok = 0;
    std::vector<int> labels(y.begin() + i, y.begin() + i + n);
    loss += softmax_xent(*out, labels, 1.0, nullptr, &ok) * static_cast<double>(n);
    correct += ok;
  }
  const double rows = static_cast<double>(std::max<Eigen::Index>(1, x.rows()));
  return std::pair{loss / rows, correct / rows};
}

}  // namespace

// ---------------------------------------------------------------- recipes

RoleSpecs Recipe::for_layer(const std::string& layer) const {
  RoleSpecs r = roles;
  for (const auto& [pattern, specs] : overrides)
    if (glob(pattern, layer))
      for (const auto& [k, v] : specs) r[k] = v;
  return r;
}

std::vector<std::string> recipe_names() {
  return {"fp32", "fp16", "fp16-static", "fp16-dynamic", "bf16", "fp8", "fp8-current", "mxfp8", "mxfp6",
          "mxfp4", "mxint8", "mxsf", "boost_e2m5", "nvfp4"};
}

Result<Recipe> recipe(const std::string& name) {
  Recipe r;
  r.name = name;
  auto all = [&](const std::string& s) {
    for (const char* role : kRoles) r.roles[role] = s;
  };
  if (name == "fp32") all("");
  else if (name == "fp16" || name == "fp16-static" || name == "fp16-dynamic") {
    all("fp16");
    if (name == "fp16-static") r.loss_scaling = {LossScaling::Kind::Static, 1024, 0, 1, 1};
    if (name == "fp16-dynamic") r.loss_scaling = {LossScaling::Kind::Dynamic, 65536, 200, 0.5, 2};
  } else if (name == "bf16") all("bf16");
  else if (name == "fp8") {
    r.roles = {{"w", "e4m3"}, {"a", "e4m3"}, {"w_bp", "e4m3"}, {"a_bp", "e4m3"}, {"g", "e5m2"}};
  } else if (name == "fp8-current") {
    // Per-tensor current scaling: one FP32 scale from each tensor's amax (Transformer Engine's "current").
    r.roles = {{"w", "e4m3:float32"}, {"a", "e4m3:float32"}, {"w_bp", "e4m3:float32"}, {"a_bp", "e4m3:float32"},
               {"g", "e5m2:float32"}};
  } else if (name == "mxfp8") {
    r.roles = {{"w", "mxfp8_e4m3"}, {"a", "mxfp8_e4m3"}, {"w_bp", "mxfp8_e4m3"}, {"a_bp", "mxfp8_e4m3"}, {"g", "mxfp8_e5m2"}};
  } else if (name == "mxfp6") {
    r.roles = {{"w", "mxfp6_e2m3"}, {"a", "mxfp6_e2m3"}, {"w_bp", "mxfp6_e2m3"}, {"a_bp", "mxfp6_e2m3"}, {"g", "mxfp6_e3m2"}};
  } else if (name == "mxfp4" || name == "mxint8" || name == "mxsf" || name == "boost_e2m5" || name == "nvfp4") {
    all(name);
  } else {
    std::string known;
    for (const auto& n : recipe_names()) known += " " + n;
    return make_error("recipe '" + name + "': unknown (known:" + known + ")");
  }
  return r;
}

std::optional<Error> apply_setting(Recipe& r, const std::string& setting) {
  const auto eq = setting.find('=');
  if (eq == std::string::npos) return make_error("setting '" + setting + "': expected ROLE=SPEC or PATTERN:ROLE=SPEC");
  std::string left = setting.substr(0, eq), spec = setting.substr(eq + 1), pattern;
  if (const auto colon = left.rfind(':'); colon != std::string::npos) pattern = left.substr(0, colon), left = left.substr(colon + 1);
  if (std::none_of(std::begin(kRoles), std::end(kRoles), [&](const char* k) { return left == k; }))
    return make_error("setting '" + setting + "': unknown role '" + left + "' (roles: w, a, g, w_bp, a_bp)");
  if (auto op = parse_operand(spec); !op) return make_error("setting '" + setting + "': " + op.error().message);
  if (pattern.empty()) r.roles[left] = spec;
  else r.overrides.push_back({pattern, {{left, spec}}});
  return std::nullopt;
}

// ---------------------------------------------------------------- training

Result<TrainResult> run(const Config& c, const Reporter& reporter, const std::function<void(const StepMetrics&)>& on_step) {
  if (c.steps < 1 || c.batch < 1) return make_error("steps and batch must be at least 1");
  if (c.optimizer != "sgd" && c.optimizer != "adamw") return make_error("optimizer '" + c.optimizer + "': expected sgd or adamw");
  const auto t0 = std::chrono::steady_clock::now();
  auto data = load_data(c);
  if (!data) return data.error();
  std::mt19937_64 rng(c.seed);
  auto model = make_model(c.model, data->h, data->w, data->classes, c.hidden, rng);
  if (!model) return model.error();
  if (auto ok = configure(*model, c.recipe); !ok) return ok.error();
  auto params = model->params();
  TrainResult out;
  Context ctx;
  ctx.threads = c.threads;
  double scale = c.recipe.loss_scaling.kind == LossScaling::Kind::None ? 1.0 : c.recipe.loss_scaling.initial;
  int good_steps = 0, updates = 0;
  std::int64_t skipped_total = 0;
  // Seeded shuffling: a permutation per epoch from the run's generator.
  std::vector<std::size_t> order(static_cast<std::size_t>(data->train_x.rows()));
  std::size_t cursor = order.size();
  Mat xb(c.batch, data->train_x.cols());
  std::vector<int> yb(static_cast<std::size_t>(c.batch));
  for (int step = 0; step < c.steps; ++step) {
    if (reporter.cancelled()) return make_error(ops::kCancelled);
    for (int i = 0; i < c.batch; ++i) {
      if (cursor == order.size()) {
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::shuffle(order.begin(), order.end(), rng);
        cursor = 0;
      }
      const std::size_t k = order[cursor++];
      xb.row(i) = data->train_x.row(static_cast<Eigen::Index>(k));
      yb[static_cast<std::size_t>(i)] = data->train_y[k];
    }
    Stats stats;
    ctx.stats = &stats;
    auto logits = model->forward(xb, ctx);
    if (!logits) return logits.error();
    Mat g;
    int correct = 0;
    StepMetrics m;
    m.step = step + 1;
    m.loss = softmax_xent(*logits, yb, scale, &g, &correct);
    m.accuracy = static_cast<double>(correct) / c.batch;
    m.loss_scale = scale;
    m.lr = learning_rate(c, step);
    if (auto ok = model->backward(g, ctx); !ok) return ok.error();
    // Unscale; an overflow (inf or NaN) skips the step and backs the scale off.
    bool finite = true;
    for (Param* p : params) {
      if (scale != 1.0) p->grad /= static_cast<float>(scale);
      finite = finite && p->grad.allFinite();
    }
    const LossScaling& ls = c.recipe.loss_scaling;
    if (!finite && ls.kind != LossScaling::Kind::None) {
      m.skipped = true;
      ++skipped_total;
      good_steps = 0;
      if (ls.kind == LossScaling::Kind::Dynamic) scale = std::max(1.0, scale * ls.backoff);
    } else {
      update(c, params, m.lr, ++updates);
      if (ls.kind == LossScaling::Kind::Dynamic && ++good_steps >= ls.growth_interval) {
        scale *= ls.growth;
        good_steps = 0;
      }
    }
    m.skipped_total = skipped_total;
    for (auto& [k, r] : stats) m.roles.push_back(r);
    if ((c.eval_every > 0 && (step + 1) % c.eval_every == 0) || step + 1 == c.steps) {
      auto test = evaluate(*model, data->test_x, data->test_y, ctx);
      if (!test) return test.error();
      auto val = evaluate(*model, data->val_x, data->val_y, ctx);
      if (!val) return val.error();
      m.test_accuracy = test->second;
      m.val_loss = val->first;
      out.test_accuracy = test->second;
      out.val_loss = val->first;
      out.val_accuracy = val->second;
    }
    if (on_step) on_step(m);
    out.steps.push_back(std::move(m));
    reporter.report(step + 1, c.steps, "steps");
  }
  out.engine = ctx.engine.empty() ? "fp32 (no quantization)" : ctx.engine;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// ---------------------------------------------------------------- bench, checks

Result<StepTiming> time_steps(const std::string& model_kind, const Recipe& recipe, int steps, int batch, unsigned threads) {
  std::mt19937_64 rng(1);
  auto model = make_model(model_kind, 28, 28, 10, 256, rng);
  if (!model) return model.error();
  if (auto ok = configure(*model, recipe); !ok) return ok.error();
  Mat x(batch, 28 * 28);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = u(rng);
  std::vector<int> y(static_cast<std::size_t>(batch));
  for (auto& v : y) v = static_cast<int>(rng() % 10);
  Context ctx;
  ctx.threads = threads;
  auto params = model->params();
  Config c;
  auto one = [&]() -> Result<bool> {
    auto logits = model->forward(x, ctx);
    if (!logits) return logits.error();
    Mat g;
    softmax_xent(*logits, y, 1.0, &g, nullptr);
    if (auto ok = model->backward(g, ctx); !ok) return ok;
    update(c, params, 1e-4, 1);
    return true;
  };
  if (auto ok = one(); !ok) return ok.error();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s)
    if (auto ok = one(); !ok) return ok.error();
  StepTiming t;
  t.seconds_per_step = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  // FP32 GEMM rate: the MLP's first layer shape [batch, 784] x [784, 256].
  Mat a = Mat::Random(batch, 784), b = Mat::Random(784, 256), out;
  const auto g0 = std::chrono::steady_clock::now();
  constexpr int kReps = 20;
  for (int r = 0; r < kReps; ++r) out.noalias() = a * b;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count();
  t.gemm_gflops = 2.0 * batch * 784 * 256 * kReps / s / 1e9 + 0 * out(0, 0);
  return t;
}

std::map<std::string, double> gradient_check(std::uint64_t seed) {
  // Each layer kind through a scalar loss L = sum(y * r) for a fixed random r: dL/dx = backward(r).
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto random = [&](Eigen::Index r, Eigen::Index c) {
    Mat m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
    return m;
  };
  std::vector<std::pair<std::unique_ptr<Layer>, Mat>> cases;
  cases.emplace_back(std::make_unique<Linear>("linear", 6, 5, rng), random(4, 6));
  // ReLU and max pooling have kinks: their inputs keep at least 0.05 from 0 and between values, more than h.
  Mat relu_in = random(4, 7);
  for (Eigen::Index i = 0; i < relu_in.size(); ++i) relu_in.data()[i] += relu_in.data()[i] < 0 ? -0.05f : 0.05f;
  Mat pool_in(2, 4 * 4 * 2);
  std::vector<float> distinct(static_cast<std::size_t>(pool_in.size()));
  for (std::size_t i = 0; i < distinct.size(); ++i) distinct[i] = 0.1f * static_cast<float>(i) - 3.0f;
  std::shuffle(distinct.begin(), distinct.end(), rng);
  std::copy(distinct.begin(), distinct.end(), pool_in.data());
  cases.emplace_back(std::make_unique<Relu>("relu"), relu_in);
  cases.emplace_back(std::make_unique<Gelu>("gelu"), random(4, 7));
  cases.emplace_back(std::make_unique<Conv>("conv", 4, 4, 2, 3, rng), random(2, 4 * 4 * 2));
  cases.emplace_back(std::make_unique<MaxPool>("maxpool", 4, 4, 2), pool_in);
  std::map<std::string, double> worst;
  Context ctx;
  for (auto& [layer, x] : cases) {
    for (const char* role : kRoles) layer->ops[role] = Operand{};
    auto y = layer->forward(x, ctx);
    const Mat r = random(y->rows(), y->cols());
    auto loss = [&](const Mat& in) {
      auto out = layer->forward(in, ctx);
      return static_cast<double>(out->cwiseProduct(r).sum());
    };
    layer->forward(x, ctx);
    auto dx = layer->backward(r, ctx);
    double w = 0;
    // Central differences with h = 1e-2 in float32: truncation O(h^2) and rounding O(eps/h) keep the
    // relative difference near 1e-3 (kinks of ReLU and max are kept away by the data above).
    const float h = 1e-2f;
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      Mat xp = x, xm = x;
      xp.data()[i] += h;
      xm.data()[i] -= h;
      const double fd = (loss(xp) - loss(xm)) / (2 * h);
      const double an = dx->data()[i];
      w = std::max(w, std::fabs(fd - an) / std::max(1.0, std::fabs(fd)));
    }
    // Parameters too.
    for (Param* p : layer->params()) {
      layer->forward(x, ctx);
      layer->backward(r, ctx);
      const Mat grad = p->grad;
      for (Eigen::Index i = 0; i < p->w.size(); ++i) {
        const float keep = p->w.data()[i];
        p->w.data()[i] = keep + h;
        const double lp = loss(x);
        p->w.data()[i] = keep - h;
        const double lm = loss(x);
        p->w.data()[i] = keep;
        const double fd = (lp - lm) / (2 * h);
        w = std::max(w, std::fabs(fd - grad.data()[i]) / std::max(1.0, std::fabs(fd)));
      }
    }
    worst[layer->kind()] = w;
  }
  // Softmax cross-entropy against its own finite differences.
  Mat logits = random(3, 5);
  std::vector<int> labels = {0, 3, 4};
  Mat g;
  softmax_xent(logits, labels, 1.0, &g, nullptr);
  double w = 0;
  for (Eigen::Index i = 0; i < logits.size(); ++i) {
    Mat p = logits, m = logits;
    p.data()[i] += 1e-2f;
    m.data()[i] -= 1e-2f;
    const double fd = (softmax_xent(p, labels, 1.0, nullptr, nullptr) - softmax_xent(m, labels, 1.0, nullptr, nullptr)) / 2e-2;
    w = std::max(w, std::fabs(fd - g.data()[i]) / std::max(1.0, std::fabs(fd)));
  }
  worst["softmax_xent"] = w;
  return worst;
}

Result<UnderflowStudy> fp16_underflow_study(std::uint64_t seed) {
  // A linear classifier's output gradients on a large batch are (p - y) / B: with B = 4096 many fall below
  // FP16's smallest subnormal 2^-24 once p is close to y; a loss scale of 2^16 lifts them back.
  std::mt19937_64 rng(seed);
  auto model = make_model("mlp", 4, 4, 4, 16, rng);
  if (!model) return model.error();
  constexpr int kBatch = 4096;
  Mat x(kBatch, 16);
  std::vector<int> y(kBatch);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int i = 0; i < kBatch; ++i) {
    y[static_cast<std::size_t>(i)] = i % 4;
    for (int k = 0; k < 16; ++k) x(i, k) = n(rng) * 0.1f + (k % 4 == i % 4 ? 3.0f : 0.0f);
  }
  UnderflowStudy s;
  for (const bool scaled : {false, true}) {
    std::mt19937_64 r2(seed);
    auto m = make_model("mlp", 4, 4, 4, 16, r2);
    auto rec = recipe(scaled ? "fp16-dynamic" : "fp16");
    if (auto ok = configure(*m, *rec); !ok) return ok.error();
    auto params = m->params();
    Config c;
    c.lr = 1e-2;
    double scale = scaled ? 65536.0 : 1.0;
    RoleMetrics total;
    for (int step = 0; step < 60; ++step) {
      Stats stats;
      Context ctx;
      ctx.stats = &stats;
      auto logits = m->forward(x, ctx);
      if (!logits) return logits.error();
      Mat g;
      softmax_xent(*logits, y, scale, &g, nullptr);
      if (auto ok = m->backward(g, ctx); !ok) return ok.error();
      bool finite = true;
      for (Param* p : params) {
        p->grad /= static_cast<float>(scale);
        finite = finite && p->grad.allFinite();
      }
      if (finite) update(c, params, c.lr, step + 1);
      else scale /= 2;
      if (step >= 30)
        for (auto& [k, r] : stats)
          if (r.role == "g") total.nonzero += r.nonzero, total.underflows += r.underflows;
    }
    (scaled ? s.with_dynamic_scaling : s.without_scaling) = total.underflow_ratio();
  }
  return s;
}

}  // namespace mxlab::train
