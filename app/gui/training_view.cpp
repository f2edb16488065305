// Training Simulator.
#include "training_view.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>
#include <qcustomplot.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "checks.hpp"
#include "mxlab/core/bits.hpp"
#include "mxlab/core/folder_lock.hpp"
#include "mxlab/core/table.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/plot/draw.hpp"
#include "mxlab/plot/plot.hpp"
#include "plot_tools.hpp"
#include "toml_text.hpp"

namespace mxlab::gui {

QString TrainingView::modelSizes(const train::ModelKindTraits& t) {
  const train::ModelConfig d;
  QStringList parts;
  parts << (t.text ? tr("text") : tr("images"));
  if (t.options & train::kHiddenOption) {
    QStringList h;
    for (auto n : d.hidden) h << QString::number(n);
    parts << tr("hidden %1").arg(h.join(","));
  }
  if (t.options & train::kWidthOption) parts << tr("width %1").arg(d.width);
  if (t.options & train::kBlocksOption) parts << tr("d_model %1, layers %2").arg(d.d_model).arg(d.layers);
  if (t.options & train::kHeadsOption) parts << tr("heads %1").arg(d.heads);
  if (t.options & train::kContextOption) parts << tr("context %1").arg(d.context);
  if (t.options & train::kPatchOption) parts << tr("patch %1").arg(d.patch);
  return parts.join("; ");
}

namespace {

/// A saved run's name on screen: its recipe and its folder's name ("fp32 (run-a)").
std::string savedName(const train::SavedRun& r) {
  return r.recipe + " (" + std::filesystem::path(r.dir).filename().string() + ")";
}

/// A kept run's folder name: when it started (UTC), its model and its recipe, each character but a letter, digit,
/// '-' and '.' as '_' ("20261127-043000-mlp-mxfp8").
std::string keptName(const train::TrainOptions& o) {
  std::string name = QDateTime::currentDateTimeUtc().toString("yyyyMMdd-HHmmss").toStdString() + "-" +
                     std::string(o.model.kind.name()) + "-" + o.recipe.name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return name;
}

/// Opens the record of a run kept in DIR (its temporary folder), as mxlab train --out DIR opens one.
Result<train::RunRecord> openKept(const train::TrainData& data, train::TrainOptions& o, const std::string& dir) {
  auto plan = train::plan_record(data, o);
  if (!plan) return plan.error();
  auto estimate = train::estimate_memory(data, o);
  if (!estimate) return estimate.error();
  estimate->record_bytes = plan->record_bytes;
  train::RecordSettings settings;
  settings.out_dir = dir;
  settings.identity = "mxlab-gui\n" + std::string(o.model.kind.name()) + "\n" + train::recipe_text(o.recipe);
  return train::RunRecord::open(data, o, settings, *plan, *estimate);
}

/// Ends a kept run's record: its summary written (a failed run's record discarded), then its temporary folder TMP
/// renamed to KEPT (KEPT-2, KEPT-3, ... if taken), or removed when the run failed. An error, or "".
std::string keepRun(std::optional<train::RunRecord>& record, const Result<train::TrainResult>& result,
                    const std::string& kept, const std::string& tmp) {
  std::string keepError;
  std::error_code ec;
  if (!result) {
    record->discard();
  } else {
    Provenance prov = build_provenance();
    prov.simd_target = ops::simd_target();
    if (auto e = record->finish(*result, prov)) keepError = e->message;
  }
  record.reset();  // releases the folder's lock
  // A stopped run is kept as stopped, with the steps it has; a failed one is not kept.
  std::string to = kept;
  for (int n = 2; std::filesystem::exists(to, ec); ++n) to = kept + "-" + std::to_string(n);
  if (result && keepError.empty()) std::filesystem::rename(tmp, to, ec);
  if (ec) keepError = "cannot rename '" + tmp + "' to '" + to + "': " + ec.message();
  if (!result || !keepError.empty()) std::filesystem::remove_all(tmp, ec);
  return keepError;
}

experiment::Series seriesOf(const std::string& name, const std::vector<double>& x, const std::vector<double>& y) {
  experiment::Series s;
  s.name = name;
  s.x = x;
  s.y = y;
  return s;
}

/// F's curves as the difference from the fp32 run trained here, else from the first saved fp32 run; F unchanged
/// when there is neither.
void differenceFromFp32(experiment::Figure& f) {
  auto ref = std::find_if(f.series.begin(), f.series.end(), [](const experiment::Series& x) { return x.name == "fp32"; });
  if (ref == f.series.end())
    ref = std::find_if(f.series.begin(), f.series.end(), [](const experiment::Series& x) { return x.name.rfind("fp32 (", 0) == 0; });
  if (ref == f.series.end()) return;
  const experiment::Series reference = *ref;
  std::vector<experiment::Series> diffs;
  for (const auto& x : f.series)
    if (x.name != reference.name) diffs.push_back(experiment::difference(x, reference));
  f.series = diffs;
  f.title += " minus the fp32 run's";
  f.y.label += " - fp32";
  f.y.scale = experiment::AxisScale::Linear;
}

}  // namespace

TrainingView::TrainingView(QWidget* parent) : QWidget(parent) {
  QVBoxLayout* rl = formBeside(this, buildForm());
  buildCurveControls(rl);
  buildTabs(rl);
  connectRun();
}

QGroupBox* TrainingView::buildForm() {
  auto* form = new QGroupBox(tr("Training"), this);
  auto* f = new QFormLayout(form);
  // Every model of the engine's traits rows, each with the sizes it reads (the defaults of train::ModelConfig).
  model_ = new QComboBox(form);
  for (const auto& t : train::kModelKinds) {
    model_->addItem(QString::fromUtf8(t.name.data(), static_cast<int>(t.name.size())));
    model_->setItemData(model_->count() - 1, modelSizes(t), Qt::ToolTipRole);
  }
  model_->setToolTip(tr("The models of mxlab train (docs/training.md), trained at their default sizes"));
  sizes_ = new QLabel(form);
  data_ = new QComboBox(form);
  data_->addItems({"fashion-mnist", "digits", "text:sherlock", "text:tom-sawyer"});
  data_->setToolTip(tr("Images for the image models, text for the text models; installed with mxlab data fetch NAME"));
  // A model takes text or images (its traits row): the data follows when it is of the other kind.
  const auto modelChanged = [this](int index) {
    if (index < 0 || index >= static_cast<int>(std::size(train::kModelKinds))) return;
    const auto& t = train::kModelKinds[index];
    sizes_->setText(modelSizes(t));
    if (t.text != data_->currentText().startsWith("text:")) data_->setCurrentText(t.text ? "text:sherlock" : "fashion-mnist");
  };
  connect(model_, &QComboBox::currentIndexChanged, this, modelChanged);
  modelChanged(model_->currentIndex());
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
  f->addRow(tr("sizes"), sizes_);
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
  addSavedRunButtons(f, form);
  addHelp(f, tr("Every GEMM operand (weights, activations, output gradients; forward and backward) is "
                "cast by the engine in the recipe's format. Gradient underflow: nonzero output "
                "gradients cast to zero."));
  return form;
}

void TrainingView::addSavedRunButtons(QFormLayout* f, QWidget* form) {
  // Runs of mxlab train --out DIR, shown beside these: their curves, difference from fp32 and validation.
  auto* openRun = new QPushButton(tr("Open saved run..."), form);
  openRun->setToolTip(tr("A folder mxlab train --out DIR wrote (metrics.csv, summary.json, recipe.txt): its curves "
                         "are drawn beside the runs trained here, and it is opened again at the next start"));
  auto* clearRuns = new QPushButton(tr("Remove saved runs"), form);
  auto* savedButtons = new QHBoxLayout;
  savedButtons->addWidget(openRun);
  savedButtons->addWidget(clearRuns);
  f->addRow(savedButtons);
  connect(openRun, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Saved run (mxlab train --out DIR)"));
    if (dir.isEmpty()) return;
    if (const QString err = this->openRun(dir); !err.isEmpty()) {
      status_->setText(err);
      emit failed(err);
    }
  });
  connect(clearRuns, &QPushButton::clicked, this, &TrainingView::clearSavedRuns);
}

