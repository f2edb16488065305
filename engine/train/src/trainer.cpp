// The training loop over the internal models: batches, loss scaling, optimizers, schedule, metrics.
#include "mxlab/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "models.hpp"

namespace mxlab::train {
namespace {

using detail::Batch;
using detail::Mat;
using detail::Model;
using detail::Param;
using detail::QuantContext;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kShuffleStream = 0x53485546464C45ULL;  // "SHUFFLE"
constexpr std::uint64_t kTextStream = 0x54455854ULL;           // "TEXT"

Result<std::unique_ptr<Model<float>>> make_model(const TrainData& data, const TrainOptions& o,
                                                 std::vector<std::string>* names) {
  const auto& c = o.model;
  std::optional<Error> failure;
  detail::FormatLookup lookup = [&](const std::string& layer) {
    if (names != nullptr) names->push_back(layer);
    detail::LayerFormats f;
    auto r = layer_formats(o.recipe, layer);
    if (!r) {
      if (!failure) failure = r.error();
      return f;
    }
    for (std::size_t i = 0; i < r->size(); ++i)
      if ((*r)[i]) f.by_role[i] = std::make_shared<const ops::FakeQuantizer>(*(*r)[i]);
    return f;
  };
  std::unique_ptr<Model<float>> m;
  if (c.kind == "mlp" || c.kind == "cnn") {
    if (data.is_text) return make_error("model '" + c.kind + "' needs image data, not " + data.name);
    for (auto h : c.hidden)
      if (h < 1) return make_error("MLP hidden widths must be positive");
    if (c.kind == "mlp") {
      m = std::make_unique<detail::Mlp<float>>(c, data.features(), data.classes, lookup, o.seed);
    } else {
      if (data.rows % 4 != 0 || data.cols % 4 != 0)
        return make_error("the CNN's two 2x2 poolings need image sides divisible by 4");
      if (c.conv1 < 1 || c.conv2 < 1 || c.fc < 1) return make_error("CNN widths must be positive");
      m = std::make_unique<detail::Cnn<float>>(c, data.rows, data.cols, data.channels, data.classes, lookup, o.seed);
    }
  } else if (c.kind == "transformer") {
    if (!data.is_text) return make_error("model 'transformer' needs text data (text:NAME), not " + data.name);
    if (c.d_model < 1 || c.heads < 1 || c.d_model % c.heads != 0)
      return make_error("transformer width " + std::to_string(c.d_model) + " must be a positive multiple of the heads");
    if (c.layers < 1 || c.context < 2) return make_error("transformer needs layers >= 1 and context >= 2");
    m = std::make_unique<detail::Transformer<float>>(c, data.vocabulary(), lookup, o.seed);
  } else {
    return make_error("unknown model '" + c.kind + "' (known: mlp, cnn, transformer)");
  }
  if (failure) return *failure;
  return m;
}

/// Learning rate at a 0-based step: linear warm-up, then cosine decay (Loshchilov and Hutter 2017, eq. 5).
double learning_rate(const OptimizerConfig& o, std::int64_t step, std::int64_t steps) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  if (!o.cosine) return o.lr;
  const double span = static_cast<double>(std::max<std::int64_t>(1, steps - o.warmup_steps));
  const double t = static_cast<double>(step - o.warmup_steps) / span;
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * 0.5 * (1.0 + std::cos(3.141592653589793 * t)));
}

/// Optimizer state per parameter, updated in FP32 on the master weights.
class Optimizer {
 public:
  Optimizer(const OptimizerConfig& c, const std::vector<Param<float>*>& params) : c_(c), params_(params) {
    for (auto* p : params) {
      m_.push_back(Mat<float>::Zero(p->value.rows(), p->value.cols()));
      if (c.kind == "adamw") v_.push_back(Mat<float>::Zero(p->value.rows(), p->value.cols()));
    }
  }
  void step(double lr) {
    ++t_;
    const auto lrf = static_cast<float>(lr);
    const auto wd = static_cast<float>(c_.weight_decay);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      Param<float>& p = *params_[i];
      if (c_.kind == "sgd") {
        if (p.decay && wd > 0) p.grad += wd * p.value;
        m_[i] = static_cast<float>(c_.momentum) * m_[i] + p.grad;
        p.value -= lrf * m_[i];
        continue;
      }
      // AdamW (Loshchilov and Hutter 2019, algorithm 2), bias-corrected moments, decoupled weight decay.
      const auto b1 = static_cast<float>(c_.beta1), b2 = static_cast<float>(c_.beta2);
      m_[i] = b1 * m_[i] + (1.0F - b1) * p.grad;
      v_[i] = b2 * v_[i] + (1.0F - b2) * p.grad.cwiseProduct(p.grad);
      const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(c_.beta1, static_cast<double>(t_))));
      const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(c_.beta2, static_cast<double>(t_))));
      const auto eps = static_cast<float>(c_.eps);
      p.value.array() -= lrf * ((m_[i].array() * c1) / ((v_[i].array() * c2).sqrt() + eps));
      if (p.decay && wd > 0) p.value *= 1.0F - lrf * wd;
    }
  }

 private:
  OptimizerConfig c_;
  std::vector<Param<float>*> params_;
  std::vector<Mat<float>> m_, v_;
  std::int64_t t_ = 0;
};

