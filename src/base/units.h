#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace stallscope {

/// Parses a duration such as "500ms", "1s", "2.5s", "10m", "1h", "250us" into ns.
/// A bare number is seconds. Errors name the text and the accepted units.
[[nodiscard]] Result<int64_t> ParseDurationNs(std::string_view text);

/// Formats a wall time (ns since epoch) as RFC 3339 UTC with milliseconds:
/// "2026-11-21T18:30:00.123Z".
[[nodiscard]] std::string FormatIsoUtc(int64_t wall_ns);

/// Appends `text` to `out` as a JSON string literal (with quotes), escaping control characters,
/// quotes, backslashes and invalid UTF-8 bytes (as \u00XX), so any process name stays valid JSON.
void AppendJsonString(std::string& out, std::string_view text);

/// `text` cut to at most `max_bytes` for a table column or a one-line message, its last kept
/// byte replaced by '~' when it was cut ("/usr/bin/python3 exa~").
[[nodiscard]] std::string Elide(std::string_view text, size_t max_bytes);

/// `text` for a terminal: control characters and DEL written as escapes ("\\n", "\\t",
/// "\\x1b"), so a string from the environment or another program cannot move the cursor,
/// recolour the terminal or forge a line of the report. Other bytes (UTF-8) pass through.
[[nodiscard]] std::string EscapeControl(std::string_view text);

/// `s` without leading blanks (space, tab) and trailing blanks and newlines.
[[nodiscard]] std::string_view Trim(std::string_view s);

/// Formats a byte count for people: "12.3 GB" (decimal units, one decimal).
[[nodiscard]] std::string FormatBytes(double bytes);

/// Formats a duration in ns for people: "850 ms", "2.40 s", "3m12s".
[[nodiscard]] std::string FormatDurationNs(int64_t ns);

}  // namespace stallscope
