#include "base/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <span>

#include <fmt/format.h>

namespace stallscope {

Result<int64_t> ParseDurationNs(std::string_view text) {
  std::string_view s = text;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  size_t split = 0;
  while (split < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[split])) || s[split] == '.'))
    ++split;
  std::string_view number = s.substr(0, split);
  std::string_view unit = s.substr(split);
  double value = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "invalid duration '{}': expected a number and a unit (us, ms, s, m, h)", text);
  }
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1e9;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "us") {
    scale = 1e3;
  } else if (unit == "ns") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60e9;
  } else if (unit == "h") {
    scale = 3600e9;
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     "invalid duration '{}': unknown unit '{}' (use us, ms, s, m or h)", text,
                     unit);
  }
  double ns = value * scale;
  if (!std::isfinite(ns) || ns > 9.2e18) {
    return MakeError(ErrorCode::kInvalidArgument, "invalid duration '{}': too large", text);
  }
  return static_cast<int64_t>(std::llround(ns));
}

std::string FormatIsoUtc(int64_t wall_ns) {
  time_t secs = static_cast<time_t>(wall_ns / 1'000'000'000);
  int64_t ms = (wall_ns % 1'000'000'000) / 1'000'000;
  if (ms < 0) {
    ms += 1000;
    --secs;
  }
  tm parts{};
  gmtime_r(&secs, &parts);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", parts.tm_year + 1900,
                     parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                     ms);
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid.
size_t Utf8Length(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return 0;
  }
  return len;
}

}  // namespace

void AppendUtf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

void AppendJsonString(std::string& out, std::string_view text) {
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
      ++i;
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (size_t len = Utf8Length(text, i); len > 0) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      // Not UTF-8 (e.g. a Latin-1 argv): keep the byte's value readable, keep the JSON valid.
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
      ++i;
    }
  }
  out.push_back('"');
}

std::string Elide(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  if (max_bytes == 0) return std::string();
  std::string out(text.substr(0, max_bytes - 1));
  out += '~';
  return out;
}

std::string CutUtf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0U) == 0x80U) --end;
  return std::string(text.substr(0, end)) + "...";
}

std::string ErrnoText(int err) {
  std::string text = std::strerror(err);
  // glibc capitalises the first word only; an acronym ("I/O error") keeps its case.
  if (text.size() > 1 && std::isupper(static_cast<unsigned char>(text[0])) != 0 &&
      std::islower(static_cast<unsigned char>(text[1])) != 0)
    text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

std::string EscapeControl(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      const size_t len = Utf8Length(text, i);
      const auto next = len == 2 ? static_cast<unsigned char>(text[i + 1]) : 0;
      if (u == 0xc2 && next >= 0x80 && next <= 0x9f) {
        // Issue 27 B17: C1 controls U+0080..U+009F (UTF-8 C2 80..C2 9F; U+009B is CSI, U+009D
        // OSC) act as ESC sequences do on terminals that honour them (ECMA-48 section 5.3).
        out += fmt::format("\\u{:04x}", next);
        ++i;
      } else if (len > 0) {
        out.append(text.substr(i, len));  // any other character
        i += len - 1;
      } else if (u <= 0x9f) {
        out += fmt::format("\\x{:02x}", u);  // a lone C1 byte: CSI itself on an 8-bit terminal
      } else {
        out.push_back(c);  // a lone Latin-1 byte: no control, shown as it is
      }
    } else if (u >= 0x20 && u != 0x7f) {
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
  return out;
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (std::fabs(bytes) >= 1000.0 && u < 5) {
    bytes /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

namespace {

/// One rung of a duration format: a value below `below` (in the input's unit) is written as
/// value / divisor, or value * multiplier, with `decimals` decimals and `unit`. Dividing and
/// multiplying are kept apart: x / 1e3 and x * 1e-3 can differ in the last bit, and the reports'
/// golden files are byte-exact.
struct DurationRung {
  double below;
  double divisor;
  double multiplier;
  int decimals;
  std::string_view unit;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string FormatRungs(double value, std::span<const DurationRung> rungs) {
  for (const DurationRung& r : rungs) {
    if (value < r.below || r.below == kInf) {
      double scaled = r.divisor != 1.0 ? value / r.divisor : value * r.multiplier;
      return fmt::format("{:.{}f} {}", scaled, r.decimals, r.unit);
    }
  }
  return {};
}

// The formats in use, each in its caller's unit (ns or s).
constexpr DurationRung kCoarseNs[] = {
    {1e6, 1e3, 1, 0, "us"}, {1e9, 1e6, 1, 0, "ms"}, {60e9, 1e9, 1, 2, "s"}};
constexpr DurationRung kFineNs[] = {
    {1e3, 1, 1, 0, "ns"}, {1e6, 1e3, 1, 1, "µs"}, {1e9, 1e6, 1, 1, "ms"}, {kInf, 1e9, 1, 2, "s"}};
constexpr DurationRung kSeconds[] = {
    {1e-3, 1, 1e6, 0, "us"}, {1.0, 1, 1e3, 1, "ms"}, {kInf, 1, 1, 2, "s"}};
constexpr DurationRung kShortSeconds[] = {{0.1, 1, 1000.0, 1, "ms"}, {kInf, 1, 1, 2, "s"}};

}  // namespace

std::string FormatDurationNs(int64_t ns) {
  double s = NsToSeconds(ns);
  if (s < 60) return FormatRungs(static_cast<double>(ns), kCoarseNs);
  auto total = static_cast<int64_t>(s);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
}

std::string FormatDurationFineNs(double ns) { return FormatRungs(ns, kFineNs); }

std::string FormatDurationSeconds(double s) { return FormatRungs(s, kSeconds); }

std::string FormatDurationShortSeconds(double s) { return FormatRungs(s, kShortSeconds); }

std::string FormatPercent(double fraction, int decimals) {
  return fmt::format("{:.{}f}%", fraction * 100.0, decimals);
}

std::string FormatPercentShort(double fraction) {
  double p = fraction * 100.0;
  return FormatPercent(fraction, std::fabs(p) < 9.95 ? 1 : 0);
}

}  // namespace stallscope