void TrainingView::buildCurveControls(QVBoxLayout* rl) {
  QWidget* right = rl->parentWidget();
  // As TensorBoard: curves smoothed (the values before it drawn faintly), or drawn as the difference from the fp32 run.
  auto* curveRow = new QHBoxLayout;
  smoothing_ = new QSlider(Qt::Horizontal, right);
  smoothing_->setRange(0, 100);
  smoothing_->setMaximumWidth(240);
  smoothing_->setToolTip(tr("Loss and accuracy curves smoothed by a centred moving average over this many steps (0: none)"));
  auto* smoothingLabel = new QLabel(right);
  fromFp32_ = new QCheckBox(tr("difference from the fp32 run"), right);
  fromFp32_->setToolTip(tr("Each recipe's loss, accuracy and validation loss minus the fp32 run's at the same step"));
  curveRow->addWidget(new QLabel(tr("smoothing"), right));
  curveRow->addWidget(smoothing_);
  curveRow->addWidget(smoothingLabel);
  curveRow->addSpacing(16);
  curveRow->addWidget(fromFp32_);
  curveRow->addStretch(1);
  rl->addLayout(curveRow);
  connect(smoothing_, &QSlider::valueChanged, this, [this, smoothingLabel](int n) {
    smoothingLabel->setText(n < 2 ? tr("none") : tr("%1 steps").arg(n));
    refresh();
  });
  smoothingLabel->setText(tr("none"));
  connect(fromFp32_, &QCheckBox::toggled, this, &TrainingView::refresh);
}

