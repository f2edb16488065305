// A view's results: off-thread evaluation, figures and tables.
#include "study_view.hpp"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>
#include <qcustomplot.h>

#include "mxlab/core/table.hpp"
#include "mxlab/plot/draw.hpp"
#include "mxlab/plot/plot.hpp"

namespace mxlab::gui {

namespace {

/// Numbers sort as numbers.
class TableModel : public QStandardItemModel {
 public:
  using QStandardItemModel::QStandardItemModel;
};

QStandardItem* item(const std::string& text, bool numeric) {
  auto* it = new QStandardItem(QString::fromStdString(text));
  it->setEditable(false);
  if (numeric) {
    bool ok = false;
    const double v = QString::fromStdString(text).toDouble(&ok);
    if (ok) it->setData(v, Qt::UserRole + 1);
    it->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  }
  return it;
}

}  // namespace

StudyView::StudyView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  tabs_ = new QTabWidget(this);
  layout->addWidget(tabs_, 1);
  auto* bar = new QHBoxLayout;
  status_ = new QLabel(this);
  progress_ = new QProgressBar(this);
  progress_->setMaximumWidth(260);
  progress_->setVisible(false);
  stop_ = new QPushButton(tr("Stop"), this);
  stop_->setToolTip(tr("Stop the computation; the previous result stays on screen"));
  stop_->setVisible(false);
  bar->addWidget(status_, 1);
  bar->addWidget(progress_);
  bar->addWidget(stop_);
  layout->addLayout(bar);
  connect(stop_, &QPushButton::clicked, this, &StudyView::cancel);
  watcher_ = new QFutureWatcher<Outcome>(this);
  connect(watcher_, &QFutureWatcher<Outcome>::finished, this, &StudyView::onDone);
}

StudyView::~StudyView() {
  cancel();
  watcher_->waitForFinished();
}

bool StudyView::busy() const { return watcher_->isRunning(); }

void StudyView::cancel() {
  if (cancel_) cancel_->store(true);
}

void StudyView::run(const QString& toml, const QString& name) {
  if (busy()) {
    // The running evaluation is cancelled; this one starts when it has stopped.
    cancel();
    watcher_->waitForFinished();
  }
  pendingText_ = toml;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto cancel = cancel_;
  auto* progress = progress_;
  progress_->setValue(0);
  progress_->setVisible(true);
  stop_->setVisible(true);
  status_->setText(tr("computing %1 ...").arg(name));
  clock_.start();
  const std::string text = toml.toStdString();
  const std::string path = name.toStdString();
  watcher_->setFuture(QtConcurrent::run([text, path, cancel, progress]() {
    Outcome o;
    auto e = experiment::parse_experiment(text, path);
    if (!e) {
      o.error = QString::fromStdString(e.error().message);
      return o;
    }
    Reporter r;
    r.cancel = cancel.get();
    r.on_progress = [progress](const Progress& p) {
      const int pct = p.total > 0 ? static_cast<int>(100 * p.done / p.total) : 0;
      QMetaObject::invokeMethod(progress, "setValue", Qt::QueuedConnection, Q_ARG(int, pct));
    };
    auto ev = experiment::evaluate(*e, 0, r);
    if (!ev) {
      o.cancelled = ev.error().message == "cancelled";
      o.error = QString::fromStdString(ev.error().message);
      return o;
    }
    o.evaluation = std::move(*ev);
    return o;
  }));
}

void StudyView::onDone() {
  progress_->setVisible(false);
  stop_->setVisible(false);
  Outcome o = watcher_->result();
  if (o.cancelled) {
    status_->setText(tr("stopped; showing the previous result"));
    return;
  }
  if (!o.evaluation) {
    status_->setText(tr("error"));
    emit failed(o.error);
    return;
  }
  const double seconds = static_cast<double>(clock_.elapsed()) / 1000.0;
  shownText_ = pendingText_;
  show(std::move(*o.evaluation));
  status_->setText(tr("%1 points in %2 s; figures drawn in %3 ms")
                       .arg(evaluation_->points.size())
                       .arg(seconds, 0, 'f', 2)
                       .arg(redrawMs_, 0, 'f', 1));
  emit finished();
}

