#include "trace/kernels.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <unordered_map>

#include "trace/intervals.h"

namespace stallscope::trace {
namespace {

int64_t DurOf(const Event& e) { return std::max<int64_t>(e.dur_ns, 0); }

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// Lower-case letters and digits only: "c10d::_allgather_base_" → "c10dallgatherbase", so every
// spelling of a collective (AllReduce, all_reduce, allreduce) compares equal.
std::string Squash(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) out.push_back(static_cast<char>(std::tolower(u)));
  }
  return out;
}

// Element sizes of the dtype names Kineto writes in collective metadata ("Float", "BFloat16").
std::optional<uint64_t> DtypeBytes(std::string_view dtype) {
  static constexpr std::pair<std::string_view, uint64_t> kSizes[] = {
      {"float", 4},  {"float32", 4}, {"half", 2},  {"float16", 2},      {"bfloat16", 2},
      {"double", 8}, {"float64", 8}, {"int", 4},   {"int32", 4},        {"long", 8},
      {"int64", 8},  {"short", 2},   {"int16", 2}, {"char", 1},         {"byte", 1},
      {"int8", 1},   {"uint8", 1},   {"bool", 1},  {"float8e4m3fn", 1}, {"float8e5m2", 1}};
  std::string key = Squash(dtype);
  for (const auto& [name, size] : kSizes) {
    if (key == name) return size;
  }
  return std::nullopt;
}

// A name predicate evaluated once per distinct name (names repeat: 129k kernels, ~1k names on
// one bench rank; the predicates search the whole name several times).
class NamePredicateCache {
 public:
  NamePredicateCache(const RankTrace& trace, bool (*predicate)(std::string_view))
      : trace_(trace), predicate_(predicate), cache_(trace.names.size(), kUnknown) {}
  bool operator()(const Event& e) {
    uint8_t& c = cache_[e.name_id];
    if (c == kUnknown) c = predicate_(trace_.NameOf(e)) ? 1 : 0;
    return c == 1;
  }

 private:
  static constexpr uint8_t kUnknown = 0xff;
  const RankTrace& trace_;
  bool (*predicate_)(std::string_view);
  std::vector<uint8_t> cache_;
};

// An outermost CPU-side collective range on one thread.
struct CpuCall {
  int32_t pid = 0;
  int64_t tid = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  std::string_view collective;
};

bool ThreadTimeLess(int32_t pid_a, int64_t tid_a, int64_t ts_a, int32_t pid_b, int64_t tid_b,
                    int64_t ts_b) {
  if (pid_a != pid_b) return pid_a < pid_b;
  if (tid_a != tid_b) return tid_a < tid_b;
  return ts_a < ts_b;
}

// c10d::allreduce_ ⊃ record_param_comms ⊃ nccl:all_reduce is one call: nested ranges refine
// the outermost one's collective (record_param_comms alone names none) instead of counting again.
std::vector<CpuCall> FindCpuCalls(const RankTrace& trace) {
  std::vector<const Event*> events;
  NamePredicateCache is_collective(trace, IsCpuCollectiveName);
  for (const Event& e : trace.events) {
    if (!IsGpuKind(e.kind) && e.kind != EventKind::kRuntime && e.kind != EventKind::kDriver &&
        is_collective(e)) {
      events.push_back(&e);
    }
  }
  std::sort(events.begin(), events.end(), [](const Event* a, const Event* b) {
    if (a->pid != b->pid || a->tid != b->tid || a->ts_ns != b->ts_ns) {
      return ThreadTimeLess(a->pid, a->tid, a->ts_ns, b->pid, b->tid, b->ts_ns);
    }
    return a->dur_ns > b->dur_ns;
  });
  std::vector<CpuCall> calls;
  for (const Event* e : events) {
    std::string_view collective = NormalizeCollective(trace.NameOf(*e));
    if (!calls.empty()) {
      CpuCall& last = calls.back();
      bool nested = last.pid == e->pid && last.tid == e->tid && e->ts_ns < last.end_ns;
      if (nested) {
        if (last.collective == "other") last.collective = collective;
        continue;
      }
    }
    calls.push_back(CpuCall{e->pid, e->tid, e->ts_ns, e->ts_ns + DurOf(*e), collective});
  }
  return calls;
}

// The call (sorted by thread, begin) on thread (pid, tid) that contains ts, if any.
const CpuCall* EnclosingCall(const std::vector<CpuCall>& calls, int32_t pid, int64_t tid,
                             int64_t ts) {
  auto it = std::upper_bound(calls.begin(), calls.end(), 0, [&](int, const CpuCall& c) {
    return ThreadTimeLess(pid, tid, ts, c.pid, c.tid, c.begin_ns);
  });
  if (it == calls.begin()) return nullptr;
  --it;
  bool inside = it->pid == pid && it->tid == tid && ts >= it->begin_ns && ts <= it->end_ns;
  return inside ? &*it : nullptr;
}

