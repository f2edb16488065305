// Checks of what the views' fields accept.
#include "checks.hpp"

#include <QComboBox>
#include <QCompleter>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QSplitter>
#include <QVBoxLayout>
#include <QLabel>
#include <QLineEdit>

#include "mxlab/formats/catalogue.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/io/distributions.hpp"
#include "mxlab/io/weights.hpp"
#include "mxlab/quantize/block_format.hpp"

namespace mxlab::gui {

namespace {

/// Longest text a field takes (a name pattern is at most 4096 bytes; the rest of a source is short).
constexpr qsizetype kMaxFieldChars = 8192;

QString tooLong(const QString& text) {
  return text.size() > kMaxFieldChars ? QObject::tr("%1 characters: longer than the %2 a field takes").arg(text.size()).arg(kMaxFieldChars)
                                      : QString();
}

}  // namespace

QString elementFormatProblem(const QString& text) {
  if (auto e = tooLong(text); !e.isEmpty()) return e;
  const std::string s = text.trimmed().toStdString();
  if (s.empty()) return QObject::tr("type a format: e4m3, e2m1, int8, e3m4, ...");
  auto f = parse_format(s);
  if (f || parse_block_format(s)) return {};
  return QString::fromStdString(f.error().message);
}

QString blockFormatProblem(const QString& text) {
  if (auto e = tooLong(text); !e.isEmpty()) return e;
  const std::string s = text.trimmed().toStdString();
  if (s.empty()) return QObject::tr("type a block format: mxfp4, mxint8, mxfp4@16, ...");
  auto b = parse_block_format(s);
  return b ? QString() : QString::fromStdString(b.error().message);
}

QString sourceProblem(const QString& text) {
  if (auto e = tooLong(text); !e.isEmpty()) return e;
  const QString s = text.trimmed();
  if (s.isEmpty()) return QObject::tr("type an input: gen:normal:0,1, a tensor file, model:NAME:PATTERN or data:NAME");
  if (s.startsWith("gen:")) {
    auto d = parse_distribution(s.mid(4).toStdString());
    if (!d) return QString::fromStdString(d.error().message);
    auto v = validate_distribution(*d, s.toStdString());
    return v ? QString() : QString::fromStdString(v.error().message);
  }
  if (s.startsWith("model:")) {
    const QString rest = s.mid(6);
    const qsizetype colon = rest.indexOf(':');
    if ((colon < 0 ? rest : rest.left(colon)).isEmpty()) return QObject::tr("model:NAME[:PATTERN]: the model's name is missing");
    if (colon < 0) return {};
    auto p = NamePattern::parse(rest.mid(colon + 1).toStdString());
    return p ? QString() : QString::fromStdString(p.error().message);
  }
  if (s.startsWith("data:")) return s.size() > 5 ? QString() : QObject::tr("data:NAME[:SPLIT]: the data set's name is missing");
  const QFileInfo f(s);
  if (!f.exists()) return QObject::tr("%1: no such file").arg(s);
  if (!f.isFile()) return QObject::tr("%1: not a file").arg(s);
  return {};
}

void markField(QWidget* field, QLabel* message, const QString& problem) {
  field->setStyleSheet(problem.isEmpty() ? QString()
                                        : QString("%1 { border: 2px solid #c62828; }").arg(field->metaObject()->className()));
  // The reason also as the text field's tooltip (an editable combo box's line edit).
  QWidget* text = field;
  if (auto* box = qobject_cast<QComboBox*>(field); box && box->lineEdit()) text = box->lineEdit();
  text->setToolTip(problem);
  if (message) {
    message->setText(problem);
    message->setVisible(!problem.isEmpty());
  }
}

QLabel* messageLine(QWidget* parent) {
  auto* l = new QLabel(parent);
  l->setWordWrap(true);
  l->setStyleSheet(QStringLiteral("color: #c62828;"));
  l->setVisible(false);
  l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  return l;
}

std::optional<Format> elementFormatOf(const QString& text) {
  const std::string s = text.trimmed().toStdString();
  if (auto f = parse_format(s)) return *f;
  if (auto b = parse_block_format(s)) return b->element;
  return std::nullopt;
}

QStringList elementNames() {
  QStringList out;
  for (const Format& f : catalogue_formats()) out << QString::fromStdString(f.name());
  return out;
}

QStringList blockNames() {
  QStringList out;
  for (const auto& n : block_format_names()) out << QString::fromStdString(n);
  return out;
}

QComboBox* formatBox(const QStringList& names, const QString& current, QWidget* parent) {
  auto* box = new QComboBox(parent);
  box->setEditable(true);
  box->addItems(names);
  box->setCurrentText(current);
  box->setInsertPolicy(QComboBox::NoInsert);
  box->completer()->setCompletionMode(QCompleter::PopupCompletion);
  box->completer()->setCaseSensitivity(Qt::CaseSensitive);
  return box;
}

void addHelp(QFormLayout* form, const QString& text) {
  auto* help = new QLabel(text, form->parentWidget());
  help->setWordWrap(true);
  form->addRow(help);
}

QVBoxLayout* formBeside(QWidget* view, QWidget* form) {
  form->setMaximumWidth(360);
  auto* split = new QSplitter(view);
  auto* right = new QWidget(split);
  auto* column = new QVBoxLayout(right);
  column->setContentsMargins(0, 0, 0, 0);
  split->addWidget(form);
  split->addWidget(right);
  split->setStretchFactor(1, 1);
  split->setSizes({360, 100000});  // the form no wider than it may be, the results the rest
  auto* layout = new QHBoxLayout(view);
  layout->addWidget(split);
  return column;
}

void checkAsTyped(QComboBox* box, QLabel* message, QString (*check)(const QString&), QObject* context,
                  const std::function<void()>& accepted) {
  QObject::connect(box, &QComboBox::currentTextChanged, context, [=](const QString& text) {
    const QString p = text == QObject::tr("(none)") ? QString() : check(text);
    markField(box, message, p);
    if (p.isEmpty()) accepted();
  });
}

}  // namespace mxlab::gui
