#include "report/trace_render.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "base/thresholds.h"
#include "base/units.h"
#include "report/run_render.h"

namespace stallscope::report {
namespace {

using diagnose::TraceRankReport;
using diagnose::TraceReport;
using trace::IdleCause;
using trace::StepCategory;

/// Trace durations, int64 or averaged ns: 1234 → "1.2 µs" (base FormatDurationFineNs).
template <typename Ns>
std::string Dur(Ns ns) {
  return FormatDurationFineNs(static_cast<double>(ns));
}

std::string_view DialectName(trace::Dialect d) {
  switch (d) {
    case trace::Dialect::kKineto:
      return "kineto";
    case trace::Dialect::kKineto2021:
      return "kineto-2021";
    case trace::Dialect::kChromeNoCats:
      return "chrome-legacy";
  }
  return "kineto";
}

/// JSON key of a step category: "Kernel" → "kernel", "CPU Exec" → "cpu_exec".
std::string CategoryKey(StepCategory c) {
  std::string k(trace::StepCategoryName(c));
  for (char& ch : k) ch = ch == ' ' ? '_' : static_cast<char>(std::tolower(ch));
  return k;
}

constexpr std::array<StepCategory, trace::kStepCategoryCount> kCategories{
    StepCategory::kKernel,        StepCategory::kMemcpy,  StepCategory::kMemset,
    StepCategory::kCommunication, StepCategory::kRuntime, StepCategory::kDataLoader,
    StepCategory::kCpuExec,       StepCategory::kOther};

// ---------------------------------------------------------------------------------------------
// Text
// ---------------------------------------------------------------------------------------------

std::string TraceHeader(const TraceReport& r) {
  uint64_t bytes = 0, events = 0;
  size_t steps = 0;
  for (const auto& k : r.ranks) {
    bytes += k.stats.bytes;
    events += k.stats.events_total;
    steps += k.timeline.steps.size();
  }
  std::string mode = r.options.hta_compat ? "  [HTA-compatible numbers]" : "";
  return fmt::format("stallscope trace: {} rank{}, {} steps, {} events, {} of JSON{}\n",
                     r.ranks.size(), r.ranks.size() == 1 ? "" : "s", steps, events,
                     FormatBytes(static_cast<double>(bytes)), mode);
}

// Under the breakdown: what the Runtime column holds, by call kind, for ranks where it is ≥ 5%
// of step time ("  rank 0 Runtime 22.0%: sync 92% of runtime-call time, launch 8%").
std::string RuntimeNotes(const TraceReport& r) {
  std::string out;
  for (const auto& k : r.ranks) {
    double runtime = k.steps.total.Share(StepCategory::kRuntime);
    const trace::RuntimeCalls& rc = k.idle.runtime;
    int64_t total = 0;
    for (int64_t ns : rc.ns) total += ns;
    if (runtime < 0.05 || total <= 0) continue;
    std::vector<size_t> order(trace::kRuntimeCallKindCount);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rc.ns[a] > rc.ns[b]; });
    std::string kinds;
    for (size_t i : order) {
      double share = static_cast<double>(rc.ns[i]) / static_cast<double>(total);
      if (share < 0.01) continue;
      kinds += fmt::format("{}{} {:.0f}%", kinds.empty() ? "" : ", ",
                           trace::RuntimeCallKindName(static_cast<trace::RuntimeCallKind>(i)),
                           share * 100.0);
    }
    out += fmt::format("  rank {} Runtime {:.1f}%: {} of runtime-call time\n", k.rank,
                       runtime * 100.0, kinds);
  }
  return out;
}

std::string BreakdownTable(const TraceReport& r, const TraceTextOptions& o) {
  std::string out = fmt::format("\nStep breakdown (TensorBoard categories, % of step wall time)\n");
  out += fmt::format("  {:<10} {:>6} {:>9}", "rank/step", "steps", "mean");
  for (StepCategory c : kCategories) out += fmt::format(" {:>8}", trace::StepCategoryName(c));
  out += '\n';
  auto row = [&](std::string label, size_t n, const trace::CategoryNs& t) {
    std::string line = fmt::format(
        "  {:<10} {:>6} {:>9}", label, n,
        n > 0 ? Dur(static_cast<double>(t.wall_ns) / static_cast<double>(n)) : Dur(t.wall_ns));
    for (StepCategory c : kCategories) line += fmt::format(" {:>7.1f}%", t.Share(c) * 100.0);
    return line + '\n';
  };
  for (const auto& k : r.ranks) {
    out += row(fmt::format("rank {}", k.rank), k.steps.steps.size(), k.steps.total);
    if (!o.per_step) continue;
    for (const auto& s : k.steps.steps) {
      out += row(fmt::format("  #{}", s.step_number), 1, s.times);
    }
  }
  return out + RuntimeNotes(r);
}

