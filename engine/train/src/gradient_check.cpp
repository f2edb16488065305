// Finite-difference gradient checks of the layers and models, all in double precision.
#include "mxlab/train/gradient_check.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "models.hpp"

namespace mxlab::train {
namespace {

using detail::Mat;
using M = Mat<double>;

constexpr double kStep = 1e-5;
constexpr int kSamples = 60;
/// Gradients below this are compared in absolute terms: the differences' own noise is about 1e-10 (rounding of
/// the loss over the step), which would dominate a relative error of a near-zero gradient.
constexpr double kFloor = 1e-3;

/// Central differences of loss() over up to kSamples seeded elements of `values`, against `analytic`.
GradientCheck compare(const std::string& layer, const std::string& tensor, M& values, const M& analytic,
                      const std::function<double()>& loss, Rng& rng) {
  GradientCheck g{layer, tensor, 0, 0, 0, 0};
  const std::int64_t n = values.size();
  const std::int64_t count = std::min<std::int64_t>(n, kSamples);
  for (std::int64_t s = 0; s < count; ++s) {
    const std::int64_t i = n <= kSamples ? s : static_cast<std::int64_t>(rng.next_u64() % static_cast<std::uint64_t>(n));
    const double v = values.data()[i];
    values.data()[i] = v + kStep;
    const double lp = loss();
    values.data()[i] = v - kStep;
    const double lm = loss();
    values.data()[i] = v;
    const double numeric = (lp - lm) / (2 * kStep);
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
                const std::function<double()>& loss, Rng& rng) {
  for (auto* p : params) {
    const M analytic = p->grad;
    out.push_back(compare(name, p->name, p->value, analytic, loss, rng));
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
  } else if (name == "relu" || name == "gelu") {
    detail::Activation<double> a;
    a.gelu = name == "gelu";
    M x = distinct(6, 9, rng), r = random(6, 9, nrm);
    x *= 30.0;  // spread over [-8, 8]: both tails of GELU
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
  } else if (name == "attention") {
    detail::Attention<double> a("attention", 8, 2, none, none, none, none);
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
  } else if (name == "softmax_ce") {
    M logits = random(6, 5, nrm, 2.0), dlogits;
    std::vector<int> targets = {0, 4, 2, 2, 1, 3};
    detail::softmax_cross_entropy<double>(logits, targets, 1.0, &dlogits, nullptr);
    auto loss = [&] { return detail::softmax_cross_entropy<double>(logits, targets, 1.0, nullptr, nullptr); };
    out.push_back(compare(name, "logits", logits, dlogits, loss, rng));
  } else if (name == "mlp" || name == "cnn" || name == "transformer") {
    ModelConfig c;
    c.kind = name;
    c.gelu = true;      // smooth activations and average pooling: no kink inside the difference step
    c.avg_pool = true;
    c.hidden = {12, 10};
    c.conv1 = 3, c.conv2 = 4, c.fc = 6;
    c.d_model = 8, c.layers = 2, c.heads = 2, c.context = 5;
    detail::Batch b;
    b.size = 3;
    std::unique_ptr<detail::Model<double>> m;
    if (name == "transformer") {
      b.seq = 5;
      for (int i = 0; i < 15; ++i) {
        b.tokens.push_back(static_cast<int>(rng.next_u64() % 7));
        b.targets.push_back(static_cast<int>(rng.next_u64() % 7));
      }
      m = std::make_unique<detail::Transformer<double>>(c, 7, nullptr, seed);
      // Larger weights than GPT-2's 0.02 so every path carries gradient well above the difference noise.
      for (auto* p : m->params()) detail::fill_normal(p->value, 0.3, nrm);
    } else {
      for (int i = 0; i < 3 * 8 * 8; ++i) b.x.push_back(static_cast<float>(rng.uniform()));
      b.targets = {1, 0, 2};
      if (name == "mlp") m = std::make_unique<detail::Mlp<double>>(c, 64, 3, nullptr, seed);
      else m = std::make_unique<detail::Cnn<double>>(c, 8, 8, 1, 3, nullptr, seed);
    }
    // The MLP and CNN read float pixels; every computation after that is double.
    m->zero_grad();
    M dlogits;
    detail::softmax_cross_entropy<double>(m->forward(b, ctx), b.targets, 1.0, &dlogits, nullptr);
    m->backward(dlogits, ctx);
    auto loss = [&] { return detail::softmax_cross_entropy<double>(m->forward(b, ctx), b.targets, 1.0, nullptr, nullptr); };
    add_params(out, name, m->params(), loss, rng);
  } else {
    std::string msg = "unknown gradient check '" + name + "' (known:";
    for (const auto& n : gradient_check_names()) msg += " " + n;
    return make_error(msg + ")");
  }
  return out;
}

}  // namespace

std::vector<std::string> gradient_check_names() {
  return {"linear", "conv2d", "maxpool", "avgpool", "relu", "gelu", "layernorm", "embedding", "attention",
          "softmax_ce", "mlp", "cnn", "transformer"};
}

Result<std::vector<GradientCheck>> check_gradients(const std::string& name, std::uint64_t seed) {
  return check(name, seed);
}

}  // namespace mxlab::train
