// Value Explorer.
#include "value_view.hpp"

#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "checks.hpp"
#include "mxlab/core/random.hpp"
#include "mxlab/formats/cast.hpp"
#include "mxlab/ops/catalogue.hpp"
#include "mxlab/ops/inspect.hpp"

namespace mxlab::gui {

namespace {

/// Field colours: sign, exponent, mantissa (float-toy's), and the bits of integers and codebook indices.
const char* const kSignColour = "#f8bbd0";
const char* const kExponentColour = "#c8e6c9";
const char* const kMantissaColour = "#bbdefb";
const char* const kOtherColour = "#e0e0e0";

/// A cell of a one-row engine table by column name.
QString cellOf(const Table& t, const char* column) {
  for (std::size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c] == column && !t.rows.empty()) return QString::fromStdString(t.rows[0][c]);
  return {};
}

QString hexOf(const Format& f, std::uint32_t code) {
  return "0x" + QString::number(code, 16).toUpper().rightJustified((f.bits() + 3) / 4, '0');
}

}  // namespace

ValueExplorer::ValueExplorer(QWidget* parent) : QWidget(parent) {
  QVBoxLayout* rl = formBeside(this, buildForm());
  buildBits(rl);
  buildReadout(rl);
  buildRoundings(rl);
  connectFields();
  formatChanged();
}

QGroupBox* ValueExplorer::buildForm() {
  auto* form = new QGroupBox(tr("Value"), this);
  auto* f = new QFormLayout(form);
  format_ = formatBox(elementNames(), "e4m3", form);
  format_->setToolTip(tr("Any format string: a catalogue name, a block format's name (its element), or a format "
                         "written down (e3m4, e2m5b3, int6)"));
  formatMessage_ = messageLine(form);
  value_ = new QLineEdit("0.3", form);
  value_->setToolTip(tr("A decimal or C99 hex literal (0.1, -1.5e-3, 0x1.8p+3), read exactly; nan, inf, -inf"));
  valueMessage_ = messageLine(form);
  code_ = new QLineEdit(form);
  code_->setToolTip(tr("A code of the format in hexadecimal (0x38), or 0b binary"));
  codeMessage_ = messageLine(form);
  overflow_ = new QComboBox(form);
  overflow_->addItems({"default", "saturate", "inf", "nan"});
  overflow_->setToolTip(tr("Values beyond the largest finite value: the format's default (inf where it has one, "
                           "else saturate), clamp, infinity or NaN (docs/casting.md)"));
  subnormals_ = new QComboBox(form);
  subnormals_->addItems({"keep", "flush", "flush-input", "flush-output"});
  subnormals_->setToolTip(tr("Subnormal inputs and results: kept, or flushed to zero"));
  seed_ = new QSpinBox(form);
  seed_->setRange(0, 1 << 30);
  seed_->setToolTip(tr("Seed of stochastic rounding's random bits (stochastic_bits(seed, 0))"));
  f->addRow(tr("format"), format_);
  f->addRow(formatMessage_);
  f->addRow(tr("value"), value_);
  f->addRow(valueMessage_);
  f->addRow(tr("code"), code_);
  f->addRow(codeMessage_);
  f->addRow(tr("overflow"), overflow_);
  f->addRow(tr("subnormals"), subnormals_);
  f->addRow(tr("stochastic seed"), seed_);
  addHelp(f, tr("Type a value to see the code it rounds to (nearest, ties to even) and its rounding "
                "under every mode with the exact error; type a code or click a bit to toggle it. "
                "Every value is exact (mxlab cast, mxlab codepoints)."));
  return form;
}

