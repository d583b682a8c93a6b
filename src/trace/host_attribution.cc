#include "trace/host_attribution.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

namespace stallscope::trace {

std::string_view IdleCauseName(IdleCause c) {
  switch (c) {
    case IdleCause::kSync:
      return "sync";
    case IdleCause::kDataLoader:
      return "dataloader";
    case IdleCause::kDependency:
      return "dependency";
    case IdleCause::kSetup:
      return "setup";
    case IdleCause::kMemory:
      return "memory";
    case IdleCause::kLaunchOverhead:
      return "launch_overhead";
    case IdleCause::kCpuOther:
      return "cpu_other";
    case IdleCause::kUnattributed:
      return "unattributed";
  }
  return "unattributed";
}

std::string_view IdlePositionName(IdlePosition p) {
  switch (p) {
    case IdlePosition::kAfterSync:
      return "after_sync";
    case IdlePosition::kDataLoader:
      return "dataloader";
    case IdlePosition::kStepStart:
      return "step_start";
    case IdlePosition::kStepEnd:
      return "step_end";
    case IdlePosition::kMidStep:
      return "mid_step";
    case IdlePosition::kOutsideSteps:
      return "outside_steps";
  }
  return "outside_steps";
}

namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

// Visits the events in EventOrder (ts, -dur, ...): in place when PrepareTimeline sorted them (the
// usual case), else through one sorted index vector.
template <typename Fn>
void ForEachSorted(const std::vector<Event>& events, Fn&& fn) {
  constexpr EventOrder before;
  if (std::is_sorted(events.begin(), events.end(), before)) {
    for (const Event& e : events) fn(e);
    return;
  }
  std::vector<size_t> order(events.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return before(events[a], events[b]); });
  for (size_t i : order) fn(events[i]);
}

// A host thread's state while scanning for syncs.
struct ThreadState {
  int32_t pid = 0;
  int64_t tid = 0;
  size_t candidate = kNone;  // open outermost aten sync op (index into the sync list)
  int64_t candidate_end_ns = 0;
  int64_t counted_end_ns = std::numeric_limits<int64_t>::min();  // last outermost sync's end
};

ThreadState& StateOf(std::vector<ThreadState>& threads, int32_t pid, int64_t tid) {
  for (ThreadState& t : threads) {
    if (t.pid == pid && t.tid == tid) return t;
  }
  threads.push_back(ThreadState{pid, tid});
  return threads.back();
}

struct HostSync {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int32_t pid = 0;
  int64_t tid = 0;
  bool confirmed = false;  // calls: always; aten ops: when a runtime call ran inside
};

// Host sync calls and aten sync ops (confirmed when a runtime/driver call on the same thread
// starts inside them), in start order.
std::vector<HostSync> FindHostSyncs(const RankTrace& trace, const NameTraits& traits) {
  std::vector<HostSync> syncs;
  size_t candidates = 0;
  for (const Event& e : trace.events) {
    if (traits[e.name_id] & (kTraitSyncCall | kTraitSyncOp)) ++candidates;
  }
  syncs.reserve(candidates);
  std::vector<ThreadState> threads;
  ForEachSorted(trace.events, [&](const Event& e) {
    uint8_t t = traits[e.name_id];
    if (IsRuntimeKind(e.kind)) {
      ThreadState& st = StateOf(threads, e.pid, e.tid);
      if (st.candidate != kNone && e.ts_ns < st.candidate_end_ns) {
        syncs[st.candidate].confirmed = true;
      }
      if (t & kTraitSyncCall) syncs.push_back({e.ts_ns, e.end_ns(), e.pid, e.tid, true});
    } else if (IsHostOpKind(e.kind) && (t & kTraitSyncOp)) {
      ThreadState& st = StateOf(threads, e.pid, e.tid);
      if (st.candidate == kNone || e.ts_ns >= st.candidate_end_ns) {
        st.candidate = syncs.size();
        st.candidate_end_ns = e.end_ns();
        syncs.push_back({e.ts_ns, e.end_ns(), e.pid, e.tid, false});
      }
    }
  });
  return syncs;
}

