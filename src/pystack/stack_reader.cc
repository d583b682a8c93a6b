#include "pystack/stack_reader.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "pystack/line_table.h"
#include "pystack/pystack.h"

namespace stallscope::pystack {
namespace {

// Loop guards and size bounds: a torn read must end in an error, never in a hang or a huge copy.
// The per-process budgets (thread states, frames, cache bytes) are ReaderBudget's.
// Steps along one frame chain, shim frames included, before it counts as garbage.
constexpr size_t kMaxFrameSteps = 2 * StackReader::kMaxFrames;
constexpr uint64_t kMaxLineTableBytes = 1 << 20;
// The fields of one struct read in one go; the real spans are under 320 bytes.
constexpr uint64_t kMaxSpanBytes = 1024;
// 3.11+: how much of a _PyStackChunk one read may copy. CPython allocates chunks of
// _PY_DATA_STACK_CHUNK_SIZE (16 KiB, Python/pystate.c push_chunk) unless one frame needs more.
constexpr uint64_t kMaxWindowBytes = 64 << 10;
constexpr size_t kMaxPthreadCacheEntries = 4096;
// Threads whose last frame chain is kept, and batch fetches of it tried per walk.
constexpr size_t kMaxChains = 1024;
constexpr int kMaxPrefetches = 64;
// glibc x86-64: `pid_t tid` in struct pthread (nptl/descr.h), where pthread_t points. Used for
// 3.8-3.10 only, which lack PyThreadState.native_thread_id; validated against /proc/PID/task.
constexpr uint64_t kGlibcPthreadTidOffset = 0x2d0;
// _PyInterpreterFrame.owner: FRAME_OWNED_BY_CSTACK (3.12-3.13 Include/internal/pycore_frame.h).
constexpr uint8_t kOwnedByCStack = 3;
// _PyInterpreterFrame.owner: FRAME_OWNED_BY_GENERATOR (3.11-3.13, measured from their headers).
constexpr uint8_t kOwnedByGenerator = 1;

// The byte range [begin, end) of a struct that holds the fields one read needs.
struct Span {
  uint64_t begin = UINT64_MAX;
  uint64_t end = 0;
  void Add(uint64_t offset, uint64_t size) {
    begin = std::min(begin, offset);
    end = std::max(end, offset + size);
  }
  uint64_t size() const { return end > begin ? end - begin : 0; }
};

// The field at struct offset `offset` out of the bytes of `span` read at `data`.
template <typename T>
T FieldAt(const uint8_t* data, const Span& span, uint64_t offset) {
  T value{};
  std::memcpy(&value, data + (offset - span.begin), sizeof(T));
  return value;
}

Error Invalid(std::string message) { return Error{ErrorCode::kParse, std::move(message)}; }

// Counts every read into ReaderStats::reads.
class CountingMemory final : public MemoryReader {
 public:
  CountingMemory(const MemoryReader& inner, int64_t& reads) : inner_(&inner), reads_(&reads) {}
  [[nodiscard]] Status Read(uint64_t address, void* out, size_t size) const override {
    ++*reads_;
    return inner_->Read(address, out, size);
  }
  [[nodiscard]] Status ReadMany(std::span<const ReadRequest> requests) const override {
    ++*reads_;
    return inner_->ReadMany(requests);
  }

 private:
  const MemoryReader* inner_;
  int64_t* reads_;
};

// What identifies a live code object: if any of these changed, the object at that address is
// another one (a freed code object's address reused). co_linetable is a bytes object of the code
// object's own, so a new code object with the same names still differs in it.
struct CodeKey {
  uint64_t type = 0;
  uint64_t filename = 0;
  uint64_t name = 0;
  uint64_t qualname = 0;
  uint64_t linetable = 0;
  int32_t first_line = 0;
  bool operator==(const CodeKey&) const = default;
};

// A line table held once for every cached code object that names its bytes object.
struct LineTableEntry {
  std::string bytes;
  int64_t users = 0;  // cache entries holding it
};

struct CodeEntry {
  CodeKey key;
  std::string file;
  std::string function;
  // The line table's bytes (a node of Impl::line_tables, stable while held), or null when the
  // cache's byte budget was spent: then read again whenever a new instruction's line is wanted.
  const std::string* table = nullptr;
  // The last lookup: a thread that sits in one place asks for the same line again and again.
  uint64_t last_unit = UINT64_MAX;
  std::optional<int> last_line;
};

struct ThreadInfo {
  uint64_t tstate = 0;
  uint64_t thread_id = 0;
  uint64_t frame = 0;  // tstate.frame / cframe / current_frame
  uint64_t chunk = 0;  // tstate.datastack_chunk (3.11+)
  std::optional<pid_t> native_tid;
};

// One Python frame found on the chain: its code object and instruction (in code units).
struct FrameRef {
  uint64_t code = 0;
  uint64_t unit = 0;
};

// The thread states one thread-list read has met: each is read once. Open addressing in a table
// of a power of two at least twice the budget, reset by clearing only the slots used (no
// allocation once made).
class SeenSet {
 public:
  explicit SeenSet(size_t capacity) : slots_(std::bit_ceil(std::max<size_t>(2 * capacity, 2)), 0) {
    used_.reserve(capacity);
  }
  void Clear() {
    for (uint32_t at : used_) slots_[at] = 0;
    used_.clear();
  }
  // False when `address` (non-zero) was inserted before. At most `capacity` insertions.
  bool Insert(uint64_t address) {
    const size_t mask = slots_.size() - 1;
    size_t at = static_cast<size_t>(((address >> 3) * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
    while (slots_[at] != 0) {
      if (slots_[at] == address) return false;
      at = (at + 1) & mask;
    }
    slots_[at] = address;
    used_.push_back(static_cast<uint32_t>(at));
    return true;
  }

 private:
  std::vector<uint64_t> slots_;
  std::vector<uint32_t> used_;
};

// What the last thread-list read left out.
struct ListCut {
  bool states = false;        // the thread-state budget was spent
  bool interpreters = false;  // the interpreter list went on past its budget
  size_t repeated = 0;        // lists ended at a thread state met before
  bool any() const { return states || interpreters || repeated > 0; }
};

}  // namespace

struct StackReader::Impl {
  Impl(PythonProcess python, std::unique_ptr<MemoryReader> reader, ReaderBudget limits);

