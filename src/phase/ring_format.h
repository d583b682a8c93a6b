#pragma once

// The on-disk layout of a phase ring file (`$STALLSCOPE_RUN_DIR/phases/<pid>.ring`), shared by
// PhaseWriter (the instrumented process) and PhaseReader (the monitor). Version 1, little-endian,
// 64-bit only. See src/phase/README.md for the format as a table.
//
// A file is: [RingHeader (4 KiB)] [name table: 256 x 48 bytes (12 KiB)] [capacity x RingSlot].
// Everything is written through a MAP_SHARED mapping; the file is a plain file, so whatever a
// crashed writer committed stays readable.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace stallscope::phase {

/// What a record says. Values are part of the file format: never renumber.
enum class RecordKind : uint8_t {
  kInvalid = 0,  ///< Never written; a zeroed slot.
  kBegin = 1,    ///< A phase began on thread `tid`.
  kEnd = 2,      ///< A phase ended on thread `tid`.
  kStep = 3,     ///< A training step ended; `arg` is the step count of the process (1-based).
  kMark = 4,     ///< A point event; `arg` is the serial of its line in `<stem>.meta.jsonl`.
  kCounter = 5,  ///< A counter (e.g. host syncs) grew by `arg`.
  /// GPU-side time of one instance of phase `phase_id`, resolved later from CUDA events: `ts_ns`
  /// is the host time the instance began (its kBegin's ts), `arg` the GPU time in ns.
  kGpuSpan = 6,
};

/// Largest valid RecordKind value.
inline constexpr uint8_t kMaxRecordKind = 6;

inline constexpr char kRingMagic[8] = {'S', 'T', 'L', 'S', 'R', 'I', 'N', 'G'};
inline constexpr uint32_t kRingVersion = 1;
/// Bytes of the fixed header block (one page).
inline constexpr uint32_t kHeaderBlockBytes = 4096;
/// Entries in the name table. Id 0 is reserved ("" = no name), so 255 names are usable.
inline constexpr uint32_t kNameCapacity = 256;
/// Bytes per name entry: a NUL-terminated UTF-8 string of at most 47 bytes.
inline constexpr uint32_t kNameBytes = 48;
/// Offset of slot 0 from the start of the file.
inline constexpr uint32_t kSlotsOffset = kHeaderBlockBytes + kNameCapacity * kNameBytes;
/// Bytes per record.
inline constexpr uint32_t kSlotBytes = 32;
/// Default ring capacity in records (a power of two): 64 Ki records = 2 MiB.
inline constexpr uint32_t kDefaultCapacity = 64 * 1024;
/// Bounds of a requested capacity (STALLSCOPE_RING_RECORDS): 1 Ki records, and 1 Mi records
/// (32 MiB of file per process, ~17 minutes of a 1,000-records/s job that nobody drains), so
/// that a typo cannot map gigabytes in every process of the job.
inline constexpr uint32_t kMinCapacity = 1024;
inline constexpr uint32_t kMaxCapacity = 1024 * 1024;

/// The fixed header at offset 0. Immutable after the file is published, except the atomics.
struct RingHeader {
  char magic[8];           ///< kRingMagic.
  uint32_t version;        ///< kRingVersion.
  uint32_t slots_offset;   ///< Byte offset of slot 0 (kSlotsOffset).
  uint32_t slot_bytes;     ///< kSlotBytes.
  uint32_t capacity;       ///< Slots in the ring; a power of two.
  uint32_t name_capacity;  ///< kNameCapacity.
  uint32_t name_bytes;     ///< kNameBytes.
  int32_t pid;             ///< Writer's process id.
  int32_t rank;            ///< RANK, else LOCAL_RANK, else 0.
  int32_t world_size;      ///< WORLD_SIZE, else 1.
  /// The pid of the process this one was forked from without exec (PhaseWriter::AfterForkInChild),
  /// 0 when it was not: a forked child (a DataLoader worker, a daemon) is never a rank's main
  /// process while one that was not forked marks as many steps. Added within version 1: the
  /// field was reserved and zero, so older files read as "not forked".
  int32_t forked_from;
  int64_t start_monotonic_ns;         ///< CLOCK_MONOTONIC when the ring was created.
  int64_t start_realtime_ns;          ///< CLOCK_REALTIME at the same moment.
  char reserved1[64];                 ///< Zero; puts the atomics on their own cache line.
  std::atomic<uint64_t> write_index;  ///< Slots claimed so far (never wraps in practice).
  std::atomic<uint64_t> dropped;      ///< Events the writer could not record (name table full).
  std::atomic<uint32_t> name_count;   ///< Name entries published (>= 1: entry 0 is "").
  uint32_t reserved2;                 ///< Zero.
};

/// One record. A slot holds the record of write index `i` when `seq == i + 1`.
///
/// Commit protocol (a seqlock, Boehm 2012 "Can seqlocks get along with programming language
/// memory models?"): the writer claims `i` with fetch_add on write_index, stores seq = 0
/// (relaxed), a release fence, the payload (relaxed), then seq = i + 1 (release). The reader
/// loads seq (acquire), copies the payload (relaxed), an acquire fence, reloads seq: the copy is
/// whole iff both loads equal i + 1. A writer never waits for a reader.
struct RingSlot {
  std::atomic<int64_t> ts_ns;  ///< CLOCK_MONOTONIC ns.
  std::atomic<int64_t> arg;    ///< Kind-specific (see RecordKind).
  std::atomic<uint64_t> seq;   ///< Commit word: write index + 1; 0 while being written.
  std::atomic<uint64_t> meta;  ///< PackMeta(tid, phase_id, kind, flags).
};

/// Packs the small fields as they lie in memory (little-endian): tid at byte 24, phase_id at
/// 28, kind at 30, flags at 31.
constexpr uint64_t PackMeta(uint32_t tid, uint16_t phase_id, RecordKind kind, uint8_t flags) {
  return static_cast<uint64_t>(tid) | static_cast<uint64_t>(phase_id) << 32 |
         static_cast<uint64_t>(kind) << 48 | static_cast<uint64_t>(flags) << 56;
}

static_assert(sizeof(RingHeader) <= kHeaderBlockBytes);
static_assert(offsetof(RingHeader, write_index) == 128, "write_index owns a cache line");
static_assert(sizeof(RingSlot) == kSlotBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(kSlotsOffset % 4096 == 0, "slots start on a page");

/// Name of the `info` line a writer appends to `<pid>.meta.jsonl` when its ring could not be
/// created (disk full, unwritable dir): data {"error": "<why>", "errno": "ENOSPC"|"EDQUOT"|""}.
/// The process records nothing else; the report says so (issue 27 B20).
inline constexpr const char* kRingErrorInfo = "ring_error";

/// Total file size of a ring with `capacity` slots.
constexpr uint64_t RingFileBytes(uint32_t capacity) {
  return kSlotsOffset + static_cast<uint64_t>(capacity) * kSlotBytes;
}

}  // namespace stallscope::phase
