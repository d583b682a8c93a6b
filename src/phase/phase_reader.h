#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "phase/ring_format.h"

namespace stallscope::phase {

/// One record as read from a ring.
struct PhaseRecord {
  uint64_t index = 0;  ///< Write index in its ring (0-based, in claim order).
  int64_t ts_ns = 0;   ///< CLOCK_MONOTONIC ns.
  int64_t arg = 0;     ///< Kind-specific, see RecordKind.
  uint32_t tid = 0;    ///< Kernel thread id of the writer.
  uint16_t phase_id = 0;
  RecordKind kind = RecordKind::kInvalid;
  uint8_t flags = 0;
};

/// The header of a ring, as read when it was opened.
struct RingInfo {
  std::string path;
  int32_t pid = 0;
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t forked_from = 0;      ///< RingHeader::forked_from: the parent's pid, 0 if not forked.
  uint32_t capacity = 0;        ///< Slots the writer uses.
  uint32_t readable_slots = 0;  ///< Slots present in the file (< capacity when truncated).
  int64_t start_monotonic_ns = 0;
  int64_t start_realtime_ns = 0;
};

/// What one read returned and what it could not.
struct DrainStats {
  uint64_t read = 0;         ///< Records delivered.
  uint64_t overwritten = 0;  ///< Records the writer overwrote before we read them (we lagged).
  uint64_t incomplete = 0;   ///< Slots never committed (writer died mid-record), torn while
                             ///< read, or cut off by a truncated file.
  uint64_t lost() const { return overwritten + incomplete; }
  DrainStats& operator+=(const DrainStats& other);
};

/// How Drain treats a claimed but not yet committed slot.
enum class DrainMode {
  kLive,   ///< Stop there and retry next poll; after >= 3 polls and >= 1 s count it incomplete.
  kFinal,  ///< The writer is gone: count it incomplete at once and read on.
};

/// Reads one ring file, live (Drain, from its own cursor) or after the fact (ReadAll). Never
/// writes to the file and never slows the writer: when it lags more than a ring's worth,
/// records are overwritten and counted here as lost.
///
/// Reads with pread(2) on a descriptor it keeps open, never through a mapping: a file that
/// shrinks while it is read (truncated by the job, issue 27 B05) gives short reads, never
/// SIGBUS. What the file still holds is read; slots cut off count `incomplete`, and shrunk()
/// says so. The seqlock read of a slot (ring_format.h) becomes three copies of a run of slots:
/// the commit words, then the payloads, then the commit words again; a slot is whole iff both
/// commit words are its index + 1 (each copy relies on the kernel copying an aligned 8-byte word
/// whole, as every Linux copy_to_user does). Holds one file descriptor and ~40 KiB per reader.
///
/// Thread-compatible: one thread per reader.
class PhaseReader {
 public:
  /// Opens and validates `path`. Errors (naming the file): kNotFound/kPermission/kIo when it
  /// cannot be read; kParse for a bad magic, impossible sizes or a file cut before the first
  /// record; kUnsupported for a newer version. A file cut inside the records opens, with
  /// info().readable_slots telling how many slots survive. `clock` (not owned; null = the
  /// system clock) times how long a live Drain waits on an uncommitted slot.
  [[nodiscard]] static Result<PhaseReader> Open(const std::string& path,
                                                const Clock* clock = nullptr);

  PhaseReader(PhaseReader&& other) noexcept;
  PhaseReader& operator=(PhaseReader&& other) noexcept;
  PhaseReader(const PhaseReader&) = delete;
  PhaseReader& operator=(const PhaseReader&) = delete;
  ~PhaseReader();

  const RingInfo& info() const { return info_; }

  /// Calls `fn(const PhaseRecord&)` for each record written since the last Drain, in write
  /// order, and advances the cursor. Does not allocate.
  template <typename Fn>
  DrainStats Drain(Fn&& fn, DrainMode mode = DrainMode::kLive) {
    return DrainCore(mode, &fn, [](void* ctx, const PhaseRecord& record) {
      (*static_cast<std::remove_reference_t<Fn>*>(ctx))(record);
    });
  }

  /// Every record still in the ring, in write order, independent of the cursor (post-mortem).
  /// `stats->overwritten` counts records written before the oldest one kept.
  std::vector<PhaseRecord> ReadAll(DrainStats* stats = nullptr) const;

  /// The name of `id`; "" when the id is unknown (not yet published, or garbage).
  const std::string& Name(uint16_t id);
  /// Names published so far, indexed by id (entry 0 is "").
  const std::vector<std::string>& Names();

  /// Slots the writer has claimed so far (the last value read once the header is cut off).
  uint64_t write_index() const;
  /// Events the writer dropped itself (name table full).
  uint64_t writer_dropped() const;
  /// Whether the file was found shorter than it was when opened (something truncated it).
  bool shrunk() const { return shrunk_; }
  /// The file's size when a read last found it shrunk (0 until shrunk()).
  uint64_t shrunk_to_bytes() const { return shrunk_to_bytes_; }
  /// The file's size when it was opened.
  uint64_t opened_bytes() const { return opened_bytes_; }
  /// Once shrunk(): an error naming the file, its sizes and the slots lost, the first time it is
  /// called after the shrink was seen; empty otherwise (so a caller warns once).
  std::optional<Error> TakeShrunkError();
  /// Index of the next record Drain will return.
  uint64_t cursor() const { return cursor_; }
  /// Everything Drain has returned and lost so far.
  const DrainStats& totals() const { return totals_; }