std::string TraceGpuTable(const TraceReport& r) {
  bool any = std::any_of(r.ranks.begin(), r.ranks.end(),
                         [](const auto& k) { return k.gpu.temporal.span_ns > 0; });
  if (!any) return "\nGPU      no GPU events in the trace (CPU-only profile)\n";
  std::string out =
      fmt::format("\nGPU time  {:<6} {:>9} {:>7} {:>9} {:>12} {:>9}   idle while the host was in\n",
                  "rank", "span", "idle", "compute", "non-compute", "overlap");
  for (const auto& k : r.ranks) {
    const auto& t = k.gpu.temporal;
    if (t.span_ns == 0) continue;
    std::string causes;
    for (size_t i = 0; i < trace::kIdleCauseCount; ++i) {
      double s = k.idle.total.Share(static_cast<IdleCause>(i));
      if (s < 0.005) continue;
      causes += fmt::format("{}{} {}", causes.empty() ? "" : ", ",
                            trace::IdleCauseName(static_cast<IdleCause>(i)), FormatPercent(s, 1));
    }
    out += fmt::format(
        "          {:<6} {:>9} {:>6.1f}% {:>8.1f}% {:>11.1f}% {:>9}   {}\n", k.rank, Dur(t.span_ns),
        t.idle_pct.value_or(0), t.compute_pct.value_or(0), t.non_compute_pct.value_or(0),
        k.gpu.comm_comp_overlap_pct ? fmt::format("{:.1f}%", *k.gpu.comm_comp_overlap_pct)
                                    : std::string("-"),
        causes.empty() ? "-" : causes);
  }
  out +=
      "          (idle causes are shares of the GPU's idle time; overlap = computing while "
      "communicating / communicating)\n";
  return out;
}

std::string StreamTable(const TraceRankReport& k, const TraceTextOptions& o) {
  if (k.gpu.idle.empty()) return "";
  std::string out = fmt::format("  Streams (rank {})  {:>8} {:>10} {:>10} {:>11} {:>10}\n", k.rank,
                                "stream", "idle", "host_wait", "kernel_wait", "other");
  std::vector<const trace::StreamIdle*> rows;
  for (const auto& s : k.gpu.idle) rows.push_back(&s);
  std::stable_sort(rows.begin(), rows.end(), [](const auto* a, const auto* b) {
    return a->host_wait_ns + a->kernel_wait_ns + a->other_ns >
           b->host_wait_ns + b->kernel_wait_ns + b->other_ns;
  });
  for (size_t i = 0; i < rows.size() && i < o.max_streams; ++i) {
    const auto& s = *rows[i];
    int64_t idle = s.host_wait_ns + s.kernel_wait_ns + s.other_ns;
    out += fmt::format("  {:<18} {:>8} {:>10} {:>9.0f}% {:>10.0f}% {:>9.0f}%\n",
                       fmt::format("GPU {}", s.device), s.stream, Dur(idle),
                       s.host_wait_share.value_or(0) * 100, s.kernel_wait_share.value_or(0) * 100,
                       s.other_share.value_or(0) * 100);
  }
  return out;
}

std::string LaunchLines(const TraceRankReport& k) {
  const auto& l = k.gpu.launch;
  if (l.launches == 0) return "";
  std::string out = fmt::format(
      "  Launches: {} (CUDA graphs {}), delay median {}, p99 {}, {} over 100 µs; {} kernels "
      "shorter than their launch call; {} launch calls over 50 µs\n",
      l.launches, l.graph_launches, l.launch_delay_median_ns ? Dur(*l.launch_delay_median_ns) : "-",
      l.launch_delay_p99_ns ? Dur(*l.launch_delay_p99_ns) : "-", l.long_launch_delays,
      l.kernels_shorter_than_launch, l.long_runtime_calls);
  for (const auto& q : l.queues) {
    if (q.samples == 0) continue;
    out += fmt::format("    queue GPU {} stream {}: mean {:.1f}, median {:.0f}, max {}", q.device,
                       q.stream, q.mean, q.median, q.max);
    if (q.blocked_launches > 0) {
      out += fmt::format(", {} launches blocked on a full queue ({})", q.blocked_launches,
                         Dur(q.blocked_ns));
    }
    out += '\n';
  }
  return out;
}