void ValueExplorer::buildBits(QVBoxLayout* rl) {
  QWidget* right = rl->parentWidget();
  bitRow_ = new QWidget(right);
  bitLayout_ = new QHBoxLayout(bitRow_);
  bitLayout_->setSpacing(2);
  bitLayout_->setContentsMargins(0, 0, 0, 0);
  rl->addWidget(bitRow_);
  auto* legend = new QLabel(QString("<span style='background:%1'>&nbsp;sign&nbsp;</span> "
                                    "<span style='background:%2'>&nbsp;exponent&nbsp;</span> "
                                    "<span style='background:%3'>&nbsp;mantissa&nbsp;</span> "
                                    "<span style='background:%4'>&nbsp;integer or index bits&nbsp;</span> &nbsp; %5")
                                .arg(kSignColour, kExponentColour, kMantissaColour, kOtherColour, tr("click a bit to toggle it")),
                            right);
  rl->addWidget(legend);
}

void ValueExplorer::buildReadout(QVBoxLayout* rl) {
  QWidget* right = rl->parentWidget();
  auto* readout = new QWidget(right);
  auto* grid = new QFormLayout(readout);
  readoutKeys_ = {"code", "bits", "fields", "class", "exact", "value", "gap_up"};
  const QStringList labels = {tr("code"), tr("bits"), tr("fields"), tr("class"), tr("exact value"), tr("value (%.17g)"),
                              tr("gap to the next value")};
  for (int i = 0; i < readoutKeys_.size(); ++i) {
    auto* l = new QLabel(readout);
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    l->setWordWrap(true);
    readoutLabels_.push_back(l);
    grid->addRow(labels[i], l);
  }
  down_ = new QPushButton(readout);
  up_ = new QPushButton(readout);
  down_->setToolTip(tr("The next value below (nextDown): show its code"));
  up_->setToolTip(tr("The next value above (nextUp): show its code"));
  auto* nb = new QHBoxLayout;
  nb->addWidget(down_, 1);
  nb->addWidget(up_, 1);
  grid->addRow(tr("neighbours"), nb);
  rl->addWidget(readout);
}

void ValueExplorer::buildRoundings(QVBoxLayout* rl) {
  QWidget* right = rl->parentWidget();
  inputLine_ = new QLabel(right);
  inputLine_->setWordWrap(true);
  inputLine_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  rl->addWidget(inputLine_);
  roundings_ = new QTableWidget(right);
  roundings_->setColumnCount(7);
  roundings_->setHorizontalHeaderLabels({tr("rounding"), tr("code"), tr("bits"), tr("value (exact)"), tr("flags"),
                                         tr("error (exact)"), tr("relative error (exact)")});
  roundings_->verticalHeader()->setVisible(false);
  roundings_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  roundings_->horizontalHeader()->setStretchLastSection(true);
  roundings_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  rl->addWidget(roundings_, 1);
}

void ValueExplorer::connectFields() {
  checkAsTyped(format_, formatMessage_, elementFormatProblem, this, [this] { formatChanged(); });
  connect(value_, &QLineEdit::textChanged, this, &ValueExplorer::valueEdited);
  connect(code_, &QLineEdit::textEdited, this, &ValueExplorer::codeEdited);
  for (QComboBox* box : {overflow_, subnormals_}) connect(box, &QComboBox::currentTextChanged, this, &ValueExplorer::valueEdited);
  connect(seed_, &QSpinBox::valueChanged, this, &ValueExplorer::fillRoundings);
  connect(down_, &QPushButton::clicked, this, [this] {
    if (downCode_) showCode(*downCode_);
  });
  connect(up_, &QPushButton::clicked, this, [this] {
    if (upCode_) showCode(*upCode_);
  });
}

QString ValueExplorer::readout(const QString& key) const {
  if (key == "down") return down_->text();
  if (key == "up") return up_->text();
  const auto i = readoutKeys_.indexOf(key);
  return i < 0 ? QString() : readoutLabels_[static_cast<std::size_t>(i)]->text();
}

void ValueExplorer::formatChanged() {
  fmt_ = elementFormatOf(format_->currentText());
  if (!fmt_) return;
  rebuildBits();
  code_value_.reset();
  valueEdited();
}

