#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stallscope::trace {

/// What an event is, from its category (Kineto `cat`, 2021 capitalised `cat`, or, for category-less
/// legacy traces, its name). README "Trace": the table of which `cat` maps to which kind.
enum class EventKind : uint8_t {
  kKernel,             ///< "kernel" / "Kernel": a GPU kernel (tid = stream)
  kMemcpy,             ///< "gpu_memcpy" / "Memcpy"
  kMemset,             ///< "gpu_memset" / "Memset"
  kCudaSync,           ///< "cuda_sync": Stream/Context/Event Sync, Stream Wait Event (GPU row)
  kGpuUserAnnotation,  ///< "gpu_user_annotation": a record_function range on a GPU row
  kRuntime,            ///< "cuda_runtime" / "Runtime": cudaLaunchKernel, cudaMemcpyAsync, ...
  kDriver,             ///< "cuda_driver": cuLaunchKernel, ...
  kCpuOp,              ///< "cpu_op" / "Operator": aten::*, autograd ops
  kUserAnnotation,  ///< "user_annotation" / "user_annotation"-like: ProfilerStep#N, record_function
  kPythonFunction,  ///< "python_function"
  kOther,           ///< any other complete event (legacy bare events with no category land
                    ///< in kCpuOp instead; see reader)
};

/// True for events that run on a GPU row (pid = device, tid = stream).
[[nodiscard]] constexpr bool IsGpuKind(EventKind k) {
  return k == EventKind::kKernel || k == EventKind::kMemcpy || k == EventKind::kMemset ||
         k == EventKind::kCudaSync || k == EventKind::kGpuUserAnnotation;
}

/// Event flags (bit set).
enum EventFlags : uint8_t {
  kFlagNone = 0,
  kFlagCudaGraph = 1 << 0,  ///< launched as part of a CUDA graph (cudaGraphLaunch correlation)
};

/// One complete ("ph":"X") event, compact: 48 bytes (bench/trace_mem.sh: peak RSS per event).
/// Times are integer nanoseconds since the epoch of the trace (Kineto: absolute µs × 1000
/// exactly, fractional digits kept; ns precision).
struct Event {
  int64_t ts_ns = 0;
  /// args.correlation (runtime ↔ GPU), else -1. Kineto: same id on the launching cuda_runtime
  /// event and the kernel/memcpy/memset it launched.
  int64_t correlation = -1;
  /// GPU kinds: the stream (args.stream, else numeric tid, else "stream N"). CPU kinds: the thread
  /// id.
  int64_t tid = 0;
  /// Memcpy/memset: args.bytes (0 when absent). Kernels: 0.
  uint64_t bytes = 0;
  /// GPU kinds: the device (args.device, else numeric pid). CPU kinds: the process id
  /// (0 when the pid was a string such as "CPU functions").
  int32_t pid = 0;
  uint32_t name_id = 0;  ///< index into RankTrace::names
  /// ≥ 0 as read (negative durations are counted as malformed and set to 0; --hta-compat
  /// rounding may make it slightly negative). The reader keeps it within ±2^47 (kMaxDurNs), so
  /// 55 bits hold it; write it with set_dur_ns. Shares 8 bytes with flags and kind.
  int64_t dur_ns : 55 = 0;
  uint8_t flags : 1 = kFlagNone;  ///< EventFlags; one bit while kFlagCudaGraph is the only one
  EventKind kind : 8 = EventKind::kOther;

  [[nodiscard]] int64_t end_ns() const { return ts_ns + dur_ns; }
  /// `dur` must lie within ±2^54 (the reader's limit is 2^47).
  void set_dur_ns(int64_t dur) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
    dur_ns = dur;
#pragma GCC diagnostic pop
  }
};
static_assert(sizeof(Event) == 48, "Event grew: README and bench/trace_mem.sh quote its size");