struct LabelledComm {
  const Event* event = nullptr;
  std::string_view collective;
  const CollectiveInfo* info = nullptr;
};

std::vector<LabelledComm> LabelCommKernels(const RankTrace& trace,
                                           const std::vector<CpuCall>& calls) {
  std::vector<LabelledComm> out;
  NamePredicateCache is_comm(trace, IsCommKernelName);
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::kKernel && is_comm(e)) {
      out.push_back(LabelledComm{&e, NormalizeCollective(trace.NameOf(e)), nullptr});
    }
  }
  if (out.empty()) return out;
  std::unordered_map<int64_t, const CollectiveInfo*> info_by_corr;
  for (const CollectiveInfo& c : trace.collectives) {
    if (c.correlation >= 0) info_by_corr.emplace(c.correlation, &c);
  }
  std::vector<LabelledComm*> unresolved;  // not named by their collective metadata
  for (LabelledComm& l : out) {
    int64_t corr = l.event->correlation;
    if (corr < 0) continue;
    if (auto it = info_by_corr.find(corr); it != info_by_corr.end()) {
      l.info = it->second;
      std::string_view named = NormalizeCollective(l.info->collective);
      if (named != "other") {
        l.collective = named;
        continue;
      }
    }
    unresolved.push_back(&l);
  }
  if (calls.empty() || unresolved.empty()) return out;
  // NCCL runs all_to_all as SendRecv kernels: the CPU range that launched it knows better. The
  // launch is the first runtime/driver event with the kernel's correlation; only the wanted
  // correlations are looked up (a hash map of every launch was 8% of a 109k-event trace).
  std::vector<int64_t> wanted;
  wanted.reserve(unresolved.size());
  for (const LabelledComm* l : unresolved) wanted.push_back(l->event->correlation);
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<const Event*> launch_of(wanted.size(), nullptr);
  for (const Event& e : trace.events) {
    bool launch = e.kind == EventKind::kRuntime || e.kind == EventKind::kDriver;
    if (!launch || e.correlation < 0) continue;
    auto it = std::lower_bound(wanted.begin(), wanted.end(), e.correlation);
    if (it == wanted.end() || *it != e.correlation) continue;
    const Event*& first = launch_of[static_cast<size_t>(it - wanted.begin())];
    if (first == nullptr) first = &e;
  }
  for (LabelledComm* l : unresolved) {
    auto it = std::lower_bound(wanted.begin(), wanted.end(), l->event->correlation);
    const Event* launch = launch_of[static_cast<size_t>(it - wanted.begin())];
    if (launch == nullptr) continue;
    const CpuCall* call = EnclosingCall(calls, launch->pid, launch->tid, launch->ts_ns);
    if (call != nullptr && call->collective != "other") l->collective = call->collective;
  }
  return out;
}

void AddKernels(const RankTrace& trace, KernelReport& report) {
  std::vector<int32_t> slot_of_name(trace.names.size(), -1);
  bool any_named = false;
  for (const Event& e : trace.events) {
    if (e.kind != EventKind::kKernel) continue;
    int32_t& slot = slot_of_name[e.name_id];
    if (slot < 0) {
      slot = static_cast<int32_t>(report.kernels.size());
      KernelStats k;
      k.name_id = e.name_id;
      k.name = trace.NameOf(e);
      k.tensor_core = IsTensorCoreKernelName(k.name);
      k.communication = IsCommKernelName(k.name);
      any_named = any_named || !k.name.empty();
      report.kernels.push_back(std::move(k));
    }
    KernelStats& k = report.kernels[static_cast<size_t>(slot)];
    int64_t dur = DurOf(e);
    ++k.count;
    k.total_ns += dur;
    k.max_ns = std::max(k.max_ns, dur);
    ++report.kernel_count;
    report.kernel_time_ns += dur;
    if (k.tensor_core) report.tensor_core_time_ns += dur;
    if (e.flags & kFlagCudaGraph) ++report.cuda_graph_kernels;
  }
  if (any_named && report.kernel_time_ns > 0) {
    report.tensor_core_share = static_cast<double>(report.tensor_core_time_ns) /
                               static_cast<double>(report.kernel_time_ns);
  }
  std::sort(report.kernels.begin(), report.kernels.end(),
            [](const KernelStats& a, const KernelStats& b) {
              return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
            });
}