/// Draws training batches: images in seeded per-epoch shuffles, text as windows at seeded random offsets.
class Batcher {
 public:
  Batcher(const TrainData& d, const TrainOptions& o) : d_(d), batch_(o.batch), seq_(o.model.context), seed_(o.seed),
                                                        text_rng_(o.seed ^ kTextStream) {}
  Batch next() {
    Batch b;
    b.size = batch_;
    if (d_.is_text) {
      b.seq = seq_;
      const auto span = static_cast<std::uint64_t>(d_.train_tokens.size()) - static_cast<std::uint64_t>(seq_);
      for (std::int64_t i = 0; i < batch_; ++i) {
        const auto at = static_cast<std::size_t>(text_rng_.next_u64() % span);
        for (std::int64_t t = 0; t < seq_; ++t) {
          b.tokens.push_back(d_.train_tokens[at + static_cast<std::size_t>(t)]);
          b.targets.push_back(d_.train_tokens[at + static_cast<std::size_t>(t) + 1]);
        }
      }
      return b;
    }
    const auto features = static_cast<std::size_t>(d_.features());
    for (std::int64_t i = 0; i < batch_; ++i) {
      if (pos_ >= order_.size()) reshuffle();
      const std::size_t k = order_[pos_++];
      b.x.insert(b.x.end(), d_.train.x.begin() + static_cast<std::ptrdiff_t>(k * features),
                 d_.train.x.begin() + static_cast<std::ptrdiff_t>((k + 1) * features));
      b.targets.push_back(d_.train.labels[k]);
    }
    return b;
  }

 private:
  void reshuffle() {
    order_.resize(static_cast<std::size_t>(d_.train.count()));
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    Rng rng(splitmix64(seed_ ^ kShuffleStream) + epoch_++);
    for (std::size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[rng.next_u64() % (i + 1)]);
    pos_ = 0;
  }
  const TrainData& d_;
  std::int64_t batch_, seq_;
  std::uint64_t seed_;
  Rng text_rng_;
  std::vector<std::size_t> order_;
  std::size_t pos_ = 0;
  std::uint64_t epoch_ = 0;
};

/// Forward-only evaluation over a split (images) or consecutive windows (text), quantized as in training.
EvalMetrics evaluate(Model<float>& model, const TrainData& d, const TrainOptions& o, bool test, std::int64_t limit,
                     const ops::FakeQuantizer* nongemm) {
  QuantContext ctx;
  ctx.threads = o.threads;
  ctx.training = false;
  ctx.nongemm = nongemm;
  EvalMetrics e;
  double loss_sum = 0;
  std::int64_t correct_sum = 0, rows = 0;
  const std::int64_t chunk = 256;
  if (d.is_text) {
    const std::vector<int>& tokens = d.validation_tokens;
    const std::int64_t seq = o.model.context;
    std::int64_t windows = (static_cast<std::int64_t>(tokens.size()) - 1) / seq;
    if (limit > 0) windows = std::min(windows, limit);
    for (std::int64_t w0 = 0; w0 < windows; w0 += chunk / 4) {
      Batch b;
      b.size = std::min(chunk / 4, windows - w0);
      b.seq = seq;
      for (std::int64_t w = w0; w < w0 + b.size; ++w)
        for (std::int64_t t = 0; t < seq; ++t) {
          b.tokens.push_back(tokens[static_cast<std::size_t>(w * seq + t)]);
          b.targets.push_back(tokens[static_cast<std::size_t>(w * seq + t + 1)]);
        }
      const Mat<float> logits = model.forward(b, ctx);
      loss_sum += detail::softmax_cross_entropy<float>(logits, b.targets, 1.0F, nullptr, nullptr) *
                  static_cast<double>(logits.rows());
      rows += logits.rows();
    }
    e.examples = windows;
  } else {
    const ImageSplit& s = test ? d.test : d.validation;
    std::int64_t n = s.count();
    if (limit > 0) n = std::min(n, limit);
    const auto features = static_cast<std::size_t>(d.features());
    for (std::int64_t i0 = 0; i0 < n; i0 += chunk) {
      Batch b;
      b.size = std::min(chunk, n - i0);
      b.x.assign(s.x.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i0) * features),
                 s.x.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i0 + b.size) * features));
      b.targets.assign(s.labels.begin() + i0, s.labels.begin() + i0 + b.size);
      const Mat<float> logits = model.forward(b, ctx);
      std::int64_t correct = 0;
      loss_sum += detail::softmax_cross_entropy<float>(logits, b.targets, 1.0F, nullptr, &correct) *
                  static_cast<double>(b.size);
      correct_sum += correct;
      rows += b.size;
    }
    e.examples = n;
  }
  e.loss = rows > 0 ? loss_sum / static_cast<double>(rows) : 0.0;
  e.accuracy = rows > 0 ? static_cast<double>(correct_sum) / static_cast<double>(rows) : 0.0;
  e.bpc = e.loss / std::log(2.0);
  return e;
}

