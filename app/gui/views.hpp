// The GUI's views. Each builds the experiment text of what it shows from its widgets, so the engine computes
// every number (through the same entry points as `mxlab run`) and the view can be saved as an experiment file.
#pragma once

#include <QWidget>

#include "study_view.hpp"

class QComboBox;
class QLineEdit;
class QSpinBox;
class QListWidget;
class QLabel;
class QTimer;

namespace mxlab::gui {

class TensorList;

/// A view: a form that describes a study, and the study's results.
class View : public QWidget {
  Q_OBJECT

 public:
  using QWidget::QWidget;
  /// The experiment text of the form's current state.
  virtual QString experimentText() const = 0;
  virtual QString title() const = 0;
  StudyView* study() const { return study_; }
  /// The name errors give the experiment (relative paths are read from its folder).
  virtual QString sourceName() const { return title().toLower().replace(' ', '_') + ".toml"; }
  /// Why the form does not describe a study (a field's check failed; shown on the field), or empty.
  virtual QString problem() const { return {}; }
  /// The line under the form that shows why the last computation failed.
  QLabel* formMessage() const { return formMessage_; }

 public slots:
  /// Recomputes from the form (off the GUI thread); a recompute still waiting for edits to settle is dropped.
  /// A form with a problem is not computed: the problem stays on its field and in the status line.
  void recompute();

 protected:
  /// Lays out the form on the left and the results on the right.
  void build(QWidget* form);
  /// Recomputes once the edits pause (the running computation is cancelled when the new one starts).
  void later();
  StudyView* study_ = nullptr;
  QTimer* debounce_ = nullptr;  ///< the pending recompute of edits still settling
  QLabel* formMessage_ = nullptr;
};

/// Format Explorer: any format string; code points, number line, density per binade; an overlay format.
class FormatExplorer : public View {
  Q_OBJECT
 public:
  explicit FormatExplorer(QWidget* parent = nullptr);
  QString experimentText() const override;
  QString title() const override { return tr("Format Explorer"); }
  QComboBox* format() const { return format_; }
  QComboBox* overlay() const { return overlay_; }
  QComboBox* classFilter() const { return class_; }
  /// The codes listed, FIRST:LAST (empty: every code); filled in for formats too wide to list whole.
  QLineEdit* codes() const { return range_; }
  /// What the codes field says about the format's width (a format too wide to enumerate), or "".
  QString codesNote() const;
  QString problem() const override;

 private:
  /// A format too wide to list whole gets a range of codes (from the code of 1.0), a narrow one every code.
  void fitRange();

  QComboBox* format_ = nullptr;
  QComboBox* overlay_ = nullptr;
  QComboBox* class_ = nullptr;
  QLineEdit* range_ = nullptr;
  QLabel* rangeNote_ = nullptr;
  bool autoRange_ = false;  ///< the range was filled in, not typed
  QLabel* formatMessage_ = nullptr;
  QLabel* overlayMessage_ = nullptr;
};

/// Quantization Lab: an input, several block formats and a profile; histograms, errors and metrics.
class QuantizationLab : public View {
  Q_OBJECT
 public:
  explicit QuantizationLab(QWidget* parent = nullptr);
  QString experimentText() const override;
  QString title() const override { return tr("Quantization Lab"); }
  QLineEdit* source() const { return source_; }
  QSpinBox* sizeLog2() const { return size_; }
  QSpinBox* seed() const { return seed_; }
  QListWidget* formats() const { return formats_; }
  QListWidget* profiles() const { return profiles_; }
  /// The tensors of the model a `model:NAME[:PATTERN]` input names (hidden for other inputs).
  TensorList* tensors() const { return tensors_; }
  QString problem() const override;

 private:
  /// Lists the tensors of the model the input names, when it names one.
  void listTensors();

  QLineEdit* source_ = nullptr;
  QLabel* sourceMessage_ = nullptr;
  TensorList* tensors_ = nullptr;
  QSpinBox* size_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QListWidget* formats_ = nullptr;
  QListWidget* profiles_ = nullptr;
};

/// Bounds: two block formats; worst-case error per exponent gap, analytic = enumerated, crossovers marked.
class BoundsView : public View {
  Q_OBJECT
 public:
  explicit BoundsView(QWidget* parent = nullptr);
  QString experimentText() const override;
  QString title() const override { return tr("Bounds"); }
  QComboBox* formatA() const { return a_; }
  QComboBox* formatB() const { return b_; }
  QString problem() const override;

 private:
  QComboBox* a_ = nullptr;
  QComboBox* b_ = nullptr;
  QLabel* aMessage_ = nullptr;
  QLabel* bMessage_ = nullptr;
  QSpinBox* maxGap_ = nullptr;
};

/// Experiments: open an experiment file, run it, browse its tables and plots.
class ExperimentsView : public View {
  Q_OBJECT
 public:
  explicit ExperimentsView(QWidget* parent = nullptr);
  QString experimentText() const override;
  QString title() const override { return tr("Experiments"); }
  QString sourceName() const override { return file_; }
  /// Reads an experiment file and runs it; an error names the file.
  QString open(const QString& path);
  /// Why the file cannot be opened as one experiment (unreadable, malformed, a batch), naming it; or empty.
  static QString check(const QString& path);

 private:
  QLabel* path_ = nullptr;
  QLabel* description_ = nullptr;
  QString file_, text_;
};

}  // namespace mxlab::gui
