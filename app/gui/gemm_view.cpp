// GEMM view.
#include "gemm_view.hpp"

#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSpinBox>

#include "checks.hpp"
#include "toml_text.hpp"
#include "mxlab/gemm/model.hpp"

namespace mxlab::gui {

namespace {

/// The model strings of a `;`-separated list, trimmed, empty ones left out.
QStringList splitModels(const QString& text) {
  QStringList out;
  for (const QString& m : text.split(';')) {
    const QString t = m.trimmed();
    if (!t.isEmpty()) out << t;
  }
  return out;
}

/// Why a model string does not parse (the engine's message), or "".
QString modelProblem(const QString& text) {
  auto m = gemm::parse_model(text.toStdString());
  return m ? QString() : QString::fromStdString(m.error().message);
}

QSpinBox* spin(QWidget* parent, int lo, int hi, int value, const QString& prefix, const QString& tip) {
  auto* s = new QSpinBox(parent);
  s->setRange(lo, hi);
  s->setValue(value);
  s->setPrefix(prefix);
  s->setToolTip(tip);
  return s;
}

}  // namespace

GemmView::GemmView(QWidget* parent) : View(parent) {
  auto* form = new QGroupBox(tr("GEMM"), this);
  auto* f = new QFormLayout(form);
  createOperandFields(form);
  createSweepFields(form);
  QPushButton* go = layoutForm(f, form);
  build(form);
  connectFields(go);
}

void GemmView::createOperandFields(QWidget* form) {
  a_ = formatBox(blockNames(), "mxfp8_e4m3", form);
  b_ = formatBox(blockNames(), "mxfp8_e4m3", form);
  a_->setToolTip(tr("A's block format (blocks along K): mxfp8_e4m3, nvfp4, mxsf, mxfp4@16, e4m3:float32, ..."));
  b_->setToolTip(tr("B's block format, applied to B's transpose (N x K, blocks along K) as a Linear weight is stored"));
  aMessage_ = messageLine(form);
  bMessage_ = messageLine(form);
  models_ = new QListWidget(form);
  for (const auto& p : gemm::model_presets()) {
    auto* it = new QListWidgetItem(QString::fromStdString(std::string(p.name)), models_);
    it->setFlags(it->flags() | Qt::ItemIsUserCheckable);
    it->setToolTip(QString::fromStdString(std::string(p.definition)));
    it->setCheckState(p.name == "ocp-dot-fp32" || p.name == "tensorcore-trunc14" || p.name == "tensorcore-trunc14-promote128"
                          ? Qt::Checked
                          : Qt::Unchecked);
  }
  models_->setMaximumHeight(130);
  models_->setToolTip(tr("Accumulation models (docs/gemm.md): each checked preset is a series"));
  more_ = new QLineEdit(form);
  more_->setPlaceholderText(tr("more models, ; between them"));
  more_->setToolTip(tr("Model strings (docs/gemm.md): a preset with settings that override it "
                       "(tensorcore-trunc14,promote=256), or key=value settings (group=4,sum=bf16); ; between models"));
  moreMessage_ = messageLine(form);
}

void GemmView::createSweepFields(QWidget* form) {
  size_ = spin(form, 1, 1024, 32, {}, tr("M = N: the rows of A and the columns of B"));
  kMin_ = spin(form, 0, 20, 6, "2^", tr("The smallest K of the error-against-K plot"));
  kMax_ = spin(form, 0, 20, 12, "2^", tr("The largest K of the error-against-K plot, and the K of the width plot"));
  widthKind_ = new QComboBox(form);
  widthKind_->addItem(tr("aligned adder, truncated"), "aligned:%1:trunc");
  widthKind_->addItem(tr("aligned adder, to nearest"), "aligned:%1:nearest");
  widthKind_->addItem(tr("float, 8 exponent bits"), "e8m%1");
  widthKind_->setToolTip(tr("What the width plot sets as each model's accumulator (the model setting acc): "
                            "acc=aligned:B keeps B bits below the largest addend's leading bit; a float keeps B "
                            "significant bits (e8m(B-1))"));
  wMin_ = spin(form, 2, 30, 8, {}, tr("The narrowest accumulator, in bits"));
  wMax_ = spin(form, 2, 30, 24, {}, tr("The widest accumulator, in bits"));
  wStep_ = spin(form, 1, 8, 2, tr("by "), tr("Bits between the widths of the width plot"));
  metric_ = new QComboBox(form);
  metric_->addItem(tr("normwise ||C - R|| / ||R||"), "normwise_rel_error");
  metric_->addItem(tr("99th percentile of |c - r| / |r|"), "p99_rel_error");
  metric_->addItem(tr("mean of |c - r| / |r|"), "mean_rel_error");
  metric_->addItem(tr("largest |c - r|"), "max_abs_error");
  metric_->addItem(tr("SQNR (dB)"), "sqnr_db");
  metric_->setToolTip(tr("The error plotted (the columns of mxlab gemm); relative errors over the entries with r != 0"));
  reference_ = new QComboBox(form);
  reference_->addItem(tr("exact, quantized operands"), "acc_");
  reference_->addItem(tr("exact, float32 operands"), "total_");
  reference_->setToolTip(tr("R: the exact product of the quantized operands (the accumulation's error alone), or of "
                            "the operands before quantization (the formats' and the accumulation's error)"));
  seed_ = spin(form, 0, 1 << 30, 0, {}, tr("A is normal(0,1) of this seed, B of seed + 1: the same seed gives the same operands"));
  widthNote_ = new QLabel(form);
  widthNote_->setWordWrap(true);
  widthNote_->setVisible(false);
}

QPushButton* GemmView::layoutForm(QFormLayout* f, QWidget* form) {
  auto* kRow = new QHBoxLayout;
  kRow->addWidget(kMin_);
  kRow->addWidget(new QLabel(tr("to"), form));
  kRow->addWidget(kMax_);
  auto* wRow = new QHBoxLayout;
  wRow->addWidget(wMin_);
  wRow->addWidget(new QLabel(tr("to"), form));
  wRow->addWidget(wMax_);
  wRow->addWidget(wStep_);
  f->addRow(tr("format A"), a_);
  f->addRow(aMessage_);
  f->addRow(tr("format B"), b_);
  f->addRow(bMessage_);
  f->addRow(tr("models"), models_);
  f->addRow(more_);
  f->addRow(moreMessage_);
  f->addRow(tr("M = N"), size_);
  f->addRow(tr("K"), kRow);
  f->addRow(tr("accumulator"), widthKind_);
  f->addRow(tr("widths (bits)"), wRow);
  f->addRow(widthNote_);
  f->addRow(tr("error"), metric_);
  f->addRow(tr("against"), reference_);
  f->addRow(tr("seed"), seed_);
  auto* go = new QPushButton(tr("Compute"), form);
  f->addRow(go);
  addHelp(f, tr("C = A B with A (M x K) and B (K x N) normal(0,1), quantized to their block formats and summed under "
                "each model, compared with R. The width plot gives each model the accumulator of each width at the "
                "largest K. As mxlab gemm computes it (docs/gemm.md)."));
  return go;
}

void GemmView::connectFields(QPushButton* go) {
  connect(go, &QPushButton::clicked, this, &View::recompute);
  checkAsTyped(a_, aMessage_, blockFormatProblem, this, [this] { later(); });
  checkAsTyped(b_, bMessage_, blockFormatProblem, this, [this] { later(); });
  connect(more_, &QLineEdit::textChanged, this, [this](const QString& t) {
    QString p;
    for (const QString& m : splitModels(t))
      if (p = modelProblem(m); !p.isEmpty()) {
        p = tr("'%1': %2").arg(m, p);
        break;
      }
    markField(more_, moreMessage_, p);
    if (p.isEmpty()) later();
  });
  auto changed = [this] {
    const QString note = widthNote();
    widthNote_->setText(note);
    widthNote_->setVisible(!note.isEmpty());
    later();
  };
  connect(models_, &QListWidget::itemChanged, this, changed);
  connect(more_, &QLineEdit::editingFinished, this, changed);
  connect(widthKind_, &QComboBox::currentIndexChanged, this, changed);
  for (QSpinBox* s : {size_, kMin_, kMax_, wMin_, wMax_, wStep_, seed_}) connect(s, &QSpinBox::valueChanged, this, [this] { later(); });
  for (QComboBox* c : {metric_, reference_}) connect(c, &QComboBox::currentIndexChanged, this, [this] { later(); });
  changed();
}

QStringList GemmView::modelList() const {
  QStringList out;
  for (int i = 0; i < models_->count(); ++i)
    if (models_->item(i)->checkState() == Qt::Checked) out << models_->item(i)->text();
  for (const QString& m : splitModels(more_->text()))
    if (!out.contains(m)) out << m;
  return out;
}

QString GemmView::accSetting(int bits) const {
  const QString pattern = widthKind_->currentData().toString();
  return pattern.startsWith('e') ? pattern.arg(bits - 1) : pattern.arg(bits);
}

QString GemmView::metricColumn() const { return reference_->currentData().toString() + metric_->currentData().toString(); }

QString GemmView::widthNote() const {
  QStringList lines;
  for (const QString& m : modelList()) {
    if (!modelProblem(m).isEmpty()) continue;  // said on the field
    if (const QString p = modelProblem(m + ",acc=" + accSetting(wMin_->value())); !p.isEmpty())
      lines << tr("%1 is not in the width plot: %2").arg(m, p);
  }
  return lines.join('\n');
}

QString GemmView::problem() const {
  if (QString p = blockFormatProblem(a_->currentText()); !p.isEmpty()) return tr("format A: %1").arg(p);
  if (QString p = blockFormatProblem(b_->currentText()); !p.isEmpty()) return tr("format B: %1").arg(p);
  for (const QString& m : splitModels(more_->text()))
    if (QString p = modelProblem(m); !p.isEmpty()) return tr("model '%1': %2").arg(m, p);
  if (modelList().isEmpty()) return tr("check a model or type one");
  if (kMin_->value() > kMax_->value()) return tr("K: the smallest (2^%1) is larger than the largest (2^%2)").arg(kMin_->value()).arg(kMax_->value());
  if (wMin_->value() > wMax_->value()) return tr("widths: the narrowest (%1) is wider than the widest (%2)").arg(wMin_->value()).arg(wMax_->value());
  return {};
}

QString GemmView::experimentPoints(const QStringList& models, const QStringList& accs) const {
  const QString a = a_->currentText().trimmed(), b = b_->currentText().trimmed();
  const qulonglong kWidth = qulonglong{1} << kMax_->value();
  // The K points say output = "float32" (C's default format) so the plots can tell them from the width points,
  // which set acc.
  // Each point names both formats (a sweep that names a format would also make a point of its own).
  const QString formats = QString("a = %1\nb = %2\n").arg(tomlString(a), tomlString(b));
  QString points;
  for (const QString& m : models)
    for (int e = kMin_->value(); e <= kMax_->value(); ++e)
      points += QString("[[points]]\n%1model = %2\nk = %3\noutput = \"float32\"\n\n").arg(formats, tomlString(m)).arg(qulonglong{1} << e);
  for (const QString& m : models) {
    if (!modelProblem(m + ",acc=" + accs.front()).isEmpty()) continue;  // widthNote() says why
    for (const QString& acc : accs)
      points += QString("[[points]]\n%1model = %2\nk = %3\nacc = %4\n\n").arg(formats, tomlString(m)).arg(kWidth).arg(tomlString(acc));
  }
  return points;
}

QString GemmView::experimentText() const {
  const QString a = a_->currentText().trimmed(), b = b_->currentText().trimmed();
  const QStringList models = modelList();
  const qulonglong kWidth = qulonglong{1} << kMax_->value();
  QStringList accs, labels;
  for (int w = wMin_->value(); w <= wMax_->value(); w += wStep_->value()) {
    accs << accSetting(w);
    labels << QString("%1 = %2").arg(tomlString(accSetting(w)), tomlString(QString::number(w)));
  }
  const QString y = metricColumn();
  const QString scale = y.endsWith("sqnr_db") ? "linear" : "log10";
  const QString yLabel = metric_->currentText() + (reference_->currentIndex() == 0 ? tr(", R exact") : tr(", R of float32 operands"));
  return QString(R"TOML(# GEMM, saved from mxlab-gui
name = "gemm"
description = %1
job = "gemm"

[sweep]
m = %2
n = %2
data_seed = %3

%4[[table]]
name = "error_vs_k"
from = "gemm"
where = { output = "float32" }
rows = ["model", "k"]
values = ["acc_normwise_rel_error", "acc_p99_rel_error", "acc_sqnr_db", "total_normwise_rel_error", "total_sqnr_db", "format_sqnr_db", "acc_share"]

[[table]]
name = "error_vs_width"
from = "gemm"
where = { acc = %5 }
rows = ["model", "acc"]
values = ["acc_normwise_rel_error", "acc_p99_rel_error", "acc_sqnr_db", "total_normwise_rel_error", "total_sqnr_db", "format_sqnr_db", "acc_share"]

[[plot]]
name = "error_vs_k"
kind = "line"
from = "gemm"
where = { output = "float32" }
x = "k"
y = %6
series = "model"
x_scale = "log2"
y_scale = %7
title = %8
x_label = "K"
y_label = %9
legend_title = "model"

[[plot]]
name = "error_vs_width"
kind = "line"
from = "gemm"
where = { acc = %5 }
x = "acc"
y = %6
series = "model"
y_scale = %7
title = %10
x_label = %11
y_label = %9
legend_title = "model"
labels = { %12 }
)TOML")
      .arg(tomlString(QString("%1 x %2, %3 x K x %3: %4").arg(a, b).arg(size_->value()).arg(models.join(", "))),
           QString::number(size_->value()), QString::number(seed_->value()), experimentPoints(models, accs), tomlList(accs), tomlString(y),
           tomlString(scale), tomlString(tr("GEMM error against K: %1 x %2").arg(a, b)), tomlString(yLabel),
           tomlString(tr("GEMM error against the accumulator's width, K = %1").arg(kWidth)),
           tomlString(tr("accumulator bits (%1)").arg(widthKind_->currentText())), labels.join(", "));
}

}  // namespace mxlab::gui