void TrainingView::buildTabs(QVBoxLayout* rl) {
  QWidget* right = rl->parentWidget();
  auto* tabs = tabs_ = new QTabWidget(right);
  loss_ = new QCustomPlot(tabs);
  accuracy_ = new QCustomPlot(tabs);
  underflow_ = new QCustomPlot(tabs);
  validation_ = new QCustomPlot(tabs);
  summary_ = new QTableWidget(tabs);
  summary_->setColumnCount(5);
  summary_->setHorizontalHeaderLabels({tr("recipe"), tr("steps"), tr("test accuracy (or bits per character)"),
                                       tr("validation loss"), tr("skipped")});
  summary_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  int index = 0;
  for (QCustomPlot* p : {loss_, accuracy_, underflow_, validation_}) {
    addPlotTools(p, [this, index]() -> const experiment::Figure* {
      return static_cast<std::size_t>(index) < figures_.size() ? &figures_[static_cast<std::size_t>(index)] : nullptr;
    });
    ++index;
  }
  tabs->addTab(loss_, tr("loss"));
  tabs->addTab(accuracy_, tr("accuracy"));
  tabs->addTab(buildUnderflowTab(tabs), tr("underflow"));
  tabs->addTab(validation_, tr("validation"));
  tabs->addTab(summary_, tr("runs (table)"));
  rl->addWidget(tabs, 1);
  auto* bar = new QHBoxLayout;
  status_ = new QLabel(right);
  progress_ = new QProgressBar(right);
  progress_->setMaximumWidth(260);
  bar->addWidget(status_, 1);
  bar->addWidget(progress_);
  rl->addLayout(bar);
}

QWidget* TrainingView::buildUnderflowTab(QTabWidget* tabs) {
  // The underflow of one role (output gradients by default) by layer over the steps, the role picked above it.
  auto* under = new QWidget(tabs);
  auto* ul = new QVBoxLayout(under);
  ul->setContentsMargins(0, 0, 0, 0);
  auto* roleRow = new QHBoxLayout;
  role_ = new QComboBox(under);
  for (int r = 0; r < train::kRoleCount; ++r)
    role_->addItem(QString::fromStdString(std::string(train::role_name(static_cast<train::Role>(r)))));
  role_->setCurrentText(QString::fromStdString(std::string(train::role_name(train::Role::G))));
  role_->setToolTip(tr("The GEMM operand whose underflow is drawn: w weights, a activations, g output gradients, "
                       "w_bp and a_bp the weights and activations of the backward pass"));
  roleRow->addWidget(new QLabel(tr("operand role"), under));
  roleRow->addWidget(role_);
  roleRow->addStretch(1);
  ul->addLayout(roleRow);
  ul->addWidget(underflow_, 1);
  connect(role_, &QComboBox::currentTextChanged, this, &TrainingView::refresh);
  return under;
}

void TrainingView::connectRun() {
  watcher_ = new QFutureWatcher<void>(this);
  timer_ = new QTimer(this);
  timer_->setInterval(250);
  connect(timer_, &QTimer::timeout, this, &TrainingView::refresh);
  connect(start_, &QPushButton::clicked, this, &TrainingView::start);
  connect(stop_, &QPushButton::clicked, this, &TrainingView::stop);
  connect(watcher_, &QFutureWatcher<void>::finished, this, &TrainingView::runFinished);
}

