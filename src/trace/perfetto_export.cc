#include "trace/perfetto_export.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope::trace {
namespace {

std::string_view KindCategory(EventKind k) {
  // Kineto's lower-case category names, so Perfetto's category filter reads as in Kineto.
  switch (k) {
    case EventKind::kKernel:
      return "kernel";
    case EventKind::kMemcpy:
      return "gpu_memcpy";
    case EventKind::kMemset:
      return "gpu_memset";
    case EventKind::kCudaSync:
      return "cuda_sync";
    case EventKind::kGpuUserAnnotation:
      return "gpu_user_annotation";
    case EventKind::kRuntime:
      return "cuda_runtime";
    case EventKind::kDriver:
      return "cuda_driver";
    case EventKind::kCpuOp:
      return "cpu_op";
    case EventKind::kUserAnnotation:
      return "user_annotation";
    case EventKind::kPythonFunction:
      return "python_function";
    case EventKind::kOther:
      break;
  }
  return "other";
}

// Buffered FILE* writer: the first failed write is remembered and reported once at the end.
class Writer {
 public:
  explicit Writer(std::FILE* out) : out_(out) { buf_.reserve(kFlushBytes + 4096); }
  std::string& buf() { return buf_; }
  void MaybeFlush() {
    if (buf_.size() >= kFlushBytes) Flush();
  }
  void Flush() {
    if (!buf_.empty() && ok_ && std::fwrite(buf_.data(), 1, buf_.size(), out_) != buf_.size()) {
      ok_ = false;
      errno_ = errno;
    }
    buf_.clear();
  }
  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] int error() const { return errno_; }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;
  std::FILE* out_;
  std::string buf_;
  bool ok_ = true;
  int errno_ = 0;
};

// One (pid, tid) row of a rank's trace, before lanes split it.
struct Track {
  bool gpu = false;
  int32_t pid = 0;
  int64_t tid = 0;
  LaneAssigner lanes;
  int64_t first_out_tid = 0;  // lane k is written as tid first_out_tid + k
  int64_t out_pid = 0;
};

// Where each event of one rank goes: its track and lane; events in (ts, -dur) order.
struct RankLayout {
  std::vector<Track> tracks;
  std::vector<uint32_t> order;     // event indices, sorted
  std::vector<uint32_t> track_of;  // by event index
  std::vector<uint32_t> lane_of;   // by event index
};

RankLayout LayOut(const RankTrace& trace) {
  RankLayout l;
  const std::vector<Event>& ev = trace.events;
  l.order.resize(ev.size());
  std::iota(l.order.begin(), l.order.end(), 0u);
  std::stable_sort(l.order.begin(), l.order.end(), [&](uint32_t a, uint32_t b) {
    return ev[a].ts_ns != ev[b].ts_ns ? ev[a].ts_ns < ev[b].ts_ns : ev[a].dur_ns > ev[b].dur_ns;
  });
  std::map<std::tuple<bool, int32_t, int64_t>, uint32_t> index;
  for (const Event& e : ev) {
    auto key = std::make_tuple(IsGpuKind(e.kind), e.pid, e.tid);
    if (!index.emplace(key, 0).second) continue;
    Track t;
    t.gpu = IsGpuKind(e.kind);
    t.pid = e.pid;
    t.tid = e.tid;
    l.tracks.push_back(std::move(t));
  }
  // Tracks in (host first, pid, tid) order, so processes and threads are numbered stably.
  std::sort(l.tracks.begin(), l.tracks.end(), [](const Track& a, const Track& b) {
    return std::tie(a.gpu, a.pid, a.tid) < std::tie(b.gpu, b.pid, b.tid);
  });
  for (uint32_t i = 0; i < l.tracks.size(); ++i) {
    index[std::make_tuple(l.tracks[i].gpu, l.tracks[i].pid, l.tracks[i].tid)] = i;
  }
  l.track_of.resize(ev.size());
  l.lane_of.resize(ev.size());
  for (uint32_t i : l.order) {
    const Event& e = ev[i];
    uint32_t t = index[std::make_tuple(IsGpuKind(e.kind), e.pid, e.tid)];
    l.track_of[i] = t;
    l.lane_of[i] = l.tracks[t].lanes.Add(e.ts_ns, e.ts_ns + std::max<int64_t>(e.dur_ns, 0));
  }
  return l;
}

