// mxlab-gui's window: the views as tabs, menus and shortcuts, the last session remembered.
#pragma once

#include <QMainWindow>

class QTabWidget;

namespace mxlab::gui {

class View;
class FormatExplorer;
class QuantizationLab;
class BoundsView;
class ExperimentsView;
class TrainingView;
class ValueExplorer;
class BlockView;
class GemmView;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  FormatExplorer* formatExplorer() const { return explorer_; }
  QuantizationLab* quantizationLab() const { return lab_; }
  BoundsView* bounds() const { return bounds_; }
  ExperimentsView* experiments() const { return experiments_; }
  TrainingView* training() const { return training_; }
  ValueExplorer* valueExplorer() const { return values_; }
  BlockView* blockView() const { return blocks_; }
  GemmView* gemm() const { return gemm_; }
  QTabWidget* tabs() const { return tabs_; }
  View* current() const;

  /// The current view when it is an experiment view (the Training Simulator is not), else null.
  /// Saves the current view as an experiment file; an error message, or empty.
  QString saveView(const QString& path) const;
  /// Exports the plot (PNG, PDF) or the table (CSV, Markdown, LaTeX) the tab on screen shows; an error or "".
  QString exportPlot(const QString& base) const;
  QString exportTable(const QString& base) const;
  /// Computes the first three views (what a start shows). A restored Quantization Lab input whose first
  /// computation fails is dropped like a setting that fails its check.
  void startViews();
  /// The saved settings the last start dropped, one line each (also in the status bar and on stderr).
  const QStringList& settingsWarnings() const { return warnings_; }
  /// Shows a message in the status bar (errors in red) until the next one.
  void showStatus(const QString& message, bool error = false);

 private:
  void buildMenus();
  void restore();
  /// Drops a saved setting: a warning line, and the key removed.
  void drop(const QString& key, const QString& value, const QString& why);

  QTabWidget* tabs_ = nullptr;
  FormatExplorer* explorer_ = nullptr;
  QuantizationLab* lab_ = nullptr;
  BoundsView* bounds_ = nullptr;
  ExperimentsView* experiments_ = nullptr;
  TrainingView* training_ = nullptr;
  ValueExplorer* values_ = nullptr;
  BlockView* blocks_ = nullptr;
  GemmView* gemm_ = nullptr;
  QStringList warnings_;
  bool restoredSource_ = false;
};

}  // namespace mxlab::gui