void TrainingView::runFinished() {
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
  if (err == "cancelled") {
    std::int64_t done = 0, total = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done = done_, total = total_;
    }
    const QString what = tr("stopped at step %1 of %2: validation skipped").arg(done).arg(total);
    progress_->setFormat(what);
    status_->setText(what);
  } else {
    status_->setText(err.isEmpty() ? tr("finished") : err);
  }
  emit finished();
}

TrainingView::~TrainingView() {
  stop();
  watcher_->waitForFinished();
}

bool TrainingView::busy() const { return watcher_->isRunning(); }

void TrainingView::stop() {
  if (!cancel_ || cancel_->load()) return;
  cancel_->store(true);
  if (busy()) {
    progress_->setFormat(tr("stopping after this step: validation skipped"));
    status_->setText(tr("stopping ..."));
  }
}

TrainingView::Settings TrainingView::formSettings() const {
  Settings s;
  s.model = model_->currentText();
  s.data = data_->currentText();
  for (int i = 0; i < recipes_->count(); ++i)
    if (recipes_->item(i)->checkState() == Qt::Checked) s.recipes << recipes_->item(i)->text();
  s.steps = steps_->value();
  s.batch = batch_->value();
  s.lr = lr_->value();
  s.seed = seed_->value();
  return s;
}

QString TrainingView::openRun(const QString& dir) {
  auto run = train::read_run(dir.toStdString());
  if (!run) return QString::fromStdString(run.error().message);
  const std::string path = QDir(dir).absolutePath().toStdString();
  run->dir = path;
  // A folder opened again replaces its earlier reading (the run may have been rerun since).
  std::erase_if(saved_, [&](const train::SavedRun& r) { return r.dir == path; });
  saved_.push_back(std::move(*run));
  status_->setText(tr("opened %1").arg(dir));
  refresh();
  return {};
}

bool TrainingView::isKept(const train::SavedRun& r) const {
  return !runsFolder_.isEmpty() && QString::fromStdString(r.dir).startsWith(runsFolder_ + "/");
}

QStringList TrainingView::savedRuns() const {
  QStringList out;
  for (const auto& r : saved_)
    if (!isKept(r)) out << QString::fromStdString(r.dir);
  return out;
}

QStringList TrainingView::keptRuns() const {
  QStringList out;
  for (const auto& r : saved_)
    if (isKept(r)) out << QString::fromStdString(r.dir);
  return out;
}

void TrainingView::setRunsFolder(const QString& dir) {
  runsFolder_ = dir.isEmpty() ? QString() : QDir(dir).absolutePath();
  if (runsFolder_.isEmpty()) return;
  const QDir d(runsFolder_);
  // A run cut short by a crash left its temporary folder (never renamed): removed, unless a run of another window
  // still holds its lock.
  for (const QFileInfo& e : d.entryInfoList({".*.tmp"}, QDir::Dirs | QDir::Hidden | QDir::NoDotAndDotDot)) {
    bool free = false;
    if (auto lock = FolderLock::acquire(e.absoluteFilePath().toStdString(), "mxlab-gui")) free = true;
    if (free) QDir(e.absoluteFilePath()).removeRecursively();
  }
  QStringList problems;
  for (const QFileInfo& e : d.entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name))
    if (const QString err = openRun(e.absoluteFilePath()); !err.isEmpty()) problems << err;
  status_->setText(problems.isEmpty() ? QString() : problems.join("; "));
  for (const QString& p : problems) qWarning("%s", qPrintable(p));
}

void TrainingView::clearSavedRuns() {
  saved_.clear();
  // The kept runs are deleted (those of earlier sessions and of this one), or they would be listed again at the
  // next start; a run training now is still in its temporary folder and is kept when it ends.
  int removed = 0;
  if (!runsFolder_.isEmpty())
    for (const QFileInfo& e : QDir(runsFolder_).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot))
      removed += QDir(e.absoluteFilePath()).removeRecursively() ? 1 : 0;
  if (removed > 0) status_->setText(tr("deleted %1 kept runs from %2").arg(removed).arg(runsFolder_));
  refresh();
}

std::map<std::string, std::vector<double>> TrainingView::losses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<double>> out;
  for (const auto& r : runs_) out[r.recipe] = r.loss;
  return out;
}