  Status ReadThreads(std::optional<pid_t> stop_at);
  ThreadInfo ParseThread(uint64_t tstate, const uint8_t* data) const;
  std::optional<pid_t> NativeTid(uint64_t pthread);
  std::optional<uint64_t> PthreadOf(pid_t tid) const;
  Result<const ThreadInfo*> FindThread(pid_t tid);
  Status Walk(const ThreadInfo& thread, size_t max_frames, size_t max_name_bytes,
              ThreadStack& stack, size_t& name_bytes);
  Result<uint64_t> InnermostFrame(const ThreadInfo& thread);
  Status CollectFrames(const ThreadInfo& thread, size_t max_frames, bool& truncated);
  Result<const uint8_t*> FrameBytes(uint64_t frame, uint64_t& chunk,
                                    const std::vector<uint64_t>& last_chain);
  const uint8_t* Prefetched(uint64_t frame);
  Result<bool> Prefetch(uint64_t frame, const std::vector<uint64_t>& last_chain);
  Status ValidateCodes();
  Result<CodeEntry*> CodeFor(uint64_t code, const CodeKey& key);
  Status LoadCode(CodeEntry& entry);
  Status ReadBytesObject(uint64_t address, std::string& out);
  const std::string* HoldTable(uint64_t address);
  void Release(CodeEntry& entry);
  void ClearCodeCache();
  Result<std::optional<int>> LineOf(CodeEntry& entry, uint64_t unit);
  Error Classify(Error error);
  Status SampleThread(pid_t tid, size_t max_frames, ThreadStack& stack);
  Status SampleThreads(size_t max_frames, size_t max_threads, ProcessStacks& out);

