#include "trace/timeline.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <thread>

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
  e.set_dur_ns(end - begin);  // may be negative, as in HTA; analyses treat < 0 as empty
}

// A row HTA treats as GPU work: a stream-bearing kernel/memcpy/memset/sync row
// (HTA `GPUKernelFilter`: stream >= 0 and correlation >= 0). gpu_user_annotation rows carry no
// `args.stream`, so HTA files them with the CPU events.
bool IsHtaGpuRow(const Event& e) {
  return IsGpuKind(e.kind) && e.kind != EventKind::kGpuUserAnnotation;
}

// HTA `_filter_irrelevant_gpu_kernels` (include_last_profiler_step=False): CPU-side events are
// kept when they start before the last ProfilerStep starts; GPU rows are kept when a kept CPU
// event (the launching runtime call) has their correlation id. So a kernel launched in step N-1
// but run after step N began stays, and one launched in the dropped last step goes, wherever it
// ran. Matches EXPECTED.md exactly on all 6 HTA test traces (gpu_metrics hta_expected_test).
void HtaDropLastStep(std::vector<Event>& events, int64_t last_step_begin_ns) {
  std::vector<int64_t> correlations;
  for (const Event& e : events) {
    if (!IsHtaGpuRow(e) && e.ts_ns < last_step_begin_ns && e.correlation >= 0) {
      correlations.push_back(e.correlation);
    }
  }
  std::sort(correlations.begin(), correlations.end());
  std::erase_if(events, [&](const Event& e) {
    if (!IsHtaGpuRow(e)) return e.ts_ns >= last_step_begin_ns;
    return e.correlation < 0 ||
           !std::binary_search(correlations.begin(), correlations.end(), e.correlation);
  });
}

// A function object, not a function pointer: std::sort inlines it.
constexpr EventOrder EventBefore;

/// Sorts by EventOrder. Large traces are split in place around a pivot and the two parts sorted
/// on two threads: the sort is the largest serial step between reading and the analyses. No
/// merge step, so no temporary buffer: std::inplace_merge took half the events again (28 bytes
/// per event at 56-byte events; bench/trace_mem.sh). The pivot is the median of 1023 evenly
/// spaced events, so one std::partition pass splits them: on trace_diff/control's 75k events the
/// split took 0.20-0.29 ms (37,454 | 37,483), nth_element at the exact median 2.8 ms.
void SortEvents(std::vector<Event>& events) {
  constexpr size_t kParallelMin = 32768;
  if (events.size() < kParallelMin || std::thread::hardware_concurrency() < 2) {
    std::sort(events.begin(), events.end(), EventBefore);
    return;
  }
  constexpr size_t kSamples = 1023;
  std::vector<Event> sample;
  sample.reserve(kSamples);
  for (size_t i = 0; i < kSamples; ++i) sample.push_back(events[i * events.size() / kSamples]);
  auto median = sample.begin() + kSamples / 2;
  std::nth_element(sample.begin(), median, sample.end(), EventBefore);
  const Event pivot = *median;
  auto mid = std::partition(events.begin(), events.end(),
                            [&](const Event& e) { return EventBefore(e, pivot); });
  std::thread first([&] { std::sort(events.begin(), mid, EventBefore); });
  std::sort(mid, events.end(), EventBefore);
  first.join();
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
  SortEvents(trace.events);
  std::vector<Step> steps = FindSteps(trace);
  for (const Step& s : steps) {
    t.trace_first_step = std::min(t.trace_first_step.value_or(s.number), s.number);
    t.trace_last_step = std::max(t.trace_last_step.value_or(s.number), s.number);
  }
  if (options.hta_compat && steps.size() >= 2) {
    int64_t last_begin = steps.back().begin_ns;
    for (const Step& s : steps) last_begin = std::max(last_begin, s.begin_ns);
    steps.pop_back();
    t.last_step_dropped = true;
    HtaDropLastStep(trace.events, last_begin);
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
    // Keep events that overlap the window at all. hta_compat scopes by launch instead (above),
    // as HTA does, unless --steps narrowed the range.
    bool narrowed = options.first_step.has_value() || options.last_step.has_value();
    if (!options.hta_compat || narrowed) {
      std::erase_if(trace.events, [&](const Event& e) {
        return e.end_ns() < t.window_begin_ns || e.ts_ns > t.window_end_ns;
      });
    }
  } else if (!trace.events.empty()) {
    t.window_begin_ns = trace.events.front().ts_ns;
    for (const Event& e : trace.events) t.window_end_ns = std::max(t.window_end_ns, e.end_ns());
  }
  return t;
}

}  // namespace stallscope::trace
