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
#include <QStatusBar>
#include <QTabWidget>

#include "mxlab/core/table.hpp"
#include "training_view.hpp"
#include "views.hpp"

namespace mxlab::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("mxlab");
  tabs_ = new QTabWidget(this);
  explorer_ = new FormatExplorer(tabs_);
  lab_ = new QuantizationLab(tabs_);
  bounds_ = new BoundsView(tabs_);
  experiments_ = new ExperimentsView(tabs_);
  training_ = new TrainingView(tabs_);
  for (View* v : std::initializer_list<View*>{explorer_, lab_, bounds_}) {
    tabs_->addTab(v, v->title());
    connect(v->study(), &StudyView::failed, this, &MainWindow::showError);
  }
  tabs_->addTab(training_, tr("Training Simulator"));
  connect(training_, &TrainingView::failed, this, &MainWindow::showError);
  tabs_->addTab(experiments_, experiments_->title());
  connect(experiments_->study(), &StudyView::failed, this, &MainWindow::showError);
  setCentralWidget(tabs_);
  buildMenus();
  restore();
  statusBar()->showMessage(tr("Every number is computed exactly by the engine; File > Save view as experiment "
                              "reproduces a view with mxlab run."));
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
}

void MainWindow::restore() {
  QSettings s;
  if (s.contains("window/geometry")) restoreGeometry(s.value("window/geometry").toByteArray());
  else resize(1280, 800);
  const QSignalBlocker b1(explorer_->format()), b2(explorer_->overlay());
  if (s.contains("explorer/format")) explorer_->format()->setCurrentText(s.value("explorer/format").toString());
  if (s.contains("explorer/overlay")) explorer_->overlay()->setCurrentText(s.value("explorer/overlay").toString());
  if (s.contains("lab/source")) lab_->source()->setText(s.value("lab/source").toString());
  if (s.contains("lab/size")) lab_->sizeLog2()->setValue(s.value("lab/size").toInt());
  if (s.contains("lab/seed")) lab_->seed()->setValue(s.value("lab/seed").toInt());
  const QSignalBlocker b3(lab_->profiles()), b4(lab_->formats()), b5(lab_->sizeLog2()), b6(lab_->seed()), b7(lab_->source());
  if (s.contains("lab/profiles")) {
    const QStringList checked = s.value("lab/profiles").toStringList();
    for (int i = 0; i < lab_->profiles()->count(); ++i)
      lab_->profiles()->item(i)->setCheckState(checked.contains(lab_->profiles()->item(i)->text()) ? Qt::Checked : Qt::Unchecked);
  }
  if (s.contains("lab/formats")) {
    const QStringList checked = s.value("lab/formats").toStringList();
    for (int i = 0; i < lab_->formats()->count(); ++i)
      lab_->formats()->item(i)->setCheckState(checked.contains(lab_->formats()->item(i)->text()) ? Qt::Checked : Qt::Unchecked);
  }
  if (s.contains("bounds/a")) bounds_->formatA()->setCurrentText(s.value("bounds/a").toString());
  if (s.contains("bounds/b")) bounds_->formatB()->setCurrentText(s.value("bounds/b").toString());
  tabs_->setCurrentIndex(s.value("window/tab", 0).toInt());
}

View* MainWindow::current() const { return qobject_cast<View*>(tabs_->currentWidget()); }

QString MainWindow::saveView(const QString& path) const {
  const QString text = !current() ? training_->experimentText()
                       : current()->study()->experimentText().isEmpty() ? current()->experimentText()
                                                                        : current()->study()->experimentText();
  if (auto err = write_file_atomic(path.toStdString(), text.toStdString())) return QString::fromStdString(err->message);
  return {};
}

void MainWindow::showError(const QString& message) { QMessageBox::warning(this, tr("mxlab"), message); }

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open experiment..."), QKeySequence::Open, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Experiment file"), "experiments", tr("Experiments (*.toml)"));
    if (path.isEmpty()) return;
    tabs_->setCurrentWidget(experiments_);
    const QString err = experiments_->open(path);
    if (!err.isEmpty()) showError(err);
  });
  file->addAction(tr("&Save view as experiment..."), QKeySequence::Save, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save as experiment file"), "view.toml", tr("Experiments (*.toml)"));
    if (path.isEmpty()) return;
    const QString err = saveView(path);
    if (!err.isEmpty()) showError(err);
    else statusBar()->showMessage(tr("saved; run it with: mxlab run %1").arg(path));
  });
  file->addSeparator();
  file->addAction(tr("Export &plot (PNG, PDF)..."), QKeySequence(tr("Ctrl+E")), this, [this] {
    const QString base = QFileDialog::getSaveFileName(this, tr("Export plot: base name"), "plot");
    if (base.isEmpty()) return;
    const QString err = current() ? current()->study()->exportPlot(base) : training_->exportPlot(base);
    if (!err.isEmpty()) showError(err);
    else statusBar()->showMessage(tr("wrote %1.png and %1.pdf").arg(base));
  });
  file->addAction(tr("Export &table (CSV, Markdown, LaTeX)..."), QKeySequence(tr("Ctrl+T")), this, [this] {
    const QString base = QFileDialog::getSaveFileName(this, tr("Export table: base name"), "table");
    if (base.isEmpty()) return;
    const QString err = current() ? current()->study()->exportTable(base) : training_->exportTable(base);
    if (!err.isEmpty()) showError(err);
    else statusBar()->showMessage(tr("wrote %1.csv, %1.md and %1.tex").arg(base));
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Recompute"), QKeySequence::Refresh, this, [this] {
    if (current()) current()->recompute();
    else training_->start();
  });
  view->addAction(tr("&Stop"), QKeySequence(Qt::Key_Escape), this, [this] {
    if (current()) current()->study()->cancel();
    else training_->stop();
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
