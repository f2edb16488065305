// mxlab-gui: explore formats, quantization, bounds and experiment files.
//   mxlab-gui [--tab N] [--open FILE.toml] [--train] [--screenshots DIR]
// A bad command line is refused as mxlab refuses bad input: one line on stderr naming the problem, exit code 2,
// and no window.
#include <QApplication>
#include <QComboBox>
#include <QCommandLineParser>
#include <QDir>
#include <QLineEdit>
#include <QSettings>
#include <QSlider>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTimer>
#include <cstdio>
#include <functional>
#include <variant>

#include "mxlab/core/memory.hpp"
#include "main_window.hpp"
#include "block_view.hpp"
#include "gemm_view.hpp"
#include "training_view.hpp"
#include "value_view.hpp"
#include "views.hpp"

namespace {

constexpr int kExitBadInput = 2;

const char* const kUsage =
    "usage: mxlab-gui [--tab N] [--open FILE.toml] [--train] [--screenshots DIR]\n"
    "\n"
    "The mxlab workbench's window (docs/gui.md): Format Explorer, Quantization Lab, Bounds, Training\n"
    "Simulator, Experiments, Value Explorer, Block and GEMM, each computed by the engine.\n"
    "\n"
    "  --tab N            open view N: 0 Format Explorer, 1 Quantization Lab, 2 Bounds,\n"
    "                     3 Training Simulator, 4 Experiments, 5 Value Explorer, 6 Block, 7 GEMM\n"
    "  --open FILE.toml   run an experiment file in the Experiments view\n"
    "  --train            start the Training Simulator with its settings\n"
    "  --screenshots DIR  compute each view, save DIR/gui-VIEW.png and exit\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Qt's own options (-platform NAME, -style NAME, ...) are passed to Qt.\n";

/// What the command line asks for.
struct CommandLine {
  int tab = -1;
  QString open, screenshots;
  bool train = false, help = false;
};

/// Parses the command line before any window exists; an error is the one line to print.
std::variant<CommandLine, QString> parse(const QStringList& args) {
  QCommandLineParser p;
  p.setSingleDashWordOptionMode(QCommandLineParser::ParseAsLongOptions);
  const QCommandLineOption help(QStringList{"h", "help"}), tab("tab", "", "N"), open("open", "", "FILE"), train("train"),
      shots("screenshots", "", "DIR");
  p.addOptions({help, tab, open, train, shots});
  // Qt's own options, which QApplication takes out of the arguments afterwards.
  for (const char* o : {"platform", "platformpluginpath", "platformtheme", "plugin", "qwindowgeometry", "qwindowicon",
                        "qwindowtitle", "style", "stylesheet", "session", "display", "geometry"})
    p.addOption(QCommandLineOption(o, "", "VALUE"));
  for (const char* o : {"reverse", "widgetcount", "nograb", "dograb", "sync"}) p.addOption(QCommandLineOption(o));
  if (!p.parse(args)) {
    const QStringList unknown = p.unknownOptionNames();
    return (unknown.isEmpty() ? p.errorText() : QString("unknown option '%1%2'").arg(unknown.first().size() > 1 ? "--" : "-", unknown.first())) +
           " (mxlab-gui --help lists the options)";
  }
  if (!p.positionalArguments().isEmpty())
    return QString("unexpected argument '%1' (mxlab-gui --help lists the options)").arg(p.positionalArguments().first());
  CommandLine c;
  c.help = p.isSet(help);
  c.train = p.isSet(train);
  if (p.isSet(tab)) {
    bool ok = false;
    c.tab = p.value(tab).toInt(&ok);
    if (!ok || c.tab < 0 || c.tab > 7) return QString("option '--tab %1': expected a view number from 0 to 7").arg(p.value(tab));
  }
  if (p.isSet(open)) {
    c.open = p.value(open);
    if (const QString err = mxlab::gui::ExperimentsView::check(c.open); !err.isEmpty()) return "option '--open': " + err;
  }
  if (p.isSet(shots)) {
    c.screenshots = p.value(shots);
    if (c.screenshots.isEmpty() || !QDir().mkpath(c.screenshots))
      return QString("option '--screenshots %1': cannot create the folder").arg(c.screenshots);
  }
  return c;
}

/// Computes each view, grabs it into DIR/gui-VIEW.png and quits; then a few states of note: the training
/// run's underflow heatmap, a format too wide to list whole, a format typed half-way, the Value Explorer,
/// one NVFP4 block and the GEMM view's two plots.
int screenshots(QApplication& app, mxlab::gui::MainWindow& window, const QString& dir) {
  using namespace mxlab::gui;
  window.resize(1400, 860);
  const QStringList names = {"format-explorer", "quantization-lab", "bounds", "training", "experiments"};
  int index = 0;
  std::function<void()> next;
  auto grab_then_next = [&] {
    QTimer::singleShot(300, &window, [&] {
      window.grab().save(dir + "/gui-" + names[index] + ".png");
      ++index;
      next();
    });
  };
  auto shot = [&](const QString& name) { window.grab().save(dir + "/gui-" + name + ".png"); };
  next = [&] {
    if (index >= 5) {
      window.tabs()->setCurrentWidget(window.training());
      window.training()->tabs()->setCurrentIndex(2);
      shot("training-underflow");
      window.tabs()->setCurrentWidget(window.formatExplorer());
      FormatExplorer* v = window.formatExplorer();
      QObject::connect(v->study(), &StudyView::finished, &window, [&, v] {
        QObject::disconnect(v->study(), nullptr, &window, nullptr);
        v->study()->tabs()->setCurrentIndex(v->study()->plotCount());
        QTimer::singleShot(300, &window, [&, v] {
          shot("float32");
          v->format()->setCurrentText("e3m");
          shot("typing");
          window.tabs()->setCurrentWidget(window.valueExplorer());
          window.valueExplorer()->format()->setCurrentText("e4m3");
          window.valueExplorer()->value()->setText("0.3");
          shot("value-explorer");
          BlockView* b = window.blockView();
          window.tabs()->setCurrentWidget(b);
          QObject::connect(b, &BlockView::finished, &window, [&] {
            QTimer::singleShot(300, &window, [&] {
              shot("block");
              GemmView* g = window.gemm();
              window.tabs()->setCurrentWidget(g);
              QObject::connect(g->study(), &StudyView::finished, &window, [&, g] {
                QTimer::singleShot(300, &window, [&, g] {
                  shot("gemm");
                  g->study()->tabs()->setCurrentIndex(1);
                  QTimer::singleShot(300, &window, [&] {
                    shot("gemm-width");
                    app.quit();
                  });
                });
              });
              g->recompute();
            });
          });
          b->format()->setCurrentText("nvfp4");
          b->block()->setValue(5);
          b->recompute();
        });
      });
      v->overlay()->setCurrentText("(none)");
      v->format()->setCurrentText("float32");
      v->recompute();
      return;
    }
    window.tabs()->setCurrentIndex(index);
    if (index == 3) {
      // A short run of the Training Simulator's settings.
      window.training()->steps()->setValue(150);
      window.training()->smoothing()->setValue(9);  // as TensorBoard shows curves: smoothed, the steps faint
      QObject::connect(window.training(), &mxlab::gui::TrainingView::finished, &window, [&] {
        QObject::disconnect(window.training(), nullptr, &window, nullptr);
        grab_then_next();
      });
      window.training()->start();
      return;
    }
    auto* view = static_cast<mxlab::gui::View*>(window.tabs()->widget(index));
    QObject::connect(view->study(), &mxlab::gui::StudyView::finished, &window, [&, view] {
      QObject::disconnect(view->study(), nullptr, &window, nullptr);
      grab_then_next();
    });
    if (index == 4) static_cast<mxlab::gui::ExperimentsView*>(view)->open(MXLAB_SOURCE_DIR "/experiments/gap_error.toml");
    else view->recompute();
  };
  QTimer::singleShot(0, &window, next);
  return app.exec();
}

}  // namespace

