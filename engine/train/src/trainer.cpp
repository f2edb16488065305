// The training loop over the internal models: batches, loss scaling, optimizers, schedule, metrics.
#include "mxlab/train/trainer.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "mxlab/core/memory.hpp"
#include "mxlab/core/small_file.hpp"
#include "mxlab/ops/ops.hpp"
#include "image_models.hpp"

namespace mxlab::train {
namespace {

using detail::Batch;
using detail::Mat;
using detail::Model;
using detail::Param;
using detail::QuantContext;
using Clock = std::chrono::steady_clock;

/// Whether every value of m is finite (no Inf or NaN: exponent field not all ones), in one pass without an
/// early exit, which the compiler vectorises; Eigen's allFinite compiled to a scalar loop with a branch per
/// value (2 to 3% of the CNN's FP32 step).
bool all_finite(const Mat<float>& m) {
  std::uint32_t special = 0;
  const float* v = m.data();
  for (Eigen::Index i = 0; i < m.size(); ++i)
    special |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v[i]) & 0x7F800000U) == 0x7F800000U);
  return special == 0;
}

constexpr std::uint64_t kShuffleStream = 0x53485546464C45ULL;  // "SHUFFLE"
constexpr std::uint64_t kTextStream = 0x54455854ULL;           // "TEXT"

/// Whether the model's shapes fit each other and the data (what building it requires).
std::optional<Error> check_model(const TrainData& data, const ModelConfig& c) {
  if (!c.kind.known()) return parse_model_kind(c.kind.name()).error();
  const std::string kind(c.kind.name());
  if (!c.kind.traits().text && data.is_text) return make_error("model '" + kind + "' needs image data, not " + data.name);
  if (c.kind.traits().text && !data.is_text)
    return make_error("model '" + kind + "' needs text data (text:NAME), not " + data.name);
  return detail::with_model_def(c.kind.kind(), [&](auto def) { return def.check(data, c); });
}

/// The GEMM layer names of a model, without building it (the order is not the model's; the ResNet and the
/// MobileNetV2, whose sizes are fixed, are built to list theirs).
std::vector<std::string> layer_names(const TrainData& data, const ModelConfig& c) {
  return detail::with_model_def(c.kind.kind(), [&](auto def) { return def.layer_names(data, c); });
}

