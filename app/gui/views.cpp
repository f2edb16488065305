// The GUI's views: forms that describe studies as experiment text.
#include "views.hpp"

#include <QComboBox>
#include <QCompleter>
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
#include <algorithm>
#include <functional>
#include <optional>

#include "checks.hpp"
#include "tensor_list.hpp"
#include "toml_text.hpp"
#include "mxlab/experiment/experiment.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::gui {

void View::build(QWidget* form) {
  auto* layout = new QHBoxLayout(this);
  auto* split = new QSplitter(this);
  auto* left = new QWidget(split);
  auto* ll = new QVBoxLayout(left);
  ll->setContentsMargins(0, 0, 0, 0);
  ll->addWidget(form, 1);
  formMessage_ = messageLine(left);
  ll->addWidget(formMessage_);
  left->setMaximumWidth(360);
  split->addWidget(left);
  study_ = new StudyView(split);
  split->addWidget(study_);
  split->setStretchFactor(1, 1);
  split->setSizes({360, 100000});  // the form no wider than it may be, the results the rest
  layout->addWidget(split);
  debounce_ = new QTimer(this);
  debounce_->setSingleShot(true);
  debounce_->setInterval(350);
  connect(debounce_, &QTimer::timeout, this, &View::recompute);
  // A failed computation says why under the form; the next result clears it.
  connect(study_, &StudyView::failed, this, [this](const QString& m) {
    formMessage_->setText(m);
    formMessage_->setVisible(true);
  });
  connect(study_, &StudyView::finished, this, [this] { formMessage_->setVisible(false); });
}

void View::later() { debounce_->start(); }

void View::recompute() {
  debounce_->stop();
  if (const QString p = problem(); !p.isEmpty()) {
    study_->showProblem(p);
    return;
  }
  if (!experimentText().isEmpty()) study_->run(experimentText(), sourceName());
}

// ---- Format Explorer

FormatExplorer::FormatExplorer(QWidget* parent) : View(parent) {
  auto* form = new QGroupBox(tr("Format"), this);
  auto* f = new QFormLayout(form);
  format_ = formatBox(elementNames(), "e4m3", form);
  format_->setToolTip(tr("Any format string: a catalogue name (e4m3, e2m1, int8, ue4m3), a block format's name "
                         "(its element), or a format written down (e3m4, e2m5b3, int6, fp6_e2m3)"));
  overlay_ = formatBox(QStringList{tr("(none)")} + elementNames(), "e5m2", form);
  overlay_->setToolTip(tr("A second format drawn beside the first"));
  class_ = new QComboBox(form);
  class_->addItems({tr("all"), "zero", "subnormal", "normal", "inf", "nan"});
  class_->setToolTip(tr("Show only the codes of one class in the code-point table"));
  formatMessage_ = messageLine(form);
  overlayMessage_ = messageLine(form);
  f->addRow(tr("format"), format_);
  f->addRow(formatMessage_);
  f->addRow(tr("overlay"), overlay_);
  f->addRow(overlayMessage_);
  f->addRow(tr("codes of class"), class_);
  range_ = new QLineEdit(form);
  range_->setPlaceholderText(tr("every code"));
  range_->setToolTip(tr("The codes to list, FIRST:LAST in decimal, 0x hex or 0b binary (at most 65,536 codes); "
                        "empty: every code of formats of at most 16 bits"));
  rangeNote_ = new QLabel(form);
  rangeNote_->setWordWrap(true);
  rangeNote_->setVisible(false);
  f->addRow(tr("codes"), range_);
  f->addRow(rangeNote_);
  auto* go = new QPushButton(tr("Show"), form);
  f->addRow(go);
  addHelp(f, tr("The code-point table lists every code: its bits (sign.exponent.mantissa), class, "
                             "exact value and the gap to the next larger value. The number line shows every "
                             "positive value on a power-of-two axis; the density counts values per binade "
                             "[2^k, 2^(k+1))."));
  build(form);
  connect(go, &QPushButton::clicked, this, &View::recompute);
  checkAsTyped(format_, formatMessage_, elementFormatProblem, this, [this] {
    fitRange();
    later();
  });
  checkAsTyped(overlay_, overlayMessage_, elementFormatProblem, this, [this] { later(); });
  connect(range_, &QLineEdit::textEdited, this, [this] {
    autoRange_ = false;
    later();
  });
  // A failed range is said on its field.
  connect(study_, &StudyView::failed, this, [this](const QString& m) {
    if (m.contains("'codes'")) markField(range_, nullptr, m);
  });
  connect(study_, &StudyView::finished, this, [this] { markField(range_, nullptr, {}); });
  fitRange();
  connect(class_, &QComboBox::currentTextChanged, this, [this](const QString& c) {
    study_->filterTable(0, "class", c == tr("all") ? QString() : c);
  });
  connect(study_, &StudyView::finished, this, [this] {
    study_->filterTable(0, "class", class_->currentText() == tr("all") ? QString() : class_->currentText());
  });
}

