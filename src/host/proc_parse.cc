#include "host/proc_parse.h"

#include <algorithm>
#include <charconv>
#include <system_error>

namespace stallscope::host {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLower(char c) { return c >= 'a' && c <= 'z'; }

/// Returns the next blank-separated token of `text` from `pos` (advanced past it); empty at end.
std::string_view NextToken(std::string_view text, size_t& pos) {
  while (pos < text.size() && (IsBlank(text[pos]) || text[pos] == '\n')) ++pos;
  const size_t start = pos;
  while (pos < text.size() && !IsBlank(text[pos]) && text[pos] != '\n') ++pos;
  return text.substr(start, pos - start);
}

/// Parses a whole token as a number: "12a" or "" is not a number.
template <typename T>
std::optional<T> ParseWhole(std::string_view token) {
  T value{};
  const char* end = token.data() + token.size();
  auto [ptr, ec] = std::from_chars(token.data(), end, value);
  if (ec != std::errc() || ptr != end || token.empty()) return std::nullopt;
  return value;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsDigit);
}

bool StartsWithThenDigits(std::string_view name, std::string_view prefix) {
  return name.starts_with(prefix) && AllDigits(name.substr(prefix.size()));
}

/// Parses "key=value" tokens of a pressure line into avg10 and total.
bool ParsePsiLine(std::string_view line, double& avg10, uint64_t& total) {
  bool have_avg10 = false, have_total = false;
  size_t pos = 0;
  NextToken(line, pos);  // "some" / "full"
  for (std::string_view tok = NextToken(line, pos); !tok.empty(); tok = NextToken(line, pos)) {
    if (tok.starts_with("avg10=")) {
      auto v = ParseWhole<double>(tok.substr(6));
      if (!v) return false;
      avg10 = *v;
      have_avg10 = true;
    } else if (tok.starts_with("total=")) {
      auto v = ParseWhole<uint64_t>(tok.substr(6));
      if (!v) return false;
      total = *v;
      have_total = true;
    }
  }
  return have_avg10 && have_total;
}

}  // namespace

std::optional<std::string_view> NextLine(std::string_view text, size_t& pos) {
  if (pos >= text.size()) return std::nullopt;
  size_t end = text.find('\n', pos);
  if (end == std::string_view::npos) end = text.size();
  std::string_view line = text.substr(pos, end - pos);
  pos = end + 1;
  return line;
}

std::optional<uint64_t> ParseU64(std::string_view text) {
  size_t pos = 0;
  return ParseWhole<uint64_t>(NextToken(text, pos));
}

std::optional<uint64_t> FindU64Field(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (auto line = NextLine(text, pos)) {
    if (!line->starts_with(key) || line->size() == key.size()) continue;
    std::string_view rest = line->substr(key.size());
    if (rest.front() == ':') {
      rest.remove_prefix(1);
    } else if (!IsBlank(rest.front())) {
      continue;  // a longer key with the same prefix
    }
    return ParseU64(rest);
  }
  return std::nullopt;
}

void ParseProcStat(std::string_view text, ProcStat& out) {
  out.total.reset();
  out.per_cpu.clear();
  out.malformed_lines = 0;
  size_t pos = 0;
  while (auto line = NextLine(text, pos)) {
    if (!line->starts_with("cpu")) continue;
    size_t lpos = 0;
    const std::string_view name = NextToken(*line, lpos);
    const bool is_total = name == "cpu";
    std::optional<uint32_t> id;
    if (!is_total) {
      id = ParseWhole<uint32_t>(name.substr(3));
      if (!id) continue;  // not a cpu line ("cpufreq..." would be someone else's)
    }
    uint64_t fields[8] = {};
    int n = 0;
    for (; n < 8; ++n) {
      auto v = ParseWhole<uint64_t>(NextToken(*line, lpos));
      if (!v) break;
      fields[n] = *v;
    }
    if (n < 4) {  // truncated or garbled: not even user nice system idle
      ++out.malformed_lines;
      continue;
    }
    CpuTimes t{id.value_or(0), fields[0], fields[1], fields[2], fields[3],
               fields[4],      fields[5], fields[6], fields[7]};
    if (is_total) {
      out.total = t;
    } else {
      out.per_cpu.push_back(t);
    }
  }
}

