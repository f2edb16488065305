// Training Simulator: trains a model with one or more recipes off the GUI thread and shows the loss and
// accuracy curves and the per-layer gradient underflow live, from the engine's per-step metrics.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "mxlab/experiment/figure.hpp"
#include "mxlab/train/run_record.hpp"
#include "mxlab/train/trainer.hpp"

class QCheckBox;
class QComboBox;
class QSlider;
class QSpinBox;
class QDoubleSpinBox;
class QFormLayout;
class QGroupBox;
class QListWidget;
class QPushButton;
class QProgressBar;
class QLabel;
class QCustomPlot;
class QTableWidget;
class QTabWidget;
class QTimer;
class QVBoxLayout;

namespace mxlab::gui {

class TrainingView : public QWidget {
  Q_OBJECT

 public:
  explicit TrainingView(QWidget* parent = nullptr);
  ~TrainingView() override;

  /// Starts training every checked recipe in turn; a run in progress is stopped first.
  void start();
  /// Stops the run at the end of its current step: the validation pass is skipped and the progress bar says so.
  void stop();
  bool busy() const;
  /// The experiment file (job = "train") that reproduces the runs on screen with mxlab run (before any run:
  /// the form's settings).
  QString experimentText() const;

  /// The models of train::kModelKinds, in their order.
  QComboBox* model() const { return model_; }
  /// What a model takes and the sizes its traits row says it reads, at their defaults ("images; width 16").
  static QString modelSizes(const train::ModelKindTraits& t);
  QLabel* sizes() const { return sizes_; }
  QListWidget* recipes() const { return recipes_; }
  QSpinBox* steps() const { return steps_; }
  QSpinBox* batch() const { return batch_; }
  QSpinBox* seed() const { return seed_; }
  QCustomPlot* lossPlot() const { return loss_; }
  QCustomPlot* underflowPlot() const { return underflow_; }
  QCustomPlot* validationPlot() const { return validation_; }
  /// The operand role whose underflow the heatmap draws (w, a, g, w_bp, a_bp; g at the start).
  QComboBox* role() const { return role_; }
  /// The smoothing of the loss and accuracy curves, in steps (0: none), and whether the curves are drawn as the
  /// difference from the fp32 run.
  QSlider* smoothing() const { return smoothing_; }
  QCheckBox* fromFp32() const { return fromFp32_; }
  QTableWidget* summary() const { return summary_; }
  QProgressBar* progress() const { return progress_; }
  QTabWidget* tabs() const { return tabs_; }
  /// The figures as last drawn: loss, accuracy, the role's underflow by layer and step, validation loss by step
  /// (tabs in this order, then the table of runs).
  const std::vector<experiment::Figure>& figures() const { return figures_; }
  /// Export what the visible tab shows: its figure (PNG, PDF at BASE); the table of runs, or a figure's data
  /// (CSV, Markdown, LaTeX at BASE). An error or "".
  QString exportPlot(const QString& base) const;
  QString exportTable(const QString& base) const;
  /// Opens a saved run's folder (what mxlab train --out DIR writes) and shows it beside the runs trained here, until
  /// removed; an error naming the folder and the file at fault, or "".
  QString openRun(const QString& dir);
  /// The folders of the saved runs opened (not those kept in runsFolder()), in the order they were opened (kept
  /// for the next start).
  QStringList savedRuns() const;
  /// Where every run trained here is kept, a folder per run written by the engine's train::RunRecord (as mxlab
  /// train --out DIR), and shows the runs already there (oldest first). "": runs trained here are not kept.
  void setRunsFolder(const QString& dir);
  QString runsFolder() const { return runsFolder_; }
  /// The folders of the kept runs shown (those in runsFolder()).
  QStringList keptRuns() const;
  /// Removes every saved run from the view (opened folders stay) and deletes the kept runs' folders.
  void clearSavedRuns();
  /// Losses received so far per recipe (tests compare them with train::run).
  std::map<std::string, std::vector<double>> losses() const;

 signals:
  void finished();
  void failed(const QString& message);