std::vector<train::TrainOptions> TrainingView::runOptions(const Settings& settings) {
  std::vector<train::TrainOptions> configs;
  for (const QString& name : settings.recipes) {
    train::TrainOptions o;
    o.model.kind = settings.model.toStdString();
    o.recipe = *train::recipe_preset(name.toStdString());
    o.steps = settings.steps;
    o.batch = settings.batch;
    o.optimizer.lr = settings.lr;
    o.seed = static_cast<std::uint64_t>(settings.seed);
    o.eval_on_cancel = false;  // Stop returns at once: no validation pass after a cancel
    configs.push_back(o);
  }
  return configs;
}

void TrainingView::start() {
  if (busy()) {
    stop();
    watcher_->waitForFinished();
  }
  const Settings settings = formSettings();
  const std::vector<train::TrainOptions> configs = runOptions(settings);
  if (configs.empty()) {
    status_->setText(tr("check at least one recipe"));
    return;
  }
  shown_ = settings;
  {
    std::lock_guard<std::mutex> lock(mu_);
    runs_.clear();
    error_.clear();
    done_ = 0;
    total_ = static_cast<std::int64_t>(configs.size()) * settings.steps;
    // The heatmap's columns: at most 16 windows of steps.
    window_ = (settings.steps + 15) / 16;
    windows_ = (settings.steps + window_ - 1) / window_;
  }
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto cancel = cancel_;
  start_->setEnabled(false);
  stop_->setEnabled(true);
  progress_->setFormat("%p%");
  status_->setText(tr("training ..."));
  timer_->start();
  const std::string spec = settings.data.toStdString();
  const std::string runsFolder = runsFolder_.toStdString();
  watcher_->setFuture(QtConcurrent::run([this, configs, cancel, spec, runsFolder] {
    train::DataOptions dopt;
    dopt.seed = configs.front().seed;
    auto loaded = train::load_train_data(spec, dopt);
    if (!loaded) return setError(QString::fromStdString(loaded.error().message));
    for (const train::TrainOptions& o : configs) {
      if (cancel->load()) return setError("cancelled");  // stopped between runs, or while the data loaded
      if (!trainRun(*loaded, o, *cancel, runsFolder)) return;
    }
  }));
}

void TrainingView::setError(const QString& message) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = message;
}

void TrainingView::addStep(const train::StepMetrics& m, bool text) {
  std::lock_guard<std::mutex> lock(mu_);
  Run& run = runs_.back();
  run.step.push_back(static_cast<double>(m.step));
  run.loss.push_back(m.loss);
  run.accuracy.push_back(text ? m.bpc : m.accuracy);
  run.skipped = m.skipped_total;
  if (m.validation) {
    run.val_loss = m.validation->loss;
    run.val_step.push_back(static_cast<double>(m.step));
    run.val_curve.push_back(m.validation->loss);
  }
  run.g.resize(static_cast<std::size_t>(windows_));
  run.g[static_cast<std::size_t>(std::min(windows_ - 1, (m.step - 1) / window_))].add(m);
  ++done_;
}

bool TrainingView::trainRun(const train::TrainData& loaded, train::TrainOptions o, std::atomic<bool>& cancel,
                            const std::string& runsFolder) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    runs_.push_back(Run{});
    runs_.back().recipe = o.recipe.name;
  }
  // The run is kept as mxlab train --out DIR writes it, in a temporary folder renamed when it ends: a crash
  // leaves no half run under its name.
  std::optional<train::RunRecord> record;
  std::string name, tmp;
  if (!runsFolder.empty()) {
    name = keptName(o);
    tmp = runsFolder + "/." + name + ".tmp";
    auto opened = openKept(loaded, o, tmp);
    if (!opened) {
      setError(tr("cannot keep the run in %1: %2")
                   .arg(QString::fromStdString(runsFolder), QString::fromStdString(opened.error().message)));
      return false;
    }
    record.emplace(std::move(*opened));
  }
  const bool text = loaded.is_text;
  Reporter r;
  r.cancel = &cancel;
  auto result = train::run_training(loaded, o, [this, text, &record](const train::StepMetrics& m) {
    if (record) record->step(m);
    addStep(m, text);
  }, r);
  std::string keepError;
  if (record) keepError = keepRun(record, result, runsFolder + "/" + name, tmp);
  std::lock_guard<std::mutex> lock(mu_);
  if (!result) {
    error_ = QString::fromStdString(result.error().message);
    return false;
  }
  if (!keepError.empty()) {
    error_ = tr("cannot keep the run in %1: %2").arg(QString::fromStdString(runsFolder), QString::fromStdString(keepError));
    return false;
  }
  if (result->test) runs_.back().test_accuracy = text ? result->test->bpc : result->test->accuracy;
  if (result->validation) runs_.back().val_loss = result->validation->loss;
  if (result->cancelled) {
    error_ = "cancelled";
    return false;
  }
  return true;
}