MemInfo ParseMeminfo(std::string_view text) {
  // proc(5): values are in kibibytes despite the "kB" label.
  MemInfo info;
  if (auto kib = FindU64Field(text, "MemTotal")) info.total_bytes = *kib * 1024;
  if (auto kib = FindU64Field(text, "MemAvailable")) info.available_bytes = *kib * 1024;
  return info;
}

std::optional<LoadAvg> ParseLoadavg(std::string_view text) {
  size_t pos = 0;
  auto l1 = ParseWhole<double>(NextToken(text, pos));
  auto l5 = ParseWhole<double>(NextToken(text, pos));
  auto l15 = ParseWhole<double>(NextToken(text, pos));
  const std::string_view tasks = NextToken(text, pos);  // "running/total"
  const size_t slash = tasks.find('/');
  if (!l1 || !l5 || !l15 || slash == std::string_view::npos) return std::nullopt;
  auto running = ParseWhole<uint32_t>(tasks.substr(0, slash));
  if (!running) return std::nullopt;
  return LoadAvg{*l1, *l5, *l15, *running};
}

std::optional<PsiReading> ParsePressure(std::string_view text) {
  PsiReading r;
  bool have_some = false;
  size_t pos = 0;
  while (auto line = NextLine(text, pos)) {
    if (line->starts_with("some ")) {
      if (!ParsePsiLine(*line, r.some_avg10_pct, r.some_total_us)) return std::nullopt;
      have_some = true;
    } else if (line->starts_with("full ")) {
      double avg10 = 0;
      uint64_t total = 0;
      if (!ParsePsiLine(*line, avg10, total)) return std::nullopt;
      r.full_avg10_pct = avg10;
    }
  }
  if (!have_some) return std::nullopt;
  return r;
}

std::optional<DiskLine> ParseDiskstatsLine(std::string_view line) {
  size_t pos = 0;
  auto major = ParseWhole<uint32_t>(NextToken(line, pos));
  auto minor = ParseWhole<uint32_t>(NextToken(line, pos));
  const std::string_view name = NextToken(line, pos);
  if (!major || !minor || name.empty()) return std::nullopt;
  // Fields 4..14 (11 counters) exist since Linux 2.6.25; read all 11 to reject short lines.
  uint64_t counters[11] = {};
  for (uint64_t& c : counters) {
    auto v = ParseWhole<uint64_t>(NextToken(line, pos));
    if (!v) return std::nullopt;
    c = *v;
  }
  // iostats.rst: field 3 (counter 2) sectors read, field 7 (counter 6) sectors written.
  return DiskLine{*major, *minor, name, counters[2], counters[6]};
}

bool IsVirtualDiskName(std::string_view name) {
  for (std::string_view prefix : {"loop", "ram", "zram", "dm-", "md", "sr", "fd"}) {
    if (StartsWithThenDigits(name, prefix)) return true;
  }
  return false;
}

bool LooksLikePartitionName(std::string_view name) {
  // nvme0n1p1, mmcblk0p2, loop0p1: a digit, 'p', digits.
  const size_t p = name.rfind('p');
  if (p != std::string_view::npos && p > 0 && IsDigit(name[p - 1]) &&
      AllDigits(name.substr(p + 1))) {
    return true;
  }
  // sda1, vdb2, xvdc3, hda1: letters after the prefix, then digits.
  for (std::string_view prefix : {"sd", "vd", "xvd", "hd"}) {
    if (!name.starts_with(prefix)) continue;
    std::string_view rest = name.substr(prefix.size());
    size_t letters = 0;
    while (letters < rest.size() && IsLower(rest[letters])) ++letters;
    if (letters > 0 && AllDigits(rest.substr(letters))) return true;
  }
  return false;
}