namespace {

/// Most codes a catalogue lists (the engine's limit for `codes`).
constexpr std::uint64_t kMaxListedCodes = std::uint64_t{1} << 16;

}  // namespace

QString FormatExplorer::codesNote() const { return rangeNote_->isVisible() ? rangeNote_->text() : QString(); }

void FormatExplorer::fitRange() {
  const auto f = elementFormatOf(format_->currentText());
  if (!f) return;
  if (f->code_count() <= kMaxListedCodes) {
    if (autoRange_) range_->clear();
    autoRange_ = false;
    rangeNote_->setVisible(false);
    return;
  }
  if (range_->text().trimmed().isEmpty() || autoRange_) {
    // 256 codes from the code of 1.0 (the engine's cast), as `mxlab codepoints FORMAT --range` would list them.
    auto o = resolve_options(*f, {});
    const std::uint64_t one = o ? cast(*f, 1.0, *o).code : 0;
    const std::uint64_t last = std::min<std::uint64_t>(one + 255, f->code_count() - 1);
    range_->setText("0x" + QString::number(one, 16).toUpper() + ":0x" + QString::number(last, 16).toUpper());
    autoRange_ = true;
  }
  rangeNote_->setText(tr("%1 has %2 codes (%3 bits), too many to list at once: the table and plots show the codes of "
                         "the range below (at most 65,536; mxlab codepoints %1 --range FIRST:LAST --csv writes any range).")
                          .arg(QString::fromStdString(f->name()))
                          .arg(static_cast<qulonglong>(f->code_count()))
                          .arg(f->bits()));
  rangeNote_->setVisible(true);
}

QString FormatExplorer::problem() const {
  if (QString p = elementFormatProblem(format_->currentText()); !p.isEmpty()) return tr("format: %1").arg(p);
  const QString b = overlay_->currentText().trimmed();
  if (b.isEmpty() || b == tr("(none)")) return {};
  if (QString p = elementFormatProblem(b); !p.isEmpty()) return tr("overlay: %1").arg(p);
  return {};
}

