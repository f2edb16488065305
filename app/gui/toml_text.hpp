// TOML text of the experiment files the GUI writes: strings escaped as TOML basic strings.
#pragma once

#include <QString>
#include <QStringList>

namespace mxlab::gui {

/// A TOML basic string: quotes, backslashes and control characters escaped, so any text (a description
/// naming recipes in quotes, a path with backslashes) reads back as itself.
inline QString tomlString(const QString& s) {
  QString out = "\"";
  for (const QChar c : s) {
    switch (c.unicode()) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c.unicode() < 0x20 || c.unicode() == 0x7F) out += QString("\\u%1").arg(int(c.unicode()), 4, 16, QChar('0'));
        else out += c;
    }
  }
  return out + "\"";
}

/// A TOML array of strings.
inline QString tomlList(const QStringList& items) {
  QStringList quoted;
  for (const auto& s : items) quoted << tomlString(s);
  return "[" + quoted.join(", ") + "]";
}

}  // namespace mxlab::gui
