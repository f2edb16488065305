// A view's results: runs an experiment (the text a view builds from its widgets) off the GUI thread,
// cancellable, keeping the previous result on screen until the new one is ready; shows its figures (drawn by
// app/plot) and tables, and exports them.
#pragma once

#include <QElapsedTimer>
#include <QFutureWatcher>
#include <QWidget>
#include <atomic>
#include <memory>
#include <optional>

#include "mxlab/core/table.hpp"
#include "mxlab/experiment/runner.hpp"

class QCustomPlot;
class QTabWidget;
class QProgressBar;
class QPushButton;
class QLabel;
class QTableView;
class QAbstractItemModel;
class QSortFilterProxyModel;
class QComboBox;

namespace mxlab::gui {

class TableModel;

/// The outcome of one evaluation, carried from the worker to the GUI thread.
struct Outcome {
  std::optional<experiment::Evaluation> evaluation;
  QString error;
  bool cancelled = false;
};

class StudyView : public QWidget {
  Q_OBJECT

 public:
  explicit StudyView(QWidget* parent = nullptr);
  ~StudyView() override;

  /// Evaluates the experiment text (replacing any run in progress, which is cancelled).
  void run(const QString& toml, const QString& name);
  /// Stops the running evaluation; the last result stays.
  void cancel();
  bool busy() const;

  /// The experiment text of what is shown (the view saved as an experiment file).
  const QString& experimentText() const { return shownText_; }
  const std::optional<experiment::Evaluation>& evaluation() const { return evaluation_; }
  /// The plot widget of figure `i` (tests compare what is drawn with the engine's numbers).
  QCustomPlot* plot(int i) const;
  int plotCount() const;
  /// The model of table `i` (rows in the engine's order; the view sorts and filters through a proxy).
  const QAbstractItemModel* table(int i) const;
  /// The cell of table `i` at (row, column name) in the engine's order, or "" (tests read the table with it).
  QString cell(int i, int row, const QString& column) const;
  /// Filters the rows of table `i` to those whose `column` equals `value` ("" = all).
  void filterTable(int i, const QString& column, const QString& value);
  /// Rows of table `i` that the filter shows.
  int shownRows(int i) const;
  /// Sorts table `i` by a column as a click on its header does.
  void sortTable(int i, const QString& column, Qt::SortOrder order);
  /// The tab on screen: a figure (0 ... plotCount() - 1), then the tables.
  QTabWidget* tabs() const { return tabs_; }
  /// Shows why the form cannot be computed (in the status line, red); the last result stays.
  void showProblem(const QString& message);
  /// Milliseconds the last redraw of every figure took.
  double lastRedrawMs() const { return redrawMs_; }

  /// Exports what the visible tab shows: its figure (PNG and PDF at BASE); its table (CSV, Markdown, LaTeX at
  /// BASE) with the rows the filter shows in the order on screen, or a figure's data (series, x, y).
  /// An error (nothing to export, a table tab for a plot) or "".
  QString exportPlot(const QString& base) const;
  QString exportTable(const QString& base) const;
  /// The table exportTable writes: the visible tab's rows as shown.
  Table visibleTable() const;

 signals:
  /// A new result is on screen.
  void finished();
  /// An evaluation failed: the message names the input at fault.
  void failed(const QString& message);

 private:
  void show(experiment::Evaluation ev);
  void onDone();

  QTabWidget* tabs_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* stop_ = nullptr;
  QLabel* status_ = nullptr;
  std::vector<QCustomPlot*> plots_;
  std::vector<TableModel*> models_;
  std::vector<QSortFilterProxyModel*> proxies_;
  std::vector<QString> tableNames_, plotNames_;
  std::optional<experiment::Evaluation> evaluation_;
  QString shownText_, pendingText_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  QFutureWatcher<Outcome>* watcher_ = nullptr;
  QElapsedTimer clock_;
  double redrawMs_ = 0;
};

}  // namespace mxlab::gui