void AddMemory(const RankTrace& trace, KernelReport& report) {
  constexpr size_t kDirs = 6;
  constexpr size_t kHosts = 5;
  std::array<MemcpyStats, kDirs * kHosts> table{};
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::kMemset) {
      ++report.memset.count;
      report.memset.bytes += e.bytes;
      report.memset.time_ns += DurOf(e);
    } else if (e.kind == EventKind::kMemcpy) {
      MemcpyKind kind = ParseMemcpyName(trace.NameOf(e));
      MemcpyStats& s = table[static_cast<size_t>(kind.direction) * kHosts +
                             static_cast<size_t>(kind.host_memory)];
      s.kind = kind;
      ++s.count;
      s.bytes += e.bytes;
      s.time_ns += DurOf(e);
    }
  }
  for (MemcpyStats& s : table) {
    if (s.count == 0) continue;
    // 1 byte/ns = 1e9 B/s = 1 GB/s (decimal, as Kineto's "memory bandwidth (GB/s)").
    if (s.time_ns > 0) {
      s.effective_gbps = static_cast<double>(s.bytes) / static_cast<double>(s.time_ns);
    }
    report.memcpy.push_back(s);
  }
}

CollectiveStats& StatsFor(std::vector<CollectiveStats>& all, std::string_view collective) {
  for (CollectiveStats& s : all) {
    if (s.collective == collective) return s;
  }
  all.push_back(CollectiveStats{});
  all.back().collective = collective;
  return all.back();
}

void AddInfo(const CollectiveInfo& info, CollectiveStats& s) {
  if (info.in_msg_nelems) {
    s.in_nelems = s.in_nelems.value_or(0) + *info.in_msg_nelems;
    if (auto size = DtypeBytes(info.dtype); size && *info.in_msg_nelems >= 0) {
      s.in_bytes = s.in_bytes.value_or(0) + static_cast<uint64_t>(*info.in_msg_nelems) * *size;
    }
  }
  if (info.out_msg_nelems) s.out_nelems = s.out_nelems.value_or(0) + *info.out_msg_nelems;
}

std::vector<CollectiveKernel> ToCollectiveKernels(const std::vector<LabelledComm>& labelled) {
  std::vector<CollectiveKernel> out;
  out.reserve(labelled.size());
  for (const LabelledComm& l : labelled) {
    out.push_back(CollectiveKernel{l.collective, l.event->ts_ns, l.event->ts_ns + DurOf(*l.event),
                                   l.event->tid});
  }
  std::stable_sort(
      out.begin(), out.end(),
      [](const CollectiveKernel& a, const CollectiveKernel& b) { return a.begin_ns < b.begin_ns; });
  return out;
}

void AddCollectives(const RankTrace& trace, KernelReport& report) {
  std::vector<CpuCall> calls = FindCpuCalls(trace);
  std::vector<LabelledComm> labelled = LabelCommKernels(trace, calls);
  report.collective_kernels = ToCollectiveKernels(labelled);
  for (const LabelledComm& l : labelled) {
    CollectiveStats& s = StatsFor(report.collectives, l.collective);
    int64_t dur = DurOf(*l.event);
    ++s.kernel_count;
    s.kernel_time_ns += dur;
    s.kernel_max_ns = std::max(s.kernel_max_ns, dur);
    if (l.info != nullptr) AddInfo(*l.info, s);
  }
  for (const CpuCall& c : calls) {
    CollectiveStats& s = StatsFor(report.collectives, c.collective);
    ++s.cpu_calls;
    s.cpu_time_ns += c.end_ns - c.begin_ns;
  }
  std::sort(report.collectives.begin(), report.collectives.end(),
            [](const CollectiveStats& a, const CollectiveStats& b) {
              if (a.kernel_time_ns != b.kernel_time_ns) return a.kernel_time_ns > b.kernel_time_ns;
              return a.collective < b.collective;
            });
}

// Replaces the contents of each outermost "<...>" with "..." ("f<int, g<x>>(a)" → "f<...>(a)").
std::string CollapseTemplates(std::string_view s) {
  std::string out;
  int depth = 0;
  for (char c : s) {
    if (c == '<') {
      if (depth++ == 0) out += "<...";
    } else if (c == '>' && depth > 0) {
      if (--depth == 0) out.push_back('>');
    } else if (depth == 0) {
      out.push_back(c);
    }
  }
  if (depth > 0) return std::string(s);  // unbalanced (e.g. "operator<"): leave it
  return out;
}

}  // namespace

std::string_view NormalizeCollective(std::string_view name) {
  // Longest patterns first: "allreduce" before "reduce", "reducescatter" before "scatter".
  static constexpr std::pair<std::string_view, std::string_view> kPatterns[] = {
      {"allreduce", "all_reduce"}, {"allgather", "all_gather"}, {"reducescatter", "reduce_scatter"},
      {"alltoall", "all_to_all"},  {"broadcast", "broadcast"},  {"sendrecv", "send_recv"},
      {"send", "send_recv"},       {"recv", "send_recv"},       {"barrier", "barrier"},
      {"reduce", "reduce"},        {"gather", "gather"},        {"scatter", "scatter"}};
  std::string squashed = Squash(name);
  for (const auto& [pattern, normalized] : kPatterns) {
    if (Contains(squashed, pattern)) return normalized;
  }
  return "other";
}