 private:
  void refresh();
  /// The settings of a run: the form's now, or the run on screen's.
  struct Settings {
    QString model, data;
    QStringList recipes;
    int steps = 0, batch = 0, seed = 0;
    double lr = 0;
  };
  Settings formSettings() const;
  /// The options of each run the settings ask for: one per checked recipe, in the list's order.
  static std::vector<train::TrainOptions> runOptions(const Settings& settings);

  /// The form: model, data, recipes, numbers, the Train and Stop buttons and those of the saved runs.
  QGroupBox* buildForm();
  void addSavedRunButtons(QFormLayout* f, QWidget* form);
  /// The smoothing slider and the fp32 difference box above the tabs.
  void buildCurveControls(QVBoxLayout* rl);
  /// The tabs of plots and the table of runs, then the status line and progress bar.
  void buildTabs(QVBoxLayout* rl);
  QWidget* buildUnderflowTab(QTabWidget* tabs);
  /// The timer that redraws during a run and the signals that start, stop and end one.
  void connectRun();
  /// A run over: the buttons back, the status (finished, stopped at a step, or the error).
  void runFinished();

  /// Trains one recipe in the worker thread, keeping it in RUNSFOLDER if set; false when the runs stop here
  /// (an error, or stopped).
  bool trainRun(const train::TrainData& loaded, train::TrainOptions o, std::atomic<bool>& cancel,
                const std::string& runsFolder);
  /// A step of the run training now, from the worker thread.
  void addStep(const train::StepMetrics& m, bool text);
  void setError(const QString& message);

  /// The figures the curves are drawn in.
  struct Curves {
    experiment::Figure loss, accuracy, validation;
  };
  /// The figures' titles and axes, no series yet.
  Curves emptyCurves() const;
  /// The curves and table rows of the runs trained here, then of the saved runs (mu_ held).
  void addTrainedRuns(Curves& c);
  void addSavedRuns(Curves& c);
  void setSummaryRow(int row, const QStringList& cells);
  /// The heatmap of ROLE's underflow by recipe and layer, a column per window of steps (mu_ held).
  void addUnderflow(experiment::Figure& heat, train::Role role) const;
  /// Whether a saved run's folder is one of runsFolder()'s.
  bool isKept(const train::SavedRun& r) const;

  QComboBox* model_ = nullptr;
  QLabel* sizes_ = nullptr;
  QComboBox* data_ = nullptr;
  QListWidget* recipes_ = nullptr;
  QSpinBox* steps_ = nullptr;
  QSpinBox* batch_ = nullptr;
  QDoubleSpinBox* lr_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QPushButton* start_ = nullptr;
  QPushButton* stop_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QCustomPlot* loss_ = nullptr;
  QCustomPlot* accuracy_ = nullptr;
  QCustomPlot* underflow_ = nullptr;
  QCustomPlot* validation_ = nullptr;
  QComboBox* role_ = nullptr;
  QSlider* smoothing_ = nullptr;
  QCheckBox* fromFp32_ = nullptr;
  QTableWidget* summary_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QTimer* timer_ = nullptr;
  std::vector<experiment::Figure> figures_;  ///< as last drawn: loss, accuracy, underflow, validation
  std::optional<Settings> shown_;            ///< the settings of the runs on screen
  std::vector<train::SavedRun> saved_;       ///< runs read from their folders, drawn after the runs trained here
  QString runsFolder_;                       ///< where runs trained here are kept ("": not kept)

  /// What the worker has reported, read by the GUI thread under the mutex.
  struct Run {
    std::string recipe;
    std::vector<double> step, loss, accuracy;
    std::vector<double> val_step, val_curve;  ///< the validation loss at the steps validation ran
    /// The operands' totals per window of steps (the heatmap reads the role picked).
    std::vector<train::MetricTotals> g;
    double test_accuracy = -1, val_loss = -1;
    std::int64_t skipped = 0;
  };
  mutable std::mutex mu_;
  std::vector<Run> runs_;
  std::int64_t done_ = 0, total_ = 0, window_ = 1, windows_ = 1;
  QString error_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  QFutureWatcher<void>* watcher_ = nullptr;
};

}  // namespace mxlab::gui