  PythonProcess process;
  ReaderBudget budget;
  std::unique_ptr<MemoryReader> owned;
  ReaderStats stats;
  CountingMemory memory;
  Span tstate_span, frame_span, code_span;
  std::optional<Error> layout_error;
  // Scratch, reused by every sample.
  std::vector<ThreadInfo> threads;
  SeenSet seen{budget.thread_states};  // the thread states the last list read met
  ListCut list_cut;                    // what it left out
  // The main thread's thread state: it lives as long as the process, so a sample of the main
  // thread (tid == pid) reads it alone, not the interpreter and thread lists (0: not known yet).
  uint64_t main_tstate = 0;
  std::vector<uint8_t> tstate_bytes, frame_bytes, code_bytes, window;
  uint64_t window_start = 0;
  bool window_valid = false;
  std::vector<FrameRef> refs;
  // Each thread's frame addresses at its last walk (by thread state): where its frames probably
  // still are, so one batch fetches them (3.8-3.10 frame objects, generators' frames).
  std::unordered_map<uint64_t, std::vector<uint64_t>> chains;
  std::vector<uint64_t> walk_chain;  // this walk's frame addresses
  size_t walk_steps = 0;             // frames this walk read, shim frames included
  std::vector<uint64_t> prefetched;  // frames whose frame_span bytes are in prefetch_bytes
  std::vector<uint8_t> prefetch_bytes;
  size_t prefetch_next = 0;  // where in `prefetched` the chain is expected next
  int prefetches = 0;
  std::vector<uint64_t> codes;      // the distinct code objects of one walk, sorted
  std::vector<CodeKey> keys;        // what each holds now, parallel to `codes`
  std::vector<CodeEntry*> entries;  // their cache entries, parallel: found as the walk needs them
  std::vector<ReadRequest> requests;
  std::unordered_map<uint64_t, CodeEntry> code_cache;
  // Line tables by their bytes object's address, shared by the code objects naming it.
  std::unordered_map<uint64_t, LineTableEntry> line_tables;
  size_t cache_bytes = 0;   // names in code_cache + bytes in line_tables
  std::string table_bytes;  // a line table read now (a miss, or one the cache does not hold)
  std::vector<std::pair<uint64_t, pid_t>> pthread_tids;  // 3.8-3.10: pthread_t -> tid
};

StackReader::Impl::Impl(PythonProcess python, std::unique_ptr<MemoryReader> reader,
                        ReaderBudget limits)
    : process(std::move(python)),
      budget(limits),
      owned(std::move(reader)),
      memory(*owned, stats.reads) {
  const Layout& l = process.layout;
  tstate_span.Add(l.tstate_next, 8);
  tstate_span.Add(l.tstate_thread_id, 8);
  tstate_span.Add(l.tstate_frame, 8);
  if (l.tstate_native_thread_id) tstate_span.Add(*l.tstate_native_thread_id, 8);
  if (l.tstate_datastack_chunk) tstate_span.Add(*l.tstate_datastack_chunk, 8);
  frame_span.Add(l.frame_back, 8);
  frame_span.Add(l.frame_code, 8);
  frame_span.Add(l.frame_instr, l.frame_model == FrameModel::kFrameObject ? 4 : 8);
  if (l.frame_owner) frame_span.Add(*l.frame_owner, 1);
  if (l.frame_gen) frame_span.Add(*l.frame_gen, 8);
  code_span.Add(l.object_type, 8);
  code_span.Add(l.code_filename, 8);
  code_span.Add(l.code_name, 8);
  if (l.code_qualname) code_span.Add(*l.code_qualname, 8);
  code_span.Add(l.code_linetable, 8);
  code_span.Add(l.code_firstlineno, 4);
  for (const Span* span : {&tstate_span, &frame_span, &code_span}) {
    if (span->size() > kMaxSpanBytes) {
      layout_error = MakeError(ErrorCode::kUnsupported,
                               "pid {}: implausible Python layout (fields {} bytes apart)",
                               process.pid, span->size());
    }
  }
  if (!layout_error) {
    tstate_bytes.resize(tstate_span.size());
    frame_bytes.resize(frame_span.size());
  }
}

ThreadInfo StackReader::Impl::ParseThread(uint64_t tstate, const uint8_t* data) const {
  const Layout& l = process.layout;
  ThreadInfo info;
  info.tstate = tstate;
  info.thread_id = FieldAt<uint64_t>(data, tstate_span, l.tstate_thread_id);
  info.frame = FieldAt<uint64_t>(data, tstate_span, l.tstate_frame);
  if (l.tstate_datastack_chunk) {
    info.chunk = FieldAt<uint64_t>(data, tstate_span, *l.tstate_datastack_chunk);
  }
  if (l.tstate_native_thread_id) {
    auto tid = FieldAt<int64_t>(data, tstate_span, *l.tstate_native_thread_id);
    if (tid > 0 && tid <= INT_MAX) info.native_tid = static_cast<pid_t>(tid);
  }
  return info;
}

// The kernel tid of a 3.8-3.10 thread from glibc's struct pthread, cached per pthread_t and
// re-read each time (glibc reuses a finished thread's pthread_t for a new thread).
std::optional<pid_t> StackReader::Impl::NativeTid(uint64_t pthread) {
  if (pthread == 0) return std::nullopt;
  auto tid = ReadValue<int32_t>(memory, pthread + kGlibcPthreadTidOffset);
  if (!tid.ok() || *tid <= 0) return std::nullopt;
  auto cached = std::find_if(pthread_tids.begin(), pthread_tids.end(),
                             [&](const auto& entry) { return entry.first == pthread; });
  if (cached != pthread_tids.end() && cached->second == *tid) return *tid;
  if (access(fmt::format("/proc/{}/task/{}", process.pid, *tid).c_str(), F_OK) != 0) {
    return std::nullopt;
  }
  if (cached != pthread_tids.end()) {
    cached->second = *tid;
  } else {
    if (pthread_tids.size() >= kMaxPthreadCacheEntries) pthread_tids.clear();
    pthread_tids.emplace_back(pthread, *tid);
  }
  return *tid;
}

std::optional<uint64_t> StackReader::Impl::PthreadOf(pid_t tid) const {
  for (const auto& [pthread, cached_tid] : pthread_tids) {
    if (cached_tid == tid) return pthread;
  }
  return std::nullopt;
}

// Reads the thread lists of every interpreter into `threads`. With `stop_at`, stops at the thread
// whose kernel tid it is: 3.11+ from the thread state; 3.8-3.10 through the pthread_t cached for
// it. One budget for the whole process (budget.thread_states thread states, .interpreters
// interpreters): past it the rest is left out and said in `list_cut`, not an error. Each thread
// state is read once: one met again ends its list (a loop, or a list two interpreters share).
Status StackReader::Impl::ReadThreads(std::optional<pid_t> stop_at) {
  const Layout& l = process.layout;
  threads.clear();
  seen.Clear();
  list_cut = {};
  std::optional<uint64_t> want_pthread;
  if (stop_at && !l.tstate_native_thread_id) want_pthread = PthreadOf(*stop_at);
  TRY(auto interp, ReadValue<uint64_t>(memory, process.runtime_address + l.runtime_interp_head));
  if (interp == 0) {
    return MakeError(ErrorCode::kNotFound,
                     "pid {}: Python has no interpreter (not started or finalized)", process.pid);
  }
  for (size_t n = 0; interp != 0; ++n) {
    if (n >= budget.interpreters) {
      list_cut.interpreters = true;
      break;
    }
    TRY(auto tstate, ReadValue<uint64_t>(memory, interp + l.interp_tstate_head));
    while (tstate != 0) {
      if (threads.size() >= budget.thread_states) {
        list_cut.states = true;
        return OkStatus();
      }
      if (!seen.Insert(tstate)) {
        ++list_cut.repeated;
        break;
      }
      TRY_STATUS(memory.Read(tstate + tstate_span.begin, tstate_bytes.data(), tstate_bytes.size()));
      threads.push_back(ParseThread(tstate, tstate_bytes.data()));
      ThreadInfo& thread = threads.back();
      if (want_pthread && thread.thread_id == *want_pthread) {
        thread.native_tid = NativeTid(thread.thread_id);
      }
      if (stop_at && thread.native_tid == stop_at) return OkStatus();
      tstate = FieldAt<uint64_t>(tstate_bytes.data(), tstate_span, l.tstate_next);
    }
    TRY(interp, ReadValue<uint64_t>(memory, interp + l.interp_next));
  }
  return OkStatus();
}

Result<const ThreadInfo*> StackReader::Impl::FindThread(pid_t tid) {
  if (tid == process.pid && main_tstate != 0) {
    // Still the main thread's (its tid, or on 3.8-3.10 its pthread's tid)? Else the full search.
    Status read =
        memory.Read(main_tstate + tstate_span.begin, tstate_bytes.data(), tstate_bytes.size());
    if (!read.ok() && read.error().code != ErrorCode::kIo) return read.take_error();
    if (read.ok()) {
      threads.assign(1, ParseThread(main_tstate, tstate_bytes.data()));
      ThreadInfo& thread = threads.back();
      if (!process.layout.tstate_native_thread_id) thread.native_tid = NativeTid(thread.thread_id);
      if (thread.native_tid == tid) return &thread;
    }
    main_tstate = 0;
  }
  TRY_STATUS(ReadThreads(tid));  // at most budget.thread_states reads: a forged list costs no more
  if (!threads.empty() && threads.back().native_tid == tid) {
    if (tid == process.pid) main_tstate = threads.back().tstate;
    return &threads.back();
  }
  if (!process.layout.tstate_native_thread_id) {
    // 3.8-3.10 and no cached pthread_t for this tid (or a stale one): every thread's tid.
    for (ThreadInfo& thread : threads) {
      thread.native_tid = NativeTid(thread.thread_id);
      if (thread.native_tid != tid) continue;
      if (tid == process.pid) main_tstate = thread.tstate;
      return &thread;
    }
  }
  if (list_cut.states) {
    return MakeError(ErrorCode::kNotFound,
                     "pid {}: no Python thread with tid {} in the first {} thread states",
                     process.pid, tid, budget.thread_states);
  }
  return MakeError(ErrorCode::kNotFound, "pid {}: no Python thread with tid {}", process.pid, tid);
}

Result<uint64_t> StackReader::Impl::InnermostFrame(const ThreadInfo& thread) {
  if (process.layout.frame_model != FrameModel::kCFrame || thread.frame == 0) return thread.frame;
  return ReadValue<uint64_t>(memory, thread.frame + process.layout.cframe_current);
}

// The bytes of frame_span of the frame at `frame`, cheapest first: from the copy of the current
// _PyStackChunk (3.11+), from this walk's batch of the thread's last chain, by one read of the
// chunk up to this frame (3.11+: `chunk` then moves to the previous chunk, whose address is the
// chunk's first word), by a batch read of the last chain from this frame on, or alone.
Result<const uint8_t*> StackReader::Impl::FrameBytes(uint64_t frame, uint64_t& chunk,
                                                     const std::vector<uint64_t>& last_chain) {
  const uint64_t begin = frame + frame_span.begin;
  const uint64_t size = frame_span.size();
  if (window_valid && begin >= window_start && begin - window_start <= window.size() &&
      window.size() - (begin - window_start) >= size) {
    return window.data() + (begin - window_start);
  }
  if (const uint8_t* bytes = Prefetched(frame)) return bytes;
  if (chunk != 0 && begin >= chunk && begin - chunk <= kMaxWindowBytes - size) {
    window.resize(begin - chunk + size);
    Status read = memory.Read(chunk, window.data(), window.size());
    if (read.ok()) {
      window_valid = true;
      window_start = chunk;
      chunk = window.size() >= 8 ? FieldAt<uint64_t>(window.data(), Span{0, 8}, 0) : 0;
      return window.data() + (begin - window_start);
    }
    if (read.error().code != ErrorCode::kIo) return read.take_error();
    window_valid = false;
    chunk = 0;  // not readable as one piece: frame by frame
  }
  TRY(bool fetched, Prefetch(frame, last_chain));
  if (fetched) return Prefetched(frame);
  TRY_STATUS(memory.Read(begin, frame_bytes.data(), size));
  return frame_bytes.data();
}

const uint8_t* StackReader::Impl::Prefetched(uint64_t frame) {
  for (size_t i = prefetch_next; i < prefetched.size(); ++i) {
    if (prefetched[i] == frame) {
      prefetch_next = i + 1;
      return prefetch_bytes.data() + i * frame_span.size();
    }
  }
  return nullptr;
}

// When `frame` was on the thread's last chain, reads it and up to kMaxBatch - 1 frames after it
// on that chain in one batch. The walk still follows the back pointers it reads, so a frame that
// moved is only a wasted fetch; an unreadable one drops the batch (not a torn read).
Result<bool> StackReader::Impl::Prefetch(uint64_t frame, const std::vector<uint64_t>& last_chain) {
  if (prefetches >= kMaxPrefetches) return false;
  auto at = std::find(last_chain.begin(), last_chain.end(), frame);
  if (at == last_chain.end()) return false;
  ++prefetches;
  const auto n =
      std::min<size_t>(static_cast<size_t>(last_chain.end() - at), MemoryReader::kMaxBatch);
  const uint64_t size = frame_span.size();
  prefetched.assign(at, at + static_cast<std::ptrdiff_t>(n));
  prefetch_bytes.resize(n * size);
  prefetch_next = 0;
  requests.clear();
  for (size_t i = 0; i < n; ++i) {
    requests.push_back({prefetched[i] + frame_span.begin, prefetch_bytes.data() + i * size, size});
  }
  Status read = memory.ReadMany(requests);
  if (read.ok()) return true;
  prefetched.clear();
  if (read.error().code != ErrorCode::kIo) return read.take_error();
  return false;
}

// Fills `refs` with the Python frames of `thread`, innermost first, at most `max_frames`.
Status StackReader::Impl::CollectFrames(const ThreadInfo& thread, size_t max_frames,
                                        bool& truncated) {
  const Layout& l = process.layout;
  refs.clear();
  walk_steps = 0;
  window_valid = false;
  walk_chain.clear();
  prefetched.clear();
  prefetch_next = 0;
  prefetches = 0;
  if (chains.size() >= kMaxChains && !chains.contains(thread.tstate)) chains.clear();
  std::vector<uint64_t>& last_chain = chains[thread.tstate];
  uint64_t chunk = thread.chunk;
  TRY(uint64_t frame, InnermostFrame(thread));
  bool generator = false;  // the last frame read runs a generator
  uint64_t saved = 0;      // Brent's cycle check: the frame at the last power-of-two step
  size_t power = 1;
  for (size_t step = 0; frame != 0; ++step) {
    if (step >= kMaxFrameSteps) return Invalid("frame chain does not end");
    if (refs.size() >= max_frames) {
      truncated = true;
      break;
    }
    TRY(const uint8_t* data, FrameBytes(frame, chunk, last_chain));
    walk_chain.push_back(frame);
    ++walk_steps;
    const auto back = FieldAt<uint64_t>(data, frame_span, l.frame_back);
    const auto code = FieldAt<uint64_t>(data, frame_span, l.frame_code);
    const uint8_t owner = l.frame_owner ? FieldAt<uint8_t>(data, frame_span, *l.frame_owner) : 0;
    const bool shim = owner == kOwnedByCStack;  // 3.12+ C-stack shim frames
    // A generator's frame links to its caller only while it runs: read as the outermost frame,
    // the thread left (or entered) the generator while we read (a stale current frame).
    generator = owner == kOwnedByGenerator ||
                (l.frame_gen && FieldAt<uint64_t>(data, frame_span, *l.frame_gen) != 0);
    if (!shim) {
      if (code == 0) return Invalid("frame without a code object");
      FrameRef ref{code, 0};
      if (l.frame_model == FrameModel::kFrameObject) {
        auto lasti = FieldAt<int32_t>(data, frame_span, l.frame_instr);
        uint64_t index = lasti < 0 ? 0 : static_cast<uint64_t>(lasti);
        ref.unit = l.minor >= 10 ? index : index / 2;  // 3.8-3.9 count bytes
      } else {
        auto instr = FieldAt<uint64_t>(data, frame_span, l.frame_instr);
        uint64_t code_start = code + l.code_adaptive;
        ref.unit = instr > code_start ? (instr - code_start) / 2 : 0;
      }
      refs.push_back(ref);
    }
    if (back != 0 && (back == frame || back == saved)) return Invalid("frame chain has a cycle");
    if (step + 1 == power) {
      saved = frame;
      power *= 2;
    }
    frame = back;
  }
  if (!truncated && generator) return Invalid("the outermost frame is a generator's");
  last_chain.swap(walk_chain);
  return OkStatus();
}

// The bytes of the bytes object at `address` into `out` (its storage reused).
Status StackReader::Impl::ReadBytesObject(uint64_t address, std::string& out) {
  const Layout& l = process.layout;
  if (address == 0) return Invalid("null bytes object");
  Span span;
  span.Add(l.object_type, 8);
  span.Add(l.bytes_size, 8);
  std::array<uint8_t, kMaxSpanBytes> header{};
  if (span.size() > header.size()) return Invalid("implausible bytes layout");
  TRY_STATUS(memory.Read(address + span.begin, header.data(), span.size()));
  if (process.bytes_type &&
      FieldAt<uint64_t>(header.data(), span, l.object_type) != *process.bytes_type) {
    return Invalid(fmt::format("object at {:#x} is not bytes", address));
  }
  auto size = FieldAt<int64_t>(header.data(), span, l.bytes_size);
  if (size < 0 || static_cast<uint64_t>(size) > kMaxLineTableBytes) {
    return Invalid(fmt::format("bytes object of implausible size {}", size));
  }
  out.resize(static_cast<size_t>(size));
  if (size > 0) TRY_STATUS(memory.Read(address + l.bytes_data, out.data(), out.size()));
  return OkStatus();
}

// The cache's copy of the line table just read into `table_bytes` (the bytes object at
// `address`), shared with the other code objects naming it; null when the cache's byte budget
// has no room for it. Bytes objects do not change, so a copy that differs is a freed object's:
// another was made at its address since, and the copy is replaced.
const std::string* StackReader::Impl::HoldTable(uint64_t address) {
  auto found = line_tables.find(address);
  if (found != line_tables.end()) {
    LineTableEntry& held = found->second;
    if (held.bytes != table_bytes) {
      cache_bytes = cache_bytes - held.bytes.size() + table_bytes.size();
      held.bytes.assign(table_bytes);
    }
    ++held.users;
    return &held.bytes;
  }
  if (cache_bytes + table_bytes.size() > budget.code_cache_bytes) return nullptr;
  LineTableEntry& held = line_tables[address];
  held.bytes.assign(table_bytes);
  held.users = 1;
  cache_bytes += held.bytes.size();
  return &held.bytes;
}

// Forgets what `entry` holds (it is being replaced): its names' bytes, its use of a line table.
void StackReader::Impl::Release(CodeEntry& entry) {
  cache_bytes -= entry.file.size() + entry.function.size();
  if (entry.table == nullptr) return;
  auto found = line_tables.find(entry.key.linetable);
  if (found != line_tables.end() && --found->second.users == 0) {
    cache_bytes -= found->second.bytes.size();
    line_tables.erase(found);
  }
  entry.table = nullptr;
}

void StackReader::Impl::ClearCodeCache() {
  code_cache.clear();
  line_tables.clear();
  cache_bytes = 0;
}

Status StackReader::Impl::LoadCode(CodeEntry& entry) {
  const CodeKey& key = entry.key;
  TRY(entry.file, ReadPyString(memory, process.layout, key.filename, 4096, process.str_type));
  uint64_t name = process.layout.code_qualname ? key.qualname : key.name;
  TRY(entry.function, ReadPyString(memory, process.layout, name, 4096, process.str_type));
  TRY_STATUS(ReadBytesObject(key.linetable, table_bytes));
  entry.table = HoldTable(key.linetable);  // last: nothing fails after it holds the table
  return OkStatus();
}

Result<CodeEntry*> StackReader::Impl::CodeFor(uint64_t code, const CodeKey& key) {
  if (process.code_type && key.type != *process.code_type) {
    return Invalid(fmt::format("object at {:#x} is not a code object", code));
  }
  auto found = code_cache.find(code);
  if (found != code_cache.end() && found->second.key == key) {
    ++stats.code_cache_hits;
    return &found->second;
  }
  ++stats.code_cache_misses;
  CodeEntry entry;
  entry.key = key;
  TRY_STATUS(LoadCode(entry));
  cache_bytes += entry.file.size() + entry.function.size();
  if (found != code_cache.end()) {
    Release(found->second);
    found->second = std::move(entry);
    return &found->second;
  }
  return &code_cache.emplace(code, std::move(entry)).first->second;
}

// One batch of reads gets what every distinct code object of the walk (`refs`) holds now
// (`keys`); the walk then checks each against the cache as it needs it (Walk: innermost first,
// so a walk cut by its byte budget reads no code object past the cut). The cache starts afresh
// when this walk could take it past its entries or it is past its bytes (ReaderBudget).
Status StackReader::Impl::ValidateCodes() {
  const Layout& l = process.layout;
  codes.clear();
  for (const FrameRef& ref : refs) codes.push_back(ref.code);
  std::sort(codes.begin(), codes.end());
  codes.erase(std::unique(codes.begin(), codes.end()), codes.end());
  if (code_cache.size() + codes.size() > budget.code_cache_entries ||
      cache_bytes > budget.code_cache_bytes) {
    ClearCodeCache();
  }
  const uint64_t size = code_span.size();
  code_bytes.resize(codes.size() * size);
  for (size_t first = 0; first < codes.size(); first += MemoryReader::kMaxBatch) {
    requests.clear();
    for (size_t i = first; i < std::min(codes.size(), first + MemoryReader::kMaxBatch); ++i) {
      requests.push_back({codes[i] + code_span.begin, code_bytes.data() + i * size, size});
    }
    TRY_STATUS(memory.ReadMany(requests));
  }
  keys.resize(codes.size());
  entries.assign(codes.size(), nullptr);
  for (size_t i = 0; i < codes.size(); ++i) {
    const uint8_t* data = code_bytes.data() + i * size;
    CodeKey& key = keys[i];
    key.type = FieldAt<uint64_t>(data, code_span, l.object_type);
    key.filename = FieldAt<uint64_t>(data, code_span, l.code_filename);
    key.name = FieldAt<uint64_t>(data, code_span, l.code_name);
    key.qualname = l.code_qualname ? FieldAt<uint64_t>(data, code_span, *l.code_qualname) : 0;
    key.linetable = FieldAt<uint64_t>(data, code_span, l.code_linetable);
    key.first_line = FieldAt<int32_t>(data, code_span, l.code_firstlineno);
  }
  return OkStatus();
}

Result<std::optional<int>> StackReader::Impl::LineOf(CodeEntry& entry, uint64_t unit) {
  if (entry.last_unit == unit) return entry.last_line;
  std::string_view table;
  if (entry.table != nullptr) {
    table = *entry.table;
  } else {
    TRY_STATUS(ReadBytesObject(entry.key.linetable, table_bytes));  // not held: over the budget
    table = table_bytes;
  }
  entry.last_line =
      LineForInstruction(process.layout.line_table, table, entry.key.first_line, unit);
  entry.last_unit = unit;
  return entry.last_line;
}

// The frames of `thread` into `stack`, at most `max_frames` and `max_name_bytes` of names (file
// + function): past either, the innermost frames are kept and `truncated` set. `name_bytes`:
// the bytes of names returned.
Status StackReader::Impl::Walk(const ThreadInfo& thread, size_t max_frames, size_t max_name_bytes,
                               ThreadStack& stack, size_t& name_bytes) {
  name_bytes = 0;
  TRY_STATUS(CollectFrames(thread, std::min(max_frames, kMaxFrames), stack.truncated));
  TRY_STATUS(ValidateCodes());
  // Frames already in `stack` are overwritten in place (their strings keep their storage).
  size_t n = 0;
  for (const FrameRef& ref : refs) {
    size_t index =
        static_cast<size_t>(std::lower_bound(codes.begin(), codes.end(), ref.code) - codes.begin());
    if (entries[index] == nullptr) {
      TRY(entries[index], CodeFor(codes[index], keys[index]));
    }
    CodeEntry& entry = *entries[index];
    const size_t size = entry.file.size() + entry.function.size();
    if (size > max_name_bytes - name_bytes) {
      stack.truncated = true;
      break;
    }
    name_bytes += size;
    if (n == stack.frames.size()) stack.frames.emplace_back();
    Frame& frame = stack.frames[n++];
    frame.file.assign(entry.file);
    frame.function.assign(entry.function);
    TRY(frame.line, LineOf(entry, ref.unit));
  }
  stack.frames.resize(n);
  return OkStatus();
}

// A torn or invalid read (an unreadable address, implausible data) becomes kIo and is counted;
// the process being gone or unreadable stays as it is.
Error StackReader::Impl::Classify(Error error) {
  if (error.code != ErrorCode::kIo && error.code != ErrorCode::kParse) return error;
  ++stats.torn;
  std::string_view what = error.message;
  std::string prefix = fmt::format("pid {}: ", process.pid);
  if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
  return MakeError(ErrorCode::kIo, "pid {}: torn or invalid read: {}", process.pid, what);
}

Status StackReader::Impl::SampleThread(pid_t tid, size_t max_frames, ThreadStack& stack) {
  stack.truncated = false;  // `frames` is overwritten in place by Walk
  stack.error.reset();
  TRY(const ThreadInfo* thread, FindThread(tid));
  stack.thread_id = thread->thread_id;
  stack.native_thread_id = tid;
  size_t name_bytes = 0;
  return Walk(*thread, max_frames, budget.name_bytes_per_walk, stack, name_bytes);
}

namespace {

// ProcessStacks::cut: what the budget left out, one line; empty when nothing.
std::string CutText(const ReaderBudget& budget, const ListCut& list, size_t not_walked) {
  std::string out;
  auto add = [&out](std::string part) {
    if (!out.empty()) out += "; ";
    out += part;
  };
  if (list.states) {
    add(fmt::format("the thread lists hold more than {} thread states: the rest are not read",
                    budget.thread_states));
  }
  if (list.interpreters) {
    add(fmt::format("more than {} interpreters: the rest are not read", budget.interpreters));
  }
  if (list.repeated > 0) {
    add(
        fmt::format("{} thread list{} met a thread state already read (a list that loops, or "
                    "one shared by interpreters): read once",
                    list.repeated, list.repeated == 1 ? "" : "s"));
  }
  if (not_walked > 0) {
    add(
        fmt::format("{} thread{} not walked: the budget of {} frames and {} MiB of names per "
                    "process (or of threads per sample) is spent",
                    not_walked, not_walked == 1 ? "" : "s", budget.frames_per_process,
                    budget.name_bytes_per_process >> 20));
  }
  return out;
}

}  // namespace

// Every thread read, the main thread (tid == pid) walked first, within the process's budget of
// frames and name bytes: threads past it are left out of the result (counted in `cut`).
Status StackReader::Impl::SampleThreads(size_t max_frames, size_t max_threads, ProcessStacks& out) {
  TRY_STATUS(ReadThreads(std::nullopt));
  size_t n = 0;  // threads of `out` filled (their storage is reused)
  size_t frames_left = budget.frames_per_process;
  size_t bytes_left = budget.name_bytes_per_process;
  size_t not_walked = 0;
  if (!process.layout.tstate_native_thread_id) {
    for (ThreadInfo& thread : threads) thread.native_tid = NativeTid(thread.thread_id);
  }
  // The main thread first (its stack is the one a budget must not cut), the others in order;
  // a rotation, not a partition: nothing allocated.
  auto main_thread = std::find_if(threads.begin(), threads.end(),
                                  [&](const ThreadInfo& t) { return t.native_tid == process.pid; });
  if (main_thread != threads.end()) std::rotate(threads.begin(), main_thread, main_thread + 1);
  for (const ThreadInfo& thread : threads) {
    if (frames_left == 0 || bytes_left == 0 || n == max_threads) {
      ++not_walked;
      continue;
    }
    if (n == out.threads.size()) out.threads.emplace_back();
    ThreadStack& stack = out.threads[n++];
    stack.truncated = false;
    stack.error.reset();
    stack.thread_id = thread.thread_id;
    stack.native_thread_id = thread.native_tid;
    size_t name_bytes = 0;
    Status walked = Walk(thread, std::min(max_frames, frames_left),
                         std::min(bytes_left, budget.name_bytes_per_walk), stack, name_bytes);
    // Every frame read counts, a torn walk's too: what a forged chain costs is what it reads.
    frames_left -= std::min(frames_left, std::max(walk_steps, stack.frames.size()));
    bytes_left -= name_bytes;
    if (walked.ok()) continue;
    Error error = walked.take_error();
    if (error.code == ErrorCode::kNotFound || error.code == ErrorCode::kPermission) return error;
    stack.error = Classify(std::move(error));
    stack.frames.clear();
    stack.truncated = false;
  }
  out.threads.resize(n);
  out.cut = CutText(budget, list_cut, not_walked);
  out.list_cut = list_cut.any();
  out.not_walked = not_walked;
  return OkStatus();
}

StackReader::StackReader(PythonProcess process, std::unique_ptr<MemoryReader> memory,
                         ReaderBudget budget)
    : impl_(std::make_unique<Impl>(std::move(process), std::move(memory), budget)) {}
StackReader::StackReader(StackReader&&) noexcept = default;
StackReader& StackReader::operator=(StackReader&&) noexcept = default;
StackReader::~StackReader() = default;

Result<StackReader> StackReader::Open(pid_t pid) {
  TRY(PythonProcess process, FindPython(pid));
  return StackReader(std::move(process), std::make_unique<ProcessMemory>(pid));
}

Result<ThreadStack> StackReader::Sample(pid_t tid, size_t max_frames) {
  ThreadStack stack;
  TRY_STATUS(SampleInto(tid, max_frames, stack));
  return stack;
}

Status StackReader::SampleInto(pid_t tid, size_t max_frames, ThreadStack& stack) {
  if (impl_->layout_error) return *impl_->layout_error;
  Status sampled = impl_->SampleThread(tid, max_frames, stack);
  if (!sampled.ok()) {
    stack.frames.clear();
    return impl_->Classify(sampled.take_error());
  }
  ++impl_->stats.samples;
  return OkStatus();
}

Result<ProcessStacks> StackReader::SampleAll(size_t max_frames) {
  ProcessStacks out;
  TRY_STATUS(SampleAllInto(max_frames, impl_->budget.thread_states, out));
  return out;
}

Status StackReader::SampleAllInto(size_t max_frames, size_t max_threads, ProcessStacks& out) {
  if (impl_->layout_error) return *impl_->layout_error;
  Status sampled = impl_->SampleThreads(max_frames, max_threads, out);
  if (!sampled.ok()) {
    out.threads.clear();
    return impl_->Classify(sampled.take_error());
  }
  ++impl_->stats.samples;
  return OkStatus();
}

const ReaderStats& StackReader::stats() const { return impl_->stats; }
const ReaderBudget& StackReader::budget() const { return impl_->budget; }
size_t StackReader::code_cache_bytes() const { return impl_->cache_bytes; }
pid_t StackReader::pid() const { return impl_->process.pid; }
const PythonProcess& StackReader::process() const { return impl_->process; }

}  // namespace stallscope::pystack
