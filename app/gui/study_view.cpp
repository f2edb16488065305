// A view's results: off-thread evaluation, figures and tables.
#include "study_view.hpp"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>
#include <qcustomplot.h>

#include "mxlab/core/table.hpp"
#include "mxlab/plot/draw.hpp"
#include "mxlab/plot/plot.hpp"
#include "plot_tools.hpp"
#include "table_model.hpp"

namespace mxlab::gui {

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

void StudyView::showProblem(const QString& message) {
  status_->setStyleSheet(QStringLiteral("color: #c62828;"));
  status_->setText(message);
  status_->setToolTip(message);
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
    showProblem(o.error);
    emit failed(o.error);
    return;
  }
  status_->setStyleSheet({});
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
      const std::size_t index = plots_.size();
      addPlotTools(p, [this, index]() -> const experiment::Figure* {
        return evaluation_ && index < evaluation_->figures.size() ? &evaluation_->figures[index].second : nullptr;
      });
      plots_.push_back(p);
      tabs_->addTab(p, n);
    }
    for (const auto& n : tableNames) {
      auto* view = new QTableView(tabs_);
      auto* model = new TableModel(view);
      auto* proxy = new QSortFilterProxyModel(view);
      proxy->setSourceModel(model);
      proxy->setSortRole(TableModel::SortRole);
      view->setModel(proxy);
      view->setSortingEnabled(true);
      view->sortByColumn(-1, Qt::AscendingOrder);  // the engine's order until a header is clicked
      view->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
      view->verticalHeader()->setVisible(false);
      view->verticalHeader()->setDefaultSectionSize(view->fontMetrics().height() + 6);
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
  // The models show the evaluation's tables in place (no copy): detached while it is replaced.
  for (TableModel* m : models_) m->setTable(nullptr);
  evaluation_ = std::move(ev);
  for (std::size_t i = 0; i < evaluation_->tables.size(); ++i) {
    models_[i]->setTable(&evaluation_->tables[i].second);
    auto* view = qobject_cast<QTableView*>(tabs_->widget(static_cast<int>(plots_.size() + i)));
    // Widths from the header and the first rows (a long table is not measured to its end).
    view->horizontalHeader()->setResizeContentsPrecision(200);
    view->resizeColumnsToContents();
  }
  if (current >= 0 && current < tabs_->count()) tabs_->setCurrentIndex(current);
}

QCustomPlot* StudyView::plot(int i) const { return i >= 0 && i < plotCount() ? plots_[static_cast<std::size_t>(i)] : nullptr; }
int StudyView::plotCount() const { return static_cast<int>(plots_.size()); }
const QAbstractItemModel* StudyView::table(int i) const {
  return i >= 0 && i < static_cast<int>(models_.size()) ? models_[static_cast<std::size_t>(i)] : nullptr;
}

QString StudyView::cell(int i, int row, const QString& column) const {
  const QAbstractItemModel* m = table(i);
  const int c = m ? models_[static_cast<std::size_t>(i)]->column(column) : -1;
  return c < 0 ? QString() : m->index(row, c).data().toString();
}

void StudyView::sortTable(int i, const QString& column, Qt::SortOrder order) {
  if (i < 0 || i >= static_cast<int>(proxies_.size())) return;
  const int c = models_[static_cast<std::size_t>(i)]->column(column);
  auto* view = qobject_cast<QTableView*>(tabs_->widget(plotCount() + i));
  if (c >= 0 && view) view->sortByColumn(c, order);
}

void StudyView::filterTable(int i, const QString& column, const QString& value) {
  if (i < 0 || i >= static_cast<int>(proxies_.size())) return;
  QSortFilterProxyModel* p = proxies_[static_cast<std::size_t>(i)];
  const int col = models_[static_cast<std::size_t>(i)]->column(column);
  p->setFilterKeyColumn(col < 0 ? 0 : col);
  p->setFilterRole(Qt::DisplayRole);
  p->setFilterRegularExpression(value.isEmpty() ? QString() : "^" + QRegularExpression::escape(value) + "$");
}

int StudyView::shownRows(int i) const {
  return i >= 0 && i < static_cast<int>(proxies_.size()) ? proxies_[static_cast<std::size_t>(i)]->rowCount() : 0;
}

QString StudyView::exportPlot(const QString& base) const {
  if (!evaluation_) return tr("nothing computed yet: no plot to export");
  const int i = tabs_->currentIndex();
  if (i < 0 || i >= plotCount())
    return tr("the tab on screen (%1) is a table: Export table writes it; choose a plot's tab to export a plot")
        .arg(tabs_->tabText(i));
  if (auto err = plot::save_figure(evaluation_->figures[static_cast<std::size_t>(i)].second, base.toStdString()))
    return QString::fromStdString(err->message);
  return {};
}

Table StudyView::visibleTable() const {
  if (!evaluation_) return {};
  const int i = tabs_->currentIndex();
  if (i >= 0 && i < plotCount()) return figureData(evaluation_->figures[static_cast<std::size_t>(i)].second);
  const int k = i - plotCount();
  if (k < 0 || k >= static_cast<int>(models_.size())) return {};
  // The rows the filter shows, in the order on screen.
  const Table& src = evaluation_->tables[static_cast<std::size_t>(k)].second;
  const QSortFilterProxyModel* p = proxies_[static_cast<std::size_t>(k)];
  Table t;
  t.columns = src.columns;
  t.numeric = src.numeric;
  t.rows.reserve(static_cast<std::size_t>(p->rowCount()));
  for (int r = 0; r < p->rowCount(); ++r) t.rows.push_back(src.rows[static_cast<std::size_t>(p->mapToSource(p->index(r, 0)).row())]);
  return t;
}

QString StudyView::exportTable(const QString& base) const {
  if (!evaluation_) return tr("nothing computed yet: no table to export");
  const Table t = visibleTable();
  if (t.columns.empty()) return tr("the tab on screen has no table");
  return writeTable(t, base);
}

}  // namespace mxlab::gui