 private:
  PhaseReader() = default;
  using Visit = void (*)(void* ctx, const PhaseRecord& record);
  DrainStats DrainCore(DrainMode mode, void* ctx, Visit visit);
  enum class SlotState : uint8_t { kOk, kOverwritten, kNotCommitted, kTorn, kMissing };
  /// Where one copy of a run of slots goes (the reader's own, or ReadAll's).
  struct Scratch {
    std::vector<unsigned char> bytes;  ///< kChunkSlots slots as copied
    std::vector<uint64_t> seq;         ///< their commit words, first copy
    std::vector<PhaseRecord> records;  ///< decoded payloads, second copy
    std::vector<SlotState> states;
    Scratch();
  };
  /// Slots copied per run of pread(2) calls.
  static constexpr uint32_t kChunkSlots = 512;
  /// Reads slots [index, index + count) (count <= kChunkSlots, no wrap) into `scratch`.
  void ReadSlots(uint64_t index, uint32_t count, Scratch& scratch) const;
  /// Reads the header's atomics; false when the file no longer holds them.
  bool ReadCounters(uint64_t* write_index, uint64_t* dropped, uint32_t* name_count) const;
  /// Notes that a read found the file shorter than it was when opened.
  void NoteShrunk() const;

  int fd_ = -1;
  uint64_t opened_bytes_ = 0;
  mutable bool shrunk_ = false;
  mutable uint64_t shrunk_to_bytes_ = 0;
  mutable uint64_t last_write_index_ = 0;
  mutable uint64_t last_dropped_ = 0;
  bool shrunk_reported_ = false;
  Scratch scratch_;
  RingInfo info_;
  const Clock* clock_ = nullptr;
  uint64_t cursor_ = 0;
  uint64_t stuck_polls_ = 0;    // polls in a row that stopped at cursor_ without progress
  int64_t stuck_since_ns_ = 0;  // when the first of them ran
  DrainStats totals_;
  std::vector<std::string> names_;
};

/// Whether process `pid` (> 0) still exists (kill(pid, 0) does not fail with ESRCH).
[[nodiscard]] bool ProcessExists(int32_t pid);

/// Watches a phases directory: each Poll opens ring files that appeared since the last one
/// and drains every ring. Files that fail to open are reported once and then ignored.
///
/// Memory is bounded by the rings of live processes, not by the run's length: a ring whose
/// writer process is gone (checked before each drain, so it wrote its last record already) is
/// drained to its end once more (DrainMode::kFinal), handed to the retire callback and then
/// unmapped and freed. What remains of it is its file name in the set of names already opened
/// (one short string per ring file of the run, which has 2 MiB on disk for each). Writers must
/// be processes of the watcher's pid namespace (`run`'s job is its child): a ring whose pid
/// is unknown here counts as gone once it has been read.
class RingDirWatcher {
 public:
  /// Says whether a ring's writer process still exists; tests inject one.
  using Liveness = std::function<bool(int32_t pid)>;

  explicit RingDirWatcher(std::string phases_dir, Liveness alive = ProcessExists)
      : dir_(std::move(phases_dir)), alive_(std::move(alive)) {}

  struct PollResult {
    DrainStats stats;          ///< Summed over all rings.
    size_t new_rings = 0;      ///< Rings opened by this poll.
    size_t retired_rings = 0;  ///< Rings of gone processes read to the end and closed.
    /// Files that could not be opened, and rings found shrunk while read (each once).
    std::vector<Error> new_errors;
  };

  /// Scans for new `*.ring` files, then calls `fn(PhaseReader& ring, const PhaseRecord&)` for
  /// every new record of every ring, and `retire(PhaseReader& ring)` for each ring whose process
  /// is gone, after its last record and just before the ring is closed (references to it die
  /// there). A missing directory is not an error (nothing yet).
  template <typename Fn, typename Retire>
  PollResult Poll(Fn&& fn, DrainMode mode, Retire&& retire) {
    PollResult result = Scan();
    for (size_t i = 0; i < rings_.size();) {
      PhaseReader& reader = *rings_[i];
      const bool gone = reader.info().pid > 0 && !alive_(reader.info().pid);
      result.stats += reader.Drain([&](const PhaseRecord& record) { fn(reader, record); },
                                   gone ? DrainMode::kFinal : mode);
      if (auto shrunk = reader.TakeShrunkError()) result.new_errors.push_back(*shrunk);
      if (!gone) {
        ++i;
        continue;
      }
      retire(reader);
      rings_.erase(rings_.begin() + static_cast<std::ptrdiff_t>(i));
      ++result.retired_rings;
    }
    return result;
  }
  /// Poll without a retire callback.
  template <typename Fn>
  PollResult Poll(Fn&& fn, DrainMode mode = DrainMode::kLive) {
    return Poll(std::forward<Fn>(fn), mode, [](PhaseReader&) {});
  }

  /// The rings open now (of live processes, or not yet seen gone), in the order found.
  const std::vector<std::unique_ptr<PhaseReader>>& rings() const { return rings_; }

 private:
  PollResult Scan();

  std::string dir_;
  Liveness alive_;
  std::vector<std::unique_ptr<PhaseReader>> rings_;
  std::set<std::string> seen_;  // file names already opened or rejected
};

}  // namespace stallscope::phase