std::string KernelLines(const TraceRankReport& k, const TraceTextOptions& o) {
  const auto& kr = k.kernels;
  if (kr.kernel_count == 0) return "";
  std::string tc =
      kr.tensor_core_share ? FormatPercent(*kr.tensor_core_share, 1) : std::string("unknown");
  std::string out = fmt::format(
      "  Kernels: {} in {}, mean {}; Tensor-core kernels {} of kernel time\n", kr.kernel_count,
      Dur(kr.kernel_time_ns),
      Dur(static_cast<double>(kr.kernel_time_ns) / static_cast<double>(kr.kernel_count)), tc);
  for (size_t i = 0; i < kr.kernels.size() && i < o.top_kernels; ++i) {
    const auto& s = kr.kernels[i];
    out += fmt::format("    {:>9} {:>6.1f}% {:>7}x  {}{}\n", Dur(s.total_ns), s.busy_share * 100,
                       s.count, EscapeControl(trace::ShortKernelName(s.name, 80)),
                       s.tensor_core ? "  [TC]" : "");
  }
  for (const auto& m : kr.memcpy) {
    bool host = m.kind.host_memory != trace::HostMemory::kNone &&
                m.kind.host_memory != trace::HostMemory::kUnknown;
    out += fmt::format(
        "  Memcpy {}{}: {}x, {}, {}{}\n", trace::MemcpyDirectionName(m.kind.direction),
        host ? fmt::format(" ({})", trace::HostMemoryName(m.kind.host_memory)) : std::string(),
        m.count, FormatBytes(static_cast<double>(m.bytes)), Dur(m.time_ns),
        m.effective_gbps ? fmt::format(", {:.1f} GB/s", *m.effective_gbps) : "");
  }
  for (const auto& c : kr.collectives) {
    if (c.kernel_count == 0) continue;  // host-only ranges (record_param_comms waits): JSON only
    out += fmt::format("  Collective {}: {} kernels, {} on the GPU (max {}), {} host calls\n",
                       EscapeControl(c.collective), c.kernel_count, Dur(c.kernel_time_ns),
                       Dur(c.kernel_max_ns), c.cpu_calls);
  }
  return out;
}

// "  Runtime calls: launch 1204 (31 ms), sync 10 (0.2 s), memory 3 (2.0 ms), setup 1 (30 s)"
// and where in the step the GPU idled, for ranks with runtime calls / GPU idle.
std::string RuntimeAndPositionLines(const TraceRankReport& k) {
  std::string out;
  const trace::RuntimeCalls& rc = k.idle.runtime;
  std::string kinds;
  for (size_t i = 0; i < trace::kRuntimeCallKindCount; ++i) {
    if (rc.count[i] == 0 && rc.ns[i] == 0) continue;
    kinds += fmt::format("{}{} {} ({})", kinds.empty() ? "" : ", ",
                         trace::RuntimeCallKindName(static_cast<trace::RuntimeCallKind>(i)),
                         rc.count[i], Dur(rc.ns[i]));
  }
  if (!kinds.empty()) out += fmt::format("  Runtime calls: {}\n", kinds);
  int64_t idle = 0;
  for (int64_t ns : k.idle.position_ns) idle += ns;
  std::string where;
  for (size_t i = 0; idle > 0 && i < trace::kIdlePositionCount; ++i) {
    double share = static_cast<double>(k.idle.position_ns[i]) / static_cast<double>(idle);
    if (share < 0.005) continue;
    where += fmt::format("{}{} {}", where.empty() ? "" : ", ",
                         trace::IdlePositionName(static_cast<trace::IdlePosition>(i)),
                         FormatPercent(share, 1));
  }
  if (!where.empty()) out += fmt::format("  GPU idle by position in the step: {}\n", where);
  return out;
}