/// The order of a prepared timeline (PrepareTimeline sorts by it): by start, the longer (the
/// enclosing) first, then by what the event is. A total order: which of two events with the same
/// start and length comes first never depends on the sort algorithm or on how many threads
/// sorted, so the numbers do not either.
struct EventOrder {
  bool operator()(const Event& a, const Event& b) const {
    if (a.ts_ns != b.ts_ns) return a.ts_ns < b.ts_ns;
    const int64_t ad = a.dur_ns;
    const int64_t bd = b.dur_ns;
    if (ad != bd) return ad > bd;
    const auto ak = static_cast<uint8_t>(a.kind);
    const auto bk = static_cast<uint8_t>(b.kind);
    if (ak != bk) return ak < bk;
    if (a.pid != b.pid) return a.pid < b.pid;
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.name_id != b.name_id) return a.name_id < b.name_id;
    if (a.correlation != b.correlation) return a.correlation < b.correlation;
    const auto af = static_cast<uint8_t>(a.flags);
    const auto bf = static_cast<uint8_t>(b.flags);
    return a.bytes != b.bytes ? a.bytes < b.bytes : af < bf;
  }
};

/// Hash for heterogeneous (string_view) lookups in StringTable: interning a name must not
/// allocate when the name is already known (the reader calls Intern once per event).
struct StringViewHash {
  using is_transparent = void;
  /// 8 bytes per step with a multiply-xorshift mix: names are hashed once per event.
  size_t operator()(std::string_view s) const {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w = 0;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0xff51afd7ed558ccdULL;
      h ^= h >> 32;
    }
    uint64_t tail = 0;
    if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
    h = (h ^ tail) * 0xc4ceb9fe1a85ec53ULL;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

/// Interned event names. Id 0 is always "". Each name is stored once: the lookup index holds
/// views of the stored strings (a deque never moves its elements), so a long name costs its
/// length once, not twice (bench/trace_mem.sh).
class StringTable {
 public:
  StringTable() { Intern(""); }
  StringTable(const StringTable& other) : strings_(other.strings_) { Reindex(); }
  StringTable& operator=(const StringTable& other) {
    if (this != &other) {
      strings_ = other.strings_;
      Reindex();
    }
    return *this;
  }
  // Moving a deque keeps its elements where they are, so the views stay valid.
  StringTable(StringTable&&) noexcept = default;
  StringTable& operator=(StringTable&&) noexcept = default;
  ~StringTable() = default;

  /// Returns the id of `s`, adding it when new.
  uint32_t Intern(std::string_view s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    auto id = static_cast<uint32_t>(strings_.size());
    strings_.emplace_back(s);
    ids_.emplace(strings_.back(), id);
    return id;
  }
  [[nodiscard]] const std::string& Get(uint32_t id) const { return strings_[id]; }
  [[nodiscard]] size_t size() const { return strings_.size(); }

 private:
  void Reindex() {
    ids_.clear();
    for (size_t i = 0; i < strings_.size(); ++i)
      ids_.emplace(strings_[i], static_cast<uint32_t>(i));
  }

