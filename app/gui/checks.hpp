// What a field of a view accepts, checked as it is typed (and when the last session is restored), by the
// engine's own parsers: an empty message means the text is accepted. Fields show a failed check in place
// (a red border and a message line under the field), never in a dialog.
#pragma once

#include <QString>

class QLabel;
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

}  // namespace mxlab::gui