int main(int argc, char** argv) {
  mxlab::keep_freed_memory();
  QStringList args;
  for (int i = 0; i < argc; ++i) args << QString::fromLocal8Bit(argv[i]);
  const auto parsed = parse(args);
  if (const auto* err = std::get_if<QString>(&parsed)) {
    std::fprintf(stderr, "mxlab-gui: %s\n", err->toLocal8Bit().constData());
    return kExitBadInput;
  }
  const CommandLine& cl = std::get<CommandLine>(parsed);
  if (cl.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  QApplication::setHighDpiScaleFactorRoundingPolicy(Qt::HighDpiScaleFactorRoundingPolicy::PassThrough);
  QApplication app(argc, argv);
  QApplication::setOrganizationName("mxlab");
  // Screenshots show the defaults: a session of their own, cleared, so they neither read nor change the user's.
  QApplication::setApplicationName(cl.screenshots.isEmpty() ? "mxlab-gui" : "mxlab-gui-screenshots");
  if (!cl.screenshots.isEmpty()) {
    QSettings().clear();
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)).removeRecursively();  // its kept runs
  }
  mxlab::gui::MainWindow window;
  window.show();
  if (!cl.screenshots.isEmpty()) return screenshots(app, window, cl.screenshots);
  window.startViews();
  if (cl.train) window.training()->start();
  if (cl.tab >= 0) window.tabs()->setCurrentIndex(cl.tab);
  if (!cl.open.isEmpty()) {
    window.tabs()->setCurrentWidget(window.experiments());
    // Checked above; a file changed since, or one whose computation fails, is reported in the view and on stderr.
    auto* once = new QObject(&window);
    QObject::connect(window.experiments()->study(), &mxlab::gui::StudyView::finished, once, [once] { once->deleteLater(); });
    QObject::connect(window.experiments()->study(), &mxlab::gui::StudyView::failed, once, [once](const QString& m) {
      std::fprintf(stderr, "mxlab-gui: option '--open': %s\n", m.toLocal8Bit().constData());
      once->deleteLater();
    });
    if (const QString err = window.experiments()->open(cl.open); !err.isEmpty()) {
      window.showStatus(err, true);
      std::fprintf(stderr, "mxlab-gui: option '--open': %s\n", err.toLocal8Bit().constData());
    }
  }
  return app.exec();
}