// Index of the step containing `ts_ns` (steps sorted by begin), or kNone.
size_t StepAt(const std::vector<Step>& steps, int64_t ts_ns) {
  auto it = std::partition_point(steps.begin(), steps.end(),
                                 [&](const Step& s) { return s.begin_ns <= ts_ns; });
  if (it == steps.begin()) return kNone;
  --it;
  return ts_ns < it->end_ns ? static_cast<size_t>(it - steps.begin()) : kNone;
}

// Counts outermost confirmed syncs and returns the union of their intervals.
IntervalSet CountSyncs(const std::vector<HostSync>& syncs, const Timeline& timeline,
                       HostSyncs& out) {
  out.count_per_step.assign(timeline.steps.size(), 0);
  out.ns_per_step.assign(timeline.steps.size(), 0);
  IntervalSet set;
  set.reserve(syncs.size());
  std::vector<ThreadState> threads;
  for (const HostSync& s : syncs) {
    if (!s.confirmed) continue;
    set.push_back({s.begin_ns, s.end_ns});
    ThreadState& st = StateOf(threads, s.pid, s.tid);
    if (s.begin_ns < st.counted_end_ns) continue;  // nested in a counted one
    st.counted_end_ns = s.end_ns;
    if (s.begin_ns >= timeline.window_begin_ns && s.begin_ns < timeline.window_end_ns) {
      ++out.count;
    }
    size_t step = StepAt(timeline.steps, s.begin_ns);
    if (step != kNone) ++out.count_per_step[step];
  }
  NormalizeIntervals(set);
  out.ns = OverlapNs(set, timeline.window_begin_ns, timeline.window_end_ns);
  for (size_t i = 0; i < timeline.steps.size(); ++i) {
    out.ns_per_step[i] = OverlapNs(set, timeline.steps[i].begin_ns, timeline.steps[i].end_ns);
  }
  return set;
}

// Host-side cause sets shared by all devices, and the per-device "Stream Wait Event" rows.
struct HostCauses {
  IntervalSet sync;  // host syncs ∪ cuda_sync rows (but Stream Wait Event)
  IntervalSet dataloader;
  IntervalSet setup;      // runtime/driver set-up calls (RuntimeCallKind::kSetup)
  IntervalSet memory;     // memory-management calls (RuntimeCallKind::kMemory)
  IntervalSet launch;     // launches and other runtime/driver calls
  IntervalSet cpu_other;  // host ops but ProfilerStep#
  std::vector<std::pair<int32_t, Interval>> stream_waits;  // (device, row)
};

HostCauses CollectHostCauses(const RankTrace& trace, const NameTraits& traits,
                             const std::vector<uint8_t>& call_kinds, IntervalSet host_syncs) {
  HostCauses c;
  c.sync = std::move(host_syncs);
  size_t host_ops = 0;
  size_t runtime = 0;
  for (const Event& e : trace.events) {
    host_ops += IsHostOpKind(e.kind) ? 1 : 0;
    runtime += IsRuntimeKind(e.kind) ? 1 : 0;
  }
  c.cpu_other.reserve(host_ops);
  c.launch.reserve(runtime);
  for (const Event& e : trace.events) {
    uint8_t t = traits[e.name_id];
    Interval iv{e.ts_ns, e.end_ns()};
    if (e.dur_ns <= 0) continue;
    if (e.kind == EventKind::kCudaSync) {
      if (t & kTraitStreamWait) {
        c.stream_waits.push_back({e.pid, iv});
      } else {
        c.sync.push_back(iv);
      }
    } else if (IsRuntimeKind(e.kind)) {
      if (t & kTraitSyncCall) continue;
      auto kind = static_cast<RuntimeCallKind>(call_kinds[e.name_id]);
      if (kind == RuntimeCallKind::kSetup) {
        c.setup.push_back(iv);
      } else if (kind == RuntimeCallKind::kMemory) {
        c.memory.push_back(iv);
      } else {
        c.launch.push_back(iv);
      }
    } else if (IsHostOpKind(e.kind) && !(t & kTraitProfilerStep)) {
      if (t & kTraitDataLoader) c.dataloader.push_back(iv);
      c.cpu_other.push_back(iv);
    }
  }
  // Nested host ops unite into far fewer intervals: give the rest back before the per-device
  // pass allocates its own sets (bench/trace_mem.sh: the analyses' peak is here).
  for (IntervalSet* s : {&c.sync, &c.dataloader, &c.setup, &c.memory, &c.launch, &c.cpu_other}) {
    NormalizeIntervals(*s);
    s->shrink_to_fit();
  }
  return c;
}

