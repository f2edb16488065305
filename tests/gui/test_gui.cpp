// mxlab-gui driven under Qt's offscreen platform: each view computes, and what it draws and tabulates is
// compared with the engine's own numbers (enumerate_codes, ops::analyze, exact bounds).
#include <QApplication>
#include <QElapsedTimer>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QProcess>
#include <QProgressBar>
#include <QCheckBox>
#include <QSlider>
#include <QPushButton>
#include <QTableWidget>
#include <QStatusBar>
#include <QListWidget>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>
#include <qcustomplot.h>

#include "main_window.hpp"
#include "mxlab/exact/bounds.hpp"
#include "mxlab/formats/codepoints.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/requests.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/train/data.hpp"
#include "mxlab/train/trainer.hpp"
#include "mxlab/train/run_record.hpp"
#include "mxlab/train/recipe.hpp"
#include "mxlab/core/provenance.hpp"
#include "block_view.hpp"
#include "gemm_view.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/quantize/block_format.hpp"
#include "training_view.hpp"
#include "value_view.hpp"
#include "plot_tools.hpp"
#include "tensor_list.hpp"
#include "views.hpp"

using namespace mxlab;
using namespace mxlab::gui;

namespace {

/// Waits for the view's next result (or fails the test after 60 s).
bool wait_result(View* v) {
  QSignalSpy done(v->study(), &StudyView::finished);
  QSignalSpy failed(v->study(), &StudyView::failed);
  for (int i = 0; i < 600 && done.isEmpty() && failed.isEmpty(); ++i) done.wait(100);
  if (!failed.isEmpty()) qWarning() << failed.first().first().toString();
  return !done.isEmpty();
}

/// Shows a format alone in the Format Explorer and waits for its result.
bool explore(FormatExplorer* v, const QString& format) {
  v->overlay()->setCurrentText("(none)");
  v->format()->setCurrentText(format);
  v->recompute();
  return wait_result(v);
}

/// Fails when a dialog (a message box or any modal window) is open.
bool no_dialog() {
  if (QApplication::activeModalWidget() != nullptr) return false;
  for (QWidget* w : QApplication::topLevelWidgets())
    if (qobject_cast<QMessageBox*>(w) && w->isVisible()) return false;
  return true;
}

/// A file's lines.
QStringList lines(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
}

/// Installs Fashion-MNIST (from its Debian package) into a scratch folder the views read; false if not installed.
bool fashion_mnist() {
  const QString dir = QDir::temp().filePath("mxlab_gui_test_data");
  FetchOptions fo;
  fo.dir = dir.toStdString();
  if (!fetch_data({"fashion-mnist"}, fo).ok()) return false;
  qputenv("MXLAB_DATA_DIR", dir.toUtf8());
  return true;
}

/// Runs a program; its exit code, standard output and standard error.
struct Ran {
  int code = -1;
  QString out, err;
};
Ran run(const QString& program, const QStringList& args, bool display = false) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  if (!display) env.remove("DISPLAY"), env.remove("WAYLAND_DISPLAY"), env.remove("QT_QPA_PLATFORM");
  p.setProcessEnvironment(env);
  p.start(program, args);
  if (!p.waitForFinished(600000)) return {};
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError())};
}