void ValueExplorer::rebuildBits() {
  for (QPushButton* b : bitButtons_) delete b;
  bitButtons_.clear();
  while (QLayoutItem* item = bitLayout_->takeAt(0)) delete item;
  const FormatSpec& s = fmt_->spec();
  const int n = fmt_->bits();
  for (int i = 0; i < n; ++i) {
    const int bit = n - 1 - i;  // most significant first
    const char* colour = kOtherColour;
    if (s.kind == FormatKind::Float) {
      colour = s.is_signed && bit == n - 1 ? kSignColour : bit >= s.mantissa_bits ? kExponentColour : kMantissaColour;
    } else if (s.kind == FormatKind::Integer && s.is_signed && bit == n - 1) {
      colour = kSignColour;
    }
    auto* b = new QPushButton("0", bitRow_);
    b->setFixedSize(n > 24 ? 24 : 30, 34);
    b->setToolTip(tr("bit %1: click to toggle").arg(bit));
    b->setStyleSheet(QString("QPushButton { background: %1; border: 1px solid #757575; font: bold 13px monospace; }").arg(colour));
    connect(b, &QPushButton::clicked, this, [this, bit] {
      if (code_value_) showCode(*code_value_ ^ (std::uint32_t{1} << bit));
    });
    bitLayout_->addWidget(b);
    bitButtons_.push_back(b);
  }
  bitLayout_->addStretch(1);
}

void ValueExplorer::showCode(std::uint32_t code) { display(code, true); }

void ValueExplorer::display(std::uint32_t code, bool takeValue) {
  if (!fmt_ || code >= fmt_->code_count()) return;
  code_value_ = code;
  markField(code_, codeMessage_, {});
  code_->setText(hexOf(*fmt_, code));
  for (std::size_t i = 0; i < bitButtons_.size(); ++i) {
    const int bit = static_cast<int>(bitButtons_.size() - 1 - i);
    bitButtons_[i]->setText((code >> bit) & 1U ? "1" : "0");
  }
  const Table row = ops::codepoint_table(*fmt_, code, code);
  const QString cls = cellOf(row, "class");
  QString fields = tr("sign %1").arg(cellOf(row, "sign"));
  if (fmt_->kind() == FormatKind::Float)
    fields += tr(", exponent field %1, mantissa field %2").arg(cellOf(row, "exponent"), cellOf(row, "mantissa"));
  const QStringList values = {hexOf(*fmt_, code) + " = " + cellOf(row, "code"), cellOf(row, "bits"), fields, cls,
                              cellOf(row, "exact"), cellOf(row, "value"),
                              cellOf(row, "gap_up").isEmpty() ? tr("none (largest finite value, or not finite)") : cellOf(row, "gap_up")};
  for (std::size_t i = 0; i < readoutLabels_.size(); ++i) readoutLabels_[i]->setText(values[static_cast<int>(i)]);
  const ops::Neighbours n = ops::neighbours(*fmt_, code);
  downCode_ = n.down;
  upCode_ = n.up;
  auto describe = [this](const std::optional<std::uint32_t>& c, const QString& arrow) {
    if (!c) return arrow + tr(" none");
    return arrow + " " + hexOf(*fmt_, *c) + " = " + cellOf(ops::codepoint_table(*fmt_, *c, *c), "exact");
  };
  down_->setText(describe(n.down, QString::fromUtf8("\u2193")));
  up_->setText(describe(n.up, QString::fromUtf8("\u2191")));
  down_->setEnabled(n.down.has_value());
  up_->setEnabled(n.up.has_value());
  // A code typed or toggled: the value field takes the code's value (its exact decimal; nan, inf as such), so
  // the roundings below are those of the value on screen.
  const QString exact = cellOf(row, "exact");
  const QString text = cls == "nan" ? (cellOf(row, "sign") == "1" ? "-nan" : "nan") : exact;
  if (takeValue && value_->text() != text) {
    const QSignalBlocker block(value_);
    value_->setText(text);
  }
  markField(value_, valueMessage_, {});
  fillRoundings();
}

