#include "trace/timeline.h"

#include <algorithm>
#include <charconv>
#include <string_view>

namespace stallscope::trace {
namespace {

constexpr std::string_view kStepPrefix = "ProfilerStep#";

std::optional<int64_t> StepNumber(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  name.remove_prefix(kStepPrefix.size());
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
  if (ec != std::errc() || ptr != name.data() + name.size()) return std::nullopt;
  return n;
}

// HTA rounds each event to whole microseconds: ts up, ts+dur down (EXPECTED.md "quirks").
void RoundToMicros(Event& e) {
  constexpr int64_t kUs = 1000;
  int64_t begin = e.ts_ns % kUs == 0 ? e.ts_ns : (e.ts_ns / kUs + (e.ts_ns > 0 ? 1 : 0)) * kUs;
  int64_t end = e.end_ns();
  end = (end / kUs - (end < 0 && end % kUs != 0 ? 1 : 0)) * kUs;
  e.ts_ns = begin;
  e.dur_ns = end - begin;  // may be negative, as in HTA; analyses treat < 0 as empty
}

}  // namespace

std::vector<Step> FindSteps(const RankTrace& trace) {
  std::vector<Step> steps;
  for (const Event& e : trace.events) {
    if (IsGpuKind(e.kind)) continue;
    auto n = StepNumber(trace.NameOf(e));
    if (!n) continue;
    steps.push_back(Step{*n, e.ts_ns, e.end_ns(), e.pid, e.tid});
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.number < b.number;
  });
  // One step per number: the first (earliest) occurrence.
  std::vector<Step> unique;
  for (const Step& s : steps) {
    bool seen = std::any_of(unique.begin(), unique.end(),
                            [&](const Step& u) { return u.number == s.number; });
    if (!seen) unique.push_back(s);
  }
  return unique;
}

Timeline PrepareTimeline(RankTrace& trace, const AnalysisOptions& options) {
  Timeline t;
  if (options.hta_compat) {
    for (Event& e : trace.events) RoundToMicros(e);
  }
  std::sort(trace.events.begin(), trace.events.end(), [](const Event& a, const Event& b) {
    return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.dur_ns > b.dur_ns;
  });
  std::vector<Step> steps = FindSteps(trace);
  if (options.hta_compat && steps.size() >= 2) {
    steps.pop_back();
    t.last_step_dropped = true;
  }
  std::erase_if(steps, [&](const Step& s) {
    return (options.first_step && s.number < *options.first_step) ||
           (options.last_step && s.number > *options.last_step);
  });
  t.steps = std::move(steps);
  if (!t.steps.empty()) {
    t.window_begin_ns = t.steps.front().begin_ns;
    t.window_end_ns = 0;
    for (const Step& s : t.steps) t.window_end_ns = std::max(t.window_end_ns, s.end_ns);
    // Keep events that overlap the window at all.
    std::erase_if(trace.events, [&](const Event& e) {
      return e.end_ns() < t.window_begin_ns || e.ts_ns > t.window_end_ns;
    });
  } else if (!trace.events.empty()) {
    t.window_begin_ns = trace.events.front().ts_ns;
    for (const Event& e : trace.events) t.window_end_ns = std::max(t.window_end_ns, e.end_ns());
  }
  return t;
}

}  // namespace stallscope::trace