std::string SeriesLines(const TraceRankReport& k) {
  std::string out = RuntimeAndPositionLines(k);
  const auto& sy = k.idle.syncs;
  size_t steps = k.timeline.steps.size();
  if (sy.count > 0) {
    out += fmt::format("  Host syncs: {} ({:.1f} per step), {} in total\n", sy.count,
                       steps > 0 ? static_cast<double>(sy.count) / static_cast<double>(steps) : 0.0,
                       Dur(sy.ns));
  }
  if (!k.step_outliers.indices.empty()) {
    std::string list;
    for (size_t i : k.step_outliers.indices) {
      if (i >= k.series.step_number.size()) continue;
      list += fmt::format("{}#{} ({})", list.empty() ? "" : ", ", k.series.step_number[i],
                          Dur(k.series.step_ns[i]));
    }
    out += fmt::format("  Slow steps (> median {} + {} robust σ): {}\n",
                       Dur(k.step_outliers.median * 1e9), kThresholds.outlier_robust_z.value, list);
  }
  if (k.step_period && k.step_period->significant) {
    out += fmt::format("  Step time repeats every {:.1f} steps (strength {:.2f})\n",
                       k.step_period->period, k.step_period->strength);
  }
  return out;
}

std::string CrossLines(const TraceReport& r) {
  if (!r.cross) return "";
  const auto& c = *r.cross;
  std::string out = "\nAcross ranks\n";
  double worst = 0;
  for (const auto& s : c.steps) worst = std::max(worst, s.spread);
  out += fmt::format("  {} shared steps; largest step-time spread {:.1f}% ((max-min)/median)\n",
                     c.steps.size(), worst * 100);
  if (c.slowest_rank) {
    for (const auto& k : c.ranks) {
      if (k.rank != *c.slowest_rank) continue;
      out += fmt::format(
          "  slowest rank {}: {:+.1f}% vs the median rank, slowest in {} of {} "
          "steps\n",
          k.rank, k.straggler_score * 100, k.times_slowest, k.steps);
    }
  }
  if (c.latest_rank) {
    for (const auto& k : c.ranks) {
      if (k.rank != *c.latest_rank) continue;
      out += fmt::format(
          "  last to arrive at collectives: rank {} ({} of {} instances, held the "
          "others up {} in all; mean lateness {})\n",
          k.rank, k.times_last, k.collectives, Dur(k.held_up_ns), Dur(k.mean_lateness_ns));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

void WriteCategories(JsonWriter& w, const trace::CategoryNs& t) {
  w.BeginObject().Field("wall_ns", t.wall_ns);
  for (StepCategory c : kCategories) w.Field(CategoryKey(c) + "_ns", t.Get(c));
  for (StepCategory c : kCategories) w.Field(CategoryKey(c) + "_pct", t.Share(c) * 100.0, 2);
  w.EndObject();
}

void WriteTemporal(JsonWriter& w, const trace::TemporalBreakdown& t) {
  w.BeginObject()
      .Field("idle_pct", t.idle_pct, 2)
      .Field("compute_pct", t.compute_pct, 2)
      .Field("non_compute_pct", t.non_compute_pct, 2)
      .Field("span_ns", t.span_ns)
      .Field("busy_ns", t.busy_ns)
      .Field("idle_ns", t.idle_ns)
      .Field("compute_ns", t.compute_ns)
      .Field("non_compute_ns", t.non_compute_ns);
  if (t.device) w.Field("device", *t.device);
  w.EndObject();
}

void WriteIdle(JsonWriter& w, const TraceRankReport& k) {
  w.Key("idle_breakdown").BeginArray();
  for (const auto& s : k.gpu.idle) {
    w.BeginObject()
        .Field("device", s.device)
        .Field("stream", s.stream)
        .Field("host_wait_ns", s.host_wait_ns)
        .Field("kernel_wait_ns", s.kernel_wait_ns)
        .Field("other_ns", s.other_ns)
        .Field("host_wait_share", s.host_wait_share, 4)
        .Field("kernel_wait_share", s.kernel_wait_share, 4)
        .Field("other_share", s.other_share, 4)
        .EndObject();
  }
  w.EndArray().Key("gpu_idle_by_host").BeginArray();
  for (const auto& d : k.idle.devices) {
    w.BeginObject()
        .Field("device", d.device)
        .Field("window_ns", d.window_ns)
        .Field("busy_ns", d.busy_ns)
        .Field("idle_ns", d.idle.idle_ns)
        .Key("causes_ns")
        .BeginObject();
    for (size_t i = 0; i < trace::kIdleCauseCount; ++i) {
      w.Field(trace::IdleCauseName(static_cast<IdleCause>(i)), d.idle.ns[i]);
    }
    w.EndObject().Key("position_ns").BeginObject();
    for (size_t i = 0; i < trace::kIdlePositionCount; ++i) {
      w.Field(trace::IdlePositionName(static_cast<trace::IdlePosition>(i)), d.position_ns[i]);
    }
    w.EndObject().EndObject();
  }
  w.EndArray();
}

void WriteRuntimeCalls(JsonWriter& w, const trace::RuntimeCalls& rc) {
  w.Key("runtime_calls")
      .BeginObject()
      .Field("window_ns", rc.window_ns)
      .Key("by_kind")
      .BeginObject();
  for (size_t i = 0; i < trace::kRuntimeCallKindCount; ++i) {
    w.Key(trace::RuntimeCallKindName(static_cast<trace::RuntimeCallKind>(i)))
        .BeginObject()
        .Field("count", rc.count[i])
        .Field("ns", rc.ns[i])
        .EndObject();
  }
  w.EndObject().Key("top").BeginArray();
  for (const auto& t : rc.top) {
    w.BeginObject()
        .Field("name", t.name)
        .Field("kind", trace::RuntimeCallKindName(t.kind))
        .Field("count", t.count)
        .Field("ns", t.ns)
        .EndObject();
  }
  w.EndArray().FieldArray("memory_calls_per_step", rc.memory_calls_per_step).EndObject();
}

void WriteLaunch(JsonWriter& w, const trace::LaunchStats& l) {
  w.Key("launch")
      .BeginObject()
      .Field("launches", l.launches)
      .Field("graph_launches", l.graph_launches)
      .Field("graph_kernels", l.graph_kernels)
      .Field("kernels_shorter_than_launch", l.kernels_shorter_than_launch)
      .Field("long_runtime_calls", l.long_runtime_calls)
      .Field("long_launch_delays", l.long_launch_delays)
      .Field("launch_delay_median_ns", l.launch_delay_median_ns)
      .Field("launch_delay_p99_ns", l.launch_delay_p99_ns)
      .Field("blocked_on_full_queue_ns", l.blocked_on_full_queue_ns)
      .Field("blocked_launches", l.blocked_launches)
      .Key("queues")
      .BeginArray();
  for (const auto& q : l.queues) {
    w.BeginObject()
        .Field("device", q.device)
        .Field("stream", q.stream)
        .Field("samples", q.samples)
        .Field("mean", q.mean, 2)
        .Field("median", q.median, 1)
        .Field("max", q.max)
        .EndObject();
  }
  w.EndArray().EndObject();
}

void WriteKernels(JsonWriter& w, const trace::KernelReport& kr) {
  w.Key("kernels")
      .BeginObject()
      .Field("count", kr.kernel_count)
      .Field("time_ns", kr.kernel_time_ns)
      .Field("gpu_busy_ns", kr.gpu_busy_ns)
      .Field("tensor_core_share", kr.tensor_core_share, 4)
      .Field("cuda_graph_launches", kr.cuda_graph_launches)
      .Key("top")
      .BeginArray();
  for (size_t i = 0; i < kr.kernels.size() && i < 20; ++i) {
    const auto& s = kr.kernels[i];
    w.BeginObject()
        .Field("name", s.name)
        .Field("count", s.count)
        .Field("total_ns", s.total_ns)
        .Field("mean_ns", s.mean_ns, 1)
        .Field("max_ns", s.max_ns)
        .Field("busy_share", s.busy_share, 4)
        .FieldBool("tensor_core", s.tensor_core)
        .FieldBool("communication", s.communication)
        .EndObject();
  }
  w.EndArray().EndObject().Key("memcpy").BeginArray();
  for (const auto& m : kr.memcpy) {
    w.BeginObject()
        .Field("direction", trace::MemcpyDirectionName(m.kind.direction))
        .Field("host_memory", trace::HostMemoryName(m.kind.host_memory))
        .Field("count", m.count)
        .Field("bytes", m.bytes)
        .Field("time_ns", m.time_ns)
        .Field("effective_gbps", m.effective_gbps, 2)
        .EndObject();
  }
  w.EndArray()
      .Key("memset")
      .BeginObject()
      .Field("count", kr.memset.count)
      .Field("bytes", kr.memset.bytes)
      .Field("time_ns", kr.memset.time_ns)
      .EndObject();
  w.Key("collectives").BeginArray();
  for (const auto& c : kr.collectives) {
    w.BeginObject()
        .Field("collective", c.collective)
        .Field("kernel_count", c.kernel_count)
        .Field("kernel_time_ns", c.kernel_time_ns)
        .Field("kernel_max_ns", c.kernel_max_ns)
        .Field("cpu_calls", c.cpu_calls)
        .Field("cpu_time_ns", c.cpu_time_ns)
        .Field("in_nelems", c.in_nelems)
        .Field("out_nelems", c.out_nelems)
        .Field("in_bytes", c.in_bytes)
        .EndObject();
  }
  w.EndArray();
}

void WriteSeries(JsonWriter& w, const TraceRankReport& k) {
  w.Key("series").BeginObject();
  w.FieldArray("step", k.series.step_number);
  w.FieldArray("step_ns", k.series.step_ns);
  w.FieldArray("dataloader_ns", k.series.dataloader_ns);
  w.FieldArray("gpu_idle_ns", k.series.gpu_idle_ns);
  w.FieldArray("sync_ns", k.series.sync_ns);
  w.EndObject().Key("slow_steps").BeginArray();
  for (size_t i : k.step_outliers.indices) {
    if (i < k.series.step_number.size()) w.Int(k.series.step_number[i]);
  }
  w.EndArray();
  if (k.step_period && k.step_period->significant) {
    w.Field("period_steps", k.step_period->period, 2);
  } else {
    w.Key("period_steps").Null();
  }
}

void WriteRank(JsonWriter& w, const TraceRankReport& k) {
  w.BeginObject()
      .Field("rank", k.rank)
      .Field("path", k.path)
      .Field("rank_source", trace::RankSourceName(k.rank_source))
      .Field("dialect", DialectName(k.dialect))
      .Field("world_size", k.world_size)
      .Field("backend", k.backend);
  w.Key("read")
      .BeginObject()
      .Field("bytes", k.stats.bytes)
      .Field("events", k.stats.events_total)
      .Field("complete", k.stats.complete)
      .Field("flows", k.stats.flows)
      .Field("malformed", k.stats.malformed)
      .FieldBool("truncated", k.stats.truncated)
      .EndObject();
  w.Key("steps")
      .BeginObject()
      .Field("count", k.timeline.steps.size())
      .Field("window_begin_ns", k.timeline.window_begin_ns)
      .Field("window_end_ns", k.timeline.window_end_ns)
      .FieldBool("last_step_dropped", k.timeline.last_step_dropped);
  if (!k.timeline.steps.empty()) {
    w.Field("first", k.timeline.steps.front().number).Field("last", k.timeline.steps.back().number);
  }
  w.EndObject();
  w.Key("temporal_breakdown");
  WriteTemporal(w, k.gpu.temporal);
  w.Key("temporal_breakdown_per_device").BeginArray();
  for (const auto& d : k.gpu.per_device) WriteTemporal(w, d);
  w.EndArray();
  WriteIdle(w, k);
  w.Key("step_breakdown").BeginObject().Key("total");
  WriteCategories(w, k.steps.total);
  w.Key("per_step").BeginArray();
  for (const auto& s : k.steps.steps) {
    w.BeginObject().Field("step", s.step_number).Field("begin_ns", s.begin_ns).Key("times");
    WriteCategories(w, s.times);
    w.EndObject();
  }
  w.EndArray().EndObject();
  w.Field("overlap_pct", k.gpu.comm_comp_overlap_pct, 2)
      .Field("comm_ns", k.gpu.comm_ns)
      .Field("comm_overlap_ns", k.gpu.comm_overlap_ns);
  WriteLaunch(w, k.gpu.launch);
  WriteKernels(w, k.kernels);
  w.Key("host_syncs")
      .BeginObject()
      .Field("count", k.idle.syncs.count)
      .Field("ns", k.idle.syncs.ns)
      .EndObject();
  WriteRuntimeCalls(w, k.idle.runtime);
  WriteSeries(w, k);
  w.FieldArray("warnings", k.warnings).EndObject();
}

void WriteCross(JsonWriter& w, const TraceReport& r) {
  w.Key("cross_rank");
  if (!r.cross) {
    w.Null();
    return;
  }
  const auto& c = *r.cross;
  w.BeginObject()
      .Field("slowest_rank", c.slowest_rank)
      .Field("latest_rank", c.latest_rank)
      .Field("collectives_matched", c.collectives_matched)
      .Field("collectives_unmatched", c.collectives_unmatched)
      .Field("aligned_on_step", c.aligned_on_step)
      .Key("steps")
      .BeginArray();
  for (const auto& s : c.steps) {
    w.BeginObject()
        .Field("step", s.step)
        .Field("ranks", s.ranks)
        .Field("min_ns", s.min_ns)
        .Field("max_ns", s.max_ns)
        .Field("median_ns", s.median_ns, 0)
        .Field("spread", s.spread, 4)
        .Field("cv_pct", s.cv_pct, 2)
        .Field("slowest_rank", s.slowest_rank)
        .EndObject();
  }
  w.EndArray().Key("ranks").BeginArray();
  for (const auto& k : c.ranks) {
    w.BeginObject()
        .Field("rank", k.rank)
        .Field("steps", k.steps)
        .Field("times_slowest", k.times_slowest)
        .Field("straggler_score", k.straggler_score, 4)
        .Field("collectives", k.collectives)
        .Field("times_last", k.times_last)
        .Field("held_up_ns", k.held_up_ns)
        .Field("mean_lateness_ns", k.mean_lateness_ns, 0)
        .Field("p95_lateness_ns", k.p95_lateness_ns, 0)
        .EndObject();
  }
  w.EndArray().EndObject();
}

}  // namespace

std::string RenderTraceText(const TraceReport& r, const TraceTextOptions& o) {
  std::string out = TraceHeader(r);
  std::optional<double> rate;
  if (!r.phases.ranks.empty() && r.phases.ranks.front().per_second > 0) {
    rate = r.phases.ranks.front().per_second;
  }
  out += RenderVerdictText(r.verdict, rate);
  out += BreakdownTable(r, o);
  out += TraceGpuTable(r);
  for (const auto& k : r.ranks) {
    std::string body = StreamTable(k, o) + LaunchLines(k) + KernelLines(k, o) + SeriesLines(k);
    if (body.empty()) continue;
    out += fmt::format("\nRank {}  ({}{})\n", k.rank, EscapeControl(k.path),
                       k.rank_source == trace::RankSource::kDistributedInfo
                           ? ""
                           : fmt::format(", rank from {}", trace::RankSourceName(k.rank_source)));
    out += body;
  }
  out += CrossLines(r);
  bool warned = false;
  for (const auto& k : r.ranks) {
    for (const auto& w : k.warnings) {
      out += fmt::format("{}warning: {}\n", warned ? "" : "\n", EscapeControl(w));
      warned = true;
    }
  }
  for (const auto& w : r.warnings) out += fmt::format("warning: {}\n", EscapeControl(w));
  out +=
      "\nNext: --json for every number, --per-step for each step's breakdown, "
      "--export-perfetto merged.json to see the timeline in ui.perfetto.dev\n";
  return out;
}

std::string RenderTraceJson(const TraceReport& r) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject().Field("schema_version", 1).Field("tool", "stallscope trace");
  w.Key("options").BeginObject().FieldBool("hta_compat", r.options.hta_compat);
  w.Field("first_step", r.options.first_step).Field("last_step", r.options.last_step).EndObject();
  WriteVerdictJson(w, r.verdict);
  w.Key("ranks").BeginArray();
  for (const auto& k : r.ranks) WriteRank(w, k);
  w.EndArray();
  WriteCross(w, r);
  w.FieldArray("warnings", r.warnings).EndObject();
  out += '\n';
  return out;
}

}  // namespace stallscope::report
