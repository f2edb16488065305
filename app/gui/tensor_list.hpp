// The tensors of a model file (name, shape, elements, stored type), as its header lists them, to pick the
// Quantization Lab's layer from, as Netron lists them.
#pragma once

#include <QTableView>

namespace mxlab::gui {

class TableModel;

class TensorList : public QTableView {
  Q_OBJECT

 public:
  explicit TensorList(QWidget* parent = nullptr);
  /// Lists the tensors of a registered model (mxlab data list) or a weight file; an error naming it, or "".
  QString load(const QString& model);
  /// The model listed ("" when none).
  const QString& modelName() const { return model_; }
  /// Tensors listed.
  int count() const;
  /// The name of tensor `row` in file order.
  QString name(int row) const;

 signals:
  /// A tensor was picked (double-click or Enter): its name.
  void picked(const QString& name);

 private:
  TableModel* table_ = nullptr;
  QString model_;
};

/// A tensor name as a glob that matches only that name (*, ?, [ and \ quoted).
QString exactPattern(const QString& name);

}  // namespace mxlab::gui