  std::deque<std::string> strings_;
  std::unordered_map<std::string_view, uint32_t, StringViewHash> ids_;
};

/// A GPU as `deviceProperties` lists it.
struct DeviceProps {
  int32_t id = 0;
  std::string name;
  std::optional<uint64_t> total_memory_bytes;
  std::optional<int32_t> compute_major;
  std::optional<int32_t> compute_minor;
  std::optional<int32_t> num_sms;
};

/// Metadata of a collective kernel or record_param_comms op (newer Kineto args).
struct CollectiveInfo {
  int64_t correlation = -1;  ///< of the kernel that carried it
  std::string collective;    ///< args "Collective name": "allreduce", "_allgather_base", ...
  std::optional<int64_t> in_msg_nelems;
  std::optional<int64_t> out_msg_nelems;
  std::optional<int64_t> group_size;
  std::string dtype;
  std::string process_group;  ///< args "Process Group Description" or "Process Group Name"
};

/// Which JSON dialect the file was written in.
enum class Dialect : uint8_t {
  kKineto,        ///< lower-case categories (kernel, cuda_runtime, cpu_op, ...)
  kKineto2021,    ///< capitalised categories (Kernel, Runtime, Operator), "stream N" tids
  kChromeNoCats,  ///< plain Chrome trace without categories (legacy autograd profiler)
};

/// Longest name or args string the reader keeps: longer ones keep their first kMaxStringBytes
/// bytes (cut at a UTF-8 boundary) followed by kTruncatedMarker, and are counted in
/// ReadStats::long_strings. The longest name in the six HTA reference traces is 2.0 KB; CUTLASS
/// template kernel names reach ~10 KB. Without a cap a 64 MB name cost 3-4× its size (issue:
/// "a 64 MB string must not cost 290 MB").
inline constexpr size_t kMaxStringBytes = size_t{64} << 10;
inline constexpr std::string_view kTruncatedMarker = "...[truncated]";

/// Counts of what the reader skipped or could not use.
struct ReadStats {
  uint64_t bytes = 0;         ///< uncompressed JSON bytes read
  uint64_t events_total = 0;  ///< elements of traceEvents seen
  uint64_t complete = 0;      ///< "X" events kept
  uint64_t flows = 0;         ///< "s"/"f"/"t" flow events (counted, not kept)
  uint64_t metadata = 0;      ///< "M" events
  uint64_t instant = 0;       ///< "i"/"I" events
  uint64_t counters = 0;      ///< "C" events
  uint64_t other_phase = 0;   ///< "B"/"E" and anything else
  uint64_t malformed = 0;     ///< elements that are not objects, lack ts, bad numbers, ...
  uint64_t negative_dur = 0;  ///< X events with dur < 0 (kept with dur 0; also in malformed)
  bool truncated = false;     ///< the file ended inside traceEvents
  uint64_t long_strings = 0;  ///< names / args strings cut to kMaxStringBytes
  uint64_t oversized = 0;     ///< elements longer than kMaxElementBytes, skipped (also malformed)
  /// The chunk buffer's capacity at the end (it only grows): the reader's memory apart from the
  /// kept events and the parser. Bounded by chunk_bytes + max_element_bytes whatever the input.
  uint64_t buffer_bytes = 0;
};

/// Where a trace's rank came from, in the order ReadTrace tries them (the default last).
enum class RankSource : uint8_t {
  kDefault,          ///< "default": none said it; rank 0
  kDistributedInfo,  ///< "distributedInfo": the trace's distributedInfo.rank
  kFileName,         ///< "file name": "rank-3.json", "worker_4.json", ...
  kOption,           ///< "--rank": the command line's
};
/// Every source with its name (trace.json "rank_source", the text report's "rank from ..."), in
/// enum order.
inline constexpr std::pair<RankSource, std::string_view> kRankSourceNames[] = {
    {RankSource::kDefault, "default"},
    {RankSource::kDistributedInfo, "distributedInfo"},
    {RankSource::kFileName, "file name"},
    {RankSource::kOption, "--rank"},
};
[[nodiscard]] std::string_view RankSourceName(RankSource source);

/// One rank's trace, as read. Events are in file order (not sorted); analyses sort what they need.
struct RankTrace {
  std::string path;
  int32_t rank = 0;
  RankSource rank_source = RankSource::kDefault;  ///< where `rank` came from
  std::optional<int32_t> world_size;
  std::string backend;  ///< distributedInfo.backend ("nccl"), "" when absent
  Dialect dialect = Dialect::kKineto;
  std::optional<int64_t> base_time_ns;  ///< baseTimeNanoseconds when present
  std::vector<DeviceProps> devices;
  std::vector<Event> events;
  StringTable names;
  std::vector<CollectiveInfo> collectives;
  /// "M" thread_name / process_name metadata: (pid, tid) → name; tid 0 for process names.
  std::unordered_map<int64_t, std::string> thread_names;   ///< key: tid
  std::unordered_map<int32_t, std::string> process_names;  ///< key: pid
  ReadStats stats;
  std::vector<std::string> warnings;  ///< "truncated: ...", "123 malformed events skipped", ...

  [[nodiscard]] const std::string& NameOf(const Event& e) const { return names.Get(e.name_id); }
};

}  // namespace stallscope::trace