std::optional<CpuMax> ParseCpuMax(std::string_view text) {
  size_t pos = 0;
  const std::string_view quota = NextToken(text, pos);
  auto period = ParseWhole<uint64_t>(NextToken(text, pos));
  if (!period || *period == 0) return std::nullopt;
  if (quota == "max") return CpuMax{true, 0, *period};
  auto quota_us = ParseWhole<uint64_t>(quota);
  if (!quota_us) return std::nullopt;
  return CpuMax{false, *quota_us, *period};
}

std::optional<MemoryMax> ParseMemoryMax(std::string_view text) {
  size_t pos = 0;
  const std::string_view token = NextToken(text, pos);
  if (token == "max") return MemoryMax{};
  auto bytes = ParseWhole<uint64_t>(token);
  if (!bytes) return std::nullopt;
  return MemoryMax{*bytes};
}

std::optional<std::string_view> ParseCgroupV2Path(std::string_view text) {
  size_t pos = 0;
  while (auto line = NextLine(text, pos)) {
    if (line->starts_with("0::/")) return line->substr(3);
  }
  return std::nullopt;
}

bool ParseCpuList(std::string_view text, std::vector<uint32_t>& out) {
  out.clear();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(pos, end - pos);
    const size_t dash = item.find('-');
    auto first = ParseWhole<uint32_t>(item.substr(0, dash));
    auto last =
        dash == std::string_view::npos ? first : ParseWhole<uint32_t>(item.substr(dash + 1));
    if (!first || !last || *last < *first || *last >= kMaxCpuListCpus ||
        out.size() + (*last - *first) >= kMaxCpuListCpus) {
      out.clear();
      return false;
    }
    for (uint32_t cpu = *first; cpu <= *last; ++cpu) out.push_back(cpu);
    pos = end + 1;
    if (end + 1 == text.size()) {  // a trailing comma
      out.clear();
      return false;
    }
  }
  return true;
}

std::optional<PidStat> ParsePidStat(std::string_view text) {
  // "PID (COMM) S ...": a blank before '(' and COMM up to the last ')'.
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string_view::npos || open < 2 || close == std::string_view::npos ||
      close < open || text[open - 1] != ' ') {
    return std::nullopt;
  }
  PidStat s;
  auto pid = ParseWhole<int32_t>(text.substr(0, open - 1));
  if (!pid) return std::nullopt;
  s.pid = *pid;
  s.comm = text.substr(open + 1, close - open - 1);
  // Fields after comm, numbered as in proc(5): 3 state, 4 ppid, ... 24 rss.
  int64_t fields[25] = {};
  size_t pos = close + 1;
  const std::string_view state = NextToken(text, pos);
  if (state.size() != 1) return std::nullopt;
  s.state = state[0];
  for (int field = 4; field <= 24; ++field) {
    auto v = ParseWhole<int64_t>(NextToken(text, pos));
    if (!v) return std::nullopt;
    fields[field] = *v;
  }
  auto u64 = [&](int field) { return static_cast<uint64_t>(std::max<int64_t>(fields[field], 0)); };
  s.ppid = static_cast<int32_t>(fields[4]);
  s.utime_ticks = u64(14);
  s.stime_ticks = u64(15);
  s.num_threads = static_cast<uint32_t>(std::min<uint64_t>(u64(20), UINT32_MAX));
  s.start_time_ticks = u64(22);
  s.rss_pages = u64(24);
  return s;
}

uint32_t AppendPidList(std::string_view text, std::vector<int32_t>& out) {
  uint32_t bad = 0;
  size_t pos = 0;
  for (std::string_view tok = NextToken(text, pos); !tok.empty(); tok = NextToken(text, pos)) {
    auto pid = ParseWhole<int32_t>(tok);
    if (pid && *pid > 0) {
      out.push_back(*pid);
    } else {
      ++bad;
    }
  }
  return bad;
}

void JoinCmdline(std::string_view raw, std::string& out) {
  while (!raw.empty() && raw.back() == '\0') raw.remove_suffix(1);
  out.assign(raw);
  std::replace(out.begin(), out.end(), '\0', ' ');
}

}  // namespace stallscope::host
