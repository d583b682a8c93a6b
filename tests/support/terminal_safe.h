#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace stallscope::testing {

/// Names that try to take over a terminal (issue 12, finding 6): an OSC that sets the window
/// title, an SGR colour, a carriage return that overwrites the line, and an embedded NUL.
inline const std::string kHostileName = std::string("\x1b]0;pwned\x07 \x1b[31mred\rcr\0nul", 26);

/// The escaped form EscapeControl gives kHostileName: what a report must show instead.
inline constexpr std::string_view kHostileEscaped = "\\x1b]0;pwned\\x07 \\x1b[31mred\\rcr\\x00nul";

/// Where `text`, meant for a terminal, holds a control byte other than the '\n' that ends a line
/// (or DEL): "" when none, else the first offender's offset and value.
inline std::string RawControlBytes(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) {
      return fmt::format("raw byte 0x{:02x} at offset {}: ...{}...", c, i,
                         text.substr(i > 40 ? i - 40 : 0, 80));
    }
  }
  return "";
}

}  // namespace stallscope::testing