void StudyView::show(experiment::Evaluation ev) {
  const int current = tabs_->currentIndex();
  // Reuse the widgets where the figure or table keeps its name, so the view does not flicker.
  std::vector<QString> plotNames, tableNames;
  for (const auto& [name, f] : ev.figures) plotNames.push_back(QString::fromStdString(name));
  for (const auto& [name, t] : ev.tables) tableNames.push_back(QString::fromStdString(name));
  if (plotNames != plotNames_ || tableNames != tableNames_) {
    tabs_->clear();
    plots_.clear();
    models_.clear();
    proxies_.clear();
    for (const auto& n : plotNames) {
      auto* p = new QCustomPlot(tabs_);
      p->setMinimumSize(320, 240);
      p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
      plots_.push_back(p);
      tabs_->addTab(p, n);
    }
    for (const auto& n : tableNames) {
      auto* view = new QTableView(tabs_);
      auto* model = new TableModel(view);
      auto* proxy = new QSortFilterProxyModel(view);
      proxy->setSourceModel(model);
      proxy->setSortRole(Qt::UserRole + 1);
      view->setModel(proxy);
      view->setSortingEnabled(true);
      view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
      view->verticalHeader()->setVisible(false);
      models_.push_back(model);
      proxies_.push_back(proxy);
      tabs_->addTab(view, n + tr(" (table)"));
    }
    plotNames_ = plotNames;
    tableNames_ = tableNames;
  }
  QElapsedTimer t;
  t.start();
  for (std::size_t i = 0; i < ev.figures.size(); ++i) {
    // Interactive: fonts at screen size.
    plot::draw(*plots_[i], ev.figures[i].second, 12);
  }
  redrawMs_ = static_cast<double>(t.nsecsElapsed()) / 1e6;
  for (std::size_t i = 0; i < ev.tables.size(); ++i) {
    const Table& tb = ev.tables[i].second;
    QStandardItemModel* m = models_[i];
    m->clear();
    QStringList headers;
    for (const auto& c : tb.columns) headers << QString::fromStdString(c);
    m->setHorizontalHeaderLabels(headers);
    for (const auto& row : tb.rows) {
      QList<QStandardItem*> items;
      for (std::size_t c = 0; c < row.size(); ++c) {
        const bool numeric = c < tb.numeric.size() && tb.numeric[c];
        QStandardItem* it = item(row[c], numeric);
        if (!numeric) it->setData(QString::fromStdString(row[c]), Qt::UserRole + 1);
        items << it;
      }
      m->appendRow(items);
    }
  }
  if (current >= 0 && current < tabs_->count()) tabs_->setCurrentIndex(current);
  evaluation_ = std::move(ev);
}

QCustomPlot* StudyView::plot(int i) const { return i >= 0 && i < plotCount() ? plots_[static_cast<std::size_t>(i)] : nullptr; }
int StudyView::plotCount() const { return static_cast<int>(plots_.size()); }
const QStandardItemModel* StudyView::table(int i) const {
  return i >= 0 && i < static_cast<int>(models_.size()) ? models_[static_cast<std::size_t>(i)] : nullptr;
}

void StudyView::filterTable(int i, const QString& column, const QString& value) {
  if (i < 0 || i >= static_cast<int>(proxies_.size())) return;
  QSortFilterProxyModel* p = proxies_[static_cast<std::size_t>(i)];
  int col = -1;
  for (int c = 0; c < models_[static_cast<std::size_t>(i)]->columnCount(); ++c)
    if (models_[static_cast<std::size_t>(i)]->horizontalHeaderItem(c)->text() == column) col = c;
  p->setFilterKeyColumn(col < 0 ? 0 : col);
  p->setFilterRole(Qt::DisplayRole);
  p->setFilterRegularExpression(value.isEmpty() ? QString() : "^" + QRegularExpression::escape(value) + "$");
}

int StudyView::shownRows(int i) const {
  return i >= 0 && i < static_cast<int>(proxies_.size()) ? proxies_[static_cast<std::size_t>(i)]->rowCount() : 0;
}

QString StudyView::exportPlot(const QString& base) const {
  if (!evaluation_ || evaluation_->figures.empty()) return tr("no plot to export");
  int i = tabs_->currentIndex();
  if (i < 0 || i >= static_cast<int>(evaluation_->figures.size())) i = 0;
  if (auto err = plot::save_figure(evaluation_->figures[static_cast<std::size_t>(i)].second, base.toStdString()))
    return QString::fromStdString(err->message);
  return {};
}

QString StudyView::exportTable(const QString& base) const {
  if (!evaluation_ || evaluation_->tables.empty()) return tr("no table to export");
  int i = tabs_->currentIndex() - static_cast<int>(evaluation_->figures.size());
  if (i < 0 || i >= static_cast<int>(evaluation_->tables.size())) i = 0;
  const Table& t = evaluation_->tables[static_cast<std::size_t>(i)].second;
  const std::string b = base.toStdString();
  for (const auto& [ext, text] : {std::pair{".csv", to_csv(t)}, std::pair{".md", to_markdown(t)}, std::pair{".tex", to_latex(t)}})
    if (auto err = write_file_atomic(b + ext, text)) return QString::fromStdString(err->message);
  return {};
}

}  // namespace mxlab::gui
