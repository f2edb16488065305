// What a field of a view accepts, checked as it is typed (and when the last session is restored), by the
// engine's own parsers: an empty message means the text is accepted. Fields show a failed check in place
// (a red border and a message line under the field), never in a dialog.
#pragma once

#include <QString>
#include <QStringList>
#include <functional>
#include <optional>

#include "mxlab/formats/format.hpp"

class QComboBox;
class QFormLayout;
class QVBoxLayout;
class QLabel;
class QObject;
class QWidget;

namespace mxlab::gui {

/// An element format string (catalogue name, written-down format, or a block format's name for its element).
QString elementFormatProblem(const QString& text);
/// A block format string (`mxfp4`, `mxfp4@16`, `e2m1:e8m0_t32`).
QString blockFormatProblem(const QString& text);
/// A Quantization Lab input: `gen:DIST`, `model:NAME[:PATTERN]`, `data:NAME[:SPLIT]` or a tensor file.
QString sourceProblem(const QString& text);

/// Shows `problem` on the field (red border, message line) or clears it when empty.
void markField(QWidget* field, QLabel* message, const QString& problem);
/// A message line for a field: red, word-wrapped, hidden while empty.
QLabel* messageLine(QWidget* parent);

/// The element format a format field names (a block format's name stands for its element), if it parses.
std::optional<Format> elementFormatOf(const QString& text);
/// The catalogue's element formats and the named block formats, by name.
QStringList elementNames();
QStringList blockNames();
/// An editable format field listing `names`, completing in a list under the field (the text stays as typed).
QComboBox* formatBox(const QStringList& names, const QString& current, QWidget* parent);
/// Adds a word-wrapped help text as the form's last row.
void addHelp(QFormLayout* form, const QString& text);
/// Lays out a view: the form on the left (at most 360 pixels wide), a column for the results on the right (the
/// layout returned, its widget the parent of what it holds), split so the results take the rest.
QVBoxLayout* formBeside(QWidget* view, QWidget* form);

/// Checks a field as it is typed: a problem shows on the field; accepted text calls `accepted` ("(none)" passes).
void checkAsTyped(QComboBox* box, QLabel* message, QString (*check)(const QString&), QObject* context,
                  const std::function<void()>& accepted);

}  // namespace mxlab::gui
