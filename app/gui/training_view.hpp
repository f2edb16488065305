// Training Simulator: trains a model with one or more recipes off the GUI thread and shows the loss and
// accuracy curves and the per-layer gradient underflow live, from the engine's per-step metrics.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "mxlab/experiment/figure.hpp"
#include "mxlab/train/trainer.hpp"

class QComboBox;
class QSpinBox;
class QDoubleSpinBox;
class QListWidget;
class QPushButton;
class QProgressBar;
class QLabel;
class QCustomPlot;
class QTableWidget;
class QTimer;

namespace mxlab::gui {

class TrainingView : public QWidget {
  Q_OBJECT

 public:
  explicit TrainingView(QWidget* parent = nullptr);
  ~TrainingView() override;

  /// Starts training every checked recipe in turn; a run in progress is stopped first.
  void start();
  void stop();
  bool busy() const;
  /// The experiment file (job = "train") that reproduces the runs with mxlab run.
  QString experimentText() const;

  QComboBox* model() const { return model_; }
  QListWidget* recipes() const { return recipes_; }
  QSpinBox* steps() const { return steps_; }
  QSpinBox* batch() const { return batch_; }
  QCustomPlot* lossPlot() const { return loss_; }
  QTableWidget* summary() const { return summary_; }
  /// Exports the loss curves (PNG, PDF at BASE) and the table of runs (CSV, Markdown, LaTeX at BASE); an error or "".
  QString exportPlot(const QString& base) const;
  QString exportTable(const QString& base) const;
  /// Losses received so far per recipe (tests compare them with train::run).
  std::map<std::string, std::vector<double>> losses() const;

 signals:
  void finished();
  void failed(const QString& message);

 private:
  void refresh();

  QComboBox* model_ = nullptr;
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
  QTableWidget* summary_ = nullptr;
  QTimer* timer_ = nullptr;
  std::vector<experiment::Figure> figures_;  ///< as last drawn: loss, accuracy, underflow

  /// What the worker has reported, read by the GUI thread under the mutex.
  struct Run {
    std::string recipe;
    std::vector<double> step, loss, accuracy;
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> g;  ///< layer -> (underflows, nonzero)
    double test_accuracy = -1, val_loss = -1;
    std::int64_t skipped = 0;
  };
  mutable std::mutex mu_;
  std::vector<Run> runs_;
  std::int64_t done_ = 0, total_ = 0;
  QString error_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  QFutureWatcher<void>* watcher_ = nullptr;
};

}  // namespace mxlab::gui