bool IsTensorCoreKernelName(std::string_view name) {
  return std::any_of(std::begin(kTensorCoreKernelPatterns), std::end(kTensorCoreKernelPatterns),
                     [&](std::string_view p) { return Contains(name, p); });
}

std::string ShortKernelName(std::string_view name, size_t max_len) {
  max_len = std::max<size_t>(max_len, 3);
  if (name.starts_with("void ")) name.remove_prefix(5);
  std::string out(name);
  if (out.size() > max_len) out = CollapseTemplates(out);
  if (out.size() > max_len && out.ends_with(')')) {
    if (size_t open = out.find('('); open != std::string::npos) out = out.substr(0, open) + "(...)";
  }
  if (out.size() > max_len) out = out.substr(0, max_len - 3) + "...";
  return out;
}

std::string_view MemcpyDirectionName(MemcpyDirection d) {
  switch (d) {
    case MemcpyDirection::kHtoD:
      return "HtoD";
    case MemcpyDirection::kDtoH:
      return "DtoH";
    case MemcpyDirection::kDtoD:
      return "DtoD";
    case MemcpyDirection::kHtoH:
      return "HtoH";
    case MemcpyDirection::kPtoP:
      return "PtoP";
    case MemcpyDirection::kOther:
      break;
  }
  return "other";
}

std::string_view HostMemoryName(HostMemory m) {
  switch (m) {
    case HostMemory::kPageable:
      return "pageable";
    case HostMemory::kPinned:
      return "pinned";
    case HostMemory::kManaged:
      return "managed";
    case HostMemory::kNone:
      return "none";
    case HostMemory::kUnknown:
      break;
  }
  return "unknown";
}

MemcpyKind ParseMemcpyName(std::string_view name) {
  // Kineto (CuptiActivity.cpp memcpyName): "Memcpy <kind> (<src> -> <dst>)".
  MemcpyKind kind;
  constexpr std::string_view kPrefix = "Memcpy ";
  if (!name.starts_with(kPrefix)) return kind;
  name.remove_prefix(kPrefix.size());
  static constexpr std::pair<std::string_view, MemcpyDirection> kDirs[] = {
      {"HtoD", MemcpyDirection::kHtoD},
      {"DtoH", MemcpyDirection::kDtoH},
      {"DtoD", MemcpyDirection::kDtoD},
      {"HtoH", MemcpyDirection::kHtoH},
      {"PtoP", MemcpyDirection::kPtoP}};
  for (const auto& [token, dir] : kDirs) {
    if (name.starts_with(token)) kind.direction = dir;
  }
  size_t open = name.find('(');
  if (open == std::string_view::npos) return kind;
  std::string_view memory = name.substr(open);
  if (Contains(memory, "Pageable")) {
    kind.host_memory = HostMemory::kPageable;
  } else if (Contains(memory, "Pinned")) {
    kind.host_memory = HostMemory::kPinned;
  } else if (Contains(memory, "Managed")) {
    kind.host_memory = HostMemory::kManaged;
  } else if (Contains(memory, "Device")) {
    kind.host_memory = HostMemory::kNone;
  }
  return kind;
}

KernelReport AnalyzeKernels(const RankTrace& trace) {
  KernelReport report;
  AddKernels(trace, report);
  AddMemory(trace, report);
  AddCollectives(trace, report);
  IntervalSet busy;
  for (const Event& e : trace.events) {
    bool work = e.kind == EventKind::kKernel || e.kind == EventKind::kMemcpy ||
                e.kind == EventKind::kMemset;
    if (work) busy.push_back({e.ts_ns, e.ts_ns + DurOf(e)});
    bool graph_launch = (e.kind == EventKind::kRuntime || e.kind == EventKind::kDriver) &&
                        IsGraphLaunchName(trace.NameOf(e));
    if (graph_launch) ++report.cuda_graph_launches;
  }
  NormalizeIntervals(busy);
  report.gpu_busy_ns = TotalNs(busy);
  for (KernelStats& k : report.kernels) {
    k.mean_ns = static_cast<double>(k.total_ns) / static_cast<double>(k.count);
    if (report.gpu_busy_ns > 0) {
      k.busy_share = static_cast<double>(k.total_ns) / static_cast<double>(report.gpu_busy_ns);
    }
  }
  return report;
}

std::vector<CollectiveKernel> ListCollectiveKernels(const RankTrace& trace) {
  return ToCollectiveKernels(LabelCommKernels(trace, FindCpuCalls(trace)));
}

}  // namespace stallscope::trace
