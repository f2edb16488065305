// The GUI's views: forms that describe studies as experiment text.
#include "views.hpp"

#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTimer>
#include <QVBoxLayout>

#include "mxlab/experiment/experiment.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::gui {

namespace {

/// A TOML basic string.
QString q(const QString& s) {
  QString out = "\"";
  for (QChar c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

QString list(const QStringList& items) {
  QStringList quoted;
  for (const auto& s : items) quoted << q(s);
  return "[" + quoted.join(", ") + "]";
}

QComboBox* format_box(const QStringList& names, const QString& current, QWidget* parent) {
  auto* box = new QComboBox(parent);
  box->setEditable(true);
  box->addItems(names);
  box->setCurrentText(current);
  box->setInsertPolicy(QComboBox::NoInsert);
  return box;
}

QStringList element_names() {
  QStringList out;
  for (const Format& f : catalogue_formats()) out << QString::fromStdString(f.name());
  return out;
}

QStringList block_names() {
  QStringList out;
  for (const auto& n : block_format_names()) out << QString::fromStdString(n);
  return out;
}

}  // namespace

void View::build(QWidget* form) {
  auto* layout = new QHBoxLayout(this);
  auto* split = new QSplitter(this);
  form->setMaximumWidth(360);
  split->addWidget(form);
  study_ = new StudyView(split);
  split->addWidget(study_);
  split->setStretchFactor(1, 1);
  layout->addWidget(split);
}

void View::recompute() {
  if (debounce_ != nullptr) debounce_->stop();
  if (!experimentText().isEmpty()) study_->run(experimentText(), sourceName());
}

// ---- Format Explorer

FormatExplorer::FormatExplorer(QWidget* parent) : View(parent) {
  auto* form = new QGroupBox(tr("Format"), this);
  auto* f = new QFormLayout(form);
  format_ = format_box(element_names(), "e4m3", form);
  format_->setToolTip(tr("Any format string: a catalogue name (e4m3, e2m1, int8, ue4m3), a block format's name "
                         "(its element), or a format written down (e3m4, e2m5b3, int6, fp6_e2m3)"));
  overlay_ = format_box(QStringList{tr("(none)")} + element_names(), "e5m2", form);
  overlay_->setToolTip(tr("A second format drawn beside the first"));
  class_ = new QComboBox(form);
  class_->addItems({tr("all"), "zero", "subnormal", "normal", "inf", "nan"});
  class_->setToolTip(tr("Show only the codes of one class in the code-point table"));
  f->addRow(tr("format"), format_);
  f->addRow(tr("overlay"), overlay_);
  f->addRow(tr("codes of class"), class_);
  auto* go = new QPushButton(tr("Show"), form);
  f->addRow(go);
  auto* help = new QLabel(tr("The code-point table lists every code: its bits (sign.exponent.mantissa), class, "
                             "exact value and the gap to the next larger value. The number line shows every "
                             "positive value on a power-of-two axis; the density counts values per binade "
                             "[2^k, 2^(k+1))."),
                          form);
  help->setWordWrap(true);
  f->addRow(help);
  build(form);
  connect(go, &QPushButton::clicked, this, &View::recompute);
  connect(format_, &QComboBox::currentTextChanged, this, &View::recompute);
  connect(overlay_, &QComboBox::currentTextChanged, this, &View::recompute);
  connect(class_, &QComboBox::currentTextChanged, this, [this](const QString& c) {
    study_->filterTable(0, "class", c == tr("all") ? QString() : c);
  });
  connect(study_, &StudyView::finished, this, [this] {
    study_->filterTable(0, "class", class_->currentText() == tr("all") ? QString() : class_->currentText());
  });
}

QString FormatExplorer::experimentText() const {
  const QString a = format_->currentText().trimmed();
  const QString b = overlay_->currentText().trimmed();
  QStringList formats{a};
  if (!b.isEmpty() && b != tr("(none)") && b != a) formats << b;
  return QString(R"TOML(# Format Explorer, saved from mxlab-gui
name = "format_explorer"
description = "code points, number line and density of %1"
job = "catalogue"

[sweep]
format = %2

[[table]]
name = "codes"
from = "codes"
where = { format = %3 }
rows = ["code", "bits", "class"]
values = ["value", "gap_up"]
digits = 17

[[table]]
name = "properties"
from = "formats"
rows = ["format"]
values = ["bits", "exponent_bits", "mantissa_bits", "bias", "emax", "max_finite", "min_normal", "min_positive", "finite_codes", "specials", "has_inf", "has_nan"]
digits = 17

[[plot]]
name = "number_line"
kind = "scatter"
from = "values"
x = "value"
y = "format"
series = "format"
x_scale = "log2"
title = "Positive values"
x_label = "value"
y_label = ""
legend_title = "format"

[[plot]]
name = "density"
kind = "histogram"
from = "values"
x = "binade"
y = "value"
series = "format"
aggregate = "count"
title = "Values per binade"
x_label = "binade k: values in [2^k, 2^(k+1))"
y_label = "values"
legend_title = "format"
)TOML")
      .arg(formats.join(", "), list(formats), q(a));
}

// ---- Quantization Lab

QuantizationLab::QuantizationLab(QWidget* parent) : View(parent) {
  auto* form = new QGroupBox(tr("Quantization"), this);
  auto* f = new QFormLayout(form);
  source_ = new QLineEdit("gen:normal:0,1", form);
  source_->setToolTip(tr("A generated distribution (gen:normal:0,1, gen:laplace:0,1, gen:student_t:3, "
                         "gen:lognormal:0,2, gen:outliers:rate=0.001,mag=100), a tensor file (.npy, .csv, .f32), "
                         "a layer of a model (model:posenet:*Conv2d_0*, blocks along its reduction axes) or a data "
                         "set's images (data:fashion-mnist:test)"));
  auto* browse = new QPushButton(tr("File..."), form);
  auto* row = new QHBoxLayout;
  row->addWidget(source_, 1);
  row->addWidget(browse);
  size_ = new QSpinBox(form);
  size_->setRange(4, 26);
  size_->setValue(20);
  size_->setPrefix("2^");
  size_->setToolTip(tr("Elements of a generated input"));
  seed_ = new QSpinBox(form);
  seed_->setRange(0, 1 << 30);
  seed_->setValue(1);
  seed_->setToolTip(tr("Seed of a generated input: the same seed gives the same tensor"));
  formats_ = new QListWidget(form);
  for (const auto& n : block_names()) {
    auto* it = new QListWidgetItem(n, formats_);
    it->setFlags(it->flags() | Qt::ItemIsUserCheckable);
    it->setCheckState(n == "mxfp8_e4m3" || n == "mxfp4" || n == "mxint8" || n == "nvfp4" ? Qt::Checked : Qt::Unchecked);
  }
  formats_->setToolTip(tr("Block formats to compare (each as its catalogue entry: element, scale, block size, rule)"));
  profiles_ = new QListWidget(form);
  for (const auto& p : profile_names()) {
    auto* it = new QListWidgetItem(QString::fromStdString(p), profiles_);
    it->setFlags(it->flags() | Qt::ItemIsUserCheckable);
    it->setCheckState(p == "ocp" ? Qt::Checked : Qt::Unchecked);
  }
  profiles_->setMaximumHeight(120);
  profiles_->setToolTip(tr("Peer libraries' choices (docs/profiles.md); each applies to the formats it covers"));
  f->addRow(tr("input"), row);
  f->addRow(tr("size"), size_);
  f->addRow(tr("seed"), seed_);
  f->addRow(tr("formats"), formats_);
  f->addRow(tr("profiles"), profiles_);
  auto* go = new QPushButton(tr("Quantize"), form);
  f->addRow(go);
  auto* help = new QLabel(tr("MSE: mean squared error. SQNR: 10 log10(sum x^2 / sum (q-x)^2) in dB. Bias: mean "
                             "signed error. Underflow: nonzero inputs that became zero. Saturation: elements whose "
                             "cast overflowed. Bits per element: element bits plus every stored scale. All exact."),
                          form);
  help->setWordWrap(true);
  f->addRow(help);
  build(form);
  connect(go, &QPushButton::clicked, this, &View::recompute);
  // Recomputes on every change, once the changes pause (the running computation is cancelled).
  debounce_ = new QTimer(this);
  debounce_->setSingleShot(true);
  debounce_->setInterval(400);
  connect(debounce_, &QTimer::timeout, this, &View::recompute);
  auto later = [this] { debounce_->start(); };
  connect(source_, &QLineEdit::editingFinished, this, later);
  connect(size_, &QSpinBox::valueChanged, this, later);
  connect(seed_, &QSpinBox::valueChanged, this, later);
  connect(formats_, &QListWidget::itemChanged, this, later);
  connect(profiles_, &QListWidget::itemChanged, this, later);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Tensor file"), {}, tr("Tensors (*.npy *.csv *.f32 *.bin *.raw)"));
    if (!file.isEmpty()) source_->setText(file);
  });
}