TrainingView::Curves TrainingView::emptyCurves() const {
  Curves c;
  experiment::Figure& loss = c.loss;
  loss.title = "Training loss";
  loss.x.label = "step";
  loss.y.label = "batch cross-entropy";
  loss.y.scale = experiment::AxisScale::Log10;
  loss.legend_title = "recipe";
  c.accuracy = loss;
  const bool text = data_->currentText().startsWith("text:");
  c.accuracy.title = text ? "Bits per character" : "Batch accuracy";
  c.accuracy.y.label = text ? "bits per character" : "accuracy";
  c.accuracy.y.scale = experiment::AxisScale::Linear;
  c.validation = loss;
  c.validation.title = "Validation loss";
  c.validation.y.label = "validation cross-entropy";
  return c;
}

void TrainingView::setSummaryRow(int row, const QStringList& cells) {
  for (int c = 0; c < cells.size(); ++c) summary_->setItem(row, c, new QTableWidgetItem(cells[c]));
}

void TrainingView::addTrainedRuns(Curves& c) {
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
    c.loss.series.push_back(sl);
    c.accuracy.series.push_back(sa);
    c.validation.series.push_back(seriesOf(r.recipe, r.val_step, r.val_curve));
    setSummaryRow(static_cast<int>(i), {QString::fromStdString(r.recipe), QString::number(r.step.size()),
                                        r.test_accuracy >= 0 ? QString::number(r.test_accuracy, 'f', 4) : QString("-"),
                                        r.val_loss >= 0 ? QString::number(r.val_loss, 'f', 4) : QString("-"),
                                        QString::number(r.skipped)});
  }
}

void TrainingView::addSavedRuns(Curves& c) {
  // Saved runs, each named by its recipe and folder: every step as the file holds it.
  for (std::size_t i = 0; i < saved_.size(); ++i) {
    const train::SavedRun& r = saved_[i];
    const std::string name = savedName(r);
    c.loss.series.push_back(seriesOf(name, r.step, r.loss));
    c.accuracy.series.push_back(seriesOf(name, r.step, r.accuracy));
    c.validation.series.push_back(seriesOf(name, r.val_step, r.val_loss));
    setSummaryRow(static_cast<int>(runs_.size() + i),
                  {QString::fromStdString(name), QString::number(r.step.size()),
                   r.test_metric ? QString::number(*r.test_metric, 'f', 4) : QString("-"),
                   r.validation_loss ? QString::number(*r.validation_loss, 'f', 4) : QString("-"),
                   QString::number(r.skipped_steps)});
  }
}

void TrainingView::addUnderflow(experiment::Figure& heat, train::Role role) const {
  const std::string roleName(train::role_name(role));
  for (std::int64_t w = 0; w < windows_; ++w)
    heat.heatmap.x_labels.push_back(window_ == 1 ? std::to_string(w + 1)
                                                 : std::to_string(w * window_ + 1) + "-" + std::to_string((w + 1) * window_));
  // One row per recipe and layer (the first run's first layer at the top), one column per window of steps.
  for (auto r = runs_.rbegin(); r != runs_.rend(); ++r) {
    std::set<std::string> layers;  // those with an operand of the role, by name
    for (const auto& window : r->g)
      for (const auto& c : window.columns())
        if (c.role == role) layers.insert(c.layer);
    for (auto l = layers.rbegin(); l != layers.rend(); ++l) {
      heat.heatmap.y_labels.push_back(r->recipe + ": " + *l);
      for (const auto& window : r->g) {
        const train::OperandTotals& g = window.at(*l + "." + roleName);
        heat.heatmap.values.push_back(g.nonzero > 0 ? g.underflow_ratio() : std::nan(""));
      }
    }
  }
}

