// A read-only model over an engine Table.
#include "table_model.hpp"

#include <cstdlib>

namespace mxlab::gui {

void TableModel::setTable(const Table* t) {
  beginResetModel();
  table_ = t;
  owned_.reset();
  endResetModel();
}

void TableModel::setTable(Table t) {
  beginResetModel();
  owned_ = std::move(t);
  table_ = &*owned_;
  endResetModel();
}

int TableModel::column(const QString& name) const {
  if (!table_) return -1;
  for (std::size_t c = 0; c < table_->columns.size(); ++c)
    if (QString::fromStdString(table_->columns[c]) == name) return static_cast<int>(c);
  return -1;
}

int TableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !table_ ? 0 : static_cast<int>(table_->rows.size());
}

int TableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() || !table_ ? 0 : static_cast<int>(table_->columns.size());
}

QVariant TableModel::data(const QModelIndex& index, int role) const {
  if (!table_ || !index.isValid()) return {};
  const auto r = static_cast<std::size_t>(index.row()), c = static_cast<std::size_t>(index.column());
  if (r >= table_->rows.size() || c >= table_->rows[r].size()) return {};
  const std::string& text = table_->rows[r][c];
  const bool numeric = c < table_->numeric.size() && table_->numeric[c];
  switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole:
      return QString::fromStdString(text);
    case Qt::TextAlignmentRole:
      return numeric ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
    case SortRole: {
      if (numeric && !text.empty()) {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end && *end == 0) return v;
      }
      return QString::fromStdString(text);
    }
    default:
      return {};
  }
}

QVariant TableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal || !table_ || section < 0 ||
      section >= static_cast<int>(table_->columns.size()))
    return QAbstractTableModel::headerData(section, orientation, role);
  return QString::fromStdString(table_->columns[static_cast<std::size_t>(section)]).replace('_', "_\n");
}

}  // namespace mxlab::gui