struct ExportState {
  int64_t next_pid = 1;
  // Thread ids above any pid we hand out, so no thread is mistaken for a process's main thread.
  int64_t next_tid = 1'000'000;
  int64_t next_flow_id = 1;
  int64_t origin_ns = 0;  // of the rank being written
  PerfettoExportStats stats;
};

void BeginEvent(std::string& b, bool& first) {
  if (!first) b += ",\n";
  first = false;
}

void WriteMeta(Writer& w, bool& first, std::string_view what, int64_t pid, int64_t tid,
               std::string_view name, int64_t sort_index) {
  std::string& b = w.buf();
  BeginEvent(b, first);
  fmt::format_to(std::back_inserter(b),
                 R"({{"ph":"M","name":"{}_name","pid":{},"tid":{},)"
                 R"("args":{{"name":)",
                 what, pid, tid);
  AppendJsonString(b, name);
  b += "}}";
  BeginEvent(b, first);
  fmt::format_to(
      std::back_inserter(b),
      R"({{"ph":"M","name":"{}_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})", what,
      pid, tid, sort_index);
}

std::string ProcessName(const RankTrace& trace, const Track& t) {
  if (t.gpu) return fmt::format("rank {} GPU {}", trace.rank, t.pid);
  auto it = trace.process_names.find(t.pid);
  if (it == trace.process_names.end() || it->second.empty()) {
    return fmt::format("rank {} host (pid {})", trace.rank, t.pid);
  }
  return fmt::format("rank {} host {} (pid {})", trace.rank, it->second, t.pid);
}

std::string ThreadName(const RankTrace& trace, const Track& t, uint32_t lane) {
  std::string name;
  if (t.gpu) {
    name = fmt::format("rank {} stream {}", trace.rank, t.tid);
  } else if (auto it = trace.thread_names.find(t.tid);
             it != trace.thread_names.end() && !it->second.empty()) {
    name = fmt::format("rank {} {} (tid {})", trace.rank, it->second, t.tid);
  } else {
    name = fmt::format("rank {} thread {}", trace.rank, t.tid);
  }
  if (lane > 0) name += fmt::format(" ({})", lane + 1);
  return name;
}

void WriteTracks(const RankTrace& trace, RankLayout& l, ExportState& s, Writer& w, bool& first) {
  for (size_t i = 0; i < l.tracks.size(); ++i) {
    Track& t = l.tracks[i];
    bool new_process = i == 0 || l.tracks[i - 1].gpu != t.gpu || l.tracks[i - 1].pid != t.pid;
    if (new_process) {
      int64_t pid = s.next_pid++;
      WriteMeta(w, first, "process", pid, 0, ProcessName(trace, t), pid);
    }
    t.out_pid = s.next_pid - 1;
    t.first_out_tid = s.next_tid;
    for (uint32_t lane = 0; lane < t.lanes.lanes(); ++lane) {
      int64_t tid = s.next_tid++;
      WriteMeta(w, first, "thread", t.out_pid, tid, ThreadName(trace, t, lane), tid);
      ++s.stats.tracks;
      if (lane > 0) ++s.stats.extra_lanes;
    }
    w.MaybeFlush();
  }
}