void TrainingView::refresh() {
  Curves c = emptyCurves();
  experiment::Figure heat;
  const auto parsed = train::parse_role(role_->currentText().toStdString());  // the combo box lists role_name()s
  const train::Role role = parsed ? *parsed : train::Role::G;
  heat.kind = experiment::PlotKind::Heatmap;
  heat.title = "Underflow of " + std::string(train::role_name(role)) + " by layer";  // the steps are the x axis
  heat.x.label = "steps";
  heat.y.label = "recipe: layer";
  heat.heatmap.value_label = "underflow ratio";
  std::int64_t done = 0, total = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done = done_;
    total = total_;
    summary_->setRowCount(static_cast<int>(runs_.size() + saved_.size()));
    addTrainedRuns(c);
    addSavedRuns(c);
    addUnderflow(heat, role);
  }
  // The difference from the fp32 run, then the smoothing (the engine's, as the plot key `smooth`).
  if (fromFp32_->isChecked())
    for (experiment::Figure* f : {&c.loss, &c.accuracy, &c.validation}) differenceFromFp32(*f);
  for (experiment::Figure* f : {&c.loss, &c.accuracy}) {
    f->smooth = smoothing_->value() > 1 ? smoothing_->value() : 0;
    for (auto& x : f->series) experiment::smooth_series(x, smoothing_->value());
  }
  figures_ = {c.loss, c.accuracy, heat, c.validation};
  plot::draw(*loss_, c.loss, 12);
  plot::draw(*accuracy_, c.accuracy, 12);
  if (!heat.heatmap.x_labels.empty() && !heat.heatmap.y_labels.empty()) plot::draw(*underflow_, heat, 12);
  plot::draw(*validation_, c.validation, 12);
  progress_->setValue(total > 0 ? static_cast<int>(100 * done / total) : 0);
  if (busy() && !cancel_->load()) status_->setText(tr("step %1 of %2").arg(done).arg(total));
}

QString TrainingView::exportPlot(const QString& base) const {
  const int i = tabs_->currentIndex();
  if (i < 0 || i >= static_cast<int>(figures_.size()))
    return tr("the tab on screen (%1) is a table: Export table writes it; choose a plot's tab to export a plot").arg(tabs_->tabText(i));
  const experiment::Figure& f = figures_[static_cast<std::size_t>(i)];
  if (f.series.empty() && f.heatmap.values.empty()) return tr("no training run to export");
  if (auto err = plot::save_figure(f, base.toStdString())) return QString::fromStdString(err->message);
  return {};
}

QString TrainingView::exportTable(const QString& base) const {
  if (const int i = tabs_->currentIndex(); i >= 0 && i < static_cast<int>(figures_.size())) {
    const Table t = figureData(figures_[static_cast<std::size_t>(i)]);
    if (t.rows.empty()) return tr("no training run to export");
    return writeTable(t, base);
  }
  const Table t = tableOf(*summary_, {0});
  if (t.rows.empty()) return tr("no training run to export");
  return writeTable(t, base);
}

QString TrainingView::experimentText() const {
  const Settings s = shown_ ? *shown_ : formSettings();
  // Saved runs shown beside these are files already: the experiment names their folders, it does not rerun them.
  QString saved;
  for (const auto& r : saved_) saved += "# shown beside them: " + QString::fromStdString(savedName(r)) + ", saved in " +
                                        QString::fromStdString(r.dir).replace('\n', ' ') + "\n";
  const int smooth = smoothing_->value() > 1 ? smoothing_->value() : 0;
  const bool text = s.data.startsWith("text:");
  return QString(R"TOML(# Training Simulator, saved from mxlab-gui
%9name = "training"
description = %1
job = "train"

[sweep]
model = %2
data = %3
steps = %4
batch = %5
lr = %6
seed = %7
recipe = %8

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
smooth = %10

[[plot]]
name = "accuracy"
kind = "line"
from = "steps"
x = "step"
y = %11
series = "recipe"
smooth = %10

[[plot]]
name = "underflow"
kind = "heatmap"
from = "layers"
where = { role = %12 }
x = "recipe"
y = "layer"
value = "underflow_ratio"
)TOML")
      .arg(tomlString(s.model + " on " + s.data + " with " + s.recipes.join(", ")), tomlString(s.model), tomlString(s.data),
           QString::number(s.steps), QString::number(s.batch), QString::fromStdString(g17(s.lr)), QString::number(s.seed),
           tomlList(s.recipes))
      .arg(saved, QString::number(smooth), tomlString(text ? "bpc" : "accuracy"), tomlString(role_->currentText()));
}

}  // namespace mxlab::gui
