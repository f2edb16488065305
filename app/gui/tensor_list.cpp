// The tensors of a model file.
#include "tensor_list.hpp"

#include <QHeaderView>
#include <QSortFilterProxyModel>

#include "mxlab/io/datasets.hpp"
#include "mxlab/io/weights.hpp"
#include "table_model.hpp"

namespace mxlab::gui {

namespace {

/// The weight file of a registered model (installed under the data folder), else the name as a path.
Result<std::string> weight_file(const std::string& model) {
  if (auto src = find_data_source(model))
    for (const auto& f : (*src)->files)
      if (f.file.ends_with(".json") || f.file.ends_with(".safetensors") || f.file.ends_with(".wd")) return data_file(model, f.file);
  return model;
}

}  // namespace

TensorList::TensorList(QWidget* parent) : QTableView(parent) {
  table_ = new TableModel(this);
  auto* proxy = new QSortFilterProxyModel(this);
  proxy->setSourceModel(table_);
  proxy->setSortRole(TableModel::SortRole);
  setModel(proxy);
  setSortingEnabled(true);
  sortByColumn(-1, Qt::AscendingOrder);
  setSelectionBehavior(QAbstractItemView::SelectRows);
  setSelectionMode(QAbstractItemView::SingleSelection);
  verticalHeader()->setVisible(false);
  horizontalHeader()->setStretchLastSection(true);
  setToolTip(tr("The model's tensors in file order (click a header to sort); double-click one to quantize it"));
  auto pick = [this, proxy](const QModelIndex& i) {
    if (i.isValid()) emit picked(name(proxy->mapToSource(i).row()));
  };
  connect(this, &QTableView::doubleClicked, this, pick);
  connect(this, &QTableView::activated, this, pick);
}

QString TensorList::load(const QString& model) {
  model_.clear();
  table_->setTable(nullptr);
  auto path = weight_file(model.toStdString());
  if (!path) return QString::fromStdString(path.error().message);
  auto wf = WeightFile::open(*path);
  if (!wf) return QString::fromStdString(wf.error().message);
  Table t;
  t.add_column("name");
  t.add_column("shape");
  t.add_column("elements", true);
  t.add_column("dtype");
  for (const WeightInfo& w : wf->weights()) {
    std::string shape;
    for (std::size_t k = 0; k < w.shape.size(); ++k) shape += (k ? "x" : "") + std::to_string(w.shape[k]);
    t.rows.push_back({w.name, shape.empty() ? "scalar" : shape, std::to_string(w.elements),
                      w.dtype + (w.readable() ? "" : " (not read)")});
  }
  table_->setTable(std::move(t));
  resizeColumnsToContents();
  model_ = model;
  return {};
}

int TensorList::count() const { return table_->rowCount(); }

QString TensorList::name(int row) const { return table_->index(row, 0).data().toString(); }

QString exactPattern(const QString& name) {
  QString out;
  for (const QChar c : name) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace mxlab::gui
