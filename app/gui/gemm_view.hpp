// GEMM view: the error of C = A B of block-format operands under accumulation models (docs/gemm.md), against K
// and against the accumulator's width, computed by the experiment job `gemm` (gemm::run, as `mxlab gemm`).
#pragma once

#include "views.hpp"

class QFormLayout;
class QLineEdit;
class QPushButton;

namespace mxlab::gui {

class GemmView : public View {
  Q_OBJECT
 public:
  explicit GemmView(QWidget* parent = nullptr);
  QString experimentText() const override;
  QString title() const override { return tr("GEMM"); }
  QString problem() const override;

  QComboBox* formatA() const { return a_; }
  QComboBox* formatB() const { return b_; }
  /// The presets of gemm::model_presets(), checkable; each checked one is a series.
  QListWidget* models() const { return models_; }
  /// More models, `;`-separated model strings (`safe-mac,product=bf16`, `group=4,sum=bf16`).
  QLineEdit* moreModels() const { return more_; }
  /// M = N, the rows of A and the columns of B.
  QSpinBox* size() const { return size_; }
  /// K from 2^kMin to 2^kMax (powers of two); the width plot is at 2^kMax.
  QSpinBox* kMin() const { return kMin_; }
  QSpinBox* kMax() const { return kMax_; }
  /// The accumulator widths of the width plot, from widthMin to widthMax by widthStep bits.
  QSpinBox* widthMin() const { return wMin_; }
  QSpinBox* widthMax() const { return wMax_; }
  QSpinBox* widthStep() const { return wStep_; }
  /// What a width means: an aligned adder of B bits (truncated or to nearest), or a float of 8 exponent bits
  /// and B significant bits.
  QComboBox* widthKind() const { return widthKind_; }
  /// The error plotted (a column of set gemm without its prefix) and against which product.
  QComboBox* metric() const { return metric_; }
  QComboBox* reference() const { return reference_; }
  QSpinBox* seed() const { return seed_; }

  /// The model strings the form names, in order (the checked presets, then the typed ones).
  QStringList modelList() const;
  /// The accumulator setting of width `bits` under the chosen kind (`aligned:14:trunc`, `e8m13`).
  QString accSetting(int bits) const;
  /// The column of set gemm the plots draw (`acc_normwise_rel_error`, ...).
  QString metricColumn() const;
  /// The models left out of the width plot, each with the engine's reason (a model whose own sums are rounded
  /// cannot take an aligned accumulator), one per line; or "".
  QString widthNote() const;

 private:
  /// The operands' formats and the models; the sizes, the widths and what the plots measure.
  void createOperandFields(QWidget* form);
  void createSweepFields(QWidget* form);
  /// The fields in the form, with the Compute button (returned) and the help.
  QPushButton* layoutForm(QFormLayout* f, QWidget* form);
  /// Checks as typed, the width note and a recompute on every change.
  void connectFields(QPushButton* go);
  /// The experiment's points: each model at each K (output float32), then each model that takes an accumulator
  /// setting at each width of ACCS, at the largest K.
  QString experimentPoints(const QStringList& models, const QStringList& accs) const;

  QComboBox* a_ = nullptr;
  QComboBox* b_ = nullptr;
  QLabel* aMessage_ = nullptr;
  QLabel* bMessage_ = nullptr;
  QListWidget* models_ = nullptr;
  QLineEdit* more_ = nullptr;
  QLabel* moreMessage_ = nullptr;
  QSpinBox* size_ = nullptr;
  QSpinBox* kMin_ = nullptr;
  QSpinBox* kMax_ = nullptr;
  QSpinBox* wMin_ = nullptr;
  QSpinBox* wMax_ = nullptr;
  QSpinBox* wStep_ = nullptr;
  QComboBox* widthKind_ = nullptr;
  QComboBox* metric_ = nullptr;
  QComboBox* reference_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QLabel* widthNote_ = nullptr;
};

}  // namespace mxlab::gui
