#include "analysis/phases.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "analysis/life.h"
#include "base/stats.h"
#include "base/units.h"
#include "phase/ring_format.h"

namespace stallscope::analysis {
namespace {

using phase::EventLog;
using phase::LoggedEvent;
using phase::RecordKind;

constexpr std::string_view kOtherName = phase_name::kOther;
constexpr std::string_view kNoStepsWarning =
    "no step boundaries: stallscope.step() was never called and no optimizer.step() was seen";
/// Same guard as phase::PhaseAggregator: deeper nesting on one thread means lost end records;
/// the oldest open phase is dropped (counted unmatched) so hostile input stays O(n).
constexpr size_t kMaxDepth = 64;

/// Where one process's events lie in EventLog::events.
struct ProcessInfo {
  int32_t pid = 0;
  int32_t rank = 0;
  bool forked = false;  ///< forked without exec from another process (EventProcess::forked_from)
  std::vector<std::pair<size_t, size_t>> runs;  ///< [begin, end) ranges, in write order
  bool sorted = true;                           ///< ts never decreases in write order
  int64_t event_count = 0;
  int64_t step_count = 0;
  int64_t last_write_ts_ns = std::numeric_limits<int64_t>::min();
};

/// Groups events by pid (one pass, no copy). Ranks come from EventLog::processes, else from the
/// first event of the pid. Result ordered by pid.
std::vector<ProcessInfo> GroupProcesses(const EventLog& log) {
  std::unordered_map<int32_t, int32_t> rank_of;
  std::unordered_set<int32_t> forked;
  for (const phase::EventProcess& p : log.processes) {
    rank_of[p.pid] = p.rank;
    if (p.forked_from > 0) forked.insert(p.pid);
  }
  std::unordered_map<int32_t, size_t> index;
  std::vector<ProcessInfo> out;
  const std::vector<LoggedEvent>& ev = log.events;
  for (size_t begin = 0; begin < ev.size();) {
    const int32_t pid = ev[begin].pid;
    auto [it, fresh] = index.try_emplace(pid, out.size());
    if (fresh) {
      ProcessInfo info;
      info.pid = pid;
      auto r = rank_of.find(pid);
      info.rank = r != rank_of.end() ? r->second : ev[begin].rank;
      info.forked = forked.contains(pid);
      out.push_back(std::move(info));
    }
    ProcessInfo& info = out[it->second];
    size_t end = begin;
    for (; end < ev.size() && ev[end].pid == pid; ++end) {
      if (ev[end].ts_ns < info.last_write_ts_ns) info.sorted = false;
      info.last_write_ts_ns = ev[end].ts_ns;
      if (ev[end].kind == RecordKind::kStep) ++info.step_count;
    }
    info.event_count += static_cast<int64_t>(end - begin);
    info.runs.emplace_back(begin, end);
    begin = end;
  }
  std::sort(out.begin(), out.end(),
            [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
  return out;
}

/// Phase and counter names interned once, so the per-event path handles small integers only.
class NameTable {
 public:
  int32_t Intern(const std::string& name) {
    auto [it, fresh] = index_.try_emplace(name, static_cast<int32_t>(names_.size()));
    if (fresh) names_.push_back(name);
    return it->second;
  }
  const std::string& Name(int32_t i) const { return names_[static_cast<size_t>(i)]; }
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, int32_t> index_;
};

/// A closed phase: [begin_ns, end_ns] of name `name` (a NameTable index).
struct Interval {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int32_t name = 0;
};

struct CounterHit {
  int64_t ts_ns = 0;
  int64_t delta = 0;
  int32_t name = 0;
};

/// A kGpuSpan record: the GPU time of the phase instance that began on the host at ts_ns.
struct GpuSpan {
  int64_t ts_ns = 0;
  int64_t gpu_ns = 0;
  int32_t name = 0;
};

/// One process's events, paired.
struct ProcessScan {
  std::vector<Interval> intervals;  ///< sorted by (begin, end, name)
  std::vector<int64_t> step_ts_ns;  ///< ascending
  std::vector<CounterHit> counters;
  std::vector<GpuSpan> gpu_spans;
  int64_t first_ts_ns = 0;
  int64_t last_ts_ns = 0;
  int64_t unmatched_begins = 0;
  int64_t unmatched_ends = 0;
  int64_t unknown_kinds = 0;
};

/// Pairs begin/end records of one process fed in time order. Allocates per thread, per name
/// and per output interval only.
class Scanner {
 public:
  Scanner(const EventLog& log, int32_t pid, NameTable& names)
      : log_(log), pid_(pid), names_(names) {}

  void Consume(const LoggedEvent& e);
  ProcessScan Finish();

 private:
  struct Open {
    int64_t begin_ns;
    uint16_t id;
  };

  int32_t Resolve(uint16_t id);
  std::vector<Open>& StackOf(uint32_t tid);
  void End(const LoggedEvent& e);
  void Close(const Open& open, int64_t end_ns) {
    scan_.intervals.push_back({open.begin_ns, end_ns, Resolve(open.id)});
  }

  const EventLog& log_;
  int32_t pid_;
  NameTable& names_;
  ProcessScan scan_;
  bool any_ = false;
  std::unordered_map<uint32_t, std::vector<Open>> stacks_;  // by tid; nodes are stable
  uint32_t cached_tid_ = 0;
  std::vector<Open>* cached_stack_ = nullptr;
  std::vector<int32_t> name_of_id_;  // per-process id → NameTable index, -1 = not resolved yet
};

int32_t Scanner::Resolve(uint16_t id) {
  if (id >= name_of_id_.size()) name_of_id_.resize(size_t{id} + 1, -1);
  int32_t& slot = name_of_id_[id];
  if (slot < 0) {
    auto it = log_.names.find({pid_, id});
    // An id without a name (its name line was lost) stays distinguishable, not merged into "".
    slot = it != log_.names.end() && !it->second.empty()
               ? names_.Intern(it->second)
               : names_.Intern("unnamed_" + std::to_string(id));
  }
  return slot;
}

std::vector<Scanner::Open>& Scanner::StackOf(uint32_t tid) {
  if (cached_stack_ == nullptr || tid != cached_tid_) {
    cached_tid_ = tid;
    cached_stack_ = &stacks_[tid];
  }
  return *cached_stack_;
}

void Scanner::Consume(const LoggedEvent& e) {
  if (e.kind == RecordKind::kGpuSpan) {
    // Not an event in time: written when the span resolved, stamped with the instance's begin,
    // so it does not move the process's first/last event. A negative time is garbage.
    if (e.arg >= 0) scan_.gpu_spans.push_back({e.ts_ns, e.arg, Resolve(e.phase_id)});
    return;
  }
  if (!any_) scan_.first_ts_ns = e.ts_ns;
  any_ = true;
  scan_.last_ts_ns = e.ts_ns;
  switch (e.kind) {
    case RecordKind::kBegin: {
      std::vector<Open>& stack = StackOf(e.tid);
      if (stack.size() >= kMaxDepth) {
        stack.erase(stack.begin());
        ++scan_.unmatched_begins;
      }
      stack.push_back({e.ts_ns, e.phase_id});
      break;
    }
    case RecordKind::kEnd:
      End(e);
      break;
    case RecordKind::kStep:
      scan_.step_ts_ns.push_back(e.ts_ns);
      break;
    case RecordKind::kCounter:
      scan_.counters.push_back({e.ts_ns, e.arg, Resolve(e.phase_id)});
      break;
    case RecordKind::kMark:
      break;
    default:  // kInvalid or a kind from a newer writer: counted, skipped
      ++scan_.unknown_kinds;
      break;
  }
}

void Scanner::End(const LoggedEvent& e) {
  std::vector<Open>& stack = StackOf(e.tid);
  auto open =
      std::find_if(stack.rbegin(), stack.rend(), [&](const Open& o) { return o.id == e.phase_id; });
  if (open == stack.rend()) {
    ++scan_.unmatched_ends;
    return;
  }
  // Phases opened inside the matched one never got their end: close them here, unmatched.
  const size_t keep = static_cast<size_t>(stack.rend() - open) - 1;
  for (size_t i = stack.size() - 1; i > keep; --i) {
    Close(stack[i], e.ts_ns);
    ++scan_.unmatched_begins;
  }
  Close(stack[keep], e.ts_ns);
  stack.resize(keep);
}

bool IntervalLess(const Interval& a, const Interval& b) {
  if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
  if (a.end_ns != b.end_ns) return a.end_ns < b.end_ns;
  return a.name < b.name;
}

ProcessScan Scanner::Finish() {
  // Still open at the end of the data (the job crashed or was killed): clip to the last event.
  for (auto& [tid, stack] : stacks_) {
    for (const Open& open : stack) Close(open, scan_.last_ts_ns);
    scan_.unmatched_begins += static_cast<int64_t>(stack.size());
    stack.clear();
  }
  // Sorted by the full key so results do not depend on hash-map order.
  std::vector<Interval>& iv = scan_.intervals;
  if (!std::is_sorted(iv.begin(), iv.end(), IntervalLess)) {
    std::sort(iv.begin(), iv.end(), IntervalLess);
  }
  return std::move(scan_);
}

/// Indices of one process's events in stable ts order (equal ts keep write order). Each thread
/// writes its own records in ts order, so the per-thread sequences are merged (O(n log threads));
/// if one is not sorted after all, a stable sort of everything.
std::vector<uint32_t> TimeOrder(const std::vector<LoggedEvent>& ev, const ProcessInfo& info) {
  std::unordered_map<uint32_t, std::vector<uint32_t>> by_tid;
  bool threads_sorted = true;
  for (auto [begin, end] : info.runs) {
    for (size_t i = begin; i < end; ++i) {
      std::vector<uint32_t>& seq = by_tid[ev[i].tid];
      if (!seq.empty() && ev[seq.back()].ts_ns > ev[i].ts_ns) threads_sorted = false;
      seq.push_back(static_cast<uint32_t>(i));
    }
  }
  auto less = [&ev](uint32_t a, uint32_t b) {
    return ev[a].ts_ns != ev[b].ts_ns ? ev[a].ts_ns < ev[b].ts_ns : a < b;
  };
  std::vector<uint32_t> order;
  order.reserve(static_cast<size_t>(info.event_count));
  for (auto& [tid, seq] : by_tid) {
    const auto mid = static_cast<std::ptrdiff_t>(order.size());
    order.insert(order.end(), seq.begin(), seq.end());
    std::vector<uint32_t>().swap(seq);
    if (threads_sorted) std::inplace_merge(order.begin(), order.begin() + mid, order.end(), less);
  }
  if (!threads_sorted) std::sort(order.begin(), order.end(), less);  // (ts, index): stable
  return order;
}

/// Feeds one process's events to a Scanner in time order: write order when it is already
/// sorted (the common single-thread case, no copy), else a stable sort of indices by ts (threads
/// interleave nearly, not strictly, in ts order; equal ts keep write order).
ProcessScan ScanProcess(const EventLog& log, const ProcessInfo& info, NameTable& names) {
  Scanner scanner(log, info.pid, names);
  const std::vector<LoggedEvent>& ev = log.events;
  if (info.sorted) {
    for (auto [begin, end] : info.runs) {
      for (size_t i = begin; i < end; ++i) scanner.Consume(ev[i]);
    }
    return scanner.Finish();
  }
  for (uint32_t i : TimeOrder(ev, info)) scanner.Consume(ev[i]);
  return scanner.Finish();
}

/// Seed 003 statistics of `durations_s` (sorted in place). `denominator_ns` is the time the
/// share is relative to.
PhaseStats MakeStats(std::string name, int32_t rank, std::vector<double>& durations_s,
                     int64_t total_ns, int64_t denominator_ns) {
  PhaseStats s;
  s.name = std::move(name);
  s.rank = rank;
  s.count = static_cast<int64_t>(durations_s.size());
  s.total_s = NsToSeconds(total_ns);
  s.share = denominator_ns > 0 ? static_cast<double>(total_ns) / static_cast<double>(denominator_ns)
                               : 0.0;
  if (durations_s.empty()) return s;
  RunningStats running;
  for (double d : durations_s) running.Add(d);
  s.mean_s = running.mean();
  s.std_s = running.stddev();
  s.min_s = running.min();
  s.max_s = running.max();
  // Sorted once for three quantiles (base/stats.h QuantileOfSorted, linear as Quantile): Quantile
  // itself sorts a copy per call, which costs seconds on millions of phases.
  std::sort(durations_s.begin(), durations_s.end());
  s.p50_s = QuantileOfSorted(durations_s, 0.50);
  s.p95_s = QuantileOfSorted(durations_s, 0.95);
  s.p99_s = QuantileOfSorted(durations_s, 0.99);
  return s;
}

/// Per-name stats of the intervals inside [span_begin, span_end] (clipped; an interval counts
/// once however many steps it crosses). Time outside the span is added to `*outside_ns`.
/// Ordered by total descending, then name.
std::vector<PhaseStats> StatsInSpan(const std::vector<Interval>& intervals, int64_t span_begin,
                                    int64_t span_end, const NameTable& names, int32_t rank,
                                    int64_t* outside_ns) {
  std::vector<std::vector<double>> durations(names.size());
  std::vector<int64_t> totals(names.size(), 0);
  std::vector<bool> seen(names.size(), false);
  for (const Interval& iv : intervals) {
    const int64_t b = std::max(iv.begin_ns, span_begin);
    const int64_t e = std::min(iv.end_ns, span_end);
    const bool inside =
        b < e || (iv.begin_ns == iv.end_ns && iv.begin_ns >= span_begin && iv.begin_ns <= span_end);
    const int64_t in_ns = b < e ? e - b : 0;
    *outside_ns += (iv.end_ns - iv.begin_ns) - in_ns;
    if (!inside) continue;
    const auto n = static_cast<size_t>(iv.name);
    durations[n].push_back(NsToSeconds(in_ns));
    totals[n] += in_ns;
    seen[n] = true;
  }
  std::vector<PhaseStats> out;
  for (size_t n = 0; n < names.size(); ++n) {
    if (!seen[n]) continue;
    out.push_back(MakeStats(names.Name(static_cast<int32_t>(n)), rank, durations[n], totals[n],
                            span_end - span_begin));
    std::vector<double>().swap(durations[n]);  // free as we go: these can be large
  }
  std::sort(out.begin(), out.end(), [](const PhaseStats& a, const PhaseStats& b) {
    if (a.total_s != b.total_s) return a.total_s > b.total_s;
    return a.name < b.name;
  });
  return out;
}

/// Time covered by at least one interval, per window [bounds[k-1], bounds[k]] (k = 1..n).
std::vector<int64_t> CoveredPerWindow(const std::vector<Interval>& sorted,
                                      const std::vector<int64_t>& bounds) {
  std::vector<int64_t> covered(bounds.size() - 1, 0);
  auto add = [&](int64_t b, int64_t e) {
    // Windows whose end is after b, while they start before e.
    auto k =
        static_cast<size_t>(std::upper_bound(bounds.begin() + 1, bounds.end(), b) - bounds.begin());
    for (; k < bounds.size() && bounds[k - 1] < e; ++k) {
      const int64_t len = std::min(e, bounds[k]) - std::max(b, bounds[k - 1]);
      if (len > 0) covered[k - 1] += len;
    }
  };
  // Merge the begin-sorted intervals into a disjoint union on the fly.
  bool open = false;
  int64_t cur_b = 0;
  int64_t cur_e = 0;
  for (const Interval& iv : sorted) {
    if (open && iv.begin_ns <= cur_e) {
      cur_e = std::max(cur_e, iv.end_ns);
      continue;
    }
    if (open) add(cur_b, cur_e);
    open = true;
    cur_b = iv.begin_ns;
    cur_e = iv.end_ns;
  }
  if (open) add(cur_b, cur_e);
  return covered;
}

/// Inclusive phase time per step and name, and "other" (window − union of phases, never
/// negative). Returns "other" per step in ns.
std::vector<int64_t> FillStepPhases(const std::vector<Interval>& intervals,
                                    const std::vector<int64_t>& bounds, const NameTable& names,
                                    std::vector<StepRecord>& steps) {
  // Dense per-step accumulation over the names this process uses (a handful).
  std::vector<int32_t> local(names.size(), -1);
  std::vector<int32_t> used;
  for (const Interval& iv : intervals) {
    int32_t& slot = local[static_cast<size_t>(iv.name)];
    if (slot < 0) {
      slot = static_cast<int32_t>(used.size());
      used.push_back(iv.name);
    }
  }
  const size_t width = used.size();
  std::vector<int64_t> acc(steps.size() * width, 0);
  std::vector<int64_t> began(steps.size() * width, 0);
  for (const Interval& iv : intervals) {
    auto k = static_cast<size_t>(std::upper_bound(bounds.begin() + 1, bounds.end(), iv.begin_ns) -
                                 bounds.begin());
    const auto col = static_cast<size_t>(local[static_cast<size_t>(iv.name)]);
    if (k < bounds.size() && iv.begin_ns >= bounds.front()) ++began[(k - 1) * width + col];
    for (; k < bounds.size() && bounds[k - 1] < iv.end_ns; ++k) {
      const int64_t len = std::min(iv.end_ns, bounds[k]) - std::max(iv.begin_ns, bounds[k - 1]);
      if (len > 0) acc[(k - 1) * width + col] += len;
    }
  }
  std::vector<int64_t> other_ns = CoveredPerWindow(intervals, bounds);
  // Columns in key order ("other" = column `width`), so each map is built by appending.
  const std::string other(kOtherName);
  std::vector<std::pair<const std::string*, size_t>> columns;
  for (size_t c = 0; c < width; ++c) columns.emplace_back(&names.Name(used[c]), c);
  columns.emplace_back(&other, width);
  std::sort(columns.begin(), columns.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  for (size_t s = 0; s < steps.size(); ++s) {
    const int64_t window = bounds[s + 1] - bounds[s];
    other_ns[s] = std::max<int64_t>(0, window - other_ns[s]);  // covered → uncovered
    std::map<std::string, double>& out = steps[s].phase_s;
    std::map<std::string, int64_t>& n = steps[s].phase_n;
    for (const auto& [name, c] : columns) {
      const int64_t ns = c == width ? other_ns[s] : acc[s * width + c];
      if (ns > 0 || c == width) out.emplace_hint(out.end(), *name, NsToSeconds(ns));
      if (c < width && began[s * width + c] > 1)
        n.emplace_hint(n.end(), *name, began[s * width + c]);
    }
  }
  return other_ns;
}

/// Seed 003 stats of "other": one value per step.
PhaseStats OtherStats(const std::vector<int64_t>& other_ns, int32_t rank, int64_t duration_ns) {
  std::vector<double> other_s;
  other_s.reserve(other_ns.size());
  int64_t total_ns = 0;
  for (int64_t ns : other_ns) {
    other_s.push_back(NsToSeconds(ns));
    total_ns += ns;
  }
  return MakeStats(std::string(kOtherName), rank, other_s, total_ns, duration_ns);
}

/// Counter growth per step (window (bounds[k-1], bounds[k]]; step 1 includes its first ts).
void FillStepCounters(const std::vector<CounterHit>& counters, const std::vector<int64_t>& bounds,
                      const NameTable& names, std::vector<StepRecord>& steps) {
  for (const CounterHit& c : counters) {
    if (c.ts_ns < bounds.front()) continue;  // start-up: only in counters_total
    auto k = static_cast<size_t>(std::lower_bound(bounds.begin() + 1, bounds.end(), c.ts_ns) -
                                 bounds.begin());
    if (k >= bounds.size()) continue;  // after the last step: only in counters_total
    steps[k - 1].counters[names.Name(c.name)] += c.delta;
  }
}

/// Step count, rate and the seed 003 variation ratio of the step durations.
void FillStepSeries(RankSteps& rs, double oscillation_ratio) {
  RunningStats durations;
  for (const StepRecord& s : rs.steps) durations.Add(NsToSeconds(s.end_ns - s.begin_ns));
  rs.count = static_cast<int64_t>(rs.steps.size());
  rs.duration_s =
      rs.steps.empty() ? 0.0 : NsToSeconds(rs.steps.back().end_ns - rs.steps[0].begin_ns);
  rs.per_second = rs.duration_s > 0 ? static_cast<double>(rs.count) / rs.duration_s : 0.0;
  rs.mean_step_s = durations.mean();
  rs.std_step_s = durations.stddev();
  rs.variation_ratio = rs.mean_step_s > 0 ? rs.std_step_s / rs.mean_step_s : 0.0;
  // Seed 003: variation_ratio = std/mean > 0.5 → oscillation.
  rs.oscillating = rs.variation_ratio > oscillation_ratio;
}

/// Adds a scan's counters and unmatched counts to the analysis totals.
void AddScanTotals(const ProcessScan& scan, const NameTable& names, PhaseAnalysis& out,
                   int64_t& unknown_kinds) {
  for (const CounterHit& c : scan.counters) out.counters_total[names.Name(c.name)] += c.delta;
  out.unmatched_begins += scan.unmatched_begins;
  out.unmatched_ends += scan.unmatched_ends;
  unknown_kinds += scan.unknown_kinds;
}

/// Attaches the GPU times of the phase instances that began inside [span_begin, span_end] to
/// the stats of their phase (a span whose phase has no host stats there is dropped: its
/// instance began before the first or after the last step).
void AddGpuTimes(const std::vector<GpuSpan>& spans, int64_t span_begin, int64_t span_end,
                 const NameTable& names, std::vector<PhaseStats>& stats) {
  if (spans.empty()) return;
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < stats.size(); ++i) index.emplace(stats[i].name, i);
  std::vector<int64_t> total_ns(stats.size(), 0);
  for (const GpuSpan& g : spans) {
    if (g.ts_ns < span_begin || g.ts_ns > span_end) continue;
    auto it = index.find(names.Name(g.name));
    if (it == index.end()) continue;
    std::optional<GpuPhaseTime>& t = stats[it->second].gpu;
    if (!t) t.emplace();
    ++t->count;
    total_ns[it->second] += g.gpu_ns;
    t->max_s = std::max(t->max_s, NsToSeconds(g.gpu_ns));
  }
  const int64_t window_ns = span_end - span_begin;
  for (size_t i = 0; i < stats.size(); ++i) {
    std::optional<GpuPhaseTime>& t = stats[i].gpu;
    if (!t) continue;
    t->total_s = NsToSeconds(total_ns[i]);
    t->mean_s = t->total_s / static_cast<double>(t->count);
    t->share =
        window_ns > 0 ? static_cast<double>(total_ns[i]) / static_cast<double>(window_ns) : 0.0;
  }
}

/// Where step 1 begins: after the data_loading that opens the process's records (the
/// iterator's creation, which starts the DataLoader workers, and the first batch), when it comes
/// before every other phase (phases nested inside it do not count) and before the first step
/// mark `first_mark_ns`. Else the first record, `scan.first_ts_ns`.
int64_t StepsBegin(const ProcessScan& scan, const NameTable& names, int64_t first_mark_ns) {
  int64_t data_end = scan.first_ts_ns;
  bool any_data = false;
  for (const Interval& iv : scan.intervals) {  // by begin
    if (iv.begin_ns >= first_mark_ns) break;
    if (names.Name(iv.name) == phase_name::kDataLoading) {
      data_end = std::max(data_end, iv.end_ns);
      any_data = true;
    } else if (!any_data || iv.begin_ns >= data_end) {
      break;  // other work began (not inside a data_loading): the step's work
    }
  }
  return any_data ? std::min(data_end, first_mark_ns) : scan.first_ts_ns;
}

/// Host time per phase name of the intervals' parts inside [begin, end].
std::map<std::string, double> PhaseTimeIn(const std::vector<Interval>& intervals, int64_t begin,
                                          int64_t end, const NameTable& names) {
  std::map<std::string, double> out;
  if (end <= begin) return out;
  for (const Interval& iv : intervals) {
    if (iv.begin_ns >= end) break;  // by begin
    const int64_t len = std::min(iv.end_ns, end) - std::max(iv.begin_ns, begin);
    if (len > 0) out[names.Name(iv.name)] += NsToSeconds(len);
  }
  return out;
}

/// Steps, per-step phases, phase stats and "other" of one rank's main process; the first batch
/// is start-up and the leading WarmupSteps are warm-up (phases.h).
void AnalyzeMain(const ProcessScan& scan, int32_t rank, int32_t pid, int32_t world_ranks,
                 const NameTable& names, const ThresholdSet& t, PhaseAnalysis& out) {
  std::vector<int64_t> bounds{scan.first_ts_ns};
  if (scan.step_ts_ns.empty()) {
    bounds.push_back(scan.last_ts_ns);
    std::string warning(kNoStepsWarning);
    if (world_ranks > 1) warning += " (rank " + std::to_string(rank) + ")";
    out.warnings.push_back(std::move(warning));
  } else {
    bounds.insert(bounds.end(), scan.step_ts_ns.begin(), scan.step_ts_ns.end());
    bounds[0] = StepsBegin(scan, names, bounds[1]);
  }
  RankSteps rs;
  rs.rank = rank;
  rs.pid = pid;
  rs.steps.resize(bounds.size() - 1);
  std::vector<double> step_s(rs.steps.size());
  for (size_t k = 1; k < bounds.size(); ++k) {
    rs.steps[k - 1].index = static_cast<int64_t>(k);
    rs.steps[k - 1].begin_ns = bounds[k - 1];
    rs.steps[k - 1].end_ns = bounds[k];
    step_s[k - 1] = NsToSeconds(bounds[k] - bounds[k - 1]);
  }
  const std::vector<int64_t> other_ns = FillStepPhases(scan.intervals, bounds, names, rs.steps);
  FillStepCounters(scan.counters, bounds, names, rs.steps);
  // Warm-up: a rank without step marks has one pseudo-step, nothing to settle. When step 1's
  // batch came with the start-up, step 1 is no ordinary step (it waited for no data): warm-up.
  size_t w = scan.step_ts_ns.empty() ? 0 : WarmupSteps(step_s, t);
  if (bounds.front() > scan.first_ts_ns && step_s.size() >= 2) w = std::max<size_t>(w, 1);
  rs.warmup.assign(std::make_move_iterator(rs.steps.begin()),
                   std::make_move_iterator(rs.steps.begin() + static_cast<std::ptrdiff_t>(w)));
  rs.steps.erase(rs.steps.begin(), rs.steps.begin() + static_cast<std::ptrdiff_t>(w));
  FillStepSeries(rs, t.oscillation_ratio.value);
  const int64_t steady_begin = bounds[w];
  rs.life.first_event_ns = scan.first_ts_ns;
  rs.life.steps_begin_ns = bounds.front();
  rs.life.steady_begin_ns = steady_begin;
  rs.life.steady_end_ns = bounds.back();
  rs.life.last_event_ns = scan.last_ts_ns;
  rs.life.startup_phase_s = PhaseTimeIn(scan.intervals, scan.first_ts_ns, bounds.front(), names);
  rs.life.tail_phase_s = PhaseTimeIn(scan.intervals, bounds.back(), scan.last_ts_ns, names);

  int64_t outside_ns = 0;
  std::vector<PhaseStats> stats =
      StatsInSpan(scan.intervals, steady_begin, bounds.back(), names, rank, &outside_ns);
  out.outside_steps_s += NsToSeconds(outside_ns);
  AddGpuTimes(scan.gpu_spans, steady_begin, bounds.back(), names, stats);
  stats.push_back(OtherStats(
      std::vector<int64_t>(other_ns.begin() + static_cast<std::ptrdiff_t>(w), other_ns.end()), rank,
      bounds.back() - steady_begin));
  out.phases.insert(out.phases.end(), std::make_move_iterator(stats.begin()),
                    std::make_move_iterator(stats.end()));
  rs.intervals.reserve(scan.intervals.size());
  for (const Interval& i : scan.intervals)
    rs.intervals.push_back({names.Name(i.name), i.begin_ns, i.end_ns});
  std::stable_sort(
      rs.intervals.begin(), rs.intervals.end(),
      [](const PhaseInterval& a, const PhaseInterval& b) { return a.begin_ns < b.begin_ns; });
  out.ranks.push_back(std::move(rs));
}

/// The process that marks a rank's steps: most step records, then one that was not forked
/// without exec (a forked child or daemon with more events never replaces the process that
/// forked it: issue 27 B08), then most events, then lowest pid.
const ProcessInfo* PickMain(const std::vector<const ProcessInfo*>& procs) {
  const ProcessInfo* best = procs.front();
  for (const ProcessInfo* p : procs) {
    if (p->step_count != best->step_count) {
      if (p->step_count > best->step_count) best = p;
    } else if (p->forked != best->forked) {
      if (!p->forked) best = p;
    } else if (p->event_count > best->event_count) {
      best = p;
    }
  }
  return best;
}

}  // namespace

int64_t InstancesIn(const StepRecord& s, const std::string& phase) {
  if (auto n = s.phase_n.find(phase); n != s.phase_n.end()) return n->second;
  auto t = s.phase_s.find(phase);
  return t != s.phase_s.end() && t->second > 0 && phase != kOtherName ? 1 : 0;
}

PhaseAnalysis AnalyzePhases(const phase::EventLog& log, const ThresholdSet& t) {
  PhaseAnalysis out;
  out.lost_records = log.lost_records;
  if (log.events.size() > std::numeric_limits<uint32_t>::max()) {
    out.warnings.push_back("event log too large to analyse (more than 2^32 events)");
    return out;
  }
  const std::vector<ProcessInfo> processes = GroupProcesses(log);
  std::map<int32_t, std::vector<const ProcessInfo*>> by_rank;  // pids ascending within a rank
  for (const ProcessInfo& p : processes) by_rank[p.rank].push_back(&p);
  const auto world_ranks = static_cast<int32_t>(by_rank.size());

  NameTable names;
  int64_t unknown_kinds = 0;
  for (const auto& [rank, procs] : by_rank) {
    const ProcessInfo* main_proc = PickMain(procs);
    {
      // Scoped: the main process's intervals can be large; freed before the next process.
      const ProcessScan scan = ScanProcess(log, *main_proc, names);
      AddScanTotals(scan, names, out, unknown_kinds);
      AnalyzeMain(scan, rank, main_proc->pid, world_ranks, names, t, out);
    }
    for (const ProcessInfo* p : procs) {
      if (p == main_proc) continue;
      const ProcessScan scan = ScanProcess(log, *p, names);
      AddScanTotals(scan, names, out, unknown_kinds);
      if (scan.intervals.empty()) continue;
      ProcessPhases pp;
      pp.pid = p->pid;
      pp.rank = rank;
      int64_t outside_ns = 0;  // 0: the span is the process's whole event span
      pp.phases =
          StatsInSpan(scan.intervals, scan.first_ts_ns, scan.last_ts_ns, names, rank, &outside_ns);
      out.other_processes.push_back(std::move(pp));
    }
  }
  if (unknown_kinds > 0) {
    out.warnings.push_back(std::to_string(unknown_kinds) +
                           " phase records with an invalid kind were skipped");
  }
  return out;
}

PhaseAnalysis PhasesFromSteps(std::vector<RankSteps> ranks, const ThresholdSet& t) {
  PhaseAnalysis out;
  for (RankSteps& rs : ranks) {
    FillStepSeries(rs, t.oscillation_ratio.value);
    int64_t steps_ns = 0;
    std::map<std::string, std::vector<double>> per_phase;
    std::map<std::string, int64_t> total_ns;
    for (const StepRecord& s : rs.steps) {
      steps_ns += s.end_ns - s.begin_ns;
      for (const auto& [name, sec] : s.phase_s) {
        per_phase[name].push_back(sec);
        total_ns[name] += std::llround(sec * static_cast<double>(kNsPerSec));
      }
      for (const auto& [name, n] : s.counters) out.counters_total[name] += n;
    }
    std::vector<PhaseStats> stats;
    for (auto& [name, durations] : per_phase) {
      if (total_ns[name] == 0 && name != kOtherName) continue;
      stats.push_back(MakeStats(name, rs.rank, durations, total_ns[name], steps_ns));
    }
    // As AnalyzePhases orders them: total descending, "other" last.
    std::stable_sort(stats.begin(), stats.end(), [](const PhaseStats& a, const PhaseStats& b) {
      if ((a.name == kOtherName) != (b.name == kOtherName)) return b.name == kOtherName;
      return a.total_s > b.total_s;
    });
    for (auto& p : stats) out.phases.push_back(std::move(p));
    out.ranks.push_back(std::move(rs));
  }
  return out;
}

}  // namespace stallscope::analysis