std::vector<OperandMetric> operand_metrics(const QuantContext& ctx) {
  std::vector<OperandMetric> out;
  for (const auto& [key, s] : ctx.stats) {
    const auto dot = key.rfind('.');
    OperandMetric m;
    m.layer = key.substr(0, dot);
    m.role = *parse_role(key.substr(dot + 1));
    m.count = s.count;
    m.nonzero = s.nonzero;
    m.underflow = s.underflow;
    m.mse = s.count > 0 ? s.sse / static_cast<double>(s.count) : 0.0;
    out.push_back(m);
  }
  return out;
}

Result<TrainResult> run(const TrainData& data, const TrainOptions& o, const std::function<void(const StepMetrics&)>& on_step,
                        const Reporter& reporter) {
  if (o.steps < 1) return make_error("steps must be at least 1");
  if (o.batch < 1) return make_error("batch must be at least 1");
  if (!(o.optimizer.lr > 0) || !std::isfinite(o.optimizer.lr)) return make_error("learning rate must be positive");
  if (o.optimizer.kind != "adamw" && o.optimizer.kind != "sgd")
    return make_error("unknown optimizer '" + o.optimizer.kind + "' (known: adamw, sgd)");
  if (data.is_text && static_cast<std::int64_t>(data.train_tokens.size()) <= o.model.context + 1)
    return make_error("text too short for the context");
  if (!data.is_text && data.train.count() < 1) return make_error("no training images");
  auto made = make_model(data, o, nullptr);
  if (!made) return made.error();
  auto nongemm_format = role_format(o.recipe.nongemm);
  if (!nongemm_format) return make_error("recipe '" + o.recipe.name + "', nongemm: " + nongemm_format.error().message);
  std::optional<ops::FakeQuantizer> nongemm;
  if (*nongemm_format) nongemm.emplace(**nongemm_format);
  const ops::FakeQuantizer* ctx_nongemm = nongemm ? &*nongemm : nullptr;
  Model<float>& model = **made;
  const auto params = model.params();
  Optimizer opt(o.optimizer, params);
  Batcher batcher(data, o);
  const LossScaling& ls = o.recipe.loss_scaling;
  double scale = ls.mode == LossScaling::Mode::None ? 1.0 : ls.initial;
  std::int64_t good_steps = 0;
  TrainResult result;
  result.parameters = model.parameter_count();
  double train_seconds = 0;
  for (std::int64_t step = 0; step < o.steps; ++step) {
    if (reporter.cancelled()) {
      result.cancelled = true;
      break;
    }
    const auto t0 = Clock::now();
    const Batch batch = batcher.next();
    QuantContext ctx;
    ctx.threads = o.threads;
    ctx.collect = o.metrics_every > 0 && step % o.metrics_every == 0;
    ctx.nongemm = ctx_nongemm;
    model.zero_grad();
    const Mat<float> logits = model.forward(batch, ctx);
    Mat<float> dlogits;
    std::int64_t correct = 0;
    const double loss =
        detail::softmax_cross_entropy<float>(logits, batch.targets, static_cast<float>(scale), &dlogits, &correct);
    model.backward(dlogits, ctx);
    // Unscale in FP32 and skip the update on a non-finite gradient (Micikevicius et al. 2018, section 3.2).
    bool finite = std::isfinite(loss);
    const auto inv = static_cast<float>(1.0 / scale);
    for (auto* p : params) {
      if (scale != 1.0) p->grad *= inv;
      finite = finite && p->grad.allFinite();
    }
    const double lr = learning_rate(o.optimizer, step, o.steps);
    StepMetrics m;
    m.loss_scale = scale;
    if (finite) {
      opt.step(lr);
      if (ls.mode == LossScaling::Mode::Dynamic && ++good_steps >= ls.growth_interval) {
        scale *= ls.growth;
        good_steps = 0;
      }
    } else {
      ++result.skipped;
      if (ls.mode == LossScaling::Mode::Dynamic) {
        scale = std::max(ls.min_scale, scale * ls.backoff);
        good_steps = 0;
      }
    }
    train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    m.step = step + 1;
    m.steps = o.steps;
    m.loss = loss;
    m.accuracy = data.is_text ? 0.0 : static_cast<double>(correct) / static_cast<double>(batch.targets.size());
    m.bpc = data.is_text ? loss / std::log(2.0) : 0.0;
    m.lr = lr;
    m.skipped = !finite;
    m.skipped_total = result.skipped;
    m.seconds = train_seconds;
    if (ctx.collect) m.operands = operand_metrics(ctx);
    const bool last = step + 1 == o.steps;
    if (last && o.final_eval) m.validation = evaluate(model, data, o, false, 0, ctx_nongemm);
    else if (o.eval_every > 0 && (step + 1) % o.eval_every == 0) m.validation = evaluate(model, data, o, false, o.eval_limit, ctx_nongemm);
    if (last && m.validation) result.validation = m.validation;
    result.losses.push_back(loss);
    result.steps_done = step + 1;
    if (on_step) on_step(m);
    reporter.report(step + 1, o.steps, "train");
  }
  if (!result.cancelled && o.final_eval && !data.is_text && data.test.count() > 0)
    result.test = evaluate(model, data, o, true, 0, ctx_nongemm);
  if (result.cancelled && o.final_eval) result.validation = evaluate(model, data, o, false, 0, ctx_nongemm);
  result.seconds = train_seconds;
  result.final_loss_scale = scale;
  return result;
}

}  // namespace

