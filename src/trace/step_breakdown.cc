#include "trace/step_breakdown.h"

#include <algorithm>

namespace stallscope::trace {

// ------------------------------------------------------------------------------ interval sets

void NormalizeIntervals(IntervalSet& intervals) {
  auto by_begin = [](const Interval& a, const Interval& b) { return a.begin_ns < b.begin_ns; };
  if (!std::is_sorted(intervals.begin(), intervals.end(), by_begin)) {
    std::sort(intervals.begin(), intervals.end(), by_begin);
  }
  size_t out = 0;
  for (const Interval& iv : intervals) {
    if (iv.end_ns <= iv.begin_ns) continue;  // empty, or inverted by HTA rounding
    if (out > 0 && iv.begin_ns <= intervals[out - 1].end_ns) {
      intervals[out - 1].end_ns = std::max(intervals[out - 1].end_ns, iv.end_ns);
    } else {
      intervals[out++] = iv;
    }
  }
  intervals.resize(out);
}

int64_t TotalNs(const IntervalSet& set) {
  int64_t total = 0;
  for (const Interval& iv : set) total += iv.end_ns - iv.begin_ns;
  return total;
}

int64_t OverlapNs(const IntervalSet& set, int64_t begin_ns, int64_t end_ns) {
  if (end_ns <= begin_ns) return 0;
  auto it = std::partition_point(set.begin(), set.end(),
                                 [&](const Interval& iv) { return iv.end_ns <= begin_ns; });
  int64_t total = 0;
  for (; it != set.end() && it->begin_ns < end_ns; ++it) {
    total += std::min(it->end_ns, end_ns) - std::max(it->begin_ns, begin_ns);
  }
  return total;
}

void IntersectIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out) {
  out.clear();
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t begin = std::max(a[i].begin_ns, b[j].begin_ns);
    int64_t end = std::min(a[i].end_ns, b[j].end_ns);
    if (begin < end) out.push_back({begin, end});
    // Advance whichever ends first; the other may still overlap the next member.
    if (a[i].end_ns < b[j].end_ns) {
      ++i;
    } else {
      ++j;
    }
  }
}

void SubtractIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out) {
  out.clear();
  size_t j = 0;
  for (const Interval& iv : a) {
    int64_t cursor = iv.begin_ns;
    while (j < b.size() && b[j].end_ns <= cursor) ++j;
    // b[j..] may cut this member several times; do not advance j past members that reach
    // beyond it (they may cut the next member of a too).
    size_t k = j;
    while (k < b.size() && b[k].begin_ns < iv.end_ns) {
      if (b[k].begin_ns > cursor) out.push_back({cursor, b[k].begin_ns});
      cursor = std::max(cursor, b[k].end_ns);
      if (cursor >= iv.end_ns) break;
      ++k;
    }
    if (cursor < iv.end_ns) out.push_back({cursor, iv.end_ns});
  }
}

void UniteIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out) {
  out.clear();
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() || j < b.size()) {
    const Interval& next =
        (j >= b.size() || (i < a.size() && a[i].begin_ns <= b[j].begin_ns)) ? a[i++] : b[j++];
    if (!out.empty() && next.begin_ns <= out.back().end_ns) {
      out.back().end_ns = std::max(out.back().end_ns, next.end_ns);
    } else {
      out.push_back(next);
    }
  }
}

// ------------------------------------------------------------------------------ names

uint8_t NameTraitsOf(std::string_view n) {
  uint8_t t = kTraitNone;
  // HTA's communication kernel pattern (EXPECTED.md: "^nccl|ncclKernel|^hip|^hccl"), plus
  // NCCL ≥ 2.19's ncclDevKernel_*.
  if (n.starts_with("nccl") || n.find("ncclKernel") != std::string_view::npos ||
      n.find("ncclDevKernel") != std::string_view::npos || n.starts_with("hccl") ||
      n.starts_with("hip")) {
    t |= kTraitCommKernel;
  }
  if (n.starts_with("nccl:") || n.find("c10d::") != std::string_view::npos ||
      n.find("record_param_comms") != std::string_view::npos || n.starts_with("ProcessGroup")) {
    t |= kTraitCommOp;
  }
  if (n.find("DataLoader") != std::string_view::npos) t |= kTraitDataLoader;
  if (n.starts_with("ProfilerStep#")) t |= kTraitProfilerStep;
  bool copy =
      n.starts_with("cudaMemcpy") || n.starts_with("cuMemcpy") || n.starts_with("hipMemcpy");
  if (n.ends_with("Synchronize") || (copy && n.find("Async") == std::string_view::npos)) {
    t |= kTraitSyncCall;
  }
  if (n == "aten::item" || n == "aten::_local_scalar_dense" || n == "aten::nonzero") {
    t |= kTraitSyncOp;
  }
  if (n == "Stream Wait Event" || n == "cudaStreamWaitEvent" || n == "cuStreamWaitEvent" ||
      n == "hipStreamWaitEvent") {
    t |= kTraitStreamWait;
  }
  return t;
}

NameTraits ClassifyNames(const StringTable& names) {
  NameTraits traits(names.size(), kTraitNone);
  for (size_t id = 0; id < names.size(); ++id) {
    traits[id] = NameTraitsOf(names.Get(static_cast<uint32_t>(id)));
  }
  return traits;
}

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
