#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "phase/ring_format.h"

namespace stallscope::phase {

/// Environment variable `stallscope run` sets to the run directory; rings go to `<it>/phases`.
inline constexpr const char* kRunDirEnv = "STALLSCOPE_RUN_DIR";
/// Optional override of the ring size in records (rounded up to a power of two,
/// kMinCapacity..kMaxCapacity: 1 Ki..1 Mi).
inline constexpr const char* kRingRecordsEnv = "STALLSCOPE_RING_RECORDS";
/// Name id meaning "no name"; events carrying it (other than steps) are dropped.
inline constexpr uint16_t kNoName = 0;

/// Where and how a process writes its ring.
struct WriterOptions {
  std::string phases_dir;                ///< Directory of ring files; empty disables the writer.
  uint32_t capacity = kDefaultCapacity;  ///< Slots; rounded up to a power of two (>= 1024).
  int32_t rank = 0;                      ///< Recorded in the header.
  int32_t world_size = 1;                ///< Recorded in the header.
};

/// Looks up an environment variable; nullopt when unset. Injected so tests need no real env.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

/// The process environment (getenv).
[[nodiscard]] EnvLookup ProcessEnv();

/// Options from the environment: phases_dir = $STALLSCOPE_RUN_DIR/phases (empty when unset),
/// rank = RANK, else LOCAL_RANK, else 0; world_size = WORLD_SIZE, else 1; capacity =
/// STALLSCOPE_RING_RECORDS, else kDefaultCapacity. Malformed numbers read as the default.
[[nodiscard]] WriterOptions WriterOptionsFromEnv(const EnvLookup& env);

/// Writes this process's phase events into its ring file. The file `<phases_dir>/<pid>.ring`
/// (or `<pid>.<n>.ring` when a reused pid finds an old file) is created on the first event, so
/// a process that never records leaves no file.
///
/// Thread-safety: every method may be called from any thread concurrently, except
/// AfterForkInChild (see there). The record methods never block and make no system call (the
/// clock is read through the vDSO); once the ring exists they do not allocate (except that a
/// thread's first record calls gettid() and, in a dlopen'ed module, may allocate its TLS block).
/// They never fail: when the ring cannot be created the writer turns itself off and error()
/// says why.
class PhaseWriter {
 public:
  /// `clock` (not owned, must outlive the writer) stamps records; null = the system clock.
  explicit PhaseWriter(WriterOptions options, const Clock* clock = nullptr);
  ~PhaseWriter();
  PhaseWriter(const PhaseWriter&) = delete;
  PhaseWriter& operator=(const PhaseWriter&) = delete;

  /// The id of `name` (interned per process; ids survive fork). Names are cut to 47 bytes.
  /// Returns kNoName when the table is full (255 names); events using it count as dropped.
  uint16_t NameId(std::string_view name);

  /// Records that phase `id` began / ended on the calling thread.
  void Begin(uint16_t id, uint8_t flags = 0) { Write(RecordKind::kBegin, id, 0, flags); }
  void End(uint16_t id, uint8_t flags = 0) { Write(RecordKind::kEnd, id, 0, flags); }
  /// The same at an explicit CLOCK_MONOTONIC time, for a boundary observed earlier (e.g. when
  /// the last gradient was ready). A thread's records should still come in time order.
  void BeginAt(uint16_t id, int64_t ts_ns) { WriteStamped(RecordKind::kBegin, id, ts_ns); }
  void EndAt(uint16_t id, int64_t ts_ns) { WriteStamped(RecordKind::kEnd, id, ts_ns); }
  /// Records the end of a training step; returns the process's step count (1-based).
  int64_t Step();
  /// Records the GPU time `gpu_ns` of an instance of phase `id` that began on the host at
  /// `begin_ts_ns` (CUDA events resolved after the fact; python/stallscope/_cuda.py).
  void GpuSpan(uint16_t id, int64_t begin_ts_ns, int64_t gpu_ns);
  /// Records that counter `id` grew by `delta`.
  void Counter(uint16_t id, int64_t delta) { Write(RecordKind::kCounter, id, delta, 0); }

  /// Records mark `id` and appends a line with `data_json` (a JSON value; empty = {}) to the
  /// meta file. Errors: kIo when the meta line could not be written (the record still is).
  Status Mark(uint16_t id, std::string_view data_json);
  /// Appends an "info" line named `kind` with `data_json` to the meta file. No ring record.
  Status Info(std::string_view kind, std::string_view data_json);

  /// Creates the ring now if it does not exist yet. Returns the error that turned it off.
  Status Open();
  /// Call in the child right after fork(), while it has one thread: forgets the parent's ring
  /// (the next event creates `<child pid>.ring`, its header's forked_from the parent's pid),
  /// keeps the names and their ids.
  void AfterForkInChild();

  /// False once the writer is off (no phases dir, or the ring could not be created).
  bool enabled() const { return !failed_.load(std::memory_order_relaxed); }
  /// Path of the ring file; empty until created.
  std::string ring_path() const;
  /// Path of the meta file (`<stem>.meta.jsonl`); empty until the ring exists.
  std::string meta_path() const;
  /// Why the writer is off; nullopt while it is on.
  std::optional<Error> error() const;

 private:
  struct Ring;

  void Write(RecordKind kind, uint16_t id, int64_t arg, uint8_t flags);
  void WriteStamped(RecordKind kind, uint16_t id, int64_t ts_ns);
  Ring* RingFor(RecordKind kind, uint16_t id);  // null: off, or the event was dropped
  void WriteAt(Ring& ring, int64_t ts_ns, RecordKind kind, uint16_t id, int64_t arg, uint8_t flags);
  Ring* OpenSlow();
  void InitHeader(RingHeader& header, int32_t pid, uint32_t capacity) const;  // needs mu_
  Status AppendMetaLineLocked(Ring& ring, std::string_view kind, std::string_view name,
                              uint16_t mark_id, std::string_view data_json);

  const WriterOptions options_;
  SystemClock system_clock_;
  const Clock* clock_;
  std::atomic<Ring*> ring_{nullptr};
  std::atomic<bool> failed_{false};
  std::atomic<int64_t> steps_{0};

  mutable std::mutex mu_;  // Guards everything below: the slow paths (names, open, meta).
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint16_t> ids_;
  std::optional<Error> error_;
  int32_t forked_from_ = 0;  // the parent's pid after AfterForkInChild (RingHeader::forked_from)
  // The process this writer belongs to: set at construction and by AfterForkInChild. The parent's
  // pid is taken from here, not getppid(): a daemon's middle process may be gone already.
  int32_t own_pid_ = 0;
  int meta_fd_ = -1;
  int64_t meta_serial_ = 0;
};

}  // namespace stallscope::phase