void WriteSlice(const RankTrace& trace, const Event& e, const Track& t, uint32_t lane,
                const ExportState& s, std::string& b) {
  fmt::format_to(std::back_inserter(b), R"({{"ph":"X","cat":"{}","name":)", KindCategory(e.kind));
  AppendJsonString(b, trace.NameOf(e));
  fmt::format_to(std::back_inserter(b), R"(,"pid":{},"tid":{},"ts":)", t.out_pid,
                 t.first_out_tid + lane);
  AppendMicros(b, e.ts_ns - s.origin_ns);
  b += ",\"dur\":";
  AppendMicros(b, std::max<int64_t>(e.dur_ns, 0));
  if (e.correlation >= 0 || e.bytes > 0) {
    b += ",\"args\":{";
    if (e.correlation >= 0)
      fmt::format_to(std::back_inserter(b), "\"correlation\":{}", e.correlation);
    if (e.correlation >= 0 && e.bytes > 0) b += ',';
    if (e.bytes > 0) fmt::format_to(std::back_inserter(b), "\"bytes\":{}", e.bytes);
    b += '}';
  }
  b += '}';
}

void WriteFlowEnd(std::string_view ph, int64_t id, const Event& e, const Track& t, uint32_t lane,
                  const ExportState& s, std::string& b) {
  // Trace Event Format: flow v1; "bp":"e" binds the end to the enclosing slice (the kernel).
  fmt::format_to(std::back_inserter(b),
                 R"({{"ph":"{}","cat":"ac2g","name":"launch","id":{},"pid":{},"tid":{},"ts":)", ph,
                 id, t.out_pid, t.first_out_tid + lane);
  AppendMicros(b, e.ts_ns - s.origin_ns);
  if (ph == "f") b += ",\"bp\":\"e\"";
  b += '}';
}

void WriteFlows(const RankTrace& trace, const RankLayout& l, ExportState& s, Writer& w,
                bool& first) {
  std::unordered_map<int64_t, uint32_t> launch_by_corr;
  for (uint32_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    bool launch = e.kind == EventKind::kRuntime || e.kind == EventKind::kDriver;
    if (launch && e.correlation >= 0) launch_by_corr.emplace(e.correlation, i);
  }
  for (uint32_t i : l.order) {
    const Event& e = trace.events[i];
    if (!IsGpuKind(e.kind) || e.correlation < 0) continue;
    auto it = launch_by_corr.find(e.correlation);
    if (it == launch_by_corr.end()) continue;
    uint32_t src = it->second;
    int64_t id = s.next_flow_id++;
    std::string& b = w.buf();
    BeginEvent(b, first);
    WriteFlowEnd("s", id, trace.events[src], l.tracks[l.track_of[src]], l.lane_of[src], s, b);
    BeginEvent(b, first);
    WriteFlowEnd("f", id, e, l.tracks[l.track_of[i]], l.lane_of[i], s, b);
    ++s.stats.flows;
    w.MaybeFlush();
  }
}

void WriteRank(const RankTrace& trace, ExportState& s, Writer& w, bool& first) {
  RankLayout l = LayOut(trace);
  WriteTracks(trace, l, s, w, first);
  for (uint32_t i : l.order) {
    std::string& b = w.buf();
    BeginEvent(b, first);
    WriteSlice(trace, trace.events[i], l.tracks[l.track_of[i]], l.lane_of[i], s, b);
    ++s.stats.slices;
    w.MaybeFlush();
  }
  WriteFlows(trace, l, s, w, first);
}

// Per rank, the ns subtracted from its timestamps; sets stats.origin_ns/ranks_rebased_alone.
std::vector<int64_t> Origins(std::span<const RankTrace> ranks, const PerfettoExportOptions& options,
                             PerfettoExportStats& stats) {
  std::vector<int64_t> origins(ranks.size(), 0);
  if (!options.rebase) return origins;
  // A double holds ns-exact µs with 3 decimals up to ~2^51 ns (26 days); ranks farther from the
  // common origin (traces of different jobs) get an origin of their own.
  constexpr int64_t kExactSpanNs = int64_t{1} << 51;
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::max();
  std::vector<std::pair<int64_t, int64_t>> spans;  // per rank: first ts, last end
  int64_t global = kUnset;
  for (const RankTrace& r : ranks) {
    std::pair<int64_t, int64_t> span{kUnset, std::numeric_limits<int64_t>::min()};
    for (const Event& e : r.events) {
      span.first = std::min(span.first, e.ts_ns);
      span.second = std::max(span.second, e.ts_ns + std::max<int64_t>(e.dur_ns, 0));
    }
    global = std::min(global, span.first);
    spans.push_back(span);
  }
  if (global == kUnset) return origins;
  stats.origin_ns = global;
  // Ranks sorted by first event; a rank that would end too far from its group's origin starts a
  // new group, so ranks of one job stay on one origin (relative offsets kept).
  std::vector<size_t> order(ranks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return spans[x] < spans[y]; });
  int64_t group = global;
  for (size_t i : order) {
    if (spans[i].first == kUnset) continue;
    if (spans[i].second - group > kExactSpanNs) group = spans[i].first;
    origins[i] = group;
    if (group != global) ++stats.ranks_rebased_alone;
  }
  return origins;
}

}  // namespace

