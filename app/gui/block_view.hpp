// Block view: one block of a tensor quantized with a block format (MXFP4, NVFP4, ...): its shared scale and
// code, every element's input, code, dequantized value and exact error, and which elements underflowed (a
// nonzero input flushed to zero) or saturated (clamped). The engine computes it (ops::block_detail) off the GUI
// thread; Stop cancels it.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <atomic>
#include <memory>
#include <optional>

#include "mxlab/experiment/figure.hpp"
#include "mxlab/ops/inspect.hpp"

class QComboBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTimer;
class QVBoxLayout;
class QCustomPlot;

namespace mxlab::gui {

class BlockView : public QWidget {
  Q_OBJECT

 public:
  explicit BlockView(QWidget* parent = nullptr);
  ~BlockView() override;

  QLineEdit* source() const { return source_; }
  QSpinBox* sizeLog2() const { return size_; }
  QSpinBox* seed() const { return seed_; }
  QComboBox* format() const { return format_; }
  QSpinBox* block() const { return block_; }
  /// The element table: one row per element of the block (columns: element, input, code, bits, value, flag
  /// ("underflow", "saturated" or empty), error (exact), relative error).
  QTableWidget* elements() const { return table_; }
  QLabel* summary() const { return summary_; }
  QCustomPlot* plot() const { return plot_; }
  /// The block on screen, as the engine gave it.
  const std::optional<ops::BlockDetail>& detail() const { return detail_; }
  bool busy() const;
  /// Exports the plot (PNG, PDF) or the element table (CSV, Markdown, LaTeX) at BASE; an error or "".
  QString exportPlot(const QString& base) const;
  QString exportTable(const QString& base) const;

 public slots:
  /// Computes the block the form names (off the GUI thread; a computation under way is cancelled first).
  void recompute();
  void cancel();

 signals:
  void finished();
  void failed(const QString& message);

 private:
  /// The form (input, format, block, the Show button); the summary, plot, table and status under it.
  QGroupBox* buildForm();
  void buildResults(QVBoxLayout* rl);
  /// Checks as typed and a recompute shortly after each change.
  void connectFields();
  /// A computation over: the block shown, or why not.
  void computed();
  void show(ops::BlockDetail d);
  /// Why the form does not describe a block, or "" (also shown on the field at fault).
  QString problem() const;

  QLineEdit* source_ = nullptr;
  QLabel* sourceMessage_ = nullptr;
  QSpinBox* size_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QComboBox* format_ = nullptr;
  QLabel* formatMessage_ = nullptr;
  QSpinBox* block_ = nullptr;
  QLabel* summary_ = nullptr;
  QLabel* status_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* stop_ = nullptr;
  QTableWidget* table_ = nullptr;
  QCustomPlot* plot_ = nullptr;
  QTimer* debounce_ = nullptr;
  experiment::Figure figure_;
  std::optional<ops::BlockDetail> detail_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  struct Outcome {
    std::optional<ops::BlockDetail> detail;
    QString error;
    bool cancelled = false;
  };
  QFutureWatcher<Outcome>* watcher_ = nullptr;
};

}  // namespace mxlab::gui
