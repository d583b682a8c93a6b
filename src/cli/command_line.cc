#include "cli/command_line.h"

#include <algorithm>
#include <cctype>

namespace stallscope::cli {

JobStart FindJobStart(std::span<const std::string> words,
                      const std::function<bool(std::string_view)>& takes_value) {
  JobStart out;
  size_t i = 0;
  while (i < words.size()) {
    const std::string_view word = words[i];
    if (word == "--") {
      out.index = i + 1;
      out.dashes = true;
      return out;
    }
    if (word.size() < 2 || word[0] != '-') break;  // "-" alone is a word too (stdin)
    if (word == "-h" || word == "--help") out.help = true;
    const bool long_name = word[1] == '-';
    // "--out=x" and "-i500ms" carry their value; "--out x" and "-i 500ms" take the next word.
    const bool joined = long_name ? word.find('=') != std::string_view::npos : word.size() > 2;
    i += !joined && takes_value(word) ? 2 : 1;
  }
  out.index = std::min(i, words.size());
  return out;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  const auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  // Three rows of the table: i - 2, i - 1 and i (the transposition looks two rows back).
  std::vector<size_t> before(b.size() + 1), last(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) last[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      row[j] = std::min({last[j] + 1, row[j - 1] + 1, last[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1])) {
        row[j] = std::min(row[j], before[j - 2] + 1);
      }
    }
    std::swap(before, last);
    std::swap(last, row);
  }
  return last[b.size()];
}

std::vector<std::string> NearestNames(std::string_view typed, std::span<const std::string> names) {
  constexpr size_t kMaxDistance = 2;  // as git's "did you mean": a slip, not another word
  size_t best = kMaxDistance + 1;
  std::vector<std::string> out;
  for (const std::string& name : names) {
    const size_t d = EditDistance(typed, name);
    if (d > kMaxDistance || d >= typed.size() || d > best) continue;
    if (d < best) out.clear();
    best = d;
    out.push_back(name);
  }
  return out;
}

}  // namespace stallscope::cli