Result<TrainResult> run_training(const TrainData& data, const TrainOptions& options,
                          const std::function<void(const StepMetrics&)>& on_step, const Reporter& reporter) {
  try {
    return run(data, options, on_step, reporter);
  } catch (const std::runtime_error& e) {
    return make_error(e.what());
  }
}

Result<std::vector<std::string>> gemm_layers(const TrainData& data, const ModelConfig& model) {
  TrainOptions o;
  o.model = model;
  std::vector<std::string> names;
  auto m = make_model(data, o, &names);
  if (!m) return m.error();
  return names;
}

Result<double> step_seconds(const ModelConfig& model, const Recipe& recipe, std::int64_t batch, std::int64_t steps,
                            int reps, unsigned threads) {
  TrainData d;
  d.name = "random images";
  d.rows = d.cols = 28;
  d.classes = 10;
  Rng rng(20240601);
  const std::int64_t n = std::max<std::int64_t>(batch, 256);
  for (std::int64_t i = 0; i < n * 28 * 28; ++i) d.train.x.push_back(static_cast<float>(rng.uniform()));
  for (std::int64_t i = 0; i < n; ++i) d.train.labels.push_back(static_cast<int>(rng.next_u64() % 10));
  TrainOptions o;
  o.model = model;
  o.recipe = recipe;
  o.batch = batch;
  o.threads = threads;
  o.metrics_every = 0;
  o.final_eval = false;
  double best = 1e300;
  for (int r = 0; r <= std::max(1, reps); ++r) {
    o.steps = r == 0 ? 1 : steps;  // the first run warms caches and allocations and is not counted
    auto res = run_training(d, o);
    if (!res) return res.error();
    if (r > 0) best = std::min(best, res->seconds / static_cast<double>(steps));
  }
  return best;
}

double fp32_gemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int reps) {
  detail::Normal rnd(1);
  Mat<float> a(m, k), bt(n, k), c(m, n);
  detail::fill_normal(a, 1.0, rnd);
  detail::fill_normal(bt, 1.0, rnd);
  double best = 1e300;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const auto t0 = Clock::now();
    c.noalias() = a * bt.transpose();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  volatile float sink = c(0, 0);  // the product is used
  (void)sink;
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / best / 1e9;
}

}  // namespace mxlab::train
