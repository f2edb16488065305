// Training Simulator.
#include "training_view.hpp"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>
#include <qcustomplot.h>

#include "mxlab/core/bits.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/plot/draw.hpp"
#include "mxlab/plot/plot.hpp"

namespace mxlab::gui {

TrainingView::TrainingView(QWidget* parent) : QWidget(parent) {
  auto* form = new QGroupBox(tr("Training"), this);
  auto* f = new QFormLayout(form);
  model_ = new QComboBox(form);
  model_->addItems({"mlp", "cnn", "transformer"});
  model_->setToolTip(tr("mlp: 784-256-128-10; cnn: two 3x3 convolutions with pooling, then 128 units; transformer: "
                        "a character-level decoder (text data) (docs/training.md)"));
  data_ = new QComboBox(form);
  data_->addItems({"fashion-mnist", "digits", "text:sherlock", "text:tom-sawyer"});
  data_->setToolTip(tr("Images for the MLP and CNN, text for the transformer; installed with mxlab data fetch NAME"));
  recipes_ = new QListWidget(form);
  for (const auto& n : train::recipe_presets()) {
    auto* it = new QListWidgetItem(QString::fromStdString(n), recipes_);
    it->setFlags(it->flags() | Qt::ItemIsUserCheckable);
    it->setCheckState(n == "fp32" || n == "mxfp8" || n == "mxint8" ? Qt::Checked : Qt::Unchecked);
  }
  recipes_->setToolTip(tr("Each checked recipe trains from the same seed, one after the other"));
  steps_ = new QSpinBox(form);
  steps_->setRange(1, 100000);
  steps_->setValue(300);
  batch_ = new QSpinBox(form);
  batch_->setRange(1, 4096);
  batch_->setValue(128);
  lr_ = new QDoubleSpinBox(form);
  lr_->setDecimals(5);
  lr_->setRange(1e-5, 1);
  lr_->setValue(1e-3);
  seed_ = new QSpinBox(form);
  seed_->setRange(0, 1 << 30);
  seed_->setValue(1);
  start_ = new QPushButton(tr("Train"), form);
  stop_ = new QPushButton(tr("Stop"), form);
  stop_->setEnabled(false);
  f->addRow(tr("model"), model_);
  f->addRow(tr("data"), data_);
  f->addRow(tr("recipes"), recipes_);
  f->addRow(tr("steps"), steps_);
  f->addRow(tr("batch"), batch_);
  f->addRow(tr("learning rate"), lr_);
  f->addRow(tr("seed"), seed_);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(start_);
  buttons->addWidget(stop_);
  f->addRow(buttons);
  auto* help = new QLabel(tr("Every GEMM operand (weights, activations, output gradients; forward and backward) is "
                             "cast by the engine in the recipe's format. Gradient underflow: nonzero output "
                             "gradients cast to zero."),
                          form);
  help->setWordWrap(true);
  f->addRow(help);
  form->setMaximumWidth(360);

  auto* right = new QWidget(this);
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  auto* tabs = new QTabWidget(right);
  loss_ = new QCustomPlot(tabs);
  accuracy_ = new QCustomPlot(tabs);
  underflow_ = new QCustomPlot(tabs);
  summary_ = new QTableWidget(tabs);
  summary_->setColumnCount(5);
  summary_->setHorizontalHeaderLabels({tr("recipe"), tr("steps"), tr("test accuracy (or bits per character)"),
                                       tr("validation loss"), tr("skipped")});
  summary_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  tabs->addTab(loss_, tr("loss"));
  tabs->addTab(accuracy_, tr("accuracy"));
  tabs->addTab(underflow_, tr("gradient underflow"));
  tabs->addTab(summary_, tr("runs (table)"));
  rl->addWidget(tabs, 1);
  auto* bar = new QHBoxLayout;
  status_ = new QLabel(right);
  progress_ = new QProgressBar(right);
  progress_->setMaximumWidth(260);
  bar->addWidget(status_, 1);
  bar->addWidget(progress_);
  rl->addLayout(bar);

  auto* layout = new QHBoxLayout(this);
  auto* split = new QSplitter(this);
  split->addWidget(form);
  split->addWidget(right);
  split->setStretchFactor(1, 1);
  layout->addWidget(split);

  watcher_ = new QFutureWatcher<void>(this);
  timer_ = new QTimer(this);
  timer_->setInterval(250);
  connect(timer_, &QTimer::timeout, this, &TrainingView::refresh);
  connect(start_, &QPushButton::clicked, this, &TrainingView::start);
  connect(stop_, &QPushButton::clicked, this, &TrainingView::stop);
  connect(watcher_, &QFutureWatcher<void>::finished, this, [this] {
    timer_->stop();
    refresh();
    start_->setEnabled(true);
    stop_->setEnabled(false);
    QString err;
    {
      std::lock_guard<std::mutex> lock(mu_);
      err = error_;
    }
    if (!err.isEmpty() && err != "cancelled") emit failed(err);
    status_->setText(err == "cancelled" ? tr("stopped") : err.isEmpty() ? tr("finished") : tr("error"));
    emit finished();
  });
}

TrainingView::~TrainingView() {
  stop();
  watcher_->waitForFinished();
}

bool TrainingView::busy() const { return watcher_->isRunning(); }

void TrainingView::stop() {
  if (cancel_) cancel_->store(true);
}

std::map<std::string, std::vector<double>> TrainingView::losses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<double>> out;
  for (const auto& r : runs_) out[r.recipe] = r.loss;
  return out;
}