QString FormatExplorer::experimentText() const {
  const QString a = format_->currentText().trimmed();
  const QString b = overlay_->currentText().trimmed();
  QStringList formats{a};
  if (!b.isEmpty() && b != tr("(none)") && b != a) formats << b;
  const QString range = range_->text().trimmed();
  // A range of codes applies to the first format: each format is a point of its own.
  QString points = "[sweep]\nformat = " + tomlList(formats) + "\n";
  if (!range.isEmpty()) {
    points = "[[points]]\nformat = " + tomlString(a) + "\ncodes = " + tomlString(range) + "\n";
    if (formats.size() > 1) points += "\n[[points]]\nformat = " + tomlString(b) + "\n";
  }
  return QString(R"TOML(# Format Explorer, saved from mxlab-gui
name = "format_explorer"
description = %1
job = "catalogue"

%2
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
      .arg(tomlString("code points, number line and density of " + formats.join(", ") + (range.isEmpty() ? "" : " (codes " + range + ")")),
           points, tomlString(a));
}

// ---- Quantization Lab

QuantizationLab::QuantizationLab(QWidget* parent) : View(parent) {
  auto* form = new QGroupBox(tr("Quantization"), this);
  auto* f = new QFormLayout(form);
  source_ = new QLineEdit("gen:normal:0,1", form);
  source_->setToolTip(tr("A generated distribution (gen:normal:0,1, gen:laplace:0,1, gen:student_t:3, "
                         "gen:lognormal:0,2, gen:outliers:rate=0.001,mag=100), a tensor file (.npy, .csv, .f32), "
                         "the layers of a model (model:NAME or model:FILE: every kernel; model:NAME:PATTERN: the tensors whose names match, "
                         "e.g. model:weights.safetensors:conv*; the list under the field names them; blocks along their reduction "
                         "axes) or a data "
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
  for (const auto& n : blockNames()) {
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
  sourceMessage_ = messageLine(form);
  tensors_ = new TensorList(form);
  tensors_->setVisible(false);
  tensors_->setMinimumHeight(140);
  f->addRow(tr("input"), row);
  f->addRow(sourceMessage_);
  f->addRow(tensors_);
  f->addRow(tr("size"), size_);
  f->addRow(tr("seed"), seed_);
  f->addRow(tr("formats"), formats_);
  f->addRow(tr("profiles"), profiles_);
  auto* go = new QPushButton(tr("Quantize"), form);
  f->addRow(go);
  addHelp(f, tr("MSE: mean squared error. SQNR: 10 log10(sum x^2 / sum (q-x)^2) in dB. Bias: mean "
                             "signed error. Underflow: nonzero inputs that became zero. Saturation: elements whose "
                             "cast overflowed. Bits per element: element bits plus every stored scale. All exact."));
  build(form);
  connect(go, &QPushButton::clicked, this, &View::recompute);
  // Recomputes on every change, once the changes pause (the running computation is cancelled).
  auto later = [this] { View::later(); };
  connect(source_, &QLineEdit::textChanged, this, [this](const QString& t) { markField(source_, sourceMessage_, sourceProblem(t)); });
  connect(source_, &QLineEdit::editingFinished, this, [this, later] {
    listTensors();
    if (sourceProblem(source_->text()).isEmpty()) later();
  });
  // A tensor picked from the list becomes the input: that tensor alone.
  connect(tensors_, &TensorList::picked, this, [this](const QString& name) {
    source_->setText("model:" + tensors_->modelName() + ":" + exactPattern(name));
    recompute();
  });
  connect(size_, &QSpinBox::valueChanged, this, later);
  connect(seed_, &QSpinBox::valueChanged, this, later);
  connect(formats_, &QListWidget::itemChanged, this, later);
  connect(profiles_, &QListWidget::itemChanged, this, later);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Tensor file"), {}, tr("Tensors (*.npy *.csv *.f32 *.bin *.raw)"));
    if (!file.isEmpty()) source_->setText(file);
  });
}

void QuantizationLab::listTensors() {
  const QString s = source_->text().trimmed();
  if (!s.startsWith("model:")) {
    tensors_->setVisible(false);
    return;
  }
  const QString rest = s.mid(6);
  const QString model = rest.left(rest.indexOf(':') < 0 ? rest.size() : rest.indexOf(':'));
  if (model != tensors_->modelName())
    if (const QString err = tensors_->load(model); !err.isEmpty()) markField(source_, sourceMessage_, err);
  tensors_->setVisible(tensors_->count() > 0);
}

QString QuantizationLab::problem() const {
  const QString p = sourceProblem(source_->text());
  return p.isEmpty() ? QString() : tr("input: %1").arg(p);
}

namespace {

/// The checked items' texts, or FALLBACK when none is checked.
QStringList checkedOr(const QListWidget* list, const QString& fallback) {
  QStringList out;
  for (int i = 0; i < list->count(); ++i)
    if (list->item(i)->checkState() == Qt::Checked) out << list->item(i)->text();
  if (out.isEmpty()) out << fallback;
  return out;
}

/// The [[points]] of the Quantization Lab's experiment: each format with each profile that covers it (OCP covers
/// every format).
QString labPoints(const QStringList& formats, const QStringList& profiles) {
  QString points;
  for (const auto& f : formats) {
    auto parsed = parse_block_format(f.toStdString());
    bool any = false;
    for (const auto& p : profiles) {
      if (!parsed || !apply_profile(*parsed, p.toStdString()).ok()) continue;
      points += QString("[[points]]\nformat = %1\nprofile = %2\n").arg(tomlString(f), tomlString(p));
      any = true;
    }
    if (!any) points += QString("[[points]]\nformat = %1\nprofile = \"ocp\"\n").arg(tomlString(f));
  }
  return points;
}

/// The input's keys: source = SRC, or for model:NAME:PATTERN (a layer, or the layers, of a registered model or
/// weight file) weights = NAME and select = PATTERN.
QString labInput(const QString& src) {
  if (!src.startsWith("model:")) return "source = " + tomlString(src) + "\n";
  const QString rest = src.mid(6);
  const int colon = static_cast<int>(rest.indexOf(':'));
  return "weights = " + tomlString(colon < 0 ? rest : rest.left(colon)) + "\n" +
         (colon < 0 ? QString() : "select = " + tomlString(rest.mid(colon + 1)) + "\n");
}

/// The Quantization Lab's experiment: %1 its description, %2 the input's keys, %3 a generated input's shape and
/// seed, %4 its points.
constexpr const char* kLabExperiment = R"TOML(# Quantization Lab, saved from mxlab-gui
name = "quantization_lab"
description = %1
job = "analyze"
gaps = true
histogram_bins = 120

[inputs.input]
%2%3
[sweep]
input = "input"

%4
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
legend_title = "values"

[[plot]]
name = "error_vs_value"
kind = "line"
from = "error_by_value"
x = "magnitude"
y = "max_rel_error"
series = "format"
aggregate = "max"
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
aggregate = "sum"
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
aggregate = "max"
y_scale = "log2"
title = "Largest relative error by exponent gap"
x_label = "exponent gap"
y_label = "max relative error"
)TOML";

}  // namespace

QString QuantizationLab::experimentText() const {
  const QStringList formats = checkedOr(formats_, "mxfp8_e4m3");
  const QStringList profiles = checkedOr(profiles_, "ocp");
  const QString src = source_->text().trimmed();
  const bool generated = src.startsWith("gen:");
  return QString(kLabExperiment)
      .arg(tomlString(src + " through " + formats.join(", ")), labInput(src),
           generated ? QString("shape = \"%1\"\nseed = %2\n").arg(qulonglong{1} << size_->value()).arg(seed_->value()) : QString(),
           labPoints(formats, profiles));
}

// ---- Bounds

BoundsView::BoundsView(QWidget* parent) : View(parent) {
  auto* form = new QGroupBox(tr("Formats"), this);
  auto* f = new QFormLayout(form);
  a_ = formatBox(blockNames(), "mxint8", form);
  b_ = formatBox(blockNames(), "mxsf", form);
  for (auto* box : {a_, b_})
    box->setToolTip(tr("A block format (mxint8, mxfp8_e4m3, mxsf, boost_e2m5, mxfp4@16, ...)"));
  maxGap_ = new QSpinBox(form);
  maxGap_->setRange(-1, 64);
  maxGap_->setValue(-1);
  maxGap_->setSpecialValueText(tr("until both underflow"));
  aMessage_ = messageLine(form);
  bMessage_ = messageLine(form);
  f->addRow(tr("format A"), a_);
  f->addRow(aMessage_);
  f->addRow(tr("format B"), b_);
  f->addRow(bMessage_);
  f->addRow(tr("last gap"), maxGap_);
  auto* go = new QPushButton(tr("Compare"), form);
  f->addRow(go);
  addHelp(f, tr("For each exponent gap g = floor(log2 amax) - floor(log2 |x|) of an element in its block: "
                             "the supremum of the relative error |q - x| / |x| and of the absolute error in units of "
                             "2^floor(log2 amax), computed exactly twice (closed forms and enumeration of every code). "
                             "Dashed lines mark the gaps where the better format changes."));
  build(form);
  connect(go, &QPushButton::clicked, this, &View::recompute);
  checkAsTyped(a_, aMessage_, blockFormatProblem, this, [this] { later(); });
  checkAsTyped(b_, bMessage_, blockFormatProblem, this, [this] { later(); });
  connect(maxGap_, &QSpinBox::valueChanged, this, [this] { later(); });
}

QString BoundsView::problem() const {
  if (QString p = blockFormatProblem(a_->currentText()); !p.isEmpty()) return tr("format A: %1").arg(p);
  if (QString p = blockFormatProblem(b_->currentText()); !p.isEmpty()) return tr("format B: %1").arg(p);
  return {};
}

QString BoundsView::experimentText() const {
  const QString a = a_->currentText().trimmed(), b = b_->currentText().trimmed();
  return QString(R"TOML(# Bounds, saved from mxlab-gui
name = "bounds"
description = %1
job = "bounds"
%2
[sweep]
format = %3

[[points]]
a = %4
b = %5

[[table]]
name = "bounds"
from = "bounds"
where = { a = %4 }
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
      .arg(tomlString("worst-case error by exponent gap: " + a + " and " + b), maxGap_->value() >= 0 ? QString("max_gap = %1\n").arg(maxGap_->value()) : QString(),
           tomlList(a == b ? QStringList{a} : QStringList{a, b}), tomlString(a), tomlString(b));
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

QString ExperimentsView::check(const QString& path) {
  auto e = experiment::read_experiment(path.toStdString());
  if (!e) return QString::fromStdString(e.error().message);
  if (!e->batch.empty()) return tr("%1 is a batch of experiment files: open one of them").arg(path);
  return {};
}

QString ExperimentsView::open(const QString& path) {
  if (QString p = check(path); !p.isEmpty()) return p;
  auto e = experiment::read_experiment(path.toStdString());
  if (!e) return QString::fromStdString(e.error().message);
  file_ = path;
  text_ = QString::fromStdString(e->text);
  path_->setText(path);
  description_->setText(QString::fromStdString(e->description));
  study_->run(text_, file_);
  return {};
}

QString ExperimentsView::experimentText() const { return text_; }

}  // namespace mxlab::gui
