// mxlab-gui: explore formats, quantization, bounds and experiment files.
//   mxlab-gui [--tab N] [--open FILE.toml] [--screenshots DIR]
//   (--screenshots: computes each view, saves DIR/gui-VIEW.png, exits)
#include <QApplication>
#include <QDir>
#include <QSpinBox>
#include <QTabWidget>
#include <QTimer>

#include "main_window.hpp"
#include "training_view.hpp"
#include "views.hpp"

int main(int argc, char** argv) {
  QApplication::setHighDpiScaleFactorRoundingPolicy(Qt::HighDpiScaleFactorRoundingPolicy::PassThrough);
  QApplication app(argc, argv);
  QApplication::setOrganizationName("mxlab");
  QApplication::setApplicationName("mxlab-gui");
  mxlab::gui::MainWindow window;
  window.show();
  const QStringList args = app.arguments();
  const int shots = static_cast<int>(args.indexOf("--screenshots"));
  if (shots < 0 || shots + 1 >= args.size()) {
    for (int i = 0; i < 3; ++i) static_cast<mxlab::gui::View*>(window.tabs()->widget(i))->recompute();
    // --tab N opens view N (0: Format Explorer ... 4: Experiments); --open FILE runs an experiment file;
    // --train starts the Training Simulator with its defaults.
    if (args.contains("--train")) window.training()->start();
    if (const int t = static_cast<int>(args.indexOf("--tab")); t >= 0 && t + 1 < args.size())
      window.tabs()->setCurrentIndex(args[t + 1].toInt());
    if (const int o = static_cast<int>(args.indexOf("--open")); o >= 0 && o + 1 < args.size()) {
      window.tabs()->setCurrentWidget(window.experiments());
      window.experiments()->open(args[o + 1]);
    }
    return app.exec();
  }
  // Screenshots: each view computed, shown, grabbed.
  const QString dir = args[shots + 1];
  QDir().mkpath(dir);
  window.resize(1400, 860);
  const QStringList names = {"format-explorer", "quantization-lab", "bounds", "training", "experiments"};
  auto* index = new int(0);
  std::function<void()> next = [&] {
    if (*index >= 5) {
      app.quit();
      return;
    }
    window.tabs()->setCurrentIndex(*index);
    if (*index == 3) {
      // A short run of the Training Simulator's defaults.
      window.training()->steps()->setValue(150);
      QObject::connect(window.training(), &mxlab::gui::TrainingView::finished, &window, [&] {
        QObject::disconnect(window.training(), nullptr, &window, nullptr);
        QTimer::singleShot(300, &window, [&] {
          window.grab().save(dir + "/gui-" + names[*index] + ".png");
          ++*index;
          next();
        });
      });
      window.training()->start();
      return;
    }
    auto* view = static_cast<mxlab::gui::View*>(window.tabs()->widget(*index));
    QObject::connect(view->study(), &mxlab::gui::StudyView::finished, &window, [&, view] {
      QObject::disconnect(view->study(), nullptr, &window, nullptr);
      QTimer::singleShot(300, &window, [&] {
        window.grab().save(dir + "/gui-" + names[*index] + ".png");
        ++*index;
        next();
      });
    });
    if (*index == 4) static_cast<mxlab::gui::ExperimentsView*>(view)->open(MXLAB_SOURCE_DIR "/experiments/gap_error.toml");
    else view->recompute();
  };
  QTimer::singleShot(0, &window, next);
  const int rc = app.exec();
  delete index;
  return rc;
}
