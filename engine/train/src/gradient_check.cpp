// Finite-difference gradient checks of the layers and models, all in double precision.
#include "mxlab/train/gradient_check.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "image_models.hpp"

namespace mxlab::train {
namespace {

using detail::Mat;
using M = Mat<double>;

constexpr double kStep = 1e-5;
constexpr int kSamples = 60;
/// Gradients below this are compared in absolute terms: the differences' own noise is about 1e-10 (rounding of
/// the loss over the step), which would dominate a relative error of a near-zero gradient.
constexpr double kFloor = 1e-3;

/// How the numeric gradient is taken: the elements compared per tensor, and whether with the fourth-order
/// five-point stencil (truncation ~ step^4 |f^(5)|) instead of central differences (~ step^2 |f^(3)|), for the
/// deep networks whose batch normalisations make the loss strongly curved.
struct Sampling {
  std::int64_t samples = kSamples;
  bool fourth_order = false;
};

/// Numeric differences of loss() over up to `samples` seeded elements of `values`, against `analytic`.
GradientCheck compare(const std::string& layer, const std::string& tensor, M& values, const M& analytic,
                      const std::function<double()>& loss, Rng& rng, Sampling how = {}) {
  GradientCheck g{layer, tensor, 0, 0, 0, 0};
  const std::int64_t n = values.size();
  const std::int64_t count = std::min<std::int64_t>(n, how.samples);
  auto at = [&](std::int64_t i, double v) {
    values.data()[i] = v;
    return loss();
  };
  for (std::int64_t s = 0; s < count; ++s) {
    const std::int64_t i = n <= how.samples ? s : static_cast<std::int64_t>(rng.next_u64() % static_cast<std::uint64_t>(n));
    const double v = values.data()[i];
    const double d1 = at(i, v + kStep) - at(i, v - kStep);
    const double numeric = how.fourth_order ? (8 * d1 - (at(i, v + 2 * kStep) - at(i, v - 2 * kStep))) / (12 * kStep)
                                            : d1 / (2 * kStep);
    values.data()[i] = v;
    const double a = analytic.data()[i];
    const double err = std::abs(a - numeric);
    g.max_abs_error = std::max(g.max_abs_error, err);
    g.max_rel_error = std::max(g.max_rel_error, err / std::max({std::abs(a), std::abs(numeric), kFloor}));
    g.max_abs_gradient = std::max(g.max_abs_gradient, std::abs(a));
    ++g.checked;
  }
  return g;
}

M random(std::int64_t r, std::int64_t c, detail::Normal& n, double scale = 1.0) {
  M m(r, c);
  detail::fill_normal(m, scale, n);
  return m;
}

/// Distinct values at least 0.01 apart, none within 0.005 of zero (no kink of ReLU or max within the step).
M distinct(std::int64_t r, std::int64_t c, Rng& rng) {
  M m(r, c);
  std::vector<double> v(static_cast<std::size_t>(m.size()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>(i) - static_cast<double>(v.size()) / 2) * 0.01 + 0.005;
  for (std::size_t i = v.size() - 1; i > 0; --i) std::swap(v[i], v[rng.next_u64() % (i + 1)]);
  std::copy(v.begin(), v.end(), m.data());
  return m;
}

double dot(const M& a, const M& b) { return a.cwiseProduct(b).sum(); }

void add_params(std::vector<GradientCheck>& out, const std::string& name, std::vector<detail::Param<double>*> params,
                const std::function<double()>& loss, Rng& rng, Sampling how = {}) {
  for (auto* p : params) {
    const M analytic = p->grad;
    out.push_back(compare(name, p->name, p->value, analytic, loss, rng, how));
  }
}

Result<std::vector<GradientCheck>> check(const std::string& name, std::uint64_t seed) {
  detail::Normal nrm(seed);
  Rng rng(seed ^ 0xF00DULL);
  detail::QuantContext ctx;
  std::vector<GradientCheck> out;
  const detail::LayerFormats* none = nullptr;
  if (name == "linear") {
    detail::Linear<double> l("linear", 7, 5, none);
    detail::fill_normal(l.w.value, 0.5, nrm);
    detail::fill_normal(l.b.value, 0.5, nrm);
    M x = random(4, 7, nrm), r = random(4, 5, nrm);
    l.forward(x, ctx);
    const M dx = l.backward(r, ctx);
    auto loss = [&] { return dot(l.forward(x, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
    add_params(out, name, {&l.w, &l.b}, loss, rng);
  } else if (name == "conv2d") {
    detail::Conv2d<double> c("conv2d", 3, 4, 3, none);
    detail::fill_normal(c.lin.w.value, 0.3, nrm);
    detail::fill_normal(c.lin.b.value, 0.3, nrm);
    const detail::Dims d{2, 5, 6, 3};
    M x = random(2 * 5 * 6, 3, nrm), r = random(2 * 5 * 6, 4, nrm);
    c.forward(x, d, ctx);
    const M dx = c.backward(r, ctx);
    auto loss = [&] { return dot(c.forward(x, d, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
    add_params(out, name, {&c.lin.w, &c.lin.b}, loss, rng);
  } else if (name == "maxpool" || name == "avgpool") {
    detail::Pool2d<double> p;
    p.max = name == "maxpool";
    const detail::Dims d{2, 4, 6, 3};
    M x = distinct(2 * 4 * 6, 3, rng), r = random(2 * 2 * 3, 3, nrm);
    p.forward(x, d, ctx);
    const M dx = p.backward(r, ctx);
    auto loss = [&] { return dot(p.forward(x, d, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
  } else if (name == "relu" || name == "gelu" || name == "relu6") {
    detail::Activation<double> a;
    a.gelu = name == "gelu";
    a.relu6 = name == "relu6";
    M x = distinct(6, 9, rng), r = random(6, 9, nrm);
    x *= 30.0;  // spread over [-8, 8]: both tails of GELU, both kinks of ReLU6 (0 and 6) 0.15 away
    a.forward(x, ctx);
    const M dx = a.backward(r, ctx);
    auto loss = [&] { return dot(a.forward(x, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
  } else if (name == "layernorm") {
    detail::LayerNorm<double> l("layernorm", 8);
    detail::fill_normal(l.gain.value, 1.0, nrm);
    detail::fill_normal(l.bias.value, 1.0, nrm);
    M x = random(5, 8, nrm, 2.0), r = random(5, 8, nrm);
    l.forward(x, ctx);
    const M dx = l.backward(r, ctx);
    auto loss = [&] { return dot(l.forward(x, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
    add_params(out, name, {&l.gain, &l.bias}, loss, rng);
  } else if (name == "embedding") {
    detail::Embedding<double> e("embedding", 6, 5, 4);
    detail::fill_normal(e.token.value, 1.0, nrm);
    detail::fill_normal(e.position.value, 1.0, nrm);
    std::vector<int> ids;
    for (int i = 0; i < 10; ++i) ids.push_back(static_cast<int>(rng.next_u64() % 6));
    M r = random(10, 4, nrm);
    e.forward(ids, 2, 5);
    e.backward(r);
    auto loss = [&] { return dot(e.forward(ids, 2, 5), r); };
    add_params(out, name, {&e.token, &e.position}, loss, rng);
  } else if (name == "attention" || name == "attention_bidirectional") {
    detail::Attention<double> a(name, 8, 2, none, none, none, none);
    a.causal = name == "attention";
    detail::fill_normal(a.qkv.w.value, 0.5, nrm);
    detail::fill_normal(a.qkv.b.value, 0.2, nrm);
    detail::fill_normal(a.proj.w.value, 0.5, nrm);
    detail::fill_normal(a.proj.b.value, 0.2, nrm);
    M x = random(2 * 5, 8, nrm), r = random(2 * 5, 8, nrm);
    a.forward(x, 2, 5, ctx);
    const M dx = a.backward(r, ctx);
    auto loss = [&] { return dot(a.forward(x, 2, 5, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
    add_params(out, name, {&a.qkv.w, &a.qkv.b, &a.proj.w, &a.proj.b}, loss, rng);
  } else if (name == "conv2d_stride2" || name == "pointwise") {
    const bool strided = name == "conv2d_stride2";
    detail::Conv2d<double> c(name, 3, 4, strided ? 3 : 1, none, strided ? 2 : 1);
    detail::fill_normal(c.lin.w.value, 0.3, nrm);
    detail::fill_normal(c.lin.b.value, 0.3, nrm);
    const detail::Dims d{2, 5, 6, 3};
    const detail::Dims o = c.out_dims(d);
    M x = random(2 * 5 * 6, 3, nrm), r = random(o.batch * o.height * o.width, 4, nrm);
    c.forward(x, d, ctx);
    const M dx = c.backward(r, ctx);
    auto loss = [&] { return dot(c.forward(x, d, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
    add_params(out, name, {&c.lin.w, &c.lin.b}, loss, rng);
  } else if (name == "depthwise" || name == "depthwise_stride2") {
    detail::DepthwiseConv2d<double> c(name, 3, 3, none, name == "depthwise" ? 1 : 2);
    detail::fill_normal(c.w.value, 0.5, nrm);
    detail::fill_normal(c.b.value, 0.5, nrm);
    const detail::Dims d{2, 5, 6, 3};
    const detail::Dims o = c.out_dims(d);
    M x = random(2 * 5 * 6, 3, nrm), r = random(o.batch * o.height * o.width, 3, nrm);
    c.forward(x, d, ctx);
    const M dx = c.backward(r, ctx);
    auto loss = [&] { return dot(c.forward(x, d, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
    add_params(out, name, {&c.w, &c.b}, loss, rng);
  } else if (name == "batchnorm" || name == "batchnorm_eval") {
    detail::BatchNorm<double> l(name, 4);
    detail::fill_normal(l.gain.value, 1.0, nrm);
    detail::fill_normal(l.bias.value, 1.0, nrm);
    M x = random(2 * 3 * 3, 4, nrm, 2.0), r = random(2 * 3 * 3, 4, nrm);
    if (name == "batchnorm_eval") {
      // Running statistics from a few batches, then normalisation with them (no batch statistics).
      for (int i = 0; i < 3; ++i) l.forward(random(18, 4, nrm, 2.0), ctx);
      ctx.training = false;
    }
    l.forward(x, ctx);
    const M dx = l.backward(r, ctx);
    auto loss = [&] { return dot(l.forward(x, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
    std::vector<detail::Param<double>*> params;
    l.collect(params);
    add_params(out, name, params, loss, rng);
  } else if (name == "global_avgpool") {
    detail::GlobalAvgPool<double> p;
    const detail::Dims d{2, 3, 4, 5};
    M x = random(2 * 3 * 4, 5, nrm), r = random(2, 5, nrm);
    p.forward(x, d, ctx);
    const M dx = p.backward(r, ctx);
    auto loss = [&] { return dot(p.forward(x, d, ctx), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
  } else if (name == "basic_block" || name == "inverted_residual") {
    // Smooth activations (GELU) so no kink lies inside the difference step; batch statistics.
    const detail::FormatsOf fmt = [](const std::string&) -> const detail::LayerFormats* { return nullptr; };
    std::optional<detail::BasicBlock<double>> basic;
    std::optional<detail::InvertedResidual<double>> inverted;
    std::vector<detail::Param<double>*> params;
    detail::Dims d{2, 4, 5, 3};
    if (name == "basic_block") {
      basic.emplace(name, 3, 4, 2, fmt);  // stride 2 and a new width: the downsample path too
      basic->act1.gelu = basic->act2.gelu = true;
      basic->collect(params);
    } else {
      inverted.emplace(name, 3, 3, 2, 1, fmt);  // expansion 2, stride 1: the residual sum too
      inverted->act1.relu6 = inverted->act2.relu6 = false;
      inverted->act1.gelu = inverted->act2.gelu = true;
      inverted->collect(params);
    }
    for (auto* p : params) detail::fill_normal(p->value, 0.5, nrm);
    M x = random(d.batch * d.height * d.width, d.channels, nrm);
    auto run = [&] {
      detail::Dims io = d;
      return basic ? basic->forward(x, io, ctx) : inverted->forward(x, io, ctx);
    };
    const M y = run();
    M r = random(y.rows(), y.cols(), nrm);
    const M dx = basic ? basic->backward(r, ctx) : inverted->backward(r, ctx);
    auto loss = [&] { return dot(run(), r); };
    out.push_back(compare(name, "input", x, dx, loss, rng));
    add_params(out, name, params, loss, rng);
  } else if (name == "softmax_ce") {
    M logits = random(6, 5, nrm, 2.0), dlogits;
    std::vector<int> targets = {0, 4, 2, 2, 1, 3};
    detail::softmax_cross_entropy<double>(logits, targets, 1.0, &dlogits, nullptr);
    auto loss = [&] { return detail::softmax_cross_entropy<double>(logits, targets, 1.0, nullptr, nullptr); };
    out.push_back(compare(name, "logits", logits, dlogits, loss, rng));
  } else if (is_model_kind(name)) {
    ModelConfig c;
    c.kind = name;
    c.gelu = true;      // smooth activations and average pooling: no kink inside the difference step
    c.avg_pool = true;
    c.hidden = {12, 10};
    c.conv1 = 3, c.conv2 = 4, c.fc = 6;
    c.d_model = 8, c.layers = 2, c.heads = 2, c.context = 5;
    c.width = 2, c.patch = 4;  // ResNet widths 2..16; MobileNetV2 at 1/8 of its widths; 4 patches of 4x4
    detail::Batch b;
    b.size = 3;
    std::unique_ptr<detail::Model<double>> m;
    bool deep = false;  // the ResNet's and MobileNetV2's 40 to 70 tensors
    detail::with_model_def(c.kind.kind(), [&](auto def) {
      m = def.gradient_model(c, b, rng, nrm, seed);
      deep = def.kDeepCheck;
    });
    // The MLP and CNN read float pixels; every computation after that is double.
    m->zero_grad();
    M dlogits;
    detail::softmax_cross_entropy<double>(m->forward(b, ctx), b.targets, 1.0, &dlogits, nullptr);
    m->backward(dlogits, ctx);
    auto loss = [&] { return detail::softmax_cross_entropy<double>(m->forward(b, ctx), b.targets, 1.0, nullptr, nullptr); };
    auto params = m->params();
    // An inverted residual's output reaches the loss only through 1x1 convolutions followed by batch
    // normalisation (the next block's expansion, or `last`), which remove a shift per channel under batch
    // statistics: the shifts of the projections' batch norms have no gradient while training. Left out.
    std::erase_if(params, [](const detail::Param<double>* p) { return p->name.ends_with("project_bn.bias"); });
    // The ResNet's and MobileNetV2's 40 to 70 tensors: 4 elements of each, with the five-point stencil.
    add_params(out, name, params, loss, rng, deep ? Sampling{4, true} : Sampling{});
  } else {
    std::string msg = "unknown gradient check '" + name + "' (known:";
    for (const auto& n : gradient_check_names()) msg += " " + n;
    return make_error(msg + ")");
  }
  return out;
}

}  // namespace

std::vector<std::string> gradient_check_names() {
  std::vector<std::string> names = {"linear",     "conv2d",    "conv2d_stride2",  "pointwise",      "depthwise",
                                    "depthwise_stride2", "maxpool", "avgpool",  "global_avgpool", "relu",
                                    "relu6",      "gelu",      "layernorm",       "batchnorm",      "batchnorm_eval",
                                    "embedding",  "attention", "attention_bidirectional", "basic_block",
                                    "inverted_residual", "softmax_ce"};
  for (const auto& k : kModelKinds) names.emplace_back(k.name);  // every model, in the order of its rows
  return names;
}

Result<std::vector<GradientCheck>> check_gradients(const std::string& name, std::uint64_t seed) {
  return check(name, seed);
}

}  // namespace mxlab::train