void TrainingView::start() {
  if (busy()) {
    stop();
    watcher_->waitForFinished();
  }
  std::vector<train::TrainOptions> configs;
  for (int i = 0; i < recipes_->count(); ++i) {
    if (recipes_->item(i)->checkState() != Qt::Checked) continue;
    train::TrainOptions o;
    o.model.kind = model_->currentText().toStdString();
    o.recipe = *train::recipe_preset(recipes_->item(i)->text().toStdString());
    o.steps = steps_->value();
    o.batch = batch_->value();
    o.optimizer.lr = lr_->value();
    o.seed = static_cast<std::uint64_t>(seed_->value());
    configs.push_back(o);
  }
  if (configs.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    runs_.clear();
    error_.clear();
    done_ = 0;
    total_ = static_cast<std::int64_t>(configs.size()) * steps_->value();
  }
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto cancel = cancel_;
  start_->setEnabled(false);
  stop_->setEnabled(true);
  status_->setText(tr("training ..."));
  timer_->start();
  const std::string spec = data_->currentText().toStdString();
  watcher_->setFuture(QtConcurrent::run([this, configs, cancel, spec] {
    train::DataOptions dopt;
    dopt.seed = configs.front().seed;
    auto loaded = train::load_train_data(spec, dopt);
    if (!loaded) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = QString::fromStdString(loaded.error().message);
      return;
    }
    const bool text = loaded->is_text;
    for (const auto& o : configs) {
      if (cancel->load()) break;
      {
        std::lock_guard<std::mutex> lock(mu_);
        runs_.push_back(Run{o.recipe.name, {}, {}, {}, {}, -1, -1, 0});
      }
      Reporter r;
      r.cancel = cancel.get();
      auto result = train::run_training(*loaded, o, [this, text](const train::StepMetrics& m) {
        std::lock_guard<std::mutex> lock(mu_);
        Run& run = runs_.back();
        run.step.push_back(static_cast<double>(m.step));
        run.loss.push_back(m.loss);
        run.accuracy.push_back(text ? m.bpc : m.accuracy);
        run.skipped = m.skipped_total;
        if (m.validation) run.val_loss = m.validation->loss;
        for (const auto& op : m.operands)
          if (op.role == train::Role::G) {
            auto& g = run.g[op.layer];
            g.first += op.underflow;
            g.second += op.nonzero;
          }
        ++done_;
      }, r);
      std::lock_guard<std::mutex> lock(mu_);
      if (!result) {
        error_ = QString::fromStdString(result.error().message);
        return;
      }
      if (result->test) runs_.back().test_accuracy = text ? result->test->bpc : result->test->accuracy;
      if (result->validation) runs_.back().val_loss = result->validation->loss;
      if (result->cancelled) {
        error_ = "cancelled";
        return;
      }
    }
  }));
}