QString QuantizationLab::experimentText() const {
  QStringList formats;
  for (int i = 0; i < formats_->count(); ++i)
    if (formats_->item(i)->checkState() == Qt::Checked) formats << formats_->item(i)->text();
  if (formats.isEmpty()) formats << "mxfp8_e4m3";
  QStringList profiles;
  for (int i = 0; i < profiles_->count(); ++i)
    if (profiles_->item(i)->checkState() == Qt::Checked) profiles << profiles_->item(i)->text();
  if (profiles.isEmpty()) profiles << "ocp";
  QString points;
  // Each format with each checked profile that covers it (OCP covers every format).
  for (const auto& f : formats) {
    auto parsed = parse_block_format(f.toStdString());
    bool any = false;
    for (const auto& p : profiles) {
      if (!parsed || !apply_profile(*parsed, p.toStdString()).ok()) continue;
      points += QString("[[points]]\nformat = %1\nprofile = %2\n").arg(q(f), q(p));
      any = true;
    }
    if (!any) points += QString("[[points]]\nformat = %1\nprofile = \"ocp\"\n").arg(q(f));
  }
  const QString src = source_->text().trimmed();
  const bool generated = src.startsWith("gen:");
  // model:NAME:PATTERN is a layer (or the layers) of a registered model or weight file.
  QString input = "source = " + q(src) + "\n";
  if (src.startsWith("model:")) {
    const QString rest = src.mid(6);
    const int colon = static_cast<int>(rest.indexOf(':'));
    input = "weights = " + q(colon < 0 ? rest : rest.left(colon)) + "\n" + (colon < 0 ? QString() : "select = " + q(rest.mid(colon + 1)) + "\n");
  }
  return QString(R"TOML(# Quantization Lab, saved from mxlab-gui
name = "quantization_lab"
description = "%1 through %2"
job = "analyze"
gaps = true
histogram_bins = 120

[inputs.input]
%3%4
[sweep]
input = "input"

%5
[[table]]
name = "metrics"
rows = ["format", "profile", "layer"]
values = ["mse", "sqnr_db", "bias", "max_abs_error", "max_rel_error", "underflow_ratio", "saturation_ratio", "bits_per_element", "engine"]

[[plot]]
name = "histogram"
kind = "histogram"
from = "histogram"
x = "bin_start"
y = "count"
series = "of"
aggregate = "max"
y_scale = "log10"
title = "Input and quantized values"
x_label = "value"
y_label = "elements"

[[plot]]
name = "error_vs_value"
kind = "line"
from = "error_by_value"
x = "magnitude"
y = "max_rel_error"
series = "format"
x_scale = "log2"
y_scale = "log2"
title = "Largest relative error by magnitude"
x_label = "|x| (binade start)"
y_label = "max relative error"

[[plot]]
name = "gap_histogram"
kind = "histogram"
from = "gaps"
x = "gap"
y = "count"
series = "format"
aggregate = "max"
y_scale = "log10"
title = "Exponent gaps"
x_label = "exponent gap"
y_label = "elements"

[[plot]]
name = "error_by_gap"
kind = "line"
from = "gaps"
x = "gap"
y = "max_rel_error"
series = "format"
y_scale = "log2"
title = "Largest relative error by exponent gap"
x_label = "exponent gap"
y_label = "max relative error"
)TOML")
      .arg(src, formats.join(", "), input,
           generated ? QString("shape = \"%1\"\nseed = %2\n").arg(qulonglong{1} << size_->value()).arg(seed_->value()) : QString(),
           points);
}

