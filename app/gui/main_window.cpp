// mxlab-gui's window.
#include "main_window.hpp"

#include <QApplication>
#include <QComboBox>
#include <QFileDialog>
#include <QKeySequence>
#include <QLineEdit>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>

#include <cstdio>
#include <functional>

#include "checks.hpp"
#include "plot_tools.hpp"
#include "mxlab/core/quote.hpp"
#include "mxlab/core/table.hpp"
#include "block_view.hpp"
#include "gemm_view.hpp"
#include "training_view.hpp"
#include "value_view.hpp"
#include "views.hpp"

namespace mxlab::gui {

namespace {

const char* const kDefaultSource = "gen:normal:0,1";

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("mxlab");
  tabs_ = new QTabWidget(this);
  explorer_ = new FormatExplorer(tabs_);
  lab_ = new QuantizationLab(tabs_);
  bounds_ = new BoundsView(tabs_);
  experiments_ = new ExperimentsView(tabs_);
  training_ = new TrainingView(tabs_);
  values_ = new ValueExplorer(tabs_);
  blocks_ = new BlockView(tabs_);
  gemm_ = new GemmView(tabs_);
  // Errors show on the field at fault, under the form and here: never in a dialog.
  auto report = [this](const QString& title) { return [this, title](const QString& m) { showStatus(title + ": " + m, true); }; };
  for (View* v : std::initializer_list<View*>{explorer_, lab_, bounds_}) {
    tabs_->addTab(v, v->title());
    connect(v->study(), &StudyView::failed, this, report(v->title()));
  }
  tabs_->addTab(training_, tr("Training Simulator"));
  connect(training_, &TrainingView::failed, this, report(tr("Training Simulator")));
  tabs_->addTab(experiments_, experiments_->title());
  connect(experiments_->study(), &StudyView::failed, this, report(experiments_->title()));
  tabs_->addTab(values_, tr("Value Explorer"));
  tabs_->addTab(blocks_, tr("Block"));
  connect(blocks_, &BlockView::failed, this, report(tr("Block")));
  tabs_->addTab(gemm_, gemm_->title());
  connect(gemm_->study(), &StudyView::failed, this, report(gemm_->title()));
  setCentralWidget(tabs_);
  buildMenus();
  showStatus(tr("Every number is computed exactly by the engine; File > Save view as experiment "
                "reproduces a view with mxlab run."));
  restore();
}

MainWindow::~MainWindow() {
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  s.setValue("window/tab", tabs_->currentIndex());
  s.setValue("explorer/format", explorer_->format()->currentText());
  s.setValue("explorer/overlay", explorer_->overlay()->currentText());
  s.setValue("lab/source", lab_->source()->text());
  s.setValue("lab/size", lab_->sizeLog2()->value());
  s.setValue("lab/seed", lab_->seed()->value());
  QStringList profiles;
  for (int i = 0; i < lab_->profiles()->count(); ++i)
    if (lab_->profiles()->item(i)->checkState() == Qt::Checked) profiles << lab_->profiles()->item(i)->text();
  s.setValue("lab/profiles", profiles);
  QStringList checked;
  for (int i = 0; i < lab_->formats()->count(); ++i)
    if (lab_->formats()->item(i)->checkState() == Qt::Checked) checked << lab_->formats()->item(i)->text();
  s.setValue("lab/formats", checked);
  s.setValue("bounds/a", bounds_->formatA()->currentText());
  s.setValue("bounds/b", bounds_->formatB()->currentText());
  s.setValue("training/runs", training_->savedRuns());
}

void MainWindow::showStatus(const QString& message, bool error) {
  statusBar()->setStyleSheet(error ? QStringLiteral("color: #c62828;") : QString());
  statusBar()->showMessage(message);
}

void MainWindow::drop(const QString& key, const QString& value, const QString& why) {
  const QString line = tr("saved setting %1 = %2 dropped: %3")
                           .arg(key, QString::fromStdString(quote_input(value.toStdString())), why);
  warnings_ << line;
  std::fprintf(stderr, "mxlab-gui: %s\n", line.toLocal8Bit().constData());
  QSettings().remove(key);
  showStatus(warnings_.join("; "), true);
}

void MainWindow::restore() {
  // Every saved value passes the check its field makes while typing before it is shown; one that fails is
  // dropped with a warning (status bar, stderr), so a bad session can never come back at the next start.
  QSettings s;
  auto text = [&](const QString& key, QString* out) {
    if (!s.contains(key)) return false;
    const QVariant v = s.value(key);
    if (v.typeId() != QMetaType::QString) {
      drop(key, v.toStringList().join(", "), tr("not a text"));
      return false;
    }
    *out = v.toString();
    return true;
  };
  auto number = [&](const QString& key, int lo, int hi, int* out) {
    if (!s.contains(key)) return false;
    bool ok = false;
    const QString t = s.value(key).toString();
    const int n = t.toInt(&ok);
    if (!ok || n < lo || n > hi) {
      drop(key, t, tr("expected a whole number from %1 to %2").arg(lo).arg(hi));
      return false;
    }
    *out = n;
    return true;
  };
  auto field = [&](const QString& key, QString (*check)(const QString&), const std::function<void(const QString&)>& set) {
    QString v;
    if (!text(key, &v)) return false;
    if (const QString p = check(v); !p.isEmpty()) {
      drop(key, v, p);
      return false;
    }
    set(v);
    return true;
  };
  auto names = [&](const QString& key, QListWidget* list) {
    if (!s.contains(key)) return;
    const QStringList wanted = s.value(key).toStringList();
    QStringList unknown;
    for (const QString& n : wanted)
      if (list->findItems(n, Qt::MatchExactly).isEmpty()) unknown << n;
    if (!unknown.isEmpty()) drop(key, unknown.join(", "), tr("not in the list"));
    if (unknown.size() == wanted.size() && !wanted.isEmpty()) return;
    for (int i = 0; i < list->count(); ++i)
      list->item(i)->setCheckState(wanted.contains(list->item(i)->text()) ? Qt::Checked : Qt::Unchecked);
  };
  if (s.contains("window/geometry") && !restoreGeometry(s.value("window/geometry").toByteArray()))
    drop("window/geometry", tr("(%1 bytes)").arg(s.value("window/geometry").toByteArray().size()), tr("not a window geometry"));
  if (!s.contains("window/geometry")) resize(1280, 800);
  const QSignalBlocker b1(explorer_->format()), b2(explorer_->overlay()), b3(lab_->profiles()), b4(lab_->formats()),
      b5(lab_->sizeLog2()), b6(lab_->seed()), b7(lab_->source()), b8(bounds_->formatA()), b9(bounds_->formatB());
  field("explorer/format", elementFormatProblem, [this](const QString& v) { explorer_->format()->setCurrentText(v); });
  field("explorer/overlay", [](const QString& v) { return v == tr("(none)") ? QString() : elementFormatProblem(v); },
        [this](const QString& v) { explorer_->overlay()->setCurrentText(v); });
  restoredSource_ = field("lab/source", sourceProblem, [this](const QString& v) { lab_->source()->setText(v); });
  int n = 0;
  if (number("lab/size", lab_->sizeLog2()->minimum(), lab_->sizeLog2()->maximum(), &n)) lab_->sizeLog2()->setValue(n);
  if (number("lab/seed", lab_->seed()->minimum(), lab_->seed()->maximum(), &n)) lab_->seed()->setValue(n);
  names("lab/profiles", lab_->profiles());
  names("lab/formats", lab_->formats());
  field("bounds/a", blockFormatProblem, [this](const QString& v) { bounds_->formatA()->setCurrentText(v); });
  field("bounds/b", blockFormatProblem, [this](const QString& v) { bounds_->formatB()->setCurrentText(v); });
  // Saved training runs are read again; a folder gone or changed into something else is dropped.
  if (s.contains("training/runs")) {
    QStringList kept;
    for (const QString& dir : s.value("training/runs").toStringList()) {
      if (const QString err = training_->openRun(dir); !err.isEmpty()) drop("training/runs", dir, err);
      else kept << dir;
    }
    if (!kept.isEmpty()) QSettings().setValue("training/runs", kept);
  }
  // Runs trained here are kept under the per-user data location and listed again at each start.
  training_->setRunsFolder(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/runs");
  if (number("window/tab", 0, tabs_->count() - 1, &n)) tabs_->setCurrentIndex(n);
}

void MainWindow::startViews() {
  if (restoredSource_) {
    // The restored input is checked by its first computation (a model or file may be gone since).
    auto* once = new QObject(this);
    connect(lab_->study(), &StudyView::finished, once, [once] { once->deleteLater(); });
    connect(lab_->study(), &StudyView::failed, once, [this, once](const QString& m) {
      once->deleteLater();
      drop("lab/source", lab_->source()->text(), m);
      {
        const QSignalBlocker b(lab_->source());
        lab_->source()->setText(kDefaultSource);
      }
      lab_->recompute();
    });
    restoredSource_ = false;
  }
  for (View* v : std::initializer_list<View*>{explorer_, lab_, bounds_}) v->recompute();
}

QString MainWindow::exportPlot(const QString& base) const {
  if (current()) return current()->study()->exportPlot(base);
  if (tabs_->currentWidget() == blocks_) return blocks_->exportPlot(base);
  if (tabs_->currentWidget() == values_) return tr("the Value Explorer has no plot: Export table writes its roundings");
  return training_->exportPlot(base);
}

QString MainWindow::exportTable(const QString& base) const {
  if (current()) return current()->study()->exportTable(base);
  if (tabs_->currentWidget() == blocks_) return blocks_->exportTable(base);
  if (tabs_->currentWidget() == values_) return writeTable(tableOf(*values_->roundings(), {0, 1, 2, 4, 6}), base);
  return training_->exportTable(base);
}

View* MainWindow::current() const { return qobject_cast<View*>(tabs_->currentWidget()); }

QString MainWindow::saveView(const QString& path) const {
  if (tabs_->currentWidget() == values_ || tabs_->currentWidget() == blocks_)
    return tr("the %1 view is not an experiment: mxlab cast FORMAT VALUE --round MODE and mxlab analyze SPEC --per-block "
              "compute what it shows")
        .arg(tabs_->tabText(tabs_->currentIndex()));
  const QString text = !current() ? training_->experimentText()
                       : current()->study()->experimentText().isEmpty() ? current()->experimentText()
                                                                        : current()->study()->experimentText();
  if (auto err = write_file_atomic(path.toStdString(), text.toStdString())) return QString::fromStdString(err->message);
  return {};
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open experiment..."), QKeySequence::Open, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Experiment file"), "experiments", tr("Experiments (*.toml)"));
    if (path.isEmpty()) return;
    tabs_->setCurrentWidget(experiments_);
    const QString err = experiments_->open(path);
    if (!err.isEmpty()) showStatus(err, true);
  });
  file->addAction(tr("&Save view as experiment..."), QKeySequence::Save, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save as experiment file"), "view.toml", tr("Experiments (*.toml)"));
    if (path.isEmpty()) return;
    const QString err = saveView(path);
    if (!err.isEmpty()) showStatus(err, true);
    else showStatus(tr("saved; run it with: mxlab run %1").arg(path));
  });
  file->addSeparator();
  file->addAction(tr("Export &plot (PNG, PDF)..."), QKeySequence(tr("Ctrl+E")), this, [this] {
    const QString base = QFileDialog::getSaveFileName(this, tr("Export plot: base name"), "plot");
    if (base.isEmpty()) return;
    const QString err = exportPlot(base);
    if (!err.isEmpty()) showStatus(err, true);
    else showStatus(tr("wrote %1.png and %1.pdf").arg(base));
  });
  file->addAction(tr("Export &table (CSV, Markdown, LaTeX)..."), QKeySequence(tr("Ctrl+T")), this, [this] {
    const QString base = QFileDialog::getSaveFileName(this, tr("Export table: base name"), "table");
    if (base.isEmpty()) return;
    const QString err = exportTable(base);
    if (!err.isEmpty()) showStatus(err, true);
    else showStatus(tr("wrote %1.csv, %1.md and %1.tex").arg(base));
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Recompute"), QKeySequence::Refresh, this, [this] {
    if (current()) current()->recompute();
    else if (tabs_->currentWidget() == blocks_) blocks_->recompute();
    else if (tabs_->currentWidget() == training_) training_->start();
  });
  view->addAction(tr("&Stop"), QKeySequence(Qt::Key_Escape), this, [this] {
    if (current()) current()->study()->cancel();
    else if (tabs_->currentWidget() == blocks_) blocks_->cancel();
    else if (tabs_->currentWidget() == training_) training_->stop();
  });
  for (int i = 0; i < tabs_->count(); ++i)
    view->addAction(tabs_->tabText(i), QKeySequence(QString("Ctrl+%1").arg(i + 1)), this, [this, i] { tabs_->setCurrentIndex(i); });
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&Metrics"), this, [this] {
    QMessageBox::information(
        this, tr("Metrics"),
        tr("<p><b>MSE</b>: mean of (q - x)^2 over finite elements, from an exact sum.</p>"
           "<p><b>SQNR</b>: 10 log10(sum x^2 / sum (q - x)^2), dB.</p>"
           "<p><b>Bias</b>: mean of q - x.</p>"
           "<p><b>Max abs / rel error</b>: largest |q - x|, and |q - x| / |x| over nonzero x.</p>"
           "<p><b>Underflow ratio</b>: nonzero inputs that became zero, over nonzero inputs.</p>"
           "<p><b>Saturation ratio</b>: elements whose cast overflowed (clamped), over finite elements.</p>"
           "<p><b>Bits per element</b>: element bits plus every stored scale (two-level scales, short blocks) "
           "divided by the elements.</p>"
           "<p><b>Exponent gap</b>: floor(log2 amax) - floor(log2 |x|) of an element in its block.</p>"));
  });
  help->addAction(tr("&About mxlab"), this, [this] {
    QMessageBox::about(this, tr("About mxlab"),
                       tr("mxlab: an exact and fast workbench for low-precision AI number formats. Every number "
                          "comes from the engine (SIMD kernels checked bit for bit against the scalar reference, "
                          "itself checked with rational arithmetic)."));
  });
}

}  // namespace mxlab::gui
