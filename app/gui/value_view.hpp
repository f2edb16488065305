// Value Explorer: one value in one format, in the style of float-toy. Type a value (any literal `mxlab cast`
// reads) or a code; see the code's bits coloured by field, its class, exact value and neighbours, and the
// typed value rounded under every rounding mode with its exact error. Clicking a bit toggles it. Every number
// is the engine's (ops::cast_text, ops::neighbours, ops::codepoint_table).
#pragma once

#include <QWidget>
#include <cstdint>
#include <optional>
#include <vector>

#include "mxlab/formats/format.hpp"

class QComboBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QHBoxLayout;
class QVBoxLayout;

namespace mxlab::gui {

class ValueExplorer : public QWidget {
  Q_OBJECT

 public:
  explicit ValueExplorer(QWidget* parent = nullptr);

  QComboBox* format() const { return format_; }
  QLineEdit* value() const { return value_; }
  QLineEdit* code() const { return code_; }
  QComboBox* overflow() const { return overflow_; }
  QSpinBox* seed() const { return seed_; }
  /// The message under the value field (why the text is not a number), hidden while it is one.
  QLabel* valueMessage() const { return valueMessage_; }
  QLabel* codeMessage() const { return codeMessage_; }
  /// The code shown, if the format parses.
  std::optional<std::uint32_t> shownCode() const { return code_value_; }
  /// The bit buttons, most significant first.
  const std::vector<QPushButton*>& bits() const { return bitButtons_; }
  /// What the readout shows for a key: "class", "exact", "value", "gap_up", "down", "up", "fields".
  QString readout(const QString& key) const;
  /// The rounding table: one row per rounding mode (columns: mode, code, bits, value, flags, error, relative error).
  QTableWidget* roundings() const { return roundings_; }
  /// The line over the rounding table: the value typed and the input it is read as (exact).
  QLabel* inputLine() const { return inputLine_; }
  /// The neighbours' buttons (jump to the code below or above).
  QPushButton* downButton() const { return down_; }
  QPushButton* upButton() const { return up_; }

 public slots:
  /// Shows a code of the format: its bits, readout and neighbours; the value field takes its exact value.
  void showCode(std::uint32_t code);

 private:
  /// The form (format, value, code, cast options); the bits and their legend; the readout of the code with its
  /// neighbours; the input line and the table of roundings.
  QGroupBox* buildForm();
  void buildBits(QVBoxLayout* rl);
  void buildReadout(QVBoxLayout* rl);
  void buildRoundings(QVBoxLayout* rl);
  /// Every field redraws what depends on it.
  void connectFields();

  /// Shows a code; takeValue: the value field takes its exact value (a code typed or toggled, not a value typed).
  void display(std::uint32_t code, bool takeValue);
  void formatChanged();
  void valueEdited();
  void codeEdited();
  /// Fills the rounding table for the value field's text.
  void fillRoundings();
  void rebuildBits();

  QComboBox* format_ = nullptr;
  QLabel* formatMessage_ = nullptr;
  QLineEdit* value_ = nullptr;
  QLabel* valueMessage_ = nullptr;
  QLineEdit* code_ = nullptr;
  QLabel* codeMessage_ = nullptr;
  QComboBox* overflow_ = nullptr;
  QComboBox* subnormals_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QWidget* bitRow_ = nullptr;
  QHBoxLayout* bitLayout_ = nullptr;
  std::vector<QPushButton*> bitButtons_;
  std::vector<QLabel*> readoutLabels_;
  QStringList readoutKeys_;
  QPushButton* down_ = nullptr;
  QPushButton* up_ = nullptr;
  QLabel* inputLine_ = nullptr;  ///< the value typed and the input it is read as
  QTableWidget* roundings_ = nullptr;
  std::optional<Format> fmt_;
  std::optional<std::uint32_t> code_value_;
  std::optional<std::uint32_t> downCode_, upCode_;
};

}  // namespace mxlab::gui