Result<std::unique_ptr<Model<float>>> make_model(const TrainData& data, const TrainOptions& o,
                                                 detail::DelayedStates* delayed) {
  const auto& c = o.model;
  if (auto e = check_model(data, c)) return *e;
  auto table = LayerFormatTable::make(o.recipe);
  if (!table) return table.error();
  std::optional<Error> failure;
  detail::FormatLookup lookup = [&](const std::string& layer) {
    detail::LayerFormats f;
    auto r = table->formats(layer);
    if (!r) {
      if (!failure) failure = r.error();
      return f;
    }
    for (std::size_t i = 0; i < r->size(); ++i) {
      if (!(*r)[i]) continue;
      BlockFormat bf = *(*r)[i];
      if (auto saturating = delayed_format(o.recipe, bf)) {
        bf = std::move(*saturating);
        if (delayed != nullptr)
          delayed->emplace_back(layer + "." + std::string(role_name(static_cast<Role>(i))),
                                AmaxHistory(o.recipe.delayed, bf.element.max_finite()));
      }
      f.by_role[i] = std::make_shared<const ops::FakeQuantizer>(bf);
    }
    return f;
  };
  std::unique_ptr<Model<float>> m =
      detail::with_model_def(c.kind.kind(), [&](auto def) { return def.template make<float>(c, data, lookup, o.seed); });
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
  /// The moments and the step count, for checkpoints.
  std::vector<Mat<float>>& first_moments() { return m_; }
  std::vector<Mat<float>>& second_moments() { return v_; }
  std::int64_t& steps() { return t_; }

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
        ++text_draws_;
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
  /// Where the batches stand: the epochs shuffled, the position in the current one, the text offsets drawn.
  struct Position {
    std::uint64_t epoch = 0, pos = 0, text_draws = 0;
  };
  Position position() const { return {epoch_, pos_, text_draws_}; }
  /// Continues from a position() of a batcher over the same data and options.
  void restore(const Position& p) {
    if (p.epoch > 0) {
      epoch_ = p.epoch - 1;
      reshuffle();  // the current epoch's order, as it was drawn
    }
    epoch_ = p.epoch;
    pos_ = static_cast<std::size_t>(p.pos);
    text_rng_ = Rng(seed_ ^ kTextStream);
    for (std::uint64_t i = 0; i < p.text_draws; ++i) text_rng_.next_u64();
    text_draws_ = p.text_draws;
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
  std::uint64_t text_draws_ = 0;
};

// ---- Checkpoint state: a flat little-endian-as-stored byte string (raw float32/float64 values, so a resumed
// run continues bit-identically on the machine that wrote it).

constexpr std::string_view kStateMagic = "mxlab-train-state-1\n";

class StateWriter {
 public:
  explicit StateWriter(std::string& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_floats(const float* p, std::size_t n) { out_.append(reinterpret_cast<const char*>(p), n * sizeof(float)); }
  void put_mat(const Mat<float>& m) {
    put<std::int64_t>(m.rows());
    put<std::int64_t>(m.cols());
    put_floats(m.data(), static_cast<std::size_t>(m.size()));
  }
  void put_string(const std::string& s) {
    put<std::uint64_t>(s.size());
    out_ += s;
  }

 private:
  std::string& out_;
};

class StateReader {
 public:
  explicit StateReader(std::string_view in) : in_(in) {}
  template <typename T>
  T get() {
    T v{};
    take(&v, sizeof v);
    return v;
  }
  void get_floats(float* p, std::size_t n) { take(p, n * sizeof(float)); }
  /// Reads a matrix into m, which must already have the stored shape.
  void get_mat(Mat<float>& m, const std::string& what) {
    const auto rows = get<std::int64_t>(), cols = get<std::int64_t>();
    if (rows != m.rows() || cols != m.cols())
      throw std::runtime_error("checkpoint does not fit this run: " + what + " is " + std::to_string(rows) + "x" +
                               std::to_string(cols) + ", the model's " + std::to_string(m.rows()) + "x" +
                               std::to_string(m.cols()));
    get_floats(m.data(), static_cast<std::size_t>(m.size()));
  }
  std::string get_string() {
    const auto n = get<std::uint64_t>();
    if (n > in_.size() - at_) throw std::runtime_error("checkpoint state is truncated");
    std::string s(in_.substr(at_, static_cast<std::size_t>(n)));
    at_ += static_cast<std::size_t>(n);
    return s;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  void take(void* p, std::size_t n) {
    if (n > in_.size() - at_) throw std::runtime_error("checkpoint state is truncated");
    std::memcpy(p, in_.data() + at_, n);
    at_ += n;
  }
  std::string_view in_;
  std::size_t at_ = 0;
};

/// Everything a run carries from one step to the next besides the model and the optimizer.
struct LoopState {
  std::int64_t steps_done = 0;
  double scale = 1;
  std::int64_t good_steps = 0;
  std::int64_t skipped = 0;
  double train_seconds = 0;
  std::vector<double> losses;
};

std::string save_state(const LoopState& loop, const std::vector<Param<float>*>& params,
                       const std::vector<Param<float>*>& buffers, Optimizer& opt, const Batcher& batcher,
                       const detail::DelayedStates& delayed) {
  std::string out(kStateMagic);
  StateWriter w(out);
  w.put<std::int64_t>(loop.steps_done);
  w.put<std::uint64_t>(params.size());
  for (const auto* p : params) w.put_mat(p->value);
  w.put<std::int64_t>(opt.steps());
  w.put<std::uint64_t>(opt.first_moments().size());
  for (const auto& m : opt.first_moments()) w.put_mat(m);
  w.put<std::uint64_t>(opt.second_moments().size());
  for (const auto& m : opt.second_moments()) w.put_mat(m);
  w.put<double>(loop.scale);
  w.put<std::int64_t>(loop.good_steps);
  w.put<std::int64_t>(loop.skipped);
  w.put<double>(loop.train_seconds);
  w.put<std::uint64_t>(loop.losses.size());
  for (double l : loop.losses) w.put<double>(l);
  const auto pos = batcher.position();
  w.put<std::uint64_t>(pos.epoch);
  w.put<std::uint64_t>(pos.pos);
  w.put<std::uint64_t>(pos.text_draws);
  w.put<std::uint64_t>(delayed.size());
  for (const auto& [key, h] : delayed) {
    w.put_string(key);
    w.put<std::uint64_t>(h.history().size());
    w.put_floats(h.history().data(), h.history().size());
    w.put<float>(h.scale());
  }
  for (const auto* b : buffers) w.put_mat(b->value);  // batch normalisation's running statistics
  return out;
}

/// Restores a save_state() string into a freshly built run; throws std::runtime_error naming what does not fit.
void load_state(std::string_view text, LoopState& loop, const std::vector<Param<float>*>& params,
                const std::vector<Param<float>*>& buffers, Optimizer& opt, Batcher& batcher,
                detail::DelayedStates& delayed, std::int64_t steps) {
  if (text.substr(0, kStateMagic.size()) != kStateMagic) throw std::runtime_error("not a training checkpoint state");
  StateReader r(text.substr(kStateMagic.size()));
  loop.steps_done = r.get<std::int64_t>();
  if (loop.steps_done < 0 || loop.steps_done > steps)
    throw std::runtime_error("checkpoint after step " + std::to_string(loop.steps_done) + " does not fit a run of " +
                             std::to_string(steps) + " steps");
  auto count = [&](std::size_t expected, const char* what) {
    const auto n = r.get<std::uint64_t>();
    if (n != expected)
      throw std::runtime_error("checkpoint does not fit this run: " + std::to_string(n) + " " + what + ", the run has " +
                               std::to_string(expected));
  };
  count(params.size(), "parameter tensors");
  for (auto* p : params) r.get_mat(p->value, p->name);
  opt.steps() = r.get<std::int64_t>();
  count(opt.first_moments().size(), "first-moment tensors");
  for (std::size_t i = 0; i < params.size(); ++i) r.get_mat(opt.first_moments()[i], params[i]->name + " moment");
  count(opt.second_moments().size(), "second-moment tensors");
  for (std::size_t i = 0; i < opt.second_moments().size(); ++i)
    r.get_mat(opt.second_moments()[i], params[i]->name + " second moment");
  loop.scale = r.get<double>();
  loop.good_steps = r.get<std::int64_t>();
  loop.skipped = r.get<std::int64_t>();
  loop.train_seconds = r.get<double>();
  count(static_cast<std::size_t>(loop.steps_done), "losses");
  loop.losses.resize(static_cast<std::size_t>(loop.steps_done));
  for (double& l : loop.losses) l = r.get<double>();
  Batcher::Position pos;
  pos.epoch = r.get<std::uint64_t>();
  pos.pos = r.get<std::uint64_t>();
  pos.text_draws = r.get<std::uint64_t>();
  batcher.restore(pos);
  count(delayed.size(), "delayed-scaling histories");
  for (auto& [key, h] : delayed) {
    const std::string stored = r.get_string();
    if (stored != key) throw std::runtime_error("checkpoint does not fit this run: delayed scaling of " + stored + ", not " + key);
    const auto length = r.get<std::uint64_t>();
    if (length != h.history().size())
      throw std::runtime_error("checkpoint does not fit this run: amax history of " + key + " has " +
                               std::to_string(length) + " entries, the recipe " + std::to_string(h.history().size()));
    std::vector<float> history(h.history().size());
    r.get_floats(history.data(), history.size());
    if (!h.restore(history, r.get<float>())) throw std::runtime_error("checkpoint holds a bad scale for " + key);
  }
  for (auto* b : buffers) r.get_mat(b->value, b->name);
  if (!r.done()) throw std::runtime_error("checkpoint state has trailing bytes");
}

/// Forward-only evaluation over a split (images) or consecutive windows (text), quantized as in training.
EvalMetrics evaluate(Model<float>& model, const TrainData& d, const TrainOptions& o, bool test, std::int64_t limit,
                     const ops::FakeQuantizer* nongemm, detail::DelayedStates* delayed,
                     const gemm::Model* accumulate = nullptr) {
  QuantContext ctx;
  ctx.threads = o.threads;
  ctx.training = false;  // the casts use the delayed scales but record no amax
  ctx.nongemm = nongemm;
  ctx.delayed = delayed;
  ctx.accumulate = accumulate;
  EvalMetrics e;
  double loss_sum = 0;
  std::int64_t correct_sum = 0, rows = 0;
  // Images per forward pass: a training batch's 64 (256 kept a ResNet chunk's im2col operand at 115 MB, out of
  // every cache, and its evaluation of 16,000 images took 17.1 s against 8.1 s in chunks of 64); text windows of
  // o.model.context tokens.
  const std::int64_t images_per_chunk = 64, windows_per_chunk = 64;
  if (d.is_text) {
    const std::vector<int>& tokens = d.validation_tokens;
    const std::int64_t seq = o.model.context;
    std::int64_t windows = (static_cast<std::int64_t>(tokens.size()) - 1) / seq;
    if (limit > 0) windows = std::min(windows, limit);
    for (std::int64_t w0 = 0; w0 < windows; w0 += windows_per_chunk) {
      Batch b;
      b.size = std::min(windows_per_chunk, windows - w0);
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
    for (std::int64_t i0 = 0; i0 < n; i0 += images_per_chunk) {
      Batch b;
      b.size = std::min(images_per_chunk, n - i0);
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
    m.delayed = s.delayed;
    m.saturated = s.saturated;
    m.scale = s.scale;
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
  if (o.checkpoint_every < 0) return make_error("checkpoint interval must not be negative");
  // Sizes are checked before the model, its optimizer state or any activation is allocated.
  auto estimate = estimate_memory(data, o);
  if (!estimate) return estimate.error();
  if (auto e = check_memory_budget(*estimate, "the " + std::string(o.model.kind.name()) + " on " + data.name)) return *e;
  detail::DelayedStates delayed;
  auto made = make_model(data, o, &delayed);
  if (!made) return made.error();
  auto nongemm_format = role_format(o.recipe.nongemm);
  if (!nongemm_format) return make_error("recipe '" + o.recipe.name + "', nongemm: " + nongemm_format.error().message);
  std::optional<ops::FakeQuantizer> nongemm;
  if (*nongemm_format) nongemm.emplace(**nongemm_format);
  const ops::FakeQuantizer* ctx_nongemm = nongemm ? &*nongemm : nullptr;
  auto accumulate = detail::accumulation_model(o.recipe);
  if (!accumulate) return accumulate.error();
  const gemm::Model* ctx_accumulate = *accumulate ? &**accumulate : nullptr;
  Model<float>& model = **made;
  const auto params = model.params();
  const auto buffers = model.buffers();
  Optimizer opt(o.optimizer, params);
  Batcher batcher(data, o);
  const LossScaling& ls = o.recipe.loss_scaling;
  LoopState loop;
  loop.scale = ls.mode == LossScaling::Mode::None ? 1.0 : ls.initial;
  if (!o.resume_state.empty()) load_state(o.resume_state, loop, params, buffers, opt, batcher, delayed, o.steps);
  TrainResult result;
  result.parameters = model.parameter_count();
  std::int64_t checkpointed = loop.steps_done;
  auto checkpoint = [&]() -> std::optional<Error> {
    checkpointed = loop.steps_done;
    if (!o.on_checkpoint) return std::nullopt;
    return o.on_checkpoint(loop.steps_done, save_state(loop, params, buffers, opt, batcher, delayed));
  };
  for (std::int64_t step = loop.steps_done; step < o.steps; ++step) {
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
    ctx.delayed = &delayed;
    ctx.accumulate = ctx_accumulate;
    model.zero_grad();
    const Mat<float> logits = model.forward(batch, ctx);
    Mat<float> dlogits;
    std::int64_t correct = 0;
    const double loss =
        detail::softmax_cross_entropy<float>(logits, batch.targets, static_cast<float>(loop.scale), &dlogits, &correct);
    model.backward(dlogits, ctx);
    // Unscale in FP32 and skip the update on a non-finite gradient (Micikevicius et al. 2018, section 3.2).
    bool finite = std::isfinite(loss);
    const auto inv = static_cast<float>(1.0 / loop.scale);
    for (auto* p : params) {
      if (loop.scale != 1.0) p->grad *= inv;
      finite = finite && all_finite(p->grad);
    }
    const double lr = learning_rate(o.optimizer, step, o.steps);
    StepMetrics m;
    m.loss_scale = loop.scale;
    if (finite) {
      opt.step(lr);
      if (ls.mode == LossScaling::Mode::Dynamic && ++loop.good_steps >= ls.growth_interval) {
        loop.scale *= ls.growth;
        loop.good_steps = 0;
      }
    } else {
      ++loop.skipped;
      if (ls.mode == LossScaling::Mode::Dynamic) {
        loop.scale = std::max(ls.min_scale, loop.scale * ls.backoff);
        loop.good_steps = 0;
      }
    }
    // Delayed scaling: this step's amaxes enter the histories; the next step casts with the new scales.
    for (auto& entry : delayed) entry.second.update();
    loop.train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    m.step = step + 1;
    m.steps = o.steps;
    m.loss = loss;
    m.accuracy = data.is_text ? 0.0 : static_cast<double>(correct) / static_cast<double>(batch.targets.size());
    m.bpc = data.is_text ? loss / std::log(2.0) : 0.0;
    m.lr = lr;
    m.skipped = !finite;
    m.skipped_total = loop.skipped;
    m.seconds = loop.train_seconds;
    if (ctx.collect) m.operands = operand_metrics(ctx);
    const bool last = step + 1 == o.steps;
    if (last && o.final_eval) m.validation = evaluate(model, data, o, false, 0, ctx_nongemm, &delayed, ctx_accumulate);
    else if (const std::int64_t every = o.eval_every < 0 ? std::max<std::int64_t>(1, o.steps / 10) : o.eval_every;
             every > 0 && (step + 1) % every == 0)
      m.validation = evaluate(model, data, o, false, o.eval_limit, ctx_nongemm, &delayed, ctx_accumulate);
    if (last && m.validation) result.validation = m.validation;
    loop.losses.push_back(loss);
    loop.steps_done = step + 1;
    if (on_step) on_step(m);
    reporter.report(step + 1, o.steps, "train");
    if (last ? o.checkpoint_last : o.checkpoint_every > 0 && loop.steps_done % o.checkpoint_every == 0)
      if (auto e = checkpoint()) return *e;
  }
  if (result.cancelled && o.checkpoint_every > 0 && checkpointed != loop.steps_done)
    if (auto e = checkpoint()) return *e;
  if (!result.cancelled && o.final_eval && !data.is_text && data.test.count() > 0)
    result.test = evaluate(model, data, o, true, 0, ctx_nongemm, &delayed, ctx_accumulate);
  if (result.cancelled && o.final_eval && o.eval_on_cancel)
    result.validation = evaluate(model, data, o, false, 0, ctx_nongemm, &delayed, ctx_accumulate);
  result.losses = std::move(loop.losses);
  result.steps_done = loop.steps_done;
  result.skipped = loop.skipped;
  result.seconds = loop.train_seconds;
  result.final_loss_scale = loop.scale;
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
  if (auto e = check_model(data, model)) return *e;
  return layer_names(data, model);  // from the shapes: nothing is allocated but the fixed-size ResNet or MobileNetV2
}

namespace {

/// A model's parameter tensors, the per-step copies of its weights and one step's working floats, from its
/// shapes alone.
std::string bytes_text(double bytes) {
  return byte_size_text(bytes >= 9.2e18 ? std::uint64_t{1} << 63 : static_cast<std::uint64_t>(bytes));
}

}  // namespace

Result<MemoryEstimate> estimate_memory(const TrainData& data, const TrainOptions& o) {
  const ModelConfig& c = o.model;
  if (auto e = check_model(data, c)) return *e;
  detail::MemoryShapes s;
  // A training step's rows, or an evaluation chunk's (evaluate(): 64 images, or 64 text windows) where that is
  // larger: evaluation reuses the layers' buffers.
  const double rows = std::max(static_cast<double>(o.batch), 64.0);
  detail::with_model_def(c.kind.kind(), [&](auto def) { def.estimate(data, c, rows, s); });
  MemoryEstimate e;
  double params = 0, state = 20 + 8 + 8 + 8 + 8 + 8 + 32 + 8 + 24 + 8;  // kStateMagic and the fixed fields
  for (double n : s.tensors) {
    params += n;
    state += 16 + 4 * n;  // a matrix: rows, columns, values
  }
  for (double n : s.buffers) state += 16 + 4 * n;
  const double moments = o.optimizer.kind == "adamw" ? 2.0 : 1.0;
  e.parameters = static_cast<std::uint64_t>(std::min(params, 1.8e19));
  e.tensors = s.tensors.size();
  e.weight_bytes = 4.0 * (2 * params + s.weight_copies);
  e.optimizer_bytes = 4.0 * moments * params;
  e.activation_bytes = 4.0 * s.floats;
  e.history_bytes = 8.0 * static_cast<double>(o.steps);
  state += moments * (16 * static_cast<double>(s.tensors.size()) + 4 * params) + 8.0 * static_cast<double>(o.steps);
  if (o.recipe.delayed.enabled) {
    auto table = LayerFormatTable::make(o.recipe);
    if (!table) return table.error();
    for (const auto& name : layer_names(data, c)) {
      auto formats = table->formats(name);
      if (!formats) return formats.error();
      for (std::size_t i = 0; i < formats->size(); ++i)
        if ((*formats)[i] && !(*formats)[i]->layout.scale)  // an element cast with a delayed scale
          state += 8 + static_cast<double>(name.size() + 1 + role_name(static_cast<Role>(i)).size()) + 8 +
                   4 * static_cast<double>(o.recipe.delayed.history_len) + 4;
    }
  }
  e.max_state_bytes = static_cast<std::uint64_t>(std::min(state, 1.8e19));
  if (o.checkpoint_every > 0) e.checkpoint_bytes = 2 * state;
  return e;
}

std::optional<Error> check_memory_budget(const MemoryEstimate& e, const std::string& what) {
  const auto budget = static_cast<double>(memory_budget());
  if (!(e.total() > budget)) return std::nullopt;
  std::string parts = "weights, gradients and their copies " + bytes_text(e.weight_bytes) + ", optimizer state " +
                      bytes_text(e.optimizer_bytes) + ", one step's activations " + bytes_text(e.activation_bytes) +
                      ", per-step losses " + bytes_text(e.history_bytes);
  if (e.checkpoint_bytes > 0) parts += ", checkpoints " + bytes_text(e.checkpoint_bytes);
  if (e.record_bytes > 0) parts += ", per-step metrics " + bytes_text(e.record_bytes);
  return make_error(what + ": training needs about " + bytes_text(e.total()) + " (" + parts +
                    "), more than the memory budget of " + bytes_text(budget) +
                    " (half the memory; MXLAB_MEMORY_BUDGET sets it)");
}

namespace {

/// The model of a checkpoint state (TrainOptions::resume_state) built under the options that wrote it, with the
/// steps it has done and the batches that follow it.
struct Restored {
  std::unique_ptr<Model<float>> model;
  std::int64_t steps_done = 0;
  std::unique_ptr<Batcher> batcher;
};

Result<Restored> restore(const TrainData& data, const TrainOptions& o) {
  detail::DelayedStates delayed;
  auto made = make_model(data, o, &delayed);
  if (!made) return made.error();
  Restored r;
  r.model = std::move(*made);
  r.batcher = std::make_unique<Batcher>(data, o);
  Optimizer opt(o.optimizer, r.model->params());
  LoopState loop;
  try {
    load_state(o.resume_state, loop, r.model->params(), r.model->buffers(), opt, *r.batcher, delayed, o.steps);
  } catch (const std::runtime_error& e) {
    return make_error(e.what());
  }
  r.steps_done = loop.steps_done;
  return r;
}

}  // namespace

Result<std::int64_t> check_resume_state(const TrainData& data, const TrainOptions& o) {
  auto r = restore(data, o);
  if (!r) return r.error();
  return r->steps_done;
}

Result<std::vector<EvalMetrics>> evaluate_casts(const TrainData& data, const TrainOptions& o,
                                                const std::vector<Recipe>& inference, const Reporter& reporter) {
  // The checkpoint is read into the model the training options build (its recipe decides the delayed-scaling
  // histories the state holds), then its weights and statistics go into a model built per inference recipe.
  auto trained = restore(data, o);
  if (!trained) return trained.error();
  const auto params = trained->model->params();
  const auto buffers = trained->model->buffers();
  const bool test = !data.is_text && data.test.count() > 0;
  std::vector<EvalMetrics> out;
  for (std::size_t i = 0; i < inference.size(); ++i) {
    if (reporter.cancelled()) return make_error(ops::kCancelled);
    TrainOptions io = o;
    io.recipe = inference[i];
    auto nongemm_format = role_format(io.recipe.nongemm);
    if (!nongemm_format) return make_error("recipe '" + io.recipe.name + "', nongemm: " + nongemm_format.error().message);
    std::optional<ops::FakeQuantizer> nongemm;
    if (*nongemm_format) nongemm.emplace(**nongemm_format);
    detail::DelayedStates cast_delayed;
    auto made = make_model(data, io, &cast_delayed);
    if (!made) return made.error();
    const auto cast_params = (*made)->params();
    const auto cast_buffers = (*made)->buffers();
    if (cast_params.size() != params.size() || cast_buffers.size() != buffers.size())
      return make_error("recipe '" + io.recipe.name + "' builds another model than the checkpoint's");
    for (std::size_t k = 0; k < params.size(); ++k) cast_params[k]->value = params[k]->value;
    for (std::size_t k = 0; k < buffers.size(); ++k) cast_buffers[k]->value = buffers[k]->value;
    out.push_back(evaluate(**made, data, io, test, 0, nongemm ? &*nongemm : nullptr, &cast_delayed));
    reporter.report(static_cast<std::int64_t>(i + 1), static_cast<std::int64_t>(inference.size()), "cast");
  }
  return out;
}

namespace {

/// The first (which = 0) or second half of an even batch.
Batch half_batch(const Batch& b, int which) {
  Batch h;
  h.size = b.size / 2;
  h.seq = b.seq;
  const auto take = [&](const auto& v, auto& out) {
    const std::size_t n = v.size() / 2;
    out.assign(v.begin() + static_cast<std::ptrdiff_t>(which * n), v.begin() + static_cast<std::ptrdiff_t>((which + 1) * n));
  };
  take(b.x, h.x);
  take(b.tokens, h.tokens);
  take(b.targets, h.targets);
  return h;
}

/// A model built under one recipe for gradients only, with the contexts its steps use.
struct GradientModel {
  std::unique_ptr<Model<float>> model;
  detail::DelayedStates delayed;
  std::optional<ops::FakeQuantizer> nongemm;
  std::optional<gemm::Model> accumulate;
  double scale = 1;  ///< the recipe's initial loss scale (none: 1)

  static Result<GradientModel> make(const TrainData& data, const TrainOptions& o,
                                    const std::vector<Param<float>*>& params, const std::vector<Param<float>*>& buffers) {
    GradientModel g;
    auto made = make_model(data, o, &g.delayed);
    if (!made) return made.error();
    g.model = std::move(*made);
    auto nongemm_format = role_format(o.recipe.nongemm);
    if (!nongemm_format) return make_error("recipe '" + o.recipe.name + "', nongemm: " + nongemm_format.error().message);
    if (*nongemm_format) g.nongemm.emplace(**nongemm_format);
    auto accumulate = detail::accumulation_model(o.recipe);
    if (!accumulate) return accumulate.error();
    if (*accumulate) g.accumulate = **accumulate;
    if (o.recipe.loss_scaling.mode != LossScaling::Mode::None) g.scale = o.recipe.loss_scaling.initial;
    const auto own = g.model->params();
    const auto own_buffers = g.model->buffers();
    if (own.size() != params.size() || own_buffers.size() != buffers.size())
      return make_error("recipe '" + o.recipe.name + "' builds another model than the checkpoint's");
    for (std::size_t k = 0; k < params.size(); ++k) own[k]->value = params[k]->value;
    for (std::size_t k = 0; k < buffers.size(); ++k) own_buffers[k]->value = buffers[k]->value;
    return g;
  }

  /// The unscaled gradient of every parameter on the batch; the batch statistics are put back afterwards.
  std::vector<Mat<float>> gradient(const Batch& b, unsigned threads) {
    const auto buffers = model->buffers();
    std::vector<Mat<float>> kept;
    for (const auto* p : buffers) kept.push_back(p->value);
    QuantContext ctx;
    ctx.threads = threads;
    ctx.nongemm = nongemm ? &*nongemm : nullptr;
    ctx.delayed = &delayed;
    ctx.accumulate = accumulate ? &*accumulate : nullptr;
    model->zero_grad();
    const Mat<float> logits = model->forward(b, ctx);
    Mat<float> dlogits;
    detail::softmax_cross_entropy<float>(logits, b.targets, static_cast<float>(scale), &dlogits, nullptr);
    model->backward(dlogits, ctx);
    std::vector<Mat<float>> out;
    for (auto* p : model->params()) out.push_back(p->grad * static_cast<float>(1.0 / scale));
    for (std::size_t k = 0; k < buffers.size(); ++k) buffers[k]->value = kept[k];
    return out;
  }
};

}  // namespace

Result<std::vector<GradientFidelity>> gradient_fidelity(const TrainData& data, const TrainOptions& o,
                                                        const std::vector<Recipe>& recipes, std::int64_t batches,
                                                        const Reporter& reporter) {
  if (batches < 1) return make_error("batches must be at least 1");
  if (o.batch < 2 || o.batch % 2 != 0) return make_error("the batch size must be even (its halves estimate the noise), got " + std::to_string(o.batch));
  // One model at a time holds a step's activations: what a training step at this batch needs, plus the FP32
  // gradient of each batch kept for the recipes.
  auto estimate = estimate_memory(data, o);
  if (!estimate) return estimate.error();
  estimate->record_bytes = 4.0 * static_cast<double>(estimate->parameters) * static_cast<double>(batches);
  if (auto e = check_memory_budget(*estimate, "gradients of the " + std::string(o.model.kind.name()) + " at batch " +
                                                  std::to_string(o.batch)))
    return *e;
  auto trained = restore(data, o);
  if (!trained) return trained.error();
  const auto params = trained->model->params();
  const auto buffers = trained->model->buffers();
  std::vector<Batch> taken;
  for (std::int64_t b = 0; b < batches; ++b) taken.push_back(trained->batcher->next());
  const std::int64_t total = batches * static_cast<std::int64_t>(recipes.size() + 1);
  std::int64_t done = 0;
  // Per parameter (and a last slot for the whole model): sum |g|^2, sum |g_1 - g_2|^2 / 4; per recipe and
  // parameter: sum |g_r - g|^2, sum <g_r, g>, sum |g_r|^2.
  const std::size_t n = params.size() + 1;
  std::vector<double> gg(n), noise(n);
  std::vector<std::vector<double>> err(recipes.size(), std::vector<double>(n)), dot = err, rr = err;
  std::vector<std::vector<Mat<float>>> fp32_grads;
  {
    TrainOptions fo = o;
    fo.recipe = Recipe{};
    auto fp32 = GradientModel::make(data, fo, params, buffers);
    if (!fp32) return fp32.error();
    for (const Batch& batch : taken) {
      if (reporter.cancelled()) return make_error(ops::kCancelled);
      auto g = fp32->gradient(batch, o.threads);
      const auto g1 = fp32->gradient(half_batch(batch, 0), o.threads);
      const auto g2 = fp32->gradient(half_batch(batch, 1), o.threads);
      for (std::size_t k = 0; k + 1 < n; ++k) {
        const double a = g[k].cast<double>().squaredNorm(), d = (g1[k] - g2[k]).cast<double>().squaredNorm() / 4;
        gg[k] += a, gg[n - 1] += a, noise[k] += d, noise[n - 1] += d;
      }
      fp32_grads.push_back(std::move(g));
      reporter.report(++done, total, "gradients");
    }
  }
  for (std::size_t r = 0; r < recipes.size(); ++r) {
    TrainOptions ro = o;
    ro.recipe = recipes[r];
    auto m = GradientModel::make(data, ro, params, buffers);
    if (!m) return m.error();
    for (std::size_t b = 0; b < taken.size(); ++b) {
      if (reporter.cancelled()) return make_error(ops::kCancelled);
      const auto gr = m->gradient(taken[b], o.threads);
      for (std::size_t k = 0; k + 1 < n; ++k) {
        const Mat<double> x = gr[k].cast<double>(), y = fp32_grads[b][k].cast<double>();
        const double e = (x - y).squaredNorm(), d = x.cwiseProduct(y).sum(), q = x.squaredNorm();
        err[r][k] += e, err[r][n - 1] += e, dot[r][k] += d, dot[r][n - 1] += d, rr[r][k] += q, rr[r][n - 1] += q;
      }
      reporter.report(++done, total, "gradients");
    }
  }
  std::vector<GradientFidelity> out;
  const auto ratio = [](double a, double b) { return b > 0 ? std::sqrt(a / b) : 0.0; };
  for (std::size_t r = 0; r < recipes.size(); ++r)
    for (std::size_t k = 0; k < n; ++k) {
      GradientFidelity f;
      f.recipe = recipes[r].name;
      f.param = k + 1 < n ? params[k]->name : "(all)";
      f.weight = k + 1 < n && params[k]->decay;
      f.fp32_norm = std::sqrt(gg[k] / static_cast<double>(batches));
      f.rel_error = ratio(err[r][k], gg[k]);
      f.cosine = gg[k] > 0 && rr[r][k] > 0 ? dot[r][k] / std::sqrt(gg[k] * rr[r][k]) : 0.0;
      f.batch_noise = ratio(noise[k], gg[k]);
      out.push_back(std::move(f));
    }
  return out;
}

Result<StepTime> step_time(const ModelConfig& model, const Recipe& recipe, std::int64_t batch, std::int64_t steps,
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
  o.eval_every = 0;
  o.final_eval = false;
  StepTime best;
  best.seconds = 1e300;
  // A run's first steps allocate the model's buffers, the quantized operands and the optimizer's state (fresh
  // pages): its steps are timed from the end of step kWarmSteps, when the tally of GEMM time restarts too.
  constexpr std::int64_t kWarmSteps = 2;
  o.steps = kWarmSteps + steps;
  const auto per_step = 1.0 / static_cast<double>(steps);
  for (int r = 0; r < std::max(1, reps); ++r) {
    double warm_seconds = 0;
    auto res = run_training(d, o, [&](const StepMetrics& m) {
      if (m.step != kWarmSteps) return;
      warm_seconds = m.seconds;
      detail::gemm_tally() = {};
    });
    if (!res) return res.error();
    const double seconds = (res->seconds - warm_seconds) * per_step;
    if (seconds < best.seconds)
      best = {seconds, detail::gemm_tally().seconds * per_step, detail::gemm_tally().flops * per_step};
  }
  return best;
}

double fp32_gemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int reps, unsigned threads) {
  detail::Normal rnd(1);
  Mat<float> a(m, k), bt(n, k), c(m, n);
  detail::fill_normal(a, 1.0, rnd);
  detail::fill_normal(bt, 1.0, rnd);
  double best = 1e300;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const auto t0 = Clock::now();
    detail::sgemm(false, true, m, n, k, a.data(), k, bt.data(), k, c.data(), n, threads);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  volatile float sink = c(0, 0);  // the product is used
  (void)sink;
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / best / 1e9;
}

std::string blas_kernel() { return detail::blas_kernel_name(); }

}  // namespace mxlab::train
