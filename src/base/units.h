#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace stallscope {

/// Time is int64 nanoseconds everywhere; these are the only ns-per-unit constants.
inline constexpr int64_t kNsPerUs = 1'000;
inline constexpr int64_t kNsPerMs = 1'000'000;
inline constexpr int64_t kNsPerSec = 1'000'000'000;

/// Binary byte units (IEC), the only definitions: GiB for memory sizes and doctor's limits, MiB
/// for NVML's and nvidia-smi's memory figures. FormatBytes prints decimal units (GB) for people.
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

/// `ns` in seconds (for rates and for people; arithmetic stays in ns).
[[nodiscard]] constexpr double NsToSeconds(int64_t ns) {
  return static_cast<double>(ns) / static_cast<double>(kNsPerSec);
}

/// Parses a duration such as "500ms", "1s", "2.5s", "10m", "1h", "250us" into ns.
/// A bare number is seconds. Errors name the text and the accepted units.
[[nodiscard]] Result<int64_t> ParseDurationNs(std::string_view text);

/// Formats a wall time (ns since epoch) as RFC 3339 UTC with milliseconds:
/// "2026-11-21T18:30:00.123Z".
[[nodiscard]] std::string FormatIsoUtc(int64_t wall_ns);

/// Appends `text` to `out` as a JSON string literal (with quotes), escaping control characters,
/// quotes, backslashes and invalid UTF-8 bytes (as \u00XX), so any process name stays valid JSON.
void AppendJsonString(std::string& out, std::string_view text);

/// Appends code point `c` (not a surrogate, at most U+10FFFF) to `out` as UTF-8.
void AppendUtf8(std::string& out, uint32_t c);

/// `text` cut to at most `max_bytes` for a table column or a one-line message, its last kept
/// byte replaced by '~' when it was cut ("/usr/bin/python3 exa~").
[[nodiscard]] std::string Elide(std::string_view text, size_t max_bytes);
/// `text` cut to at most `max_bytes` at a UTF-8 character boundary, "..." marking the cut (a
/// source line, a command line shown whole in a line of its own).
[[nodiscard]] std::string CutUtf8(std::string_view text, size_t max_bytes);

/// `text` for a terminal: control characters and DEL written as escapes ("\\n", "\\t",
/// "\\x1b"), C1 controls too (U+0080..U+009F as "\\u009b", a lone byte 0x80..0x9f as
/// "\\x9b"), so a string from the environment or another program cannot move the cursor,
/// recolour the terminal or forge a line of the report. Other characters (UTF-8) and other
/// bytes pass through.
[[nodiscard]] std::string EscapeControl(std::string_view text);

/// strerror(`err`) as the cause in a message ("permission denied", "too many levels of
/// symbolic links"): the first letter lowercased. Issue 27 B21: say the real cause, not a guess.
[[nodiscard]] std::string ErrnoText(int err);

/// `s` without the whitespace JSON allows (space, tab, newline, carriage return) at either end:
/// the one trim for config values, /proc lines, environment variables and JSON tokens.
[[nodiscard]] inline std::string_view Trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

/// The whole of `s` as a decimal int64: an optional '-' and digits, nothing else (no blanks, no
/// '+'; Trim first where blanks are allowed). Empty when `s` is anything else or out of range.
/// Fast on the short numbers of traces and /proc (no allocation). Inline: the trace reader calls
/// it for every number of every event, and a call costs half again (measured: 47 vs 71 ns for 8
/// tokens).
[[nodiscard]] inline std::optional<int64_t> ParseInt64(std::string_view s) {
  bool negative = !s.empty() && s.front() == '-';
  std::string_view digits = s.substr(negative ? 1 : 0);
  if (digits.empty() || digits.size() > 18) {
    // Empty, or long enough to overflow: from_chars checks the range.
    int64_t exact = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), exact);
    if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
    return exact;
  }
  uint64_t v = 0;
  for (char c : digits) {
    auto d = static_cast<unsigned>(c - '0');
    if (d > 9) return std::nullopt;
    v = v * 10 + d;
  }
  auto value = static_cast<int64_t>(v);  // at most 18 digits: no overflow
  return negative ? -value : value;
}

/// Formats a byte count for people: "12.3 GB" (decimal units, one decimal).
[[nodiscard]] std::string FormatBytes(double bytes);

/// Formats a duration in ns for people: "850 us", "850 ms", "2.40 s", "3m12s", "1h05m" (the
/// CLI's intervals, timeouts and recording lengths).
[[nodiscard]] std::string FormatDurationNs(int64_t ns);

/// Formats a duration in ns down to the nanosecond: "850 ns", "1.2 µs", "76.1 ms", "2.50 s"
/// (trace reports, where kernels and launches are sub-microsecond).
[[nodiscard]] std::string FormatDurationFineNs(double ns);

/// Formats a duration in seconds: "850 us", "12.3 ms", "2.50 s" (the run report).
[[nodiscard]] std::string FormatDurationSeconds(double s);

/// Formats a duration in seconds in two steps: "12.3 ms" below 0.1 s, else "1.42 s" (verdict
/// texts).
[[nodiscard]] std::string FormatDurationShortSeconds(double s);

/// Formats a fraction as a percentage with `decimals` decimals: (0.1234, 1) → "12.3%".
[[nodiscard]] std::string FormatPercent(double fraction, int decimals);

/// Formats a fraction as a percentage, one decimal below 10%: 0.913 → "91%", 0.046 → "4.6%".
[[nodiscard]] std::string FormatPercentShort(double fraction);

}  // namespace stallscope
