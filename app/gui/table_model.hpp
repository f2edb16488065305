// A read-only Qt model over an engine Table: cells are handed to the view as it draws them, so a table of
// 65,536 codes is shown at once instead of being copied into item objects first.
#pragma once

#include <QAbstractTableModel>
#include <optional>
#include <vector>

#include "mxlab/core/table.hpp"

namespace mxlab::gui {

class TableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  /// The role sorting uses: a number for numeric cells that read as one, else the text.
  static constexpr int SortRole = Qt::UserRole + 1;

  using QAbstractTableModel::QAbstractTableModel;
  /// Shows `t`, which must outlive its use here (until the next setTable), or nothing.
  void setTable(const Table* t);
  /// Shows a table the model keeps.
  void setTable(Table t);
  const Table* table() const { return table_; }
  /// The column with this name, or -1.
  int column(const QString& name) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  /// Column names break after underscores onto more lines, so wide tables fit.
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  const Table* table_ = nullptr;
  std::optional<Table> owned_;
};

}  // namespace mxlab::gui
