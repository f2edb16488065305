// Block view.
#include "block_view.hpp"

#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>
#include <cmath>
#include <qcustomplot.h>

#include "checks.hpp"
#include "mxlab/core/bits.hpp"
#include "mxlab/ops/requests.hpp"
#include "mxlab/plot/draw.hpp"
#include "mxlab/plot/plot.hpp"
#include "plot_tools.hpp"

namespace mxlab::gui {

namespace {

const QColor kUnderflowRow("#bbdefb");
const QColor kSaturatedRow("#ffcdd2");

QString hexOf(int bits, std::uint32_t code) {
  return "0x" + QString::number(code, 16).toUpper().rightJustified((bits + 3) / 4, '0');
}

}  // namespace

BlockView::BlockView(QWidget* parent) : QWidget(parent) {
  buildResults(formBeside(this, buildForm()));
  connectFields();
}

QGroupBox* BlockView::buildForm() {
  auto* form = new QGroupBox(tr("Block"), this);
  auto* f = new QFormLayout(form);
  source_ = new QLineEdit("gen:normal:0,1", form);
  source_->setToolTip(tr("A generated distribution (gen:normal:0,1, gen:laplace:0,1, gen:lognormal:0,2) or a tensor file "
                         "(.npy, .csv, .f32)"));
  sourceMessage_ = messageLine(form);
  size_ = new QSpinBox(form);
  size_->setRange(4, 22);
  size_->setValue(12);
  size_->setPrefix("2^");
  size_->setToolTip(tr("Elements of a generated input (a format with a tensor scale quantizes all of them; others the block alone)"));
  seed_ = new QSpinBox(form);
  seed_->setRange(0, 1 << 30);
  seed_->setValue(1);
  seed_->setToolTip(tr("Seed of a generated input"));
  format_ = formatBox(blockNames(), "mxfp4", form);
  format_->setToolTip(tr("A block format (mxfp4, nvfp4, mxint8, mxfp4@16, e2m1:e8m0_t32, ...)"));
  formatMessage_ = messageLine(form);
  block_ = new QSpinBox(form);
  block_->setRange(0, 1 << 30);  // narrowed to the tensor's blocks once computed
  block_->setToolTip(tr("The block's index, row-major over the block grid"));
  f->addRow(tr("input"), source_);
  f->addRow(sourceMessage_);
  f->addRow(tr("size"), size_);
  f->addRow(tr("seed"), seed_);
  f->addRow(tr("format"), format_);
  f->addRow(formatMessage_);
  f->addRow(tr("block"), block_);
  auto* go = new QPushButton(tr("Show"), form);
  f->addRow(go);
  addHelp(f, tr("The scalar reference (the definition of every format's values) quantizes the block, or the whole "
                "tensor where a tensor scale (NVFP4), N:M sparsity or stochastic rounding needs it, "
                "and shows one block: its shared scale, each element's code, value and exact error. Rows "
                "in blue underflowed (a nonzero input became 0); rows in red saturated (the cast "
                "overflowed and was clamped)."));
  connect(go, &QPushButton::clicked, this, &BlockView::recompute);
  return form;
}

void BlockView::buildResults(QVBoxLayout* rl) {
  QWidget* right = rl->parentWidget();
  summary_ = new QLabel(right);
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  rl->addWidget(summary_);
  auto* split = new QSplitter(Qt::Vertical, right);
  plot_ = new QCustomPlot(split);
  plot_->setMinimumHeight(220);
  addPlotTools(plot_, [this]() -> const experiment::Figure* { return detail_ ? &figure_ : nullptr; });
  table_ = new QTableWidget(split);
  table_->setColumnCount(8);
  table_->setHorizontalHeaderLabels({tr("element"), tr("input"), tr("code"), tr("bits"), tr("value"), tr("flag"),
                                     tr("error (exact)"), tr("relative error (6 digits)")});
  table_->verticalHeader()->setVisible(false);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  split->addWidget(plot_);
  split->addWidget(table_);
  rl->addWidget(split, 1);
  auto* bar = new QHBoxLayout;
  status_ = new QLabel(right);
  progress_ = new QProgressBar(right);
  progress_->setMaximumWidth(260);
  progress_->setVisible(false);
  stop_ = new QPushButton(tr("Stop"), right);
  stop_->setVisible(false);
  bar->addWidget(status_, 1);
  bar->addWidget(progress_);
  bar->addWidget(stop_);
  rl->addLayout(bar);
}

void BlockView::connectFields() {
  debounce_ = new QTimer(this);
  debounce_->setSingleShot(true);
  debounce_->setInterval(350);
  connect(debounce_, &QTimer::timeout, this, &BlockView::recompute);
  auto later = [this] { debounce_->start(); };
  connect(stop_, &QPushButton::clicked, this, &BlockView::cancel);
  checkAsTyped(format_, formatMessage_, blockFormatProblem, this, later);
  connect(source_, &QLineEdit::textChanged, this, [this, later](const QString& t) {
    markField(source_, sourceMessage_, sourceProblem(t));
    if (sourceProblem(t).isEmpty()) later();
  });
  for (QSpinBox* s : {size_, seed_, block_}) connect(s, &QSpinBox::valueChanged, this, later);
  watcher_ = new QFutureWatcher<Outcome>(this);
  connect(watcher_, &QFutureWatcher<Outcome>::finished, this, &BlockView::computed);
}

void BlockView::computed() {
  progress_->setVisible(false);
  stop_->setVisible(false);
  Outcome o = watcher_->result();
  if (o.cancelled) {
    status_->setText(tr("stopped; showing the previous block"));
    return;
  }
  if (!o.detail) {
    status_->setStyleSheet(QStringLiteral("color: #c62828;"));
    status_->setText(o.error);
    emit failed(o.error);
    return;
  }
  status_->setStyleSheet({});
  status_->setText(tr("block %1 of %2 (%3)").arg(o.detail->block).arg(o.detail->blocks).arg(QString::fromStdString(o.detail->engine)));
  show(std::move(*o.detail));
  emit finished();
}

BlockView::~BlockView() {
  cancel();
  watcher_->waitForFinished();
}

bool BlockView::busy() const { return watcher_->isRunning(); }

void BlockView::cancel() {
  if (cancel_) cancel_->store(true);
}

QString BlockView::problem() const {
  if (QString p = blockFormatProblem(format_->currentText()); !p.isEmpty()) return tr("format: %1").arg(p);
  const QString s = source_->text().trimmed();
  if (QString p = sourceProblem(s); !p.isEmpty()) return tr("input: %1").arg(p);
  if (s.startsWith("model:") || s.startsWith("data:"))
    return tr("input: the block view takes a generated distribution or a tensor file (the Quantization Lab takes models "
              "and data sets)");
  return {};
}

void BlockView::recompute() {
  debounce_->stop();
  auto refuse = [this](const QString& p) {
    status_->setStyleSheet(QStringLiteral("color: #c62828;"));
    status_->setText(p);
    emit failed(p);
  };
  if (const QString p = problem(); !p.isEmpty()) {
    if (p.startsWith(tr("input: "))) markField(source_, sourceMessage_, p.mid(tr("input: ").size()));
    refuse(p);
    return;
  }
  if (busy()) {
    cancel();
    watcher_->waitForFinished();
  }
  auto fmt = ops::block_format(format_->currentText().trimmed().toStdString(), {},
                               [](std::string_view n) { return "option '" + std::string(n) + "'"; });
  if (!fmt) {
    markField(format_, formatMessage_, QString::fromStdString(fmt.error().message));
    refuse(tr("format: %1").arg(QString::fromStdString(fmt.error().message)));
    return;
  }
  ops::InputRequest req;
  req.input = source_->text().trimmed().toStdString();
  if (source_->text().trimmed().startsWith("gen:")) req.shape = std::to_string(std::int64_t{1} << size_->value());
  req.seed = static_cast<std::uint64_t>(seed_->value());
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto cancel = cancel_;
  const std::int64_t block = block_->value();
  progress_->setRange(0, 0);  // busy: the reference quantizes the block (or the tensor) in one pass
  progress_->setVisible(true);
  stop_->setVisible(true);
  status_->setText(tr("quantizing ..."));
  watcher_->setFuture(QtConcurrent::run([req, f = *fmt, block, cancel]() {
    Outcome o;
    auto src = ops::open_tensor(req);
    if (!src) {
      o.error = QString::fromStdString(src.error().message);
      return o;
    }
    // A block index past the end (the input or format changed) is brought back to the last block.
    ops::Run run;
    run.reporter.cancel = cancel.get();
    const std::int64_t blocks = ops::block_count(f, src->shape());
    auto d = ops::block_detail(f, *src, blocks > 0 ? std::min(block, blocks - 1) : block, run);
    if (!d) {
      o.cancelled = d.error().message == ops::kCancelled;
      o.error = QString::fromStdString(d.error().message);
      return o;
    }
    o.detail = std::move(*d);
    return o;
  }));
}

QString BlockView::exportPlot(const QString& base) const {
  if (!detail_) return tr("nothing computed yet: no plot to export");
  if (auto err = plot::save_figure(figure_, base.toStdString())) return QString::fromStdString(err->message);
  return {};
}

QString BlockView::exportTable(const QString& base) const {
  if (!detail_) return tr("nothing computed yet: no table to export");
  return writeTable(tableOf(*table_, {2, 3, 5}), base);
}

void BlockView::show(ops::BlockDetail d) {
  const auto fmt = ops::block_format(format_->currentText().trimmed().toStdString(), {},
                                     [](std::string_view n) { return std::string(n); });
  const int elementBits = fmt ? fmt->element.bits() : 8;
  const Format* element = fmt ? &fmt->element : nullptr;
  {
    const QSignalBlocker b(block_);
    block_->setMaximum(static_cast<int>(std::min<std::int64_t>(d.blocks - 1, INT32_MAX)));
    block_->setValue(static_cast<int>(d.block));
  }
  int underflows = 0, saturated = 0;
  for (const auto& e : d.elements) underflows += e.underflow, saturated += e.saturated;
  QString scale;
  if (d.has_scale) {
    const int scaleBits = fmt && fmt->layout.scale ? fmt->layout.scale->bits() : 8;
    scale = tr("shared scale %1 (code %2 of %3)")
                .arg(QString::fromStdString(d.scale_exact), hexOf(scaleBits, d.scale_code),
                     fmt && fmt->layout.scale ? QString::fromStdString(fmt->layout.scale->name()) : QString());
    if (d.shared_exponent) scale += tr(" = 2^%1").arg(*d.shared_exponent);
  }
  QString tensor;
  if (d.has_tensor_scale && fmt && fmt->layout.tensor_scale)
    tensor = tr("; tensor scale %1 (code %2 of %3)")
                 .arg(QString::fromStdString(g17(d.tensor_scale)), hexOf(fmt->layout.tensor_scale->bits(), d.tensor_scale_code),
                      QString::fromStdString(fmt->layout.tensor_scale->name()));
  summary_->setText(tr("<b>block %1</b> of %2 (grid %3): %4 elements, amax %5; %6%7. <span style='background:%8'>&nbsp;%9 "
                       "underflowed&nbsp;</span> <span style='background:%10'>&nbsp;%11 saturated&nbsp;</span>")
                        .arg(d.block)
                        .arg(d.blocks)
                        .arg([&] {
                          QStringList g;
                          for (auto v : d.block_grid) g << QString::number(v);
                          return g.join(" x ");
                        }())
                        .arg(d.elements.size())
                        .arg(QString::fromStdString(g17(d.amax)), scale, tensor, kUnderflowRow.name())
                        .arg(underflows)
                        .arg(kSaturatedRow.name())
                        .arg(saturated));
  table_->setRowCount(static_cast<int>(d.elements.size()));
  experiment::Figure fig;
  fig.kind = experiment::PlotKind::Scatter;
  fig.title = "Block " + std::to_string(d.block) + " of " + (fmt ? fmt->name : std::string());
  fig.x.label = "element of the block";
  fig.y.label = "value";
  fig.legend_title = "values";
  experiment::Series in, out, under, sat;
  in.name = "input", out.name = "quantized", under.name = "underflowed to 0", sat.name = "saturated";
  for (std::size_t i = 0; i < d.elements.size(); ++i) {
    const ops::BlockElement& e = d.elements[i];
    const QStringList cells = {QString::number(e.index), QString::fromStdString(g17(e.x)), hexOf(elementBits, e.code),
                               element ? QString::fromStdString(bit_string(*element, e.code)) : QString(),
                               QString::fromStdString(g17(e.q)),
                               e.underflow ? tr("underflow") : e.saturated ? tr("saturated") : QString(),
                               QString::fromStdString(e.error_exact),
                               std::isnan(e.rel_error) ? QString("-") : QString::number(e.rel_error, 'g', 6)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (e.underflow) item->setBackground(kUnderflowRow);
      if (e.saturated) item->setBackground(kSaturatedRow);
      if (c == 6) item->setToolTip(cells[c]);
      table_->setItem(static_cast<int>(i), c, item);
    }
    const auto k = static_cast<double>(i);
    in.x.push_back(k), in.y.push_back(e.x);
    out.x.push_back(k), out.y.push_back(e.q);
    if (e.underflow) under.x.push_back(k), under.y.push_back(e.q);
    if (e.saturated) sat.x.push_back(k), sat.y.push_back(e.q);
  }
  fig.series = {in, out};
  if (!under.x.empty()) fig.series.push_back(under);
  if (!sat.x.empty()) fig.series.push_back(sat);
  detail_ = std::move(d);
  figure_ = std::move(fig);
  plot::draw(*plot_, figure_, 12);
}

}  // namespace mxlab::gui
