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
  QTabWidget* tabs() const { return tabs_; }
  View* current() const;

  /// The current view when it is an experiment view (the Training Simulator is not), else null.
  /// Saves the current view as an experiment file; an error message, or empty.
  QString saveView(const QString& path) const;

 private:
  void buildMenus();
  void restore();
  void showError(const QString& message);

  QTabWidget* tabs_ = nullptr;
  FormatExplorer* explorer_ = nullptr;
  QuantizationLab* lab_ = nullptr;
  BoundsView* bounds_ = nullptr;
  ExperimentsView* experiments_ = nullptr;
  TrainingView* training_ = nullptr;
};

}  // namespace mxlab::gui