struct GpuOp {
  int32_t device = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t correlation = -1;
};

// Kernel/memcpy/memset rows with a duration, grouped by device, in start order per device.
std::vector<GpuOp> BusyGpuOps(const RankTrace& trace) {
  auto busy = [](const Event& e) {
    return (e.kind == EventKind::kKernel || e.kind == EventKind::kMemcpy ||
            e.kind == EventKind::kMemset) &&
           e.dur_ns > 0;
  };
  std::vector<GpuOp> ops;
  ops.reserve(static_cast<size_t>(std::count_if(trace.events.begin(), trace.events.end(), busy)));
  for (const Event& e : trace.events) {
    if (busy(e)) ops.push_back({e.pid, e.ts_ns, e.end_ns(), e.correlation});
  }
  std::sort(ops.begin(), ops.end(), [](const GpuOp& a, const GpuOp& b) {
    if (a.device != b.device) return a.device < b.device;
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
  return ops;
}

// (correlation, launch start) of every runtime/driver call that has a correlation, sorted.
std::vector<std::pair<int64_t, int64_t>> LaunchStarts(const RankTrace& trace) {
  std::vector<std::pair<int64_t, int64_t>> launches;
  size_t n = 0;
  for (const Event& e : trace.events) n += IsRuntimeKind(e.kind) && e.correlation >= 0 ? 1 : 0;
  launches.reserve(n);
  for (const Event& e : trace.events) {
    if (IsRuntimeKind(e.kind) && e.correlation >= 0) launches.push_back({e.correlation, e.ts_ns});
  }
  std::sort(launches.begin(), launches.end());
  return launches;
}

// Idle gaps of one device's ops [first, last) within [wb, we), and the subset during which the
// op ending the gap had already been launched (its launch call began before the gap did).
void DeviceGaps(const GpuOp* first, const GpuOp* last, int64_t wb, int64_t we,
                const std::vector<std::pair<int64_t, int64_t>>& launches, IntervalSet& gaps,
                IntervalSet& queued) {
  gaps.clear();
  queued.clear();
  int64_t busy_until = wb;
  for (const GpuOp* op = first; op != last && op->begin_ns < we; ++op) {
    if (op->begin_ns > busy_until) {
      gaps.push_back({busy_until, op->begin_ns});
      auto it = std::lower_bound(launches.begin(), launches.end(),
                                 std::pair<int64_t, int64_t>{op->correlation, 0},
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
      if (op->correlation >= 0 && it != launches.end() && it->first == op->correlation &&
          it->second < busy_until) {
        queued.push_back(gaps.back());
      }
    }
    busy_until = std::max(busy_until, op->end_ns);
  }
  if (busy_until < we) gaps.push_back({busy_until, we});
}

// Splits `gaps` by cause in priority order.
IdleCauseNs SplitByCause(const IntervalSet& gaps, const HostCauses& host,
                         const IntervalSet& dependency) {
  IdleCauseNs out;
  out.idle_ns = TotalNs(gaps);
  const IntervalSet* causes[] = {&host.sync,   &host.dataloader, &dependency,    &host.setup,
                                 &host.memory, &host.launch,     &host.cpu_other};
  static_assert(std::size(causes) + 1 == kIdleCauseCount);
  IntervalSet remaining = gaps;
  IntervalSet claimed;
  IntervalSet next;
  claimed.reserve(gaps.size());
  next.reserve(gaps.size());
  for (size_t c = 0; c < std::size(causes); ++c) {
    IntersectIntervals(remaining, *causes[c], claimed);
    out.ns[c] = TotalNs(claimed);
    SubtractIntervals(remaining, *causes[c], next);
    remaining.swap(next);
  }
  out.ns[static_cast<size_t>(IdleCause::kUnattributed)] = TotalNs(remaining);
  return out;
}

// Dependency time of one device: queued gaps ∪ its Stream Wait Event rows.
void DependencySet(int32_t device, const HostCauses& host, const IntervalSet& queued,
                   IntervalSet& scratch, IntervalSet& out) {
  scratch.clear();
  for (const auto& [d, iv] : host.stream_waits) {
    if (d == device) scratch.push_back(iv);
  }
  NormalizeIntervals(scratch);
  UniteIntervals(queued, scratch, out);
}

// Runtime/driver calls by kind: one pass in start order (union per kind by sweeping), totals
// per name, memory calls per step.
RuntimeCalls SummarizeRuntimeCalls(const RankTrace& trace, const Timeline& timeline,
                                   const std::vector<uint8_t>& call_kinds) {
  RuntimeCalls out;
  const int64_t wb = timeline.window_begin_ns;
  const int64_t we = std::max(wb, timeline.window_end_ns);
  out.window_ns = we - wb;
  out.memory_calls_per_step.assign(timeline.steps.size(), 0);
  std::vector<RuntimeCallTotal> by_name(trace.names.size());
  std::array<int64_t, kRuntimeCallKindCount> covered_until;
  covered_until.fill(wb);
  ForEachSorted(trace.events, [&](const Event& e) {
    if (!IsRuntimeKind(e.kind)) return;
    const auto k = static_cast<size_t>(call_kinds[e.name_id]);
    if (k == static_cast<size_t>(RuntimeCallKind::kMemory)) {
      size_t step = StepAt(timeline.steps, e.ts_ns);
      if (step != kNone) ++out.memory_calls_per_step[step];
    }
    const int64_t b = std::max(e.ts_ns, wb);
    const int64_t end = std::min(e.end_ns(), we);
    if (e.ts_ns < wb || e.ts_ns >= we) {
      if (end <= b) return;  // outside the window
    } else {
      ++out.count[k];
      ++by_name[e.name_id].count;
    }
    if (end <= b) return;
    by_name[e.name_id].ns += end - b;
    if (end > covered_until[k]) {
      out.ns[k] += end - std::max(b, covered_until[k]);
      covered_until[k] = end;
    }
  });
  for (uint32_t id = 0; id < by_name.size(); ++id) {
    RuntimeCallTotal& t = by_name[id];
    if (t.count == 0 && t.ns == 0) continue;
    t.name = trace.names.Get(id);
    t.kind = static_cast<RuntimeCallKind>(call_kinds[id]);
    out.top.push_back(std::move(t));
  }
  std::sort(out.top.begin(), out.top.end(), [](const auto& a, const auto& b) {
    return a.ns != b.ns ? a.ns > b.ns : a.name < b.name;
  });
  if (out.top.size() > RuntimeCalls::kMaxTopCalls) out.top.resize(RuntimeCalls::kMaxTopCalls);
  return out;
}

// True when some interval of the normalized `set` overlaps [b, e).
bool Overlaps(const IntervalSet& set, int64_t b, int64_t e) {
  auto it = std::partition_point(set.begin(), set.end(),
                                 [&](const Interval& iv) { return iv.end_ns <= b; });
  return it != set.end() && it->begin_ns < e;
}

// True when a gap beginning at `b` began while a sync of the normalized `syncs` was in progress
// or at most kAfterSyncSlackNs after it returned (the GPU drained; host and GPU clocks differ).
bool BeganAtASync(const IntervalSet& syncs, int64_t b) {
  auto it = std::partition_point(syncs.begin(), syncs.end(),
                                 [&](const Interval& iv) { return iv.begin_ns <= b; });
  if (it == syncs.begin()) return false;
  --it;
  return b <= it->end_ns + kAfterSyncSlackNs;
}

// Splits each gap by IdlePosition (see the enum) and adds it to `out`.
void AddPositions(const IntervalSet& gaps, const HostCauses& host, const std::vector<Step>& steps,
                  std::array<int64_t, kIdlePositionCount>& out) {
  auto add = [&](IdlePosition p, int64_t ns) { out[static_cast<size_t>(p)] += ns; };
  for (const Interval& g : gaps) {
    if (BeganAtASync(host.sync, g.begin_ns)) {
      add(IdlePosition::kAfterSync, g.end_ns - g.begin_ns);
      continue;
    }
    if (Overlaps(host.dataloader, g.begin_ns, g.end_ns)) {
      add(IdlePosition::kDataLoader, g.end_ns - g.begin_ns);
      continue;
    }
    int64_t inside = 0;
    auto it = std::partition_point(steps.begin(), steps.end(),
                                   [&](const Step& s) { return s.end_ns <= g.begin_ns; });
    for (; it != steps.end() && it->begin_ns < g.end_ns; ++it) {
      int64_t b = std::max(g.begin_ns, it->begin_ns);
      int64_t e = std::min(g.end_ns, it->end_ns);
      if (e <= b) continue;
      inside += e - b;
      IdlePosition p = b == it->begin_ns ? IdlePosition::kStepStart
                       : e == it->end_ns ? IdlePosition::kStepEnd
                                         : IdlePosition::kMidStep;
      add(p, e - b);
    }
    add(IdlePosition::kOutsideSteps, g.end_ns - g.begin_ns - inside);
  }
}

}  // namespace

HostAttribution AttributeGpuIdle(const RankTrace& trace, const Timeline& timeline) {
  HostAttribution out;
  NameTraits traits = ClassifyNames(trace.names);
  IntervalSet host_syncs = CountSyncs(FindHostSyncs(trace, traits), timeline, out.syncs);
  const std::vector<uint8_t> call_kinds = ClassifyRuntimeCalls(trace.names);
  out.runtime = SummarizeRuntimeCalls(trace, timeline, call_kinds);
  HostCauses host = CollectHostCauses(trace, traits, call_kinds, std::move(host_syncs));
  std::vector<GpuOp> ops = BusyGpuOps(trace);
  auto launches = LaunchStarts(trace);
  out.gpu_idle_ns_per_step.assign(timeline.steps.size(), 0);
  const int64_t wb = timeline.window_begin_ns;
  const int64_t we = std::max(timeline.window_begin_ns, timeline.window_end_ns);
  IntervalSet gaps, queued, scratch, dependency;
  for (size_t lo = 0; lo < ops.size();) {
    size_t hi = lo;
    while (hi < ops.size() && ops[hi].device == ops[lo].device) ++hi;
    DeviceIdle dev;
    dev.device = ops[lo].device;
    dev.window_ns = we - wb;
    DeviceGaps(ops.data() + lo, ops.data() + hi, wb, we, launches, gaps, queued);
    DependencySet(dev.device, host, queued, scratch, dependency);
    dev.gaps = static_cast<int64_t>(gaps.size());
    dev.idle = SplitByCause(gaps, host, dependency);
    dev.busy_ns = dev.window_ns - dev.idle.idle_ns;
    AddPositions(gaps, host, timeline.steps, dev.position_ns);
    for (size_t p = 0; p < kIdlePositionCount; ++p) out.position_ns[p] += dev.position_ns[p];
    for (size_t c = 0; c < kIdleCauseCount; ++c) out.total.ns[c] += dev.idle.ns[c];
    out.total.idle_ns += dev.idle.idle_ns;
    for (size_t i = 0; i < timeline.steps.size(); ++i) {
      out.gpu_idle_ns_per_step[i] +=
          OverlapNs(gaps, timeline.steps[i].begin_ns, timeline.steps[i].end_ns);
    }
    out.devices.push_back(dev);
    lo = hi;
  }
  return out;
}

StepSeries BuildStepSeries(const StepBreakdown& breakdown, const HostAttribution& attribution) {
  StepSeries s;
  size_t n = breakdown.steps.size();
  s.step_number.reserve(n);
  s.step_ns.reserve(n);
  s.dataloader_ns.reserve(n);
  s.gpu_idle_ns.reserve(n);
  s.sync_ns.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const StepBreakdownRow& row = breakdown.steps[i];
    s.step_number.push_back(row.step_number);
    s.step_ns.push_back(row.times.wall_ns);
    s.dataloader_ns.push_back(row.times.Get(StepCategory::kDataLoader));
    s.gpu_idle_ns.push_back(
        i < attribution.gpu_idle_ns_per_step.size() ? attribution.gpu_idle_ns_per_step[i] : 0);
    s.sync_ns.push_back(i < attribution.syncs.ns_per_step.size() ? attribution.syncs.ns_per_step[i]
                                                                 : 0);
  }
  return s;
}

}  // namespace stallscope::trace