void TrainingView::refresh() {
  experiment::Figure loss, acc, heat;
  loss.title = "Training loss";
  loss.x.label = "step";
  loss.y.label = "batch cross-entropy";
  loss.y.scale = experiment::AxisScale::Log10;
  loss.legend_title = "recipe";
  acc = loss;
  const bool text = data_->currentText().startsWith("text:");
  acc.title = text ? "Bits per character" : "Batch accuracy";
  acc.y.label = text ? "bits per character" : "accuracy";
  acc.y.scale = experiment::AxisScale::Linear;
  heat.kind = experiment::PlotKind::Heatmap;
  heat.title = "Output-gradient underflow by layer";
  heat.x.label = "recipe";
  heat.y.label = "layer";
  heat.heatmap.value_label = "underflow ratio";
  std::int64_t done = 0, total = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done = done_;
    total = total_;
    std::vector<std::string> layers;
    for (const auto& r : runs_)
      for (const auto& [layer, g] : r.g)
        if (std::find(layers.begin(), layers.end(), layer) == layers.end()) layers.push_back(layer);
    heat.heatmap.y_labels = layers;
    summary_->setRowCount(static_cast<int>(runs_.size()));
    for (std::size_t i = 0; i < runs_.size(); ++i) {
      const Run& r = runs_[i];
      // A moving view: every step up to 2,000 points per curve (later steps thinned evenly).
      const std::size_t stride = std::max<std::size_t>(1, r.step.size() / 2000);
      experiment::Series sl, sa;
      sl.name = sa.name = r.recipe;
      for (std::size_t k = 0; k < r.step.size(); k += stride) {
        sl.x.push_back(r.step[k]);
        sl.y.push_back(r.loss[k]);
        sa.x.push_back(r.step[k]);
        sa.y.push_back(r.accuracy[k]);
      }
      loss.series.push_back(sl);
      acc.series.push_back(sa);
      heat.heatmap.x_labels.push_back(r.recipe);
      const QStringList cells = {QString::fromStdString(r.recipe), QString::number(r.step.size()),
                                 r.test_accuracy >= 0 ? QString::number(r.test_accuracy, 'f', 4) : QString("-"),
                                 r.val_loss >= 0 ? QString::number(r.val_loss, 'f', 4) : QString("-"), QString::number(r.skipped)};
      for (int c = 0; c < cells.size(); ++c) summary_->setItem(static_cast<int>(i), c, new QTableWidgetItem(cells[c]));
    }
    heat.heatmap.values.assign(heat.heatmap.x_labels.size() * layers.size(), std::nan(""));
    for (std::size_t i = 0; i < runs_.size(); ++i)
      for (std::size_t l = 0; l < layers.size(); ++l) {
        auto it = runs_[i].g.find(layers[l]);
        if (it != runs_[i].g.end() && it->second.second > 0)
          heat.heatmap.values[l * runs_.size() + i] = static_cast<double>(it->second.first) / static_cast<double>(it->second.second);
      }
  }
  figures_ = {loss, acc, heat};
  plot::draw(*loss_, loss, 12);
  plot::draw(*accuracy_, acc, 12);
  if (!heat.heatmap.x_labels.empty() && !heat.heatmap.y_labels.empty()) plot::draw(*underflow_, heat, 12);
  progress_->setValue(total > 0 ? static_cast<int>(100 * done / total) : 0);
  if (busy()) status_->setText(tr("step %1 of %2").arg(done).arg(total));
}

QString TrainingView::exportPlot(const QString& base) const {
  if (figures_.empty() || figures_[0].series.empty()) return tr("no training run to export");
  if (auto err = plot::save_figure(figures_[0], base.toStdString())) return QString::fromStdString(err->message);
  return {};
}

QString TrainingView::exportTable(const QString& base) const {
  Table t;
  for (int c = 0; c < summary_->columnCount(); ++c) t.add_column(summary_->horizontalHeaderItem(c)->text().toStdString(), c > 0);
  for (int r = 0; r < summary_->rowCount(); ++r) {
    std::vector<std::string> row;
    for (int c = 0; c < summary_->columnCount(); ++c)
      row.push_back(summary_->item(r, c) ? summary_->item(r, c)->text().toStdString() : "");
    t.rows.push_back(std::move(row));
  }
  if (t.rows.empty()) return tr("no training run to export");
  const std::string b = base.toStdString();
  for (const auto& [ext, text] : {std::pair{".csv", to_csv(t)}, std::pair{".md", to_markdown(t)}, std::pair{".tex", to_latex(t)}})
    if (auto err = write_file_atomic(b + ext, text)) return QString::fromStdString(err->message);
  return {};
}

QString TrainingView::experimentText() const {
  QStringList recipes;
  for (int i = 0; i < recipes_->count(); ++i)
    if (recipes_->item(i)->checkState() == Qt::Checked) recipes << "\"" + recipes_->item(i)->text() + "\"";
  return QString(R"TOML(# Training Simulator, saved from mxlab-gui
name = "training"
description = "%1 on %2 with %3"
job = "train"

[sweep]
model = "%1"
data = "%2"
steps = %4
batch = %5
lr = %6
seed = %7
recipe = [%3]

[[table]]
name = "summary"
from = "summary"
rows = ["recipe"]
values = ["test_accuracy", "val_loss", "grad_underflow_ratio", "skipped_steps"]

[[plot]]
name = "loss"
kind = "line"
from = "steps"
x = "step"
y = "loss"
series = "recipe"
y_scale = "log10"

[[plot]]
name = "underflow"
kind = "heatmap"
from = "layers"
where = { role = "g" }
x = "recipe"
y = "layer"
value = "underflow_ratio"
)TOML")
      .arg(model_->currentText(), data_->currentText(), recipes.join(", "))
      .arg(steps_->value())
      .arg(batch_->value())
      .arg(QString::fromStdString(g17(lr_->value())))
      .arg(seed_->value());
}

}  // namespace mxlab::gui