uint32_t LaneAssigner::Add(int64_t begin_ns, int64_t end_ns) {
  end_ns = std::max(end_ns, begin_ns);
  for (uint32_t lane = 0; lane < open_.size(); ++lane) {
    std::vector<int64_t>& stack = open_[lane];
    // Intervals that ended by `begin_ns` are closed for every later interval too (input order).
    while (!stack.empty() && stack.back() <= begin_ns) stack.pop_back();
    if (stack.empty() || end_ns <= stack.back()) {
      stack.push_back(end_ns);
      return lane;
    }
  }
  open_.push_back({end_ns});
  return static_cast<uint32_t>(open_.size() - 1);
}

void AppendMicros(std::string& out, int64_t ns) {
  // Trace Event Format: ts/dur are µs; 3 decimals keep ns exact without float rounding.
  uint64_t mag = ns < 0 ? uint64_t{0} - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  if (ns < 0) out.push_back('-');
  fmt::format_to(std::back_inserter(out), "{}.{:03}", mag / 1000, mag % 1000);
}

Result<PerfettoExportStats> WritePerfettoJson(std::span<const RankTrace> ranks, std::FILE* out,
                                              const PerfettoExportOptions& options) {
  ExportState s;
  std::vector<int64_t> origins = Origins(ranks, options, s.stats);
  Writer w(out);
  w.buf() += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  for (size_t i = 0; i < ranks.size(); ++i) {
    s.origin_ns = origins[i];
    WriteRank(ranks[i], s, w, first);
  }
  std::string& b = w.buf();
  fmt::format_to(std::back_inserter(b),
                 "\n],\"otherData\":{{\"generator\":\"stallscope\",\"origin_ns\":{},\"ranks\":[",
                 s.stats.origin_ns);
  for (size_t i = 0; i < ranks.size(); ++i) {
    fmt::format_to(std::back_inserter(b),
                   "{}{{\"rank\":{},\"origin_ns\":{},\"path\":", i == 0 ? "" : ",", ranks[i].rank,
                   origins[i]);
    AppendJsonString(b, ranks[i].path);
    b += '}';
  }
  b += "]}}\n";
  w.Flush();
  if (!w.ok() || std::fflush(out) != 0) {
    return MakeError(ErrorCode::kIo, "writing the Perfetto trace failed: {}",
                     std::strerror(w.ok() ? errno : w.error()));
  }
  return s.stats;
}

Result<PerfettoExportStats> WritePerfettoJsonFile(std::span<const RankTrace> ranks,
                                                  const std::string& path,
                                                  const PerfettoExportOptions& options) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return MakeError(errno == EACCES ? ErrorCode::kPermission : ErrorCode::kIo,
                     "cannot write {}: {}", path, std::strerror(errno));
  }
  auto result = WritePerfettoJson(ranks, f, options);
  bool closed = std::fclose(f) == 0;
  if (!result.ok()) return Error{result.error().code, path + ": " + result.error().message};
  if (!closed) return MakeError(ErrorCode::kIo, "cannot write {}: close failed", path);
  return result;
}

}  // namespace stallscope::trace