void ValueExplorer::valueEdited() {
  if (!fmt_) return;
  CastOptions o;
  o.overflow = *parse_overflow(overflow_->currentText().toStdString());
  o.subnormals = *parse_subnormals(subnormals_->currentText().toStdString());
  auto resolved = resolve_options(*fmt_, o);
  if (!resolved) {
    markField(overflow_, valueMessage_, QString::fromStdString(resolved.error().message));
    return;
  }
  markField(overflow_, nullptr, {});
  auto c = ops::cast_text(*fmt_, value_->text().trimmed().toStdString(), *resolved);
  if (!c) {
    markField(value_, valueMessage_, QString::fromStdString(c.error().message));
    roundings_->setRowCount(0);
    return;
  }
  markField(value_, valueMessage_, {});
  display(c->result.code, false);
}

void ValueExplorer::codeEdited() {
  if (!fmt_) return;
  QString t = code_->text().trimmed().toLower();
  bool ok = false;
  qulonglong v = 0;
  if (t.startsWith("0b")) v = t.mid(2).toULongLong(&ok, 2);
  else v = (t.startsWith("0x") ? t.mid(2) : t).toULongLong(&ok, 16);
  if (!ok || v >= fmt_->code_count()) {
    markField(code_, codeMessage_,
              tr("code '%1': expected a code of %2 from 0x0 to %3 (hexadecimal, or 0b binary)")
                  .arg(code_->text(), QString::fromStdString(fmt_->name()), hexOf(*fmt_, static_cast<std::uint32_t>(fmt_->code_count() - 1))));
    return;
  }
  const int cursor = code_->cursorPosition();
  const QString typed = code_->text();
  display(static_cast<std::uint32_t>(v), true);
  code_->setText(typed);  // the text stays as typed while it is edited
  code_->setCursorPosition(cursor);
}

void ValueExplorer::fillRoundings() {
  roundings_->setRowCount(0);
  if (!fmt_) return;
  const std::string text = value_->text().trimmed().toStdString();
  CastOptions o;
  o.overflow = *parse_overflow(overflow_->currentText().toStdString());
  o.subnormals = *parse_subnormals(subnormals_->currentText().toStdString());
  int row = 0;
  inputLine_->clear();
  for (const Rounding r : kAllRoundings) {
    o.rounding = r;
    auto resolved = resolve_options(*fmt_, o);
    if (!resolved) return;
    const std::uint32_t random = r == Rounding::Stochastic ? stochastic_bits(static_cast<std::uint64_t>(seed_->value()), 0) : 0;
    auto c = ops::cast_text(*fmt_, text, *resolved, random);
    if (!c) return;
    QStringList flags;
    if (c->result.inexact) flags << "inexact";
    if (c->result.overflow) flags << "overflow";
    if (c->result.underflow) flags << "underflow";
    if (c->result.invalid) flags << "invalid";
    if (row == 0)
      inputLine_->setText(tr("<b>%1</b> %2 %3 (%4); rounded to %5 under each mode (error = rounded - input, exact; "
                             "relative error = |error| / |input|):")
                              .arg(value_->text().trimmed().toHtmlEscaped(),
                                   c->input_rounded ? tr("is not a %1 value: read as").arg(QString::fromStdString(std::string(to_string(o.source))))
                                                    : tr("is read exactly as"),
                                   QString::fromStdString(c->input_exact), QString::fromStdString(std::string(to_string(o.source))),
                                   QString::fromStdString(fmt_->name())));
    QString rel = QString::fromStdString(c->rel_error_exact);
    if (!std::isnan(c->rel_error) && QString::number(c->rel_error, 'g', 17) != rel)
      rel += QString::fromUtf8(" \u2248 ") + QString::number(c->rel_error, 'g', 6);
    const QStringList cells = {QString::fromStdString(std::string(to_string(r))), hexOf(*fmt_, c->result.code),
                               QString::fromStdString(bit_string(*fmt_, c->result.code)), QString::fromStdString(c->exact),
                               flags.join(", "), QString::fromStdString(c->error_exact), rel};
    roundings_->insertRow(row);
    for (int k = 0; k < cells.size(); ++k) {
      auto* item = new QTableWidgetItem(cells[k]);
      item->setToolTip(cells[k]);
      roundings_->setItem(row, k, item);
    }
    ++row;
  }
}

}  // namespace mxlab::gui
