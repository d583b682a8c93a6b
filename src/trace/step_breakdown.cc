#include "trace/step_breakdown.h"

#include <algorithm>

namespace stallscope::trace {

// ------------------------------------------------------------------------------ breakdown

std::string_view StepCategoryName(StepCategory c) {
  switch (c) {
    case StepCategory::kKernel:
      return "Kernel";
    case StepCategory::kMemcpy:
      return "Memcpy";
    case StepCategory::kMemset:
      return "Memset";
    case StepCategory::kCommunication:
      return "Communication";
    case StepCategory::kRuntime:
      return "Runtime";
    case StepCategory::kDataLoader:
      return "DataLoader";
    case StepCategory::kCpuExec:
      return "CPU Exec";
    case StepCategory::kOther:
      return "Other";
  }
  return "Other";
}

StepCategory CategoryOf(const Event& e, uint8_t traits) {
  switch (e.kind) {
    case EventKind::kKernel:
      return (traits & kTraitCommKernel) ? StepCategory::kCommunication : StepCategory::kKernel;
    case EventKind::kMemcpy:
      return StepCategory::kMemcpy;
    case EventKind::kMemset:
      return StepCategory::kMemset;
    case EventKind::kRuntime:
    case EventKind::kDriver:
      return StepCategory::kRuntime;
    case EventKind::kCpuOp:
    case EventKind::kUserAnnotation:
    case EventKind::kPythonFunction:
      if (traits & kTraitProfilerStep) return StepCategory::kOther;
      if (traits & kTraitCommOp) return StepCategory::kCommunication;
      if (traits & kTraitDataLoader) return StepCategory::kDataLoader;
      return StepCategory::kCpuExec;
    case EventKind::kCudaSync:
    case EventKind::kGpuUserAnnotation:
    case EventKind::kOther:
      return StepCategory::kOther;
  }
  return StepCategory::kOther;
}

namespace {

constexpr size_t kClaiming = kStepCategoryCount - 1;  // every category but Other

// Per category (but Other), the time it claims over the whole trace: its union minus the
// unions of all higher-priority categories.
std::array<IntervalSet, kClaiming> ClaimedSets(const RankTrace& trace) {
  NameTraits traits = ClassifyNames(trace.names);
  std::array<size_t, kClaiming> counts{};
  for (const Event& e : trace.events) {
    auto c = static_cast<size_t>(CategoryOf(e, traits[e.name_id]));
    if (c < kClaiming && e.dur_ns > 0) ++counts[c];
  }
  std::array<IntervalSet, kClaiming> unions;
  for (size_t c = 0; c < kClaiming; ++c) unions[c].reserve(counts[c]);
  for (const Event& e : trace.events) {
    auto c = static_cast<size_t>(CategoryOf(e, traits[e.name_id]));
    if (c < kClaiming && e.dur_ns > 0) unions[c].push_back({e.ts_ns, e.end_ns()});
  }
  for (IntervalSet& u : unions) NormalizeIntervals(u);

  std::array<IntervalSet, kClaiming> claimed;
  IntervalSet higher;
  IntervalSet scratch;
  for (size_t c = 0; c < kClaiming; ++c) {
    SubtractIntervals(unions[c], higher, claimed[c]);
    UniteIntervals(higher, unions[c], scratch);
    higher.swap(scratch);
  }
  return claimed;
}

CategoryNs BreakDownSpan(const std::array<IntervalSet, kClaiming>& claimed, int64_t begin_ns,
                         int64_t end_ns) {
  CategoryNs times;
  times.wall_ns = std::max<int64_t>(0, end_ns - begin_ns);
  int64_t claimed_ns = 0;
  for (size_t c = 0; c < kClaiming; ++c) {
    times.ns[c] = OverlapNs(claimed[c], begin_ns, end_ns);
    claimed_ns += times.ns[c];
  }
  times.ns[static_cast<size_t>(StepCategory::kOther)] = times.wall_ns - claimed_ns;
  return times;
}

}  // namespace

StepBreakdown ComputeStepBreakdown(const RankTrace& trace, const Timeline& timeline) {
  StepBreakdown out;
  std::array<IntervalSet, kClaiming> claimed = ClaimedSets(trace);
  if (timeline.steps.empty()) {
    out.whole_window = true;
    out.total = BreakDownSpan(claimed, timeline.window_begin_ns, timeline.window_end_ns);
    return out;
  }
  out.steps.reserve(timeline.steps.size());
  for (const Step& s : timeline.steps) {
    StepBreakdownRow row{s.number, s.begin_ns, s.end_ns,
                         BreakDownSpan(claimed, s.begin_ns, s.end_ns)};
    for (size_t c = 0; c < kStepCategoryCount; ++c) out.total.ns[c] += row.times.ns[c];
    out.total.wall_ns += row.times.wall_ns;
    out.steps.push_back(row);
  }
  return out;
}

}  // namespace stallscope::trace