// ---- Bounds

BoundsView::BoundsView(QWidget* parent) : View(parent) {
  auto* form = new QGroupBox(tr("Formats"), this);
  auto* f = new QFormLayout(form);
  a_ = format_box(block_names(), "mxint8", form);
  b_ = format_box(block_names(), "mxsf", form);
  for (auto* box : {a_, b_})
    box->setToolTip(tr("A block format (mxint8, mxfp8_e4m3, mxsf, boost_e2m5, mxfp4@16, ...)"));
  maxGap_ = new QSpinBox(form);
  maxGap_->setRange(-1, 64);
  maxGap_->setValue(-1);
  maxGap_->setSpecialValueText(tr("until both underflow"));
  f->addRow(tr("format A"), a_);
  f->addRow(tr("format B"), b_);
  f->addRow(tr("last gap"), maxGap_);
  auto* go = new QPushButton(tr("Compare"), form);
  f->addRow(go);
  auto* help = new QLabel(tr("For each exponent gap g = floor(log2 amax) - floor(log2 |x|) of an element in its block: "
                             "the supremum of the relative error |q - x| / |x| and of the absolute error in units of "
                             "2^floor(log2 amax), computed exactly twice (closed forms and enumeration of every code). "
                             "Dashed lines mark the gaps where the better format changes."),
                          form);
  help->setWordWrap(true);
  f->addRow(help);
  build(form);
  connect(go, &QPushButton::clicked, this, &View::recompute);
}