/// A safetensors file of float32 tensors (name, shape), values 0.01 * (i + 1) with alternating signs.
void write_safetensors(const QString& path, const std::vector<std::pair<std::string, std::vector<int>>>& tensors) {
  QByteArray header = "{", data;
  for (const auto& [name, shape] : tensors) {
    std::size_t n = 1;
    QStringList dims;
    for (int d : shape) n *= static_cast<std::size_t>(d), dims << QString::number(d);
    const auto begin = data.size();
    for (std::size_t i = 0; i < n; ++i) {
      const float v = (i % 2 ? -0.01f : 0.01f) * static_cast<float>(i % 97 + 1);
      data.append(reinterpret_cast<const char*>(&v), 4);
    }
    if (header.size() > 1) header += ",";
    header += QString("\"%1\":{\"dtype\":\"F32\",\"shape\":[%2],\"data_offsets\":[%3,%4]}")
                  .arg(QString::fromStdString(name), dims.join(','))
                  .arg(begin)
                  .arg(data.size())
                  .toUtf8();
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  const quint64 len = static_cast<quint64>(header.size());
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(header);
  f.write(data);
}

/// Waits until the training view is idle and has shown its last results (or 120 s).
bool wait_idle(TrainingView* v) {
  // Up to 2 minutes: a CNN run under the sanitizers on a loaded 2-core machine takes tens of seconds (a wait, not
  // a time limit on the run: it ends as soon as the view is idle).
  for (int i = 0; i < 6000 && v->busy(); ++i) QTest::qWait(20);
  QTest::qWait(50);  // the queued end of the run: its last refresh
  return !v->busy();
}

/// Checks the recipes named in the Training Simulator and unchecks the others.
void check_recipes(TrainingView* v, const QStringList& names) {
  for (int i = 0; i < v->recipes()->count(); ++i)
    v->recipes()->item(i)->setCheckState(names.contains(v->recipes()->item(i)->text()) ? Qt::Checked : Qt::Unchecked);
}

/// Trains a short MLP run with the engine and writes its folder as mxlab train --out DIR does (RunRecord).
QString write_run(const QString& dir, const std::string& recipe) {
  train::DataOptions dopt;
  dopt.seed = 1;
  auto data = train::load_train_data("fashion-mnist", dopt);
  if (!data) return QString::fromStdString(data.error().message);
  train::TrainOptions o;
  o.model.kind = std::string("mlp");
  o.recipe = *train::recipe_preset(recipe);
  o.steps = 20;
  o.batch = 32;
  o.eval_every = 5;
  o.eval_limit = 200;
  o.seed = 1;
  auto plan = train::plan_record(*data, o);
  auto estimate = train::estimate_memory(*data, o);
  if (!plan || !estimate) return "plan";
  train::RecordSettings settings;
  settings.out_dir = dir.toStdString();
  auto record = train::RunRecord::open(*data, o, settings, *plan, *estimate);
  if (!record) return QString::fromStdString(record.error().message);
  auto result = train::run_training(*data, o, [&](const train::StepMetrics& m) { record->step(m); }, Reporter{});
  if (!result) return QString::fromStdString(result.error().message);
  if (auto e = record->finish(*result, build_provenance())) return QString::fromStdString(e->message);
  return {};
}

/// The column of a metrics.csv as the file holds it: (step, value) of every row with a value.
std::vector<std::pair<double, double>> csv_column(const QString& path, const QString& column) {
  const QStringList rows = lines(path);
  const int c = static_cast<int>(rows[0].split(',').indexOf(column));
  std::vector<std::pair<double, double>> out;
  for (int r = 1; r < rows.size(); ++r) {
    const QStringList f = rows[r].split(',');
    if (!f[c].isEmpty()) out.emplace_back(f[0].toDouble(), f[c].toDouble());
  }
  return out;
}

/// Points as a run's metrics.csv records them: each value to 9 significant digits (the engine's RunRecord).
std::vector<std::pair<double, double>> as_recorded(std::vector<std::pair<double, double>> points) {
  for (auto& [x, y] : points) y = QString::asprintf("%.9g", y).toDouble();
  return points;
}

/// A figure's series of that name as (x, y) pairs.
std::vector<std::pair<double, double>> series_points(const experiment::Figure& f, const std::string& name) {
  std::vector<std::pair<double, double>> out;
  for (const auto& s : f.series)
    if (s.name == name)
      for (std::size_t i = 0; i < s.x.size(); ++i) out.emplace_back(s.x[i], s.y[i]);
  return out;
}

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("mxlab-test");
    QCoreApplication::setApplicationName("mxlab-gui-test");
    QSettings().clear();
    // Runs trained in the Training Simulator are kept under the per-user data location: a temporary one here.
    QVERIFY(dataHome_.isValid());
    qputenv("XDG_DATA_HOME", dataHome_.path().toUtf8());
  }

  // Each test starts from no saved session (a window saves its own when it closes). The functions that run as
  // ctest entries of their own (tests/CMakeLists.txt) are skipped by the entry that runs the rest.
  void init() {
    QSettings().clear();
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)).removeRecursively();
    if (qEnvironmentVariable("MXLAB_GUI_OWN_ENTRIES").split(',').contains(QString(QTest::currentTestFunction())))
      QSKIP("runs as a ctest entry of its own");
  }

  void formatExplorerShowsEveryCode() {
    MainWindow w;
    FormatExplorer* v = w.formatExplorer();
    QVERIFY(explore(v, "e2m1"));
    // The code table holds every code of E2M1 with the engine's exact values.
    const Format f = *parse_format("e2m1");
    const auto codes = enumerate_codes(f, 0, f.code_count() - 1);
    const QAbstractItemModel* t = v->study()->table(0);
    QVERIFY(t);
    QCOMPARE(t->rowCount(), static_cast<int>(codes.size()));
    for (int r = 0; r < t->rowCount(); ++r)
      QCOMPARE(v->study()->cell(0, r, "value").toDouble(), codes[static_cast<std::size_t>(r)].value);
    // The number line plots the positive values: 0.5, 1, 1.5, 2, 3, 4, 6.
    QCustomPlot* p = v->study()->plot(0);
    QVERIFY(p && p->graphCount() == 1);
    std::vector<double> xs;
    for (auto it = p->graph(0)->data()->constBegin(); it != p->graph(0)->data()->constEnd(); ++it) xs.push_back(it->key);
    QCOMPARE(xs, (std::vector<double>{0.5, 1, 1.5, 2, 3, 4, 6}));
    // Filtering by class: E2M1 has two zeros (+0, -0) and two subnormals (+-0.5).
    v->classFilter()->setCurrentText("zero");
    QCOMPARE(v->study()->shownRows(0), 2);
    v->classFilter()->setCurrentText("subnormal");
    QCOMPARE(v->study()->shownRows(0), 2);
    v->classFilter()->setCurrentText("all");
    QCOMPARE(v->study()->shownRows(0), 16);
  }

  void quantizationLabMatchesAnalyze() {
    MainWindow w;
    QuantizationLab* v = w.quantizationLab();
    v->source()->setText("gen:laplace:0,1");
    v->sizeLog2()->setValue(16);
    v->seed()->setValue(7);
    for (int i = 0; i < v->formats()->count(); ++i) {
      const QString n = v->formats()->item(i)->text();
      v->formats()->item(i)->setCheckState(n == "mxfp4" || n == "mxint8" ? Qt::Checked : Qt::Unchecked);
    }
    for (int i = 0; i < v->profiles()->count(); ++i)
      v->profiles()->item(i)->setCheckState(v->profiles()->item(i)->text() == "ocp" ? Qt::Checked : Qt::Unchecked);
    v->recompute();
    QVERIFY(wait_result(v));
    const QAbstractItemModel* t = v->study()->table(0);
    QVERIFY(t);
    QCOMPARE(t->rowCount(), 2);
    ops::InputRequest req;
    req.input = "gen:laplace:0,1";
    req.shape = "65536";
    req.seed = 7;
    auto src = ops::open_tensor(req);
    QVERIFY(src.ok());
    for (int r = 0; r < 2; ++r) {
      const std::string name = v->study()->cell(0, r, "format").toStdString();
      auto f = ops::block_format(name, {}, [](std::string_view n) { return std::string(n); });
      QVERIFY(f.ok());
      auto a = ops::analyze({*f}, *src);
      QVERIFY(a.ok());
      // The table rounds to 4 significant digits: compare with the engine's value rounded the same way.
      auto digits4 = [](double x) { return QString::number(x, 'g', 4).toDouble(); };
      QCOMPARE(v->study()->cell(0, r, "sqnr_db").toDouble(), digits4(a->front().total.sqnr_db()));
      QCOMPARE(v->study()->cell(0, r, "bits_per_element").toDouble(), digits4(a->front().bits_per_element));
    }
    // Four figures; the exponent-gap histogram counts every nonzero element once per format.
    QCOMPARE(v->study()->plotCount(), 4);
    QCustomPlot* gaps = v->study()->plot(2);
    double total = 0;
    // Two formats' histograms overlaid: step outlines.
    auto* steps = qobject_cast<QCPGraph*>(gaps->plottable(0));
    QVERIFY(steps);
    QCOMPARE(steps->lineStyle(), QCPGraph::lsStepCenter);
    for (auto it = steps->data()->constBegin(); it != steps->data()->constEnd(); ++it) total += it->value;
    QCOMPARE(total, 65536.0);
    QVERIFY(v->study()->lastRedrawMs() > 0);
  }

  void boundsMarksCrossovers() {
    MainWindow w;
    BoundsView* v = w.bounds();
    v->formatA()->setCurrentText("mxint8");
    v->formatB()->setCurrentText("mxsf");
    v->recompute();
    QVERIFY(wait_result(v));
    QCustomPlot* p = v->study()->plot(0);
    QCOMPARE(p->graphCount(), 2);
    // The plotted bounds are the exact module's (analytic) for every gap.
    auto f = ops::block_format("mxint8", {}, [](std::string_view n) { return std::string(n); });
    auto b = exact::analytic_bounds(*f, *exact::full_underflow_gap(*f));
    QVERIFY(b.ok());
    int k = 0;
    for (auto it = p->graph(0)->data()->constBegin(); it != p->graph(0)->data()->constEnd(); ++it, ++k)
      QCOMPARE(it->value, (*b)[static_cast<std::size_t>(k)].max_rel_f64);
    QCOMPARE(k, static_cast<int>(b->size()));
    // Crossovers at gaps 2, 3 and 5 (docs/bounds.md), each a dashed line.
    int lines = 0;
    for (int i = 0; i < p->itemCount(); ++i) lines += qobject_cast<QCPItemStraightLine*>(p->item(i)) != nullptr;
    QCOMPARE(lines, 3);
  }

  void experimentsViewRunsAFile() {
    MainWindow w;
    ExperimentsView* v = w.experiments();
    QCOMPARE(v->open(MXLAB_SOURCE_DIR "/experiments/gap_error.toml"), QString());
    QVERIFY(wait_result(v));
    QCOMPARE(v->study()->plotCount(), 1);
    QCOMPARE(v->study()->plot(0)->graphCount(), 4);
    QCOMPARE(v->study()->table(0)->rowCount(), 17);  // gaps 0..16
    // MXINT8's bound at gap 1 is 1/65 exactly.
    QCOMPARE(v->study()->cell(0, 1, "mxint8"), QString("1/65"));
    // A malformed file is refused with its name.
    QTemporaryDir dir;
    const QString bad = dir.filePath("bad.toml");
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("name = \"x\"\njob = 3\n");
    f.close();
    QVERIFY(v->open(bad).contains("bad.toml:2"));
  }

  void savedViewRunsFromTheCommandLine() {
    MainWindow w;
    w.tabs()->setCurrentWidget(w.bounds());
    w.bounds()->recompute();
    QVERIFY(wait_result(w.bounds()));
    QTemporaryDir dir;
    const QString path = dir.filePath("view.toml");
    QCOMPARE(w.saveView(path), QString());
    auto e = experiment::read_experiment(path.toStdString());
    QVERIFY(e.ok());
    auto ev = experiment::evaluate(*e);
    QVERIFY(ev.ok());
    QCOMPARE(ev->figures.size(), std::size_t{2});
    // The same numbers as the view shows.
    const auto& shown = w.bounds()->study()->evaluation()->figures[0].second;
    QCOMPARE(ev->figures[0].second.series[0].y, shown.series[0].y);
  }

  void trainingModelsAreTheEnginesModelKinds() {
    MainWindow w;
    TrainingView* v = w.training();
    QStringList shown, expected;
    for (int i = 0; i < v->model()->count(); ++i) shown << v->model()->itemText(i);
    for (const auto& t : train::kModelKinds) expected << QString::fromStdString(std::string(t.name));
    QCOMPARE(shown, expected);
    // Each model offers the sizes its row reads, and picking a text model picks text data (and back).
    for (int i = 0; i < v->model()->count(); ++i) {
      const auto& t = train::kModelKinds[i];
      v->model()->setCurrentIndex(i);
      QCOMPARE(v->sizes()->text(), TrainingView::modelSizes(t));
      QCOMPARE(v->model()->itemData(i, Qt::ToolTipRole).toString(), v->sizes()->text());
      QCOMPARE(v->sizes()->text().contains("width"), (t.options & train::kWidthOption) != 0);
      QCOMPARE(v->sizes()->text().contains("hidden"), (t.options & train::kHiddenOption) != 0);
      QCOMPARE(v->sizes()->text().contains("patch"), (t.options & train::kPatchOption) != 0);
      QCOMPARE(v->sizes()->text().contains("context"), (t.options & train::kContextOption) != 0);
      QCOMPARE(v->sizes()->text().contains("d_model"), (t.options & train::kBlocksOption) != 0);
      QCOMPARE(v->experimentText().contains("data = \"text:"), t.text);
    }
  }

  void trainingSimulatorShowsTheEnginesLosses() {
    if (!fashion_mnist()) QSKIP("the Debian package dataset-fashion-mnist is not installed");
    MainWindow w;
    TrainingView* v = w.training();
    for (int i = 0; i < v->recipes()->count(); ++i) {
      const QString n = v->recipes()->item(i)->text();
      v->recipes()->item(i)->setCheckState(n == "fp32" || n == "mxfp8" ? Qt::Checked : Qt::Unchecked);
    }
    v->steps()->setValue(15);
    v->batch()->setValue(32);
    QSignalSpy done(v, &TrainingView::finished);
    v->start();
    QVERIFY(done.wait(120000));
    const auto losses = v->losses();
    QCOMPARE(losses.size(), std::size_t{2});
    train::DataOptions dopt;
    dopt.seed = 1;
    auto data = train::load_train_data("fashion-mnist", dopt);
    QVERIFY(data.ok());
    // The engine's steps of the mxfp8 run: its validation losses and its operands' underflow.
    std::vector<double> valStep, valLoss;
    std::vector<std::vector<train::OperandMetric>> operands;
    for (const char* name : {"fp32", "mxfp8"}) {
      train::TrainOptions o;
      o.recipe = *train::recipe_preset(name);
      o.steps = 15;
      o.batch = 32;
      o.optimizer.lr = 1e-3;
      o.seed = 1;
      const bool keep = std::string(name) == "mxfp8";
      auto r = train::run_training(*data, o, [&](const train::StepMetrics& m) {
        if (!keep) return;
        if (m.validation) valStep.push_back(static_cast<double>(m.step)), valLoss.push_back(m.validation->loss);
        operands.push_back(m.operands);
      });
      QVERIFY(r.ok());
      QCOMPARE(losses.at(o.recipe.name), r->losses);
    }
    // Validation over the steps: the engine's validation losses at the steps it validated.
    const experiment::Figure& val = v->figures()[3];
    QCOMPARE(val.series.size(), std::size_t{2});
    QVERIFY(!valStep.empty());
    QCOMPARE(val.series[1].x, valStep);
    QCOMPARE(val.series[1].y, valLoss);
    // Underflow over the steps of the role picked (15 steps: a window per step): each cell is that step's
    // operand underflow / nonzero, for the weights and then the output gradients.
    for (const char* role : {"w", "g"}) {
      v->role()->setCurrentText(role);
      const experiment::Figure& heat = v->figures()[2];
      QVERIFY(QString::fromStdString(heat.title).contains(QString("of %1 ").arg(role)));
      QCOMPARE(heat.heatmap.x_labels.size(), std::size_t{15});
      int checked = 0;
      for (const auto& layer : {"fc1", "fc2", "fc3"}) {
        const auto row = std::find(heat.heatmap.y_labels.begin(), heat.heatmap.y_labels.end(), std::string("mxfp8: ") + layer);
        QVERIFY(row != heat.heatmap.y_labels.end());
        const auto r = static_cast<std::size_t>(row - heat.heatmap.y_labels.begin());
        for (std::size_t k = 0; k < 15; ++k)
          for (const auto& op : operands[k])
            if (op.layer == layer && train::role_name(op.role) == role) {
              QVERIFY(heat.heatmap.values[r * 15 + k] == op.underflow_ratio());  // exact, not QCOMPARE's fuzzy doubles
              ++checked;
            }
      }
      QCOMPARE(checked, 3 * 15);
    }
    v->role()->setCurrentText("g");
    // Smoothing: a centred moving average over 5 steps (3 and 4 at the ends), the losses kept as raw values.
    v->smoothing()->setValue(5);
    const std::vector<double>& fp32 = losses.at("fp32");
    const std::vector<double>& mx = losses.at("mxfp8");
    const experiment::Series& smoothed = v->figures()[0].series[0];
    QCOMPARE(smoothed.raw, fp32);
    for (std::size_t k = 0; k < fp32.size(); ++k) {
      const std::size_t lo = k < 2 ? 0 : k - 2, hi = std::min(fp32.size() - 1, k + 2);
      double sum = 0;
      for (std::size_t j = lo; j <= hi; ++j) sum += fp32[j];
      QVERIFY(smoothed.y[k] == sum / static_cast<double>(hi - lo + 1));
    }
    // The difference from the fp32 run: one curve, mxfp8's loss minus fp32's at each step.
    v->smoothing()->setValue(0);
    v->fromFp32()->setChecked(true);
    const experiment::Figure& diff = v->figures()[0];
    QCOMPARE(diff.series.size(), std::size_t{1});
    QCOMPARE(diff.series[0].name, std::string("mxfp8"));
    QCOMPARE(diff.series[0].y.size(), fp32.size());
    for (std::size_t k = 0; k < fp32.size(); ++k) QVERIFY(diff.series[0].y[k] == mx[k] - fp32[k]);
    QCOMPARE(v->lossPlot()->graphCount(), 1);
    v->fromFp32()->setChecked(false);
    // Both curves drawn, every step.
    QCOMPARE(v->lossPlot()->graphCount(), 2);
    QCOMPARE(v->lossPlot()->graph(1)->data()->size(), 15);
    QCOMPARE(v->summary()->rowCount(), 2);
    // Stop ends a long run early.
    v->steps()->setValue(100000);
    v->start();
    QTest::qWait(1500);
    v->stop();
    QVERIFY(done.wait(60000));
    for (const auto& [name, l] : v->losses()) QVERIFY(l.size() < 100000);
    qunsetenv("MXLAB_DATA_DIR");
  }

  void cancelKeepsThePreviousResult() {
    MainWindow w;
    QuantizationLab* v = w.quantizationLab();
    v->sizeLog2()->setValue(12);
    v->recompute();
    QVERIFY(wait_result(v));
    const auto before = v->study()->evaluation()->figures[0].second.series[0].y;
    v->sizeLog2()->setValue(24);
    v->recompute();
    v->study()->cancel();
    for (int i = 0; i < 600 && v->study()->busy(); ++i) QTest::qWait(50);
    QVERIFY(!v->study()->busy());
    QCOMPARE(v->study()->evaluation()->figures[0].second.series[0].y, before);
  }

  void hostileSettingsAreDroppedWithAWarning() {
    QTemporaryDir dir;
    const QString weights = dir.filePath("w.safetensors");
    write_safetensors(weights, {{"conv1.weight", {16, 3, 3, 3}}, {"fc.weight", {10, 64}}});
    {
      QSettings s;
      s.clear();
      s.setValue("window/geometry", QByteArray("not a geometry"));
      s.setValue("window/tab", "99");
      s.setValue("explorer/format", "e3m");
      s.setValue("explorer/overlay", QStringList{"a", "list"});
      // A name pattern past the 4,096 bytes a pattern may have, nested 3,000 deep.
      s.setValue("lab/source", "model:posenet:re:" + QString(3000, '(') + "a" + QString(3000, ')'));
      s.setValue("lab/size", "2^99");
      s.setValue("lab/formats", QStringList{"mxfp4", "not_a_format"});
      s.setValue("bounds/a", "mxint8");
      s.setValue("bounds/b", "mxfp4@0");
    }
    {
      MainWindow w;
      QVERIFY(no_dialog());
      QCOMPARE(w.bounds()->formatA()->currentText(), QString("mxint8"));  // a good value is kept
      QCOMPARE(w.bounds()->formatB()->currentText(), QString("mxsf"));    // the bad one dropped
      QCOMPARE(w.formatExplorer()->format()->currentText(), QString("e4m3"));
      QCOMPARE(w.quantizationLab()->source()->text(), QString("gen:normal:0,1"));
      QCOMPARE(w.quantizationLab()->sizeLog2()->value(), 20);
      QCOMPARE(w.tabs()->currentIndex(), 0);
      const QString warnings = w.settingsWarnings().join('\n');
      for (const char* key : {"window/geometry", "window/tab", "explorer/format", "explorer/overlay", "lab/source", "lab/size",
                              "lab/formats", "bounds/b"})
        QVERIFY2(warnings.contains(key), key);
      QVERIFY(!warnings.contains("bounds/a"));
      QVERIFY(w.statusBar()->currentMessage().contains("mxfp4@0"));
      // The known format of the list stays checked, and the views compute without a dialog.
      QCOMPARE(w.quantizationLab()->formats()->findItems("mxfp4", Qt::MatchExactly).first()->checkState(), Qt::Checked);
      w.startViews();
      QVERIFY(wait_result(w.bounds()));
      QVERIFY(no_dialog());
      QVERIFY(!QSettings().contains("bounds/b"));
    }
    // A pattern that parses (RE2, linear time) but matches nothing: dropped at its first computation.
    QSettings().setValue("lab/source", "model:" + weights + ":re:(((a*)*)*)*b");
    {
      MainWindow w;
      QVERIFY(w.settingsWarnings().isEmpty());
      w.startViews();
      QSignalSpy done(w.quantizationLab()->study(), &StudyView::finished);
      for (int i = 0; i < 600 && done.isEmpty(); ++i) QTest::qWait(100);
      QVERIFY(!done.isEmpty());
      QVERIFY(no_dialog());
      QCOMPARE(w.quantizationLab()->source()->text(), QString("gen:normal:0,1"));
      QVERIFY(w.settingsWarnings().join(' ').contains("lab/source"));
    }
    QSettings().clear();
  }

  void commandLine() {
    // --help prints the usage and exits 0 without a display.
    Ran r = run(MXLAB_GUI_BINARY, {"--help"});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.startsWith("usage: mxlab-gui"));
    QVERIFY(r.err.isEmpty());
    // A bad command line: one line on stderr naming the problem, exit 2, nothing else.
    const QStringList bad[] = {{"--open", "/nonexistent/x.toml"}, {"--bogus"}, {"--tab", "8"}, {"--tab"}, {"stray"}};
    const char* named[] = {"/nonexistent/x.toml", "--bogus", "--tab 8", "tab", "stray"};
    for (std::size_t i = 0; i < std::size(bad); ++i) {
      r = run(MXLAB_GUI_BINARY, bad[i]);
      QCOMPARE(r.code, 2);
      QVERIFY(r.out.isEmpty());
      QVERIFY2(r.err.startsWith("mxlab-gui: ") && r.err.count('\n') == 1 && r.err.contains(named[i]), qPrintable(r.err));
    }
    // A malformed experiment file is named with its line.
    QTemporaryDir dir;
    QFile f(dir.filePath("bad.toml"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("name = \"x\"\njob = 3\n");
    f.close();
    r = run(MXLAB_GUI_BINARY, {"--open", f.fileName()});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("bad.toml:2"), qPrintable(r.err));
  }

  void typingAFormatRaisesNoDialog() {
    MainWindow w;
    w.show();
    FormatExplorer* v = w.formatExplorer();
    v->overlay()->setCurrentText("(none)");
    QLineEdit* edit = v->format()->lineEdit();
    QVERIFY(edit);
    // A watcher fails the test if a dialog opens at any moment.
    bool dialog = false;
    QTimer watch;
    QObject::connect(&watch, &QTimer::timeout, [&] { dialog = dialog || !no_dialog(); });
    watch.start(5);
    QSignalSpy failed(v->study(), &StudyView::failed);
    for (int delay : {0, 500}) {  // fast, and slower than the pause that starts a computation
      edit->selectAll();
      QTest::keyClick(edit, Qt::Key_Backspace);
      QSignalSpy done(v->study(), &StudyView::finished);
      for (const char c : std::string("e3m4")) {
        QTest::keyClicks(edit, QString(c), Qt::NoModifier, 0);
        QCOMPARE(edit->text().right(1), QString(c));  // every key reaches the field
        if (std::string("e3m").find(c) != std::string::npos && edit->text() != "e") {
          // "e3" and "e3m" are not formats: said on the field, not in a dialog.
          QVERIFY(v->format()->styleSheet().contains("border"));
          QVERIFY(!edit->toolTip().isEmpty());
        }
        if (delay) QTest::qWait(delay);
      }
      QCOMPARE(edit->text(), QString("e3m4"));
      QVERIFY(v->format()->styleSheet().isEmpty());
      for (int i = 0; i < 600 && done.isEmpty(); ++i) QTest::qWait(50);
      QVERIFY(!done.isEmpty());
      QCOMPARE(v->study()->table(0)->rowCount(), 256);
    }
    QVERIFY(!dialog);
    QVERIFY(failed.isEmpty());  // nothing half-typed was computed
  }

  void wideFormatsListARangeAndLargeTablesStayResponsive() {
    MainWindow w;
    w.show();
    FormatExplorer* v = w.formatExplorer();
    // float32 and e9m9 are too wide to list whole: the view says so and lists 256 codes from the code of 1.0.
    for (const auto& [name, range, bits] : {std::tuple{"float32", "0x3F800000:0x3F8000FF", "32 bits"},
                                            std::tuple{"e9m9", "0x1FE00:0x1FEFF", "19 bits"}}) {
      QVERIFY(explore(v, name));
      QVERIFY2(v->codesNote().contains("too many to list") && v->codesNote().contains(bits), qPrintable(v->codesNote()));
      QCOMPARE(v->codes()->text(), QString(range));
      QCOMPARE(v->study()->table(0)->rowCount(), 256);
      QCOMPARE(v->study()->cell(0, 0, "value"), QString("1"));
      // The number line draws the chosen format's values (not only the overlay's).
      const auto& line = v->study()->evaluation()->figures[0].second;
      QCOMPARE(line.series.size(), std::size_t{1});
      QCOMPARE(line.series[0].name, std::string(name));
    }
    // A range beyond the limit is refused on its field, without a dialog.
    QSignalSpy failed(v->study(), &StudyView::failed);
    v->codes()->setText("0:0x1FFFF");
    v->recompute();
    QVERIFY(failed.wait(30000));
    QVERIFY(failed.first().first().toString().contains("more than the 65536"));
    QVERIFY(!v->codes()->styleSheet().isEmpty());
    QVERIFY(no_dialog());
    // A narrow format lists every code again.
    QVERIFY(explore(v, "e5m2"));
    QVERIFY(v->codes()->text().isEmpty() && v->codesNote().isEmpty());
    // 16 bits: 65,536 rows; the window keeps handling events while they are computed and shown.
    QElapsedTimer clock;
    qint64 last = 0, longest = 0;
    QTimer tick;
    QObject::connect(&tick, &QTimer::timeout, [&] {
      longest = std::max(longest, clock.elapsed() - last);
      last = clock.elapsed();
    });
    clock.start();
    tick.start(5);
    QVERIFY(explore(v, "e5m10"));
    QTest::qWait(20);
    qInfo("float16: %d rows; the event loop's longest pause %lld ms (figures drawn in %.0f ms)", v->study()->table(0)->rowCount(), longest,
          v->study()->lastRedrawMs());
    QCOMPARE(v->study()->table(0)->rowCount(), 65536);
  }

  void valueExplorerShowsTheEnginesCasts() {
    MainWindow w;
    w.show();
    ValueExplorer* v = w.valueExplorer();
    w.tabs()->setCurrentWidget(v);
    v->format()->setCurrentText("e4m3");
    // 1.0625 lies halfway between E4M3's 1 (0x38) and 1.125 (0x39): each rounding mode picks one of them, the
    // error is -+1/16 and the relative error 1/17 (E4M3: bias 7, 3 mantissa bits, so 1 + k/8 on [1, 2)).
    v->value()->setText("1.0625");
    QCOMPARE(*v->shownCode(), 0x38U);
    QTableWidget* t = v->roundings();
    QCOMPARE(t->rowCount(), 8);
    const std::map<QString, QString> expected = {{"nearest-even", "0x38"}, {"nearest-away", "0x39"}, {"nearest-zero", "0x38"},
                                                 {"zero", "0x38"}, {"up", "0x39"}, {"down", "0x38"}, {"odd", "0x39"}};
    for (int r = 0; r < t->rowCount(); ++r) {
      const QString mode = t->item(r, 0)->text();
      if (!expected.count(mode)) continue;
      QCOMPARE(t->item(r, 1)->text(), expected.at(mode));
      const bool up = expected.at(mode) == "0x39";
      QCOMPARE(t->item(r, 3)->text(), QString(up ? "1.125" : "1"));
      QCOMPARE(t->item(r, 4)->text(), QString("inexact"));
      QCOMPARE(t->item(r, 5)->text(), QString(up ? "0.0625" : "-0.0625"));
      QVERIFY2(t->item(r, 6)->text().startsWith("1/17 "), qPrintable(t->item(r, 6)->text()));
    }
    QVERIFY(v->inputLine()->text().contains("is read exactly as"));
    // Neighbours of 1.0: 0.9375 below, 1.125 above.
    v->showCode(0x38);
    QCOMPARE(v->value()->text(), QString("1"));
    QCOMPARE(v->readout("down"), QString::fromUtf8("\u2193 0x37 = 0.9375"));
    QCOMPARE(v->readout("up"), QString::fromUtf8("\u2191 0x39 = 1.125"));
    QCOMPARE(v->readout("class"), QString("normal"));
    // Clicking a bit toggles it: the mantissa's last bit, then the sign.
    QCOMPARE(static_cast<int>(v->bits().size()), 8);
    QTest::mouseClick(v->bits().back(), Qt::LeftButton);
    QCOMPARE(*v->shownCode(), 0x39U);
    QCOMPARE(v->value()->text(), QString("1.125"));
    QTest::mouseClick(v->bits().front(), Qt::LeftButton);
    QCOMPARE(*v->shownCode(), 0xB9U);
    QCOMPARE(v->value()->text(), QString("-1.125"));
    QCOMPARE(v->code()->text(), QString("0xB9"));
    // The ends: E4M3's largest finite value (0x7E, 448) has no value above (no infinity); E5M2's (0x7B) has +inf.
    v->showCode(0x7E);
    QCOMPARE(v->readout("up"), QString::fromUtf8("\u2191 none"));
    QVERIFY(!v->upButton()->isEnabled());
    QCOMPARE(v->readout("exact"), QString("448"));
    // +0's neighbours: the smallest subnormals, 2^-9.
    v->showCode(0x00);
    QCOMPARE(v->readout("down"), QString::fromUtf8("\u2193 0x81 = -0.001953125"));
    QCOMPARE(v->readout("up"), QString::fromUtf8("\u2191 0x01 = 0.001953125"));
    v->format()->setCurrentText("e5m2");
    v->showCode(0x7B);
    QCOMPARE(v->readout("up"), QString::fromUtf8("\u2191 0x7C = inf"));
    QTest::mouseClick(v->upButton(), Qt::LeftButton);
    QCOMPARE(v->readout("class"), QString("inf"));
    QCOMPARE(v->readout("down"), QString::fromUtf8("\u2193 0x7B = 57344"));
    // E8M0 (no sign, no zero): its smallest value 2^-127 (code 0) has none below; its NaN (0xFF) no neighbours.
    v->format()->setCurrentText("e8m0");
    v->showCode(0x00);
    QCOMPARE(v->readout("down"), QString::fromUtf8("\u2193 none"));
    QVERIFY(v->readout("up").startsWith(QString::fromUtf8("\u2191 0x01 = ")));
    QCOMPARE(static_cast<int>(v->bits().size()), 8);
    v->showCode(0xFF);
    QCOMPARE(v->readout("class"), QString("nan"));
    QCOMPARE(v->readout("up"), QString::fromUtf8("\u2191 none"));
    v->format()->setCurrentText("e5m2");
    // Typing a code; a code past the format's last is refused on its field.
    v->code()->setText("");
    QTest::keyClicks(v->code(), "0x3C");
    QCOMPARE(*v->shownCode(), 0x3CU);
    QCOMPARE(v->value()->text(), QString("1"));
    QTest::keyClicks(v->code(), "0");
    QVERIFY(v->codeMessage()->text().contains("0x3C0"));
    QVERIFY(!v->code()->styleSheet().isEmpty());
    // A value that is not a number: said under the field, no dialog.
    v->value()->setText("1.2.3");
    QVERIFY(!v->valueMessage()->isHidden());
    QVERIFY(v->valueMessage()->text().contains("1.2.3"));
    QVERIFY(no_dialog());
    // A format of 32 bits: float32's code of 0.1 is 0x3DCCCCCD (IEEE 754 binary32).
    v->format()->setCurrentText("float32");
    v->value()->setText("0.1");
    QCOMPARE(*v->shownCode(), 0x3DCCCCCDU);
    QCOMPARE(static_cast<int>(v->bits().size()), 32);
#ifdef MXLAB_BINARY
    // Every row is mxlab cast's for the same value, mode and seed: code, exact value and exact error.
    v->format()->setCurrentText("e2m3");
    v->seed()->setValue(5);
    v->value()->setText("-0.3");
    for (int r = 0; r < t->rowCount(); ++r) {
      const QString mode = t->item(r, 0)->text();
      const Ran c = run(MXLAB_BINARY, {"cast", "e2m3", "-0.3", "--round", mode, "--seed", "5", "--csv", "--columns", "hex,exact,error_exact"});
      QVERIFY2(c.code == 0, qPrintable(c.err));
      const QStringList csv = c.out.split('\n', Qt::SkipEmptyParts);
      QCOMPARE(csv.last(), t->item(r, 1)->text() + "," + t->item(r, 3)->text() + "," + t->item(r, 5)->text());
    }
#endif
  }

  void blockViewMarksUnderflowAndSaturation() {
    // Two MXFP4 blocks of 32 elements. Block 0: amax 7.5, so its scale is 2^(floor(log2 7.5) - emax(E2M1)) = 2^0
    // (E8M0 code 127 = 0x7F); 7.5 lies beyond E2M1's 6 and the midpoint 7 to the next grid point 8: it saturates;
    // 0.2 and 0.25 (the tie between 0 and 0.5, to the even code 0) become 0: they underflow; 0 stays 0 and does not.
    // Block 1: every element 2^-10, scale 2^-12 (code 0x73), element 4 (code 0x6), exact.
    QTemporaryDir dir;
    const QString path = dir.filePath("two_blocks.f32");
    std::vector<float> x(64, 1.0f);
    const float first[] = {7.5f, 0.2f, 1.5f, -3.0f, 0.25f, 0.0f};
    std::copy(std::begin(first), std::end(first), x.begin());
    std::fill(x.begin() + 32, x.end(), std::ldexp(1.0f, -10));
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(reinterpret_cast<const char*>(x.data()), static_cast<qint64>(x.size() * sizeof(float)));
    f.close();
    MainWindow w;
    BlockView* v = w.blockView();
    w.tabs()->setCurrentWidget(v);
    QSignalSpy done(v, &BlockView::finished);
    v->format()->setCurrentText("mxfp4");
    v->source()->setText(path);
    v->block()->setValue(0);
    v->recompute();
    QVERIFY(done.wait(60000));
    QTableWidget* t = v->elements();
    QCOMPARE(t->rowCount(), 32);
    QCOMPARE(v->detail()->scale_code, 0x7FU);
    QCOMPARE(*v->detail()->shared_exponent, 0);
    QStringList flags;
    for (int r = 0; r < t->rowCount(); ++r) flags << t->item(r, 5)->text();
    QCOMPARE(flags.mid(0, 6), (QStringList{"saturated", "underflow", "", "", "underflow", ""}));
    QCOMPARE(flags.count(""), 32 - 3);
    QCOMPARE(t->item(0, 4)->text(), QString("6"));
    QCOMPARE(t->item(0, 6)->text(), QString("-1.5"));
    QCOMPARE(t->item(1, 4)->text(), QString("0"));
    // The same counts as the engine's per-block analysis (the kernels' path).
    ops::InputRequest req;
    req.input = path.toStdString();
    auto src = ops::open_tensor(req);
    QVERIFY(src.ok());
    auto fmt = ops::block_format("mxfp4", {}, [](std::string_view n) { return std::string(n); });
    ops::AnalyzeOptions ao;
    ao.per_block = true;
    auto a = ops::analyze({*fmt}, *src, ao);
    QVERIFY(a.ok());
    QCOMPARE(a->front().blocks.size(), std::size_t{2});
    QCOMPARE(a->front().blocks[0].stats.underflows, std::int64_t{2});
    QCOMPARE(a->front().blocks[0].stats.saturations, std::int64_t{1});
    QVERIFY(a->front().blocks[0].scale == v->detail()->scale);
    // Block 1; an index past the last block shows the last one.
    v->block()->setValue(7);
    v->recompute();
    QVERIFY(done.wait(60000));
    QCOMPARE(v->detail()->block, std::int64_t{1});
    QCOMPARE(v->block()->value(), 1);
    QCOMPARE(v->detail()->scale_code, 0x73U);
    for (int r = 0; r < t->rowCount(); ++r) {
      QCOMPARE(t->item(r, 2)->text(), QString("0x6"));
      QCOMPARE(t->item(r, 5)->text(), QString());
      QCOMPARE(t->item(r, 6)->text(), QString("0"));
    }
    // The plot draws the block's inputs and quantized values.
    QCOMPARE(v->plot()->graphCount() >= 2, true);
    // A format that is not a block format: said on the field and in the status line, no dialog.
    QSignalSpy failed(v, &BlockView::failed);
    v->format()->setCurrentText("e4m3");
    v->recompute();
    if (failed.isEmpty()) QVERIFY(failed.wait(60000));
    QVERIFY2(failed.first().first().toString().startsWith("format: block format 'e4m3'"), qPrintable(failed.first().first().toString()));
    QVERIFY(!v->format()->styleSheet().isEmpty());
    QVERIFY(no_dialog());
  }

  void formatChangeRedrawsAMillionElements() {
    MainWindow w;
    w.show();
    QuantizationLab* v = w.quantizationLab();
    v->sizeLog2()->setValue(20);
    v->recompute();
    QVERIFY(wait_result(v));
    // Checking one more format: recomputed once the edit settles (350 ms), then redrawn.
    QSignalSpy done(v->study(), &StudyView::finished);
    QElapsedTimer t;
    t.start();
    v->formats()->findItems("mxfp6_e3m2", Qt::MatchExactly).first()->setCheckState(Qt::Checked);
    for (int i = 0; i < 1200 && done.isEmpty(); ++i) QTest::qWait(5);
    QVERIFY(!done.isEmpty());
    const double ms = static_cast<double>(t.nsecsElapsed()) / 1e6;
    qInfo("2^20 elements, 5 formats: format change to redrawn plots %.0f ms (350 ms of it the pause for more edits; "
          "figures drawn in %.0f ms)", ms, v->study()->lastRedrawMs());
    QCOMPARE(v->study()->table(0)->rowCount(), 5);
  }

  void modelTensorsAreListedAndPicked() {
    QTemporaryDir dir;
    const QString weights = dir.filePath("w.safetensors");
    write_safetensors(weights, {{"conv1/kernel", {3, 3, 8, 16}}, {"conv2/kernel", {3, 3, 16, 32}}, {"dense/kernel", {512, 10}}});
    MainWindow w;
    QuantizationLab* v = w.quantizationLab();
    // Every kernel of the file: one metrics row per layer and format.
    v->source()->setText("model:" + weights);
    emit v->source()->editingFinished();
    QVERIFY(wait_result(v));
    QCOMPARE(v->study()->table(0)->rowCount(), 3 * 4);
    // The list names every tensor with its shape and size.
    TensorList* list = v->tensors();
    QVERIFY(!list->isHidden());
    QCOMPARE(list->count(), 3);
    QCOMPARE(list->name(1), QString("conv2/kernel"));
    QCOMPARE(list->model()->index(1, 1).data().toString(), QString("3x3x16x32"));
    QCOMPARE(list->model()->index(1, 2).data().toString(), QString("4608"));
    // Picking one quantizes that tensor alone.
    emit list->picked("conv2/kernel");
    QCOMPARE(v->source()->text(), "model:" + weights + ":conv2/kernel");
    QVERIFY(wait_result(v));
    QCOMPARE(v->study()->table(0)->rowCount(), 4);
    QCOMPARE(v->study()->cell(0, 0, "layer"), QString("conv2/kernel"));
    // A glob over the names.
    v->source()->setText("model:" + weights + ":conv*");
    v->recompute();
    QVERIFY(wait_result(v));
    QCOMPARE(v->study()->table(0)->rowCount(), 2 * 4);
    QCOMPARE(exactPattern("a*b[1]?"), QString("a\\*b\\[1]\\?"));
  }

  void gemmViewPlotsTheEnginesErrors() {
    MainWindow w;
    GemmView* v = w.gemm();
    QCOMPARE(w.tabs()->indexOf(v), 7);
    v->formatA()->setCurrentText("mxfp8_e4m3");
    v->formatB()->setCurrentText("nvfp4");
    for (int i = 0; i < v->models()->count(); ++i)
      v->models()->item(i)->setCheckState(v->models()->item(i)->text() == "tensorcore-trunc14" ? Qt::Checked : Qt::Unchecked);
    // A model string that does not parse is said on its field; one whose sums are rounded stays out of the
    // width plot (an aligned accumulator takes exact sums), with the engine's reason.
    v->moreModels()->setText("group=4,sum=bf17");
    QVERIFY(!v->problem().isEmpty());
    QVERIFY(no_dialog());
    v->moreModels()->setText("group=4,sum=bf16");
    QVERIFY(v->problem().isEmpty());
    QVERIFY2(v->widthNote().startsWith("group=4,sum=bf16 is not in the width plot"), qPrintable(v->widthNote()));
    v->size()->setValue(4);
    v->kMin()->setValue(5);
    v->kMax()->setValue(7);
    v->widthMin()->setValue(8);
    v->widthMax()->setValue(12);
    v->widthStep()->setValue(2);
    v->metric()->setCurrentIndex(v->metric()->findData("p99_rel_error"));
    v->reference()->setCurrentIndex(v->reference()->findData("acc_"));
    v->seed()->setValue(3);
    v->recompute();
    QVERIFY(wait_result(v));
    // The engine on the same operands: A normal(0,1) of the seed, B of seed + 1 (as mxlab gemm and the job).
    auto engine = [](const std::string& model, std::int64_t k) {
      gemm::GemmRequest r;
      r.format_a = *parse_block_format("mxfp8_e4m3");
      r.format_b = *parse_block_format("nvfp4");
      r.m = 4, r.k = k, r.n = 4;
      ops::InputRequest in;
      in.input = "gen:normal:0,1";
      in.shape = "4x" + std::to_string(k);
      in.seed = 3;
      r.a = ops::load_tensor(in)->exact_values();
      in.shape = std::to_string(k) + "x4";
      in.seed = 4;
      r.b = ops::load_tensor(in)->exact_values();
      r.models = {*gemm::parse_model(model)};
      auto rep = gemm::run(r);
      return rep ? rep->models[0].vs_exact.p99_rel_error : -1.0;
    };
    auto graph = [](QCustomPlot* p, const QString& name) -> QCPGraph* {
      for (int i = 0; i < p->graphCount(); ++i)
        if (p->graph(i)->name() == name) return p->graph(i);
      return nullptr;
    };
    QCOMPARE(v->study()->plotCount(), 2);
    // Error against K: one point per K, each the engine's p99 relative error, for both models.
    for (const std::string model : {"tensorcore-trunc14", "group=4,sum=bf16"}) {
      QCPGraph* g = graph(v->study()->plot(0), QString::fromStdString(model));
      QVERIFY2(g, model.c_str());
      QCOMPARE(g->data()->size(), 3);
      int i = 0;
      for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it, ++i) {
        QCOMPARE(it->key, static_cast<double>(32 << i));
        QCOMPARE(it->value, engine(model, 32 << i));
      }
    }
    // Error against the width at K = 128: tensorcore-trunc14 with acc=aligned:B:trunc for B = 8, 10, 12; the
    // model with rounded sums is not drawn.
    QCustomPlot* wp = v->study()->plot(1);
    QCOMPARE(wp->graphCount(), 1);
    QCPGraph* g = graph(wp, "tensorcore-trunc14");
    QVERIFY(g);
    QCOMPARE(g->data()->size(), 3);
    std::vector<double> drawn;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) drawn.push_back(it->value);
    QCOMPARE(drawn, (std::vector<double>{engine("tensorcore-trunc14,acc=aligned:8:trunc", 128),
                                         engine("tensorcore-trunc14,acc=aligned:10:trunc", 128),
                                         engine("tensorcore-trunc14,acc=aligned:12:trunc", 128)}));
    QVERIFY(drawn[0] > drawn[2]);  // 8 bits err more than 12
    // Export follows the visible tab: the width plot and its data.
    QTemporaryDir dir;
    w.tabs()->setCurrentWidget(v);
    v->study()->tabs()->setCurrentIndex(1);
    QCOMPARE(w.exportPlot(dir.filePath("width")), QString());
    QVERIFY(QFile::exists(dir.filePath("width.png")));
    QCOMPARE(w.exportTable(dir.filePath("width")), QString());
    QCOMPARE(lines(dir.filePath("width.csv")).size(), 1 + 3);
    // The view saved as an experiment file reads back as one.
    QCOMPARE(w.saveView(dir.filePath("gemm.toml")), QString());
    QCOMPARE(ExperimentsView::check(dir.filePath("gemm.toml")), QString());
  }

  void savedTrainingRunsAreComparedAfterARestart() {
    if (!fashion_mnist()) QSKIP("the Debian package dataset-fashion-mnist is not installed");
    QTemporaryDir root;
    const QString fp32 = root.filePath("run-fp32"), mx = root.filePath("run-mxfp4");
    QCOMPARE(write_run(fp32, "fp32"), QString());
    QCOMPARE(write_run(mx, "mxfp4"), QString());
    {
      MainWindow w;
      TrainingView* v = w.training();
      // A folder that is not a run says which file is missing, on the status line, without a dialog.
      const QString bad = v->openRun(root.path());
      QVERIFY2(bad.contains("metrics.csv"), qPrintable(bad));
      QVERIFY(no_dialog());
      QCOMPARE(v->openRun(fp32), QString());
      QCOMPARE(v->openRun(mx), QString());
      // Each curve's points are the file's values, step by step; validation at the steps the run validated.
      const auto& f = v->figures();
      QCOMPARE(series_points(f[0], "fp32 (run-fp32)"), csv_column(fp32 + "/metrics.csv", "loss"));
      QCOMPARE(series_points(f[1], "mxfp4 (run-mxfp4)"), csv_column(mx + "/metrics.csv", "accuracy"));
      const auto val = csv_column(mx + "/metrics.csv", "val_loss");
      QCOMPARE(val.size(), std::size_t{4});  // steps 5, 10, 15 and the last, 20
      QCOMPARE(series_points(f[3], "mxfp4 (run-mxfp4)"), val);
      // Drawn as the difference from the fp32 run: mxfp4's loss minus fp32's at each step, exactly.
      v->fromFp32()->setChecked(true);
      const auto a = csv_column(mx + "/metrics.csv", "loss"), b = csv_column(fp32 + "/metrics.csv", "loss");
      const auto diff = series_points(v->figures()[0], "mxfp4 (run-mxfp4)");
      QCOMPARE(diff.size(), a.size());
      for (std::size_t i = 0; i < a.size(); ++i) QVERIFY(diff[i].second == a[i].second - b[i].second);
      // The table of runs lists both with their validation loss from summary.json.
      QCOMPARE(v->summary()->rowCount(), 2);
      QCOMPARE(v->summary()->item(1, 0)->text(), QString("mxfp4 (run-mxfp4)"));
    }
    {
      // After a restart the saved runs are there again, read from their folders.
      MainWindow w;
      QCOMPARE(w.training()->savedRuns(), (QStringList{QDir(fp32).absolutePath(), QDir(mx).absolutePath()}));
      QCOMPARE(series_points(w.training()->figures()[0], "fp32 (run-fp32)"), csv_column(fp32 + "/metrics.csv", "loss"));
    }
    // A saved folder gone since is dropped with a warning at the next start; the other stays.
    QVERIFY(QDir(mx).removeRecursively());
    MainWindow w;
    QCOMPARE(w.training()->savedRuns(), QStringList{QDir(fp32).absolutePath()});
    QVERIFY2(w.settingsWarnings().join('\n').contains("run-mxfp4"), qPrintable(w.settingsWarnings().join('\n')));
    QVERIFY(no_dialog());
  }

  void trainedRunsAreKeptAndReopenedAfterARestart() {
    if (!fashion_mnist()) QSKIP("the Debian package dataset-fashion-mnist is not installed");
    const QString runs = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/runs";
    QVERIFY(runs.startsWith(dataHome_.path()));
    std::vector<std::pair<double, double>> loss, accuracy;
    {
      MainWindow w;
      TrainingView* v = w.training();
      QCOMPARE(v->runsFolder(), runs);
      check_recipes(v, {"fp32", "mxfp4"});
      v->steps()->setValue(8);
      v->batch()->setValue(32);
      v->start();
      QVERIFY(wait_idle(v));
      loss = series_points(v->figures()[0], "mxfp4");
      accuracy = series_points(v->figures()[1], "mxfp4");
      QCOMPARE(loss.size(), std::size_t{8});
      // The first run is kept, no temporary folder is left, and the file holds what was drawn.
      const QStringList kept = QDir(runs).entryList(QDir::Dirs | QDir::Hidden | QDir::NoDotAndDotDot, QDir::Name);
      QCOMPARE(kept.size(), 2);
      QVERIFY2(kept[0].endsWith("-mlp-fp32") && kept[1].endsWith("-mlp-mxfp4"), qPrintable(kept.join(' ')));
      QCOMPARE(csv_column(runs + "/" + kept[1] + "/metrics.csv", "loss"), as_recorded(loss));
    }
    const QStringList kept = QDir(runs).entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name);
    const std::string name = "mxfp4 (" + kept[1].toStdString() + ")";
    // A temporary folder a crash left behind (no process holds its lock) is deleted at the next start.
    const QString left = runs + "/.20260101-000000-mlp-fp32.tmp";
    QVERIFY(QDir().mkpath(left));
    {
      // A fresh window lists both, and the reopened curves are the first window's, point for point (as recorded).
      MainWindow w;
      TrainingView* v = w.training();
      QCOMPARE(v->keptRuns(), (QStringList{runs + "/" + kept[0], runs + "/" + kept[1]}));
      QVERIFY(!QFileInfo::exists(left));
      QVERIFY(v->savedRuns().isEmpty());  // kept runs are listed from their folder, not from the saved settings
      QCOMPARE(series_points(v->figures()[0], name), as_recorded(loss));
      QCOMPARE(series_points(v->figures()[1], name), as_recorded(accuracy));
      QCOMPARE(v->summary()->rowCount(), 2);
      // Saved as an experiment, the file names the runs shown beside those it reruns.
      QVERIFY(v->experimentText().contains(QString::fromStdString("# shown beside them: " + name)));
      // Remove saved runs deletes them: none at the next start.
      v->clearSavedRuns();
      QVERIFY(v->keptRuns().isEmpty());
    }
    std::size_t stoppedSteps = 0;
    {
      MainWindow w;
      TrainingView* v = w.training();
      QVERIFY(v->keptRuns().isEmpty());
      QVERIFY(QDir(runs).entryList(QDir::Dirs | QDir::Hidden | QDir::NoDotAndDotDot).isEmpty());
      // A run stopped once it has steps is kept as stopped, with the steps it has.
      check_recipes(v, {"fp32"});
      v->steps()->setValue(100000);
      v->start();
      for (int i = 0; i < 6000 && v->losses()["fp32"].empty(); ++i) QTest::qWait(20);
      v->stop();
      QVERIFY(wait_idle(v));
      stoppedSteps = v->losses().at("fp32").size();
      QVERIFY(stoppedSteps > 0 && stoppedSteps < 100000);
    }
    MainWindow w;
    const QStringList stopped = w.training()->keptRuns();
    QCOMPARE(stopped.size(), 1);
    auto saved = train::read_run(stopped[0].toStdString());
    QVERIFY2(saved.ok(), saved.ok() ? "" : saved.error().message.c_str());
    QVERIFY(saved->cancelled);
    QCOMPARE(saved->step.size(), stoppedSteps);
    QVERIFY(no_dialog());
  }

  void exportsFollowTheVisibleTabAndTheTable() {
    MainWindow w;
    FormatExplorer* v = w.formatExplorer();
    QVERIFY(explore(v, "e4m3"));
    QTemporaryDir dir;
    // The code table filtered to its 14 subnormals, sorted by value from the largest: exported as shown.
    v->classFilter()->setCurrentText("subnormal");
    v->study()->sortTable(0, "value", Qt::DescendingOrder);
    StudyView* st = v->study();
    st->tabs()->setCurrentIndex(st->plotCount());  // the codes table
    QVERIFY(!st->exportPlot(dir.filePath("p")).isEmpty());  // a table's tab has no plot to export
    QCOMPARE(st->exportTable(dir.filePath("codes")), QString());
    QStringList rows = lines(dir.filePath("codes.csv"));
    QCOMPARE(rows.size(), 1 + 14);
    const int value = static_cast<int>(rows[0].split(',').indexOf("value"));
    std::vector<double> values;
    for (int r = 1; r < rows.size(); ++r) values.push_back(rows[r].split(',')[value].toDouble());
    QVERIFY(std::is_sorted(values.rbegin(), values.rend()));
    QCOMPARE(values.front(), 0.875 * std::ldexp(1.0, -6));  // the largest E4M3 subnormal, 7/8 * 2^-6
    // A plot's tab: Export plot writes that plot, Export table its data.
    st->tabs()->setCurrentIndex(1);  // density per binade
    QCOMPARE(st->exportPlot(dir.filePath("density")), QString());
    QVERIFY(QFile::exists(dir.filePath("density.png")) && QFile::exists(dir.filePath("density.pdf")));
    QCOMPARE(st->exportTable(dir.filePath("density")), QString());
    rows = lines(dir.filePath("density.csv"));
    QVERIFY2(rows[0].startsWith("format,\"binade k"), qPrintable(rows[0]));
    double count = 0;
    for (int r = 1; r < rows.size(); ++r) count += rows[r].split(',').last().toDouble();
    QCOMPARE(count, 126.0);  // E4M3's positive finite values
  }

  void trainingViewSavedRunsWithMxlabRun() {
    if (!fashion_mnist()) QSKIP("the Debian package dataset-fashion-mnist is not installed");
    MainWindow w;
    TrainingView* v = w.training();
    w.tabs()->setCurrentWidget(v);
    check_recipes(v, {"fp32", "mxfp4"});
    v->steps()->setValue(12);
    v->batch()->setValue(32);
    v->start();
    // The form changes after the start: the file describes the run on screen, not the form.
    v->steps()->setValue(500);
    QVERIFY(wait_idle(v));
    QTemporaryDir dir;
    const QString path = dir.filePath("training.toml");
    QCOMPARE(w.saveView(path), QString());
    // The engine's experiment runner reads it and gives the losses on screen, bit for bit.
    auto e = experiment::read_experiment(path.toStdString());
    QVERIFY2(e.ok(), e.ok() ? "" : e.error().message.c_str());
    QVERIFY(QString::fromStdString(e->description).contains("with fp32, mxfp4"));
    auto ev = experiment::evaluate(*e);
    QVERIFY(ev.ok());
    const auto losses = v->losses();
    std::map<std::string, std::vector<double>> rerun;
    for (const auto& row : ev->results.at("steps"))
      rerun[std::get<std::string>(*row.find("recipe"))].push_back(std::get<double>(*row.find("loss")));
    QCOMPARE(rerun.size(), std::size_t{2});
    for (const auto& [name, l] : losses) QCOMPARE(rerun.at(name), l);
    // The test accuracy of each run, as the view's table shows it.
    for (const auto& row : ev->results.at("summary")) {
      const QString recipe = QString::fromStdString(std::get<std::string>(*row.find("recipe")));
      const auto items = v->summary()->findItems(recipe, Qt::MatchExactly);
      QCOMPARE(items.size(), 1);
      QCOMPARE(v->summary()->item(items[0]->row(), 2)->text(),
               QString::number(std::get<double>(*row.find("test_accuracy")), 'f', 4));
    }
#ifdef MXLAB_BINARY
    // And mxlab run accepts the file.
    const Ran r = run(MXLAB_BINARY, {"run", path, "--out", dir.filePath("out")});
    QVERIFY2(r.code == 0, qPrintable(r.err));
#endif
  }

  void trainingHeatmapAndStop() {
    if (!fashion_mnist()) QSKIP("the Debian package dataset-fashion-mnist is not installed");
    MainWindow w;
    TrainingView* v = w.training();
    w.tabs()->setCurrentWidget(v);
    v->model()->setCurrentText("cnn");
    for (int i = 0; i < v->recipes()->count(); ++i)
      v->recipes()->item(i)->setCheckState(v->recipes()->item(i)->text() == "mxfp4" ? Qt::Checked : Qt::Unchecked);
    v->steps()->setValue(32);
    v->batch()->setValue(16);
    v->start();
    QVERIFY(wait_idle(v));
    // Output-gradient underflow by layer over windows of steps; the colour scale starts at 0, cells say their value.
    const experiment::Figure& heat = v->figures()[2];
    QCOMPARE(heat.heatmap.x_labels.size(), std::size_t{16});
    QCOMPARE(heat.heatmap.x_labels.front(), std::string("1-2"));
    QVERIFY(!heat.heatmap.y_labels.empty());
    QCPColorMap* map = nullptr;
    for (int i = 0; i < v->underflowPlot()->plottableCount(); ++i)
      if (auto* m = qobject_cast<QCPColorMap*>(v->underflowPlot()->plottable(i))) map = m;
    QVERIFY(map);
    QCOMPARE(map->dataRange().lower, 0.0);
    int texts = 0;
    for (int i = 0; i < v->underflowPlot()->itemCount(); ++i) texts += qobject_cast<QCPItemText*>(v->underflowPlot()->item(i)) != nullptr;
    QCOMPARE(texts, static_cast<int>(std::count_if(heat.heatmap.values.begin(), heat.heatmap.values.end(), [](double x) { return std::isfinite(x); })));
    // The readout over a cell names its column, row and value.
    v->tabs()->setCurrentIndex(2);
    v->underflowPlot()->resize(800, 500);
    v->underflowPlot()->replot();
    QCPAxisRect* rect = v->underflowPlot()->axisRect(0);
    const QPointF at(rect->axis(QCPAxis::atBottom)->coordToPixel(0), rect->axis(QCPAxis::atLeft)->coordToPixel(0));
    const QString readout = readoutAt(*v->underflowPlot(), heat, at);
    QVERIFY2(readout.startsWith("1-2, ") && readout.contains("underflow ratio = "), qPrintable(readout));
    // Exports follow the visible tab: the heatmap's data, not the loss curves.
    QTemporaryDir dir;
    QCOMPARE(v->exportTable(dir.filePath("heat")), QString());
    QVERIFY(lines(dir.filePath("heat.csv"))[0].startsWith("steps,recipe: layer,underflow ratio"));
    v->tabs()->setCurrentIndex(4);  // the table of runs: no plot
    QVERIFY(!v->exportPlot(dir.filePath("p")).isEmpty());
    // Stop during a long run: idle within a step or two, no validation pass, and the progress bar says so.
    v->steps()->setValue(100000);
    v->batch()->setValue(128);
    v->start();
    // Stopped once it is training (the data loaded and a step done), however long loading takes.
    QTRY_VERIFY_WITH_TIMEOUT(!v->losses().empty() && !v->losses().begin()->second.empty(), 120000);
    QElapsedTimer t;
    t.start();
    v->stop();
    QVERIFY(v->progress()->format().contains("validation skipped"));
    QVERIFY(wait_idle(v));
    QCoreApplication::processEvents();
    const double ms = static_cast<double>(t.nsecsElapsed()) / 1e6;
    qInfo("Stop to idle (CNN, batch 128): %.0f ms", ms);
    QVERIFY(v->progress()->format().startsWith("stopped at step "));
    QVERIFY(v->progress()->format().contains("validation skipped"));
    QCOMPARE(v->summary()->item(0, 3)->text(), QString("-"));  // no validation loss
  }

 private:
  QTemporaryDir dataHome_;
};

QTEST_MAIN(GuiTest)
#include "test_gui.moc"
