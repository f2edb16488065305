// mxlab-gui driven under Qt's offscreen platform: each view computes, and what it draws and tabulates is
// compared with the engine's own numbers (enumerate_codes, ops::analyze, exact bounds).
#include <QComboBox>
#include <QLineEdit>
#include <QListWidget>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTemporaryDir>
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
#include "training_view.hpp"
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

int column(const QStandardItemModel* m, const QString& name) {
  for (int c = 0; c < m->columnCount(); ++c)
    if (m->horizontalHeaderItem(c)->text() == name) return c;
  return -1;
}

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("mxlab-test");
    QCoreApplication::setApplicationName("mxlab-gui-test");
    QSettings().clear();
  }

  void formatExplorerShowsEveryCode() {
    MainWindow w;
    FormatExplorer* v = w.formatExplorer();
    v->overlay()->setCurrentText("(none)");
    v->format()->setCurrentText("e2m1");
    v->recompute();
    QVERIFY(wait_result(v));
    // The code table holds every code of E2M1 with the engine's exact values.
    const Format f = *parse_format("e2m1");
    const auto codes = enumerate_codes(f, 0, f.code_count() - 1);
    const QStandardItemModel* t = v->study()->table(0);
    QVERIFY(t);
    QCOMPARE(t->rowCount(), static_cast<int>(codes.size()));
    const int value = column(t, "value");
    QVERIFY(value >= 0);
    for (int r = 0; r < t->rowCount(); ++r) QCOMPARE(t->item(r, value)->text().toDouble(), codes[static_cast<std::size_t>(r)].value);
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
    const QStandardItemModel* t = v->study()->table(0);
    QVERIFY(t);
    QCOMPARE(t->rowCount(), 2);
    ops::InputRequest req;
    req.input = "gen:laplace:0,1";
    req.shape = "65536";
    req.seed = 7;
    auto src = ops::open_tensor(req);
    QVERIFY(src.ok());
    for (int r = 0; r < 2; ++r) {
      const std::string name = t->item(r, column(t, "format"))->text().toStdString();
      auto f = ops::block_format(name, {}, [](std::string_view n) { return std::string(n); });
      QVERIFY(f.ok());
      auto a = ops::analyze({*f}, *src);
      QVERIFY(a.ok());
      // The table rounds to 4 significant digits: compare with the engine's value printed the same way.
      QCOMPARE(t->item(r, column(t, "sqnr_db"))->text(), QString::number(a->front().total.sqnr_db(), 'g', 4));
      QCOMPARE(t->item(r, column(t, "bits_per_element"))->text(), QString::number(a->front().bits_per_element, 'g', 4));
    }
    // Four figures; the exponent-gap histogram counts every nonzero element once per format.
    QCOMPARE(v->study()->plotCount(), 4);
    QCustomPlot* gaps = v->study()->plot(2);
    double total = 0;
    auto* bars = qobject_cast<QCPBars*>(gaps->plottable(0));
    QVERIFY(bars);
    for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) total += it->value;
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
    const QStandardItemModel* t = v->study()->table(0);
    QCOMPARE(t->rowCount(), 17);  // gaps 0..16
    // MXINT8's bound at gap 1 is 1/65 exactly.
    QCOMPARE(t->item(1, column(t, "mxint8"))->text(), QString("1/65"));
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

  void trainingSimulatorShowsTheEnginesLosses() {
    // Fashion-MNIST from its Debian package, installed into a scratch folder the views read.
    const QString dir = QDir::temp().filePath("mxlab_gui_test_data");
    FetchOptions fo;
    fo.dir = dir.toStdString();
    if (!fetch_data({"fashion-mnist"}, fo).ok()) QSKIP("the Debian package dataset-fashion-mnist is not installed");
    qputenv("MXLAB_DATA_DIR", dir.toUtf8());
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
    for (const char* name : {"fp32", "mxfp8"}) {
      train::TrainOptions o;
      o.recipe = *train::recipe_preset(name);
      o.steps = 15;
      o.batch = 32;
      o.optimizer.lr = 1e-3;
      o.seed = 1;
      auto r = train::run_training(*data, o);
      QVERIFY(r.ok());
      QCOMPARE(losses.at(o.recipe.name), r->losses);
    }
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
};

QTEST_MAIN(GuiTest)
#include "test_gui.moc"