QString BoundsView::experimentText() const {
  const QString a = a_->currentText().trimmed(), b = b_->currentText().trimmed();
  return QString(R"TOML(# Bounds, saved from mxlab-gui
name = "bounds"
description = "worst-case error by exponent gap: %1 and %2"
job = "bounds"
%3
[sweep]
format = %4

[[points]]
a = %5
b = %6

[[table]]
name = "bounds"
from = "bounds"
where = { a = %5 }
rows = ["gap"]
values = ["max_rel_A", "max_rel_B", "rel_smaller", "max_abs_A", "max_abs_B", "abs_smaller", "analytic_eq_enumerated"]

[[plot]]
name = "relative"
kind = "line"
from = "bounds"
x = "gap"
y = "max_rel"
series = "format"
y_scale = "log2"
markers = "pairs.crossover_gaps"
marker_label = "crossover"
title = "Worst-case relative error"
x_label = "exponent gap"
y_label = "max |q - x| / |x|"
legend_title = "format"

[[plot]]
name = "absolute"
kind = "line"
from = "bounds"
x = "gap"
y = "max_abs"
series = "format"
y_scale = "log2"
title = "Worst-case absolute error"
x_label = "exponent gap"
y_label = "max |q - x| / 2^floor(log2 amax)"
legend_title = "format"
)TOML")
      .arg(a, b, maxGap_->value() >= 0 ? QString("max_gap = %1\n").arg(maxGap_->value()) : QString(),
           list(a == b ? QStringList{a} : QStringList{a, b}), q(a), q(b));
}

// ---- Experiments

ExperimentsView::ExperimentsView(QWidget* parent) : View(parent) {
  auto* form = new QGroupBox(tr("Experiment file"), this);
  auto* f = new QVBoxLayout(form);
  auto* open = new QPushButton(tr("Open..."), form);
  path_ = new QLabel(tr("no file"), form);
  path_->setWordWrap(true);
  description_ = new QLabel(form);
  description_->setWordWrap(true);
  auto* rerun = new QPushButton(tr("Run again"), form);
  auto* help = new QLabel(tr("Runs the experiment in memory (mxlab run FILE writes its results folder) and shows "
                             "its tables and plots. docs/experiments.md describes the file."),
                          form);
  help->setWordWrap(true);
  f->addWidget(open);
  f->addWidget(path_);
  f->addWidget(description_);
  f->addWidget(rerun);
  f->addWidget(help);
  f->addStretch(1);
  build(form);
  connect(open, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Experiment file"), "experiments", tr("Experiments (*.toml)"));
    if (file.isEmpty()) return;
    const QString err = this->open(file);
    if (!err.isEmpty()) emit study_->failed(err);
  });
  connect(rerun, &QPushButton::clicked, this, &View::recompute);
}

QString ExperimentsView::open(const QString& path) {
  auto e = experiment::read_experiment(path.toStdString());
  if (!e) return QString::fromStdString(e.error().message);
  if (!e->batch.empty()) return tr("%1 is a batch of experiment files: open one of them").arg(path);
  file_ = path;
  text_ = QString::fromStdString(e->text);
  path_->setText(path);
  description_->setText(QString::fromStdString(e->description));
  study_->run(text_, file_);
  return {};
}

QString ExperimentsView::experimentText() const { return text_; }

}  // namespace mxlab::gui
