#include "trace/gpu_metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <utility>

#include "base/stats.h"
#include "trace/huge_pages.h"
#include "trace/names.h"

namespace stallscope::trace {
namespace {

// A [begin, end) span on a GPU row. HTA keeps negative spans (µs rounding can make end < begin)
// and so do we in hta_compat; the merge below then reproduces HTA's arithmetic exactly.
struct HtaSpan {
  int64_t begin = 0;
  int64_t end = 0;
};

// One GPU row in scope, with what the analyses need.
struct GpuRow {
  int64_t ts = 0;
  int64_t end = 0;
  int64_t stream = 0;
  int64_t correlation = -1;
  int32_t device = 0;
  KernelClass cls = KernelClass::kCompute;
  int32_t launch = -1;  // index into the launch lookup, -1 when no runtime/driver event matched
};

// Runtime/driver events by correlation, for GPU → launch lookups (sorted vector, no hashing).
struct LaunchRef {
  int64_t correlation = 0;
  uint32_t event = 0;  // index into RankTrace::events
  bool driver = false;
};

enum class LaunchName : uint8_t { kNone, kKernel, kGraph, kMemory };

// How a runtime/driver call name counts for launch statistics.
// HTA `cuda_kernel_launch_stats`: cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync,
// cudaMemsetAsync; HTA's queue length leaves out cudaLaunchKernelExC.
LaunchName ClassifyLaunch(std::string_view name, bool hta_compat, bool for_queue) {
  if (hta_compat) {
    if (name == "cudaLaunchKernel") return LaunchName::kKernel;
    if (name == "cudaLaunchKernelExC") return for_queue ? LaunchName::kNone : LaunchName::kKernel;
    if (name == "cudaMemcpyAsync" || name == "cudaMemsetAsync") return LaunchName::kMemory;
    return LaunchName::kNone;
  }
  static constexpr std::array<std::string_view, 8> kKernelLaunches = {
      "cudaLaunchKernel",
      "cudaLaunchKernelExC",
      "cuLaunchKernel",
      "cuLaunchKernelEx",
      "cudaLaunchCooperativeKernel",
      "cudaLaunchCooperativeKernelMultiDevice",
      "cuLaunchCooperativeKernel",
      "hipLaunchKernel"};
  for (std::string_view k : kKernelLaunches) {
    if (name == k) return LaunchName::kKernel;
  }
  if (IsGraphLaunchName(name)) return LaunchName::kGraph;
  if (name == "cudaMemcpyAsync" || name == "cudaMemsetAsync" || name == "cuMemcpyAsync" ||
      name == "cuMemsetD8Async" || name == "cuMemsetD32Async") {
    return LaunchName::kMemory;
  }
  return LaunchName::kNone;
}

// Sorts `iv` by begin and merges it as HTA's `merge_kernel_intervals` does: a new group starts
// when an interval begins strictly after the running maximum end of all earlier ones; a group
// is [min begin, max end]. Writes the groups to `out` (cleared first).
void MergeIntervals(std::vector<HtaSpan>& iv, std::vector<HtaSpan>& out) {
  out.clear();
  ReserveHuge(out, iv.size());
  auto before = [](const HtaSpan& a, const HtaSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  };
  // GPU rows come from the (ts, -dur)-sorted events, so the intervals usually are in this order
  // already (not when clipping to the step window ties their begins): check in O(n) first.
  if (!std::is_sorted(iv.begin(), iv.end(), before)) std::sort(iv.begin(), iv.end(), before);
  int64_t running_max_end = 0;
  for (size_t i = 0; i < iv.size(); ++i) {
    if (i == 0 || iv[i].begin > running_max_end) {
      out.push_back(iv[i]);
    } else {
      out.back().end = std::max(out.back().end, iv[i].end);
    }
    running_max_end = i == 0 ? iv[i].end : std::max(running_max_end, iv[i].end);
  }
}

int64_t TotalLength(const std::vector<HtaSpan>& merged) {
  int64_t total = 0;
  for (const HtaSpan& m : merged) total += m.end - m.begin;
  return total;
}

// |A ∩ B| for two merged (disjoint, sorted) interval lists.
int64_t IntersectionLength(const std::vector<HtaSpan>& a, const std::vector<HtaSpan>& b) {
  int64_t total = 0;
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t lo = std::max(a[i].begin, b[j].begin);
    int64_t hi = std::min(a[i].end, b[j].end);
    if (hi > lo) total += hi - lo;
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

std::optional<double> Ratio(int64_t part, int64_t whole, double scale) {
  if (whole == 0) return std::nullopt;
  return scale * static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace

KernelClass ClassifyKernel(EventKind kind, std::string_view name) {
  if (!IsGpuKind(kind) || kind == EventKind::kGpuUserAnnotation) return KernelClass::kNotKernel;
  if (kind == EventKind::kCudaSync) return KernelClass::kSync;
  // EXPECTED.md (HTA): communication `^nccl|ncclKernel|^hip|^hccl` (names.h, shared).
  if (IsCommKernelName(name)) return KernelClass::kCommunication;
  // EXPECTED.md (HTA): memory `^Memcpy|^Memset|^dma`.
  if (kind == EventKind::kMemcpy || kind == EventKind::kMemset || name.starts_with("Memcpy") ||
      name.starts_with("Memset") || name.starts_with("dma")) {
    return KernelClass::kMemory;
  }
  return KernelClass::kCompute;
}

namespace {

// Everything ComputeGpuMetrics shares between its steps.
struct Context {
  const RankTrace& trace;
  const Timeline& timeline;
  bool hta = false;
  std::vector<GpuRow> rows;         // in (ts, -dur) order
  std::vector<LaunchRef> launches;  // sorted by (correlation, driver, event)
};

std::vector<LaunchRef> BuildLaunchLookup(const RankTrace& trace) {
  std::vector<LaunchRef> refs;
  size_t n = 0;
  for (const Event& e : trace.events) {
    n += (e.kind == EventKind::kRuntime || e.kind == EventKind::kDriver) && e.correlation >= 0;
  }
  refs.reserve(n);
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if ((e.kind != EventKind::kRuntime && e.kind != EventKind::kDriver) || e.correlation < 0) {
      continue;
    }
    refs.push_back(
        LaunchRef{e.correlation, static_cast<uint32_t>(i), e.kind == EventKind::kDriver});
  }
  // Runtime before driver: the runtime call is what the user's thread issued.
  std::sort(refs.begin(), refs.end(), [](const LaunchRef& a, const LaunchRef& b) {
    if (a.correlation != b.correlation) return a.correlation < b.correlation;
    if (a.driver != b.driver) return !a.driver;
    return a.event < b.event;
  });
  return refs;
}

int32_t FindLaunch(const std::vector<LaunchRef>& refs, int64_t correlation) {
  if (correlation < 0) return -1;
  auto it = std::lower_bound(refs.begin(), refs.end(), correlation,
                             [](const LaunchRef& r, int64_t c) { return r.correlation < c; });
  if (it == refs.end() || it->correlation != correlation) return -1;
  return static_cast<int32_t>(it - refs.begin());
}

// Selects the GPU rows in scope. Clean: kernels, memcpy and memset, clipped to the step window.
// HTA: every row with a stream (cuda_sync included), unclipped (PrepareTimeline already kept
// exactly HTA's rows).
void CollectRows(Context& ctx) {
  const bool clip = !ctx.hta && !ctx.timeline.steps.empty();
  std::vector<uint8_t> class_cache(ctx.trace.names.size(), 0xff);
  ReserveHuge(ctx.rows, ctx.trace.events.size() / 4 + 1);
  for (const Event& e : ctx.trace.events) {
    if (!IsGpuKind(e.kind) || e.kind == EventKind::kGpuUserAnnotation) continue;
    if (!ctx.hta && e.kind == EventKind::kCudaSync) continue;
    GpuRow r;
    r.ts = e.ts_ns;
    r.end = e.end_ns();
    if (clip) {
      r.ts = std::max(r.ts, ctx.timeline.window_begin_ns);
      r.end = std::min(r.end, ctx.timeline.window_end_ns);
      if (r.end < r.ts) continue;
    }
    r.stream = e.tid;
    r.device = e.pid;
    r.correlation = e.correlation;
    uint8_t& cached = class_cache[e.name_id];
    if (cached == 0xff) cached = static_cast<uint8_t>(ClassifyKernel(e.kind, ctx.trace.NameOf(e)));
    r.cls = static_cast<KernelClass>(cached);
    // cuda_sync rows share the name cache with nothing else in practice, but keep kind first.
    if (e.kind == EventKind::kCudaSync) r.cls = KernelClass::kSync;
    r.launch = FindLaunch(ctx.launches, e.correlation);
    ctx.rows.push_back(r);
  }
}

TemporalBreakdown Temporal(const std::vector<GpuRow>& rows, std::optional<int32_t> device,
                           std::vector<HtaSpan>& all, std::vector<HtaSpan>& compute,
                           std::vector<HtaSpan>& merged) {
  all.clear();
  compute.clear();
  for (const GpuRow& r : rows) {
    if (device && r.device != *device) continue;
    all.push_back({r.ts, r.end});
    if (r.cls == KernelClass::kCompute) compute.push_back({r.ts, r.end});
  }
  TemporalBreakdown t;
  t.device = device;
  if (all.empty()) return t;
  MergeIntervals(all, merged);
  // HTA: kernel_time = last merged group's end − first group's begin.
  t.span_ns = merged.back().end - merged.front().begin;
  t.busy_ns = TotalLength(merged);
  t.idle_ns = t.span_ns - t.busy_ns;
  MergeIntervals(compute, merged);
  t.compute_ns = TotalLength(merged);
  t.non_compute_ns = t.span_ns - t.compute_ns - t.idle_ns;
  t.idle_pct = Ratio(t.idle_ns, t.span_ns, 100.0);
  t.compute_pct = Ratio(t.compute_ns, t.span_ns, 100.0);
  t.non_compute_pct = Ratio(t.non_compute_ns, t.span_ns, 100.0);
  return t;
}

void ComputeTemporal(const Context& ctx, GpuMetrics& m) {
  std::vector<HtaSpan> all;
  std::vector<HtaSpan> compute;
  std::vector<HtaSpan> merged;
  ReserveHuge(all, ctx.rows.size());
  ReserveHuge(compute, ctx.rows.size());
  ReserveHuge(merged, ctx.rows.size());
  m.temporal = Temporal(ctx.rows, std::nullopt, all, compute, merged);
  std::vector<int32_t> devices;
  for (const GpuRow& r : ctx.rows) {
    if (std::find(devices.begin(), devices.end(), r.device) == devices.end()) {
      devices.push_back(r.device);
    }
  }
  if (devices.size() < 2) return;
  std::sort(devices.begin(), devices.end());
  for (int32_t d : devices) m.per_device.push_back(Temporal(ctx.rows, d, all, compute, merged));
}

void ComputeOverlap(const Context& ctx, GpuMetrics& m) {
  std::vector<HtaSpan> comm;
  std::vector<HtaSpan> comp;
  ReserveHuge(comm, ctx.rows.size());
  ReserveHuge(comp, ctx.rows.size());
  for (const GpuRow& r : ctx.rows) {
    if (r.cls == KernelClass::kCommunication) comm.push_back({r.ts, r.end});
    if (r.cls == KernelClass::kCompute) comp.push_back({r.ts, r.end});
  }
  std::vector<HtaSpan> comm_merged;
  std::vector<HtaSpan> comp_merged;
  MergeIntervals(comm, comm_merged);
  MergeIntervals(comp, comp_merged);
  m.comm_ns = TotalLength(comm_merged);
  m.comm_overlap_ns = IntersectionLength(comm_merged, comp_merged);
  m.comm_comp_overlap_pct = Ratio(m.comm_overlap_ns, m.comm_ns, 100.0);
}

void FinishIdle(StreamIdle& s) {
  int64_t total = s.host_wait_ns + s.kernel_wait_ns + s.other_ns;
  s.host_wait_share = Ratio(s.host_wait_ns, total, 1.0);
  s.kernel_wait_share = Ratio(s.kernel_wait_ns, total, 1.0);
  s.other_share = Ratio(s.other_ns, total, 1.0);
}

// Idle-time breakdown per (device, stream); cuda_sync rows are never part of it.
// HTA: the gap is ts − end of the previous row (negative when rows overlap; summed as is).
// Clean: the gap is ts − max end so far, and only positive gaps count.
void ComputeIdle(const Context& ctx, GpuMetrics& m) {
  std::vector<uint32_t> order;
  ReserveHuge(order, ctx.rows.size());
  for (uint32_t i = 0; i < ctx.rows.size(); ++i) {
    if (ctx.rows[i].cls != KernelClass::kSync) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const GpuRow& x = ctx.rows[a];
    const GpuRow& y = ctx.rows[b];
    return x.device != y.device ? x.device < y.device : x.stream < y.stream;
  });
  const auto& events = ctx.trace.events;
  for (size_t i = 0; i < order.size();) {
    const GpuRow& first = ctx.rows[order[i]];
    StreamIdle s;
    s.device = first.device;
    s.stream = first.stream;
    int64_t prev_end = first.end;
    size_t j = i + 1;
    for (; j < order.size(); ++j) {
      const GpuRow& r = ctx.rows[order[j]];
      if (r.device != s.device || r.stream != s.stream) break;
      int64_t gap = r.ts - prev_end;
      if (ctx.hta || gap > 0) {
        ++s.gaps;
        bool host_wait = r.launch >= 0 &&
                         events[ctx.launches[static_cast<size_t>(r.launch)].event].ts_ns > prev_end;
        if (host_wait) {
          s.host_wait_ns += gap;
        } else if (gap < kKernelWaitThresholdNs) {  // strict, as HTA's `idle_interval < delay`
          s.kernel_wait_ns += gap;
        } else {
          s.other_ns += gap;
        }
      }
      prev_end = ctx.hta ? r.end : std::max(prev_end, r.end);
    }
    FinishIdle(s);
    m.idle.push_back(s);
    i = j;
  }
}

// One +1 (launch call start) or −1 (GPU row) step of a stream's launch queue.
// Fields ordered for size (32 bytes, not 40): the vector holds two per GPU row and is sorted.
struct QueueStep {
  int64_t stream = 0;
  int64_t ts = 0;
  int64_t call_dur_ns = 0;
  int32_t device = 0;
  int8_t delta = 0;
  bool first_of_call = false;  // the +1 of a call's first GPU row (a graph launch has several)
};
static_assert(sizeof(QueueStep) == 32);

// Per-name launch classification, computed once per distinct name.
class LaunchNames {
 public:
  LaunchNames(const RankTrace& trace, bool hta) : trace_(trace), hta_(hta) {
    cache_.assign(trace.names.size(), 0xff);
  }
  // (for launch statistics, for the queue length)
  std::pair<LaunchName, LaunchName> Get(const Event& call) {
    uint8_t& c = cache_[call.name_id];
    if (c == 0xff) {
      std::string_view name = trace_.NameOf(call);
      c = static_cast<uint8_t>(static_cast<uint8_t>(ClassifyLaunch(name, hta_, false)) |
                               static_cast<uint8_t>(ClassifyLaunch(name, hta_, true)) << 4);
    }
    return {static_cast<LaunchName>(c & 0xf), static_cast<LaunchName>(c >> 4)};
  }

 private:
  const RankTrace& trace_;
  bool hta_;
  std::vector<uint8_t> cache_;
};

// Queue-length statistics and full-queue blocking of each stream. `steps` sorted by
// (device, stream, ts, order); `median_call_ns` is the typical launch-call duration.
void QueueStats(const std::vector<QueueStep>& steps, double median_call_ns, LaunchStats& out) {
  std::vector<int64_t> values;
  ReserveHuge(values, steps.size());
  for (size_t i = 0; i < steps.size();) {
    QueueLength q;
    q.device = steps[i].device;
    q.stream = steps[i].stream;
    size_t j = i;
    int64_t depth = 0;
    double sum = 0;
    values.clear();
    for (; j < steps.size() && steps[j].device == q.device && steps[j].stream == q.stream; ++j) {
      depth += steps[j].delta;
      values.push_back(depth);
      sum += static_cast<double>(depth);
      q.max = std::max(q.max, depth);
    }
    q.samples = values.size();
    q.mean = sum / static_cast<double>(values.size());
    q.median = MedianInPlace(std::span(values));  // pandas median(): reorders values
    if (q.max >= kFullQueueMinDepth) {
      // "Full": within 10% of the deepest the queue got (see LaunchStats::blocked_*).
      auto full = static_cast<int64_t>(std::ceil(0.9 * static_cast<double>(q.max)));
      depth = 0;
      for (size_t k = i; k < j; ++k) {
        if (steps[k].delta > 0 && steps[k].first_of_call && depth >= full) {
          ++q.blocked_launches;
          q.blocked_ns += std::max<int64_t>(
              0, steps[k].call_dur_ns - static_cast<int64_t>(std::llround(median_call_ns)));
        }
        depth += steps[k].delta;
      }
    }
    out.blocked_launches += q.blocked_launches;
    out.blocked_on_full_queue_ns += q.blocked_ns;
    out.queues.push_back(q);
    i = j;
  }
}

// Launch statistics (HTA `cuda_kernel_launch_stats` and `get_queue_length_summary`).
// HTA: every (call, GPU row) pair counts; launch delay = GPU start − call end; the queue steps
// −1 when the GPU row starts. Clean: delay = GPU start − call start, once per call (its first
// GPU row); the queue steps −1 when the GPU row ends.
void ComputeLaunchStats(const Context& ctx, LaunchStats& out) {
  LaunchNames names(ctx.trace, ctx.hta);
  std::vector<uint8_t> seen(ctx.launches.size(), 0);
  std::vector<int64_t> delays;
  std::vector<int64_t> call_durs;
  std::vector<QueueStep> steps;
  ReserveHuge(delays, ctx.rows.size());
  ReserveHuge(call_durs, ctx.rows.size());
  ReserveHuge(steps, 2 * ctx.rows.size());
  for (const GpuRow& r : ctx.rows) {
    if (r.launch < 0) continue;
    const Event& call = ctx.trace.events[ctx.launches[static_cast<size_t>(r.launch)].event];
    bool first = seen[static_cast<size_t>(r.launch)] == 0;
    seen[static_cast<size_t>(r.launch)] = 1;
    auto [kind, queue_kind] = names.Get(call);
    if (kind != LaunchName::kNone) {
      ++out.launches;
      if (kind == LaunchName::kGraph) {
        ++out.graph_kernels;
        out.graph_launches += first;
      }
      out.kernels_shorter_than_launch += (r.end - r.ts) < call.dur_ns;
      if (ctx.hta || first) {
        out.long_runtime_calls += call.dur_ns > kLongRuntimeCallNs;
        int64_t delay = ctx.hta ? r.ts - call.end_ns() : r.ts - call.ts_ns;
        out.long_launch_delays += delay > kLongLaunchDelayNs;
        delays.push_back(delay);
      }
      if (first) call_durs.push_back(call.dur_ns);
    }
    if (queue_kind != LaunchName::kNone) {
      steps.push_back({r.stream, call.ts_ns, call.dur_ns, r.device, +1, first});
      steps.push_back({r.stream, ctx.hta ? r.ts : r.end, 0, r.device, -1, false});
    }
  }
  if (!delays.empty()) {
    // pandas median() and quantile(q) (linear), by selection: O(n), reordering `delays`.
    out.launch_delay_median_ns = std::llround(MedianInPlace(std::span(delays)));
    out.launch_delay_p99_ns = std::llround(QuantileInPlace(std::span(delays), 0.99));
  }
  double median_call = 0;
  if (!call_durs.empty()) {
    median_call = MedianInPlace(std::span(call_durs));
  }
  // Ties: HTA's sort puts a launch before a GPU start at the same µs; clean counts an end first.
  const int8_t first_delta = ctx.hta ? 1 : -1;
  std::sort(steps.begin(), steps.end(), [&](const QueueStep& a, const QueueStep& b) {
    if (a.device != b.device) return a.device < b.device;
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.ts != b.ts) return a.ts < b.ts;
    return a.delta == first_delta && b.delta != first_delta;
  });
  QueueStats(steps, median_call, out);
}

}  // namespace

GpuMetrics ComputeGpuMetrics(const RankTrace& trace, const Timeline& timeline,
                             const AnalysisOptions& options) {
  Context ctx{trace, timeline, options.hta_compat, {}, BuildLaunchLookup(trace)};
  CollectRows(ctx);
  GpuMetrics m;
  m.gpu_events = ctx.rows.size();
  for (const GpuRow& r : ctx.rows) m.gpu_events_without_launch += r.launch < 0;
  ComputeTemporal(ctx, m);
  ComputeOverlap(ctx, m);
  ComputeIdle(ctx, m);
  ComputeLaunchStats(ctx, m.launch);
  return m;
}

}  // namespace stallscope::trace
