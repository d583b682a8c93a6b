#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "phase/phase_reader.h"

namespace stallscope::phase {

/// One phase record of any process of the job, as `run` persisted it (events.bin). 32 bytes.
struct LoggedEvent {
  int64_t ts_ns = 0;  ///< CLOCK_MONOTONIC
  int64_t arg = 0;    ///< as PhaseRecord::arg
  int32_t pid = 0;
  uint32_t tid = 0;
  int32_t rank = 0;
  uint16_t phase_id = 0;  ///< per-process id; names via EventLog::names
  RecordKind kind = RecordKind::kInvalid;
  uint8_t flags = 0;
};
static_assert(sizeof(LoggedEvent) == 32);

/// A process that wrote phase events.
struct EventProcess {
  int32_t pid = 0;
  int32_t rank = 0;
  int32_t world_size = 1;
  int64_t start_monotonic_ns = 0;
  int32_t forked_from = 0;  ///< the parent's pid when forked without exec (RingInfo), else 0
};

/// One line of a process's meta file (marks with their data, "info" items such as loader settings).
struct MetaItem {
  int64_t ts_ns = 0;
  int32_t pid = 0;
  int32_t rank = 0;
  std::string kind;       ///< "mark" | "info"
  std::string name;       ///< mark name, or info kind (e.g. "dataloader")
  std::string data_json;  ///< the raw JSON object
};

/// Everything the job's processes reported from inside: what the analysis reads.
struct EventLog {
  std::vector<LoggedEvent> events;  ///< per process in write order; processes concatenated
  std::map<std::pair<int32_t, uint16_t>, std::string> names;  ///< (pid, phase_id) → name
  std::vector<EventProcess> processes;
  std::vector<MetaItem> meta;    ///< ordered by ts_ns
  uint64_t lost_records = 0;     ///< overwritten/incomplete while draining, plus writer drops
  uint64_t invalid_records = 0;  ///< events.bin records of no known kind (corrupt): skipped
  /// Events the writers dropped themselves, as their rings' headers count them: a process that
  /// named more than 255 phases has no name id for the rest (issue 27 B11). A warning says so.
  uint64_t writer_dropped = 0;
  std::vector<int32_t> writer_dropped_pids;  ///< the processes that dropped them, ascending
  /// Processes whose ring could not be created (disk full, unwritable dir: their kRingErrorInfo
  /// meta line), which recorded no phase: "process 42 (rank 0): phase ring ...: No space left on
  /// device", one each (issue 27 B20). A warning says so; the verdict carries a caveat.
  std::vector<std::string> ring_errors;
  /// Why events.bin could not be read at all (not a stallscope event log, a record size of
  /// another version, unreadable, not a regular file), when it could not: the phases then come
  /// from the rings alone, and the verdict carries a caveat (issue 27 B10). Empty otherwise.
  std::string events_bin_damage;
  std::vector<std::string> warnings;

  /// Name of an event's phase ("" if unknown).
  const std::string& NameOf(const LoggedEvent& e) const;
};

/// Appends drained ring records to `<run_dir>/events.bin` and their names to
/// `<run_dir>/events.names.jsonl`. Records are buffered and written with one write(2) per
/// Flush(), so a monitor killed mid-run leaves whole records (a torn tail is dropped on read).
///
/// Memory: the buffer holds the records of one drain (flushed every poll: at most the rings'
/// capacity, 2 MiB each, and its capacity is kept); the names and processes already written
/// are remembered per live process only (Forget drops a process whose ring was retired).
class EventLogWriter {
 public:
  [[nodiscard]] static Result<EventLogWriter> Open(const std::string& run_dir);
  EventLogWriter(EventLogWriter&& other) noexcept;
  EventLogWriter& operator=(EventLogWriter&&) = delete;
  ~EventLogWriter();

  /// Buffers `record` of `ring`; notes names and processes it has not seen.
  void Add(PhaseReader& ring, const PhaseRecord& record);
  /// Forgets what was written about process `pid` (its "process" and "name" lines): call when
  /// its ring is retired (RingDirWatcher), after its last Add. A later ring of a reused pid
  /// then gets its own lines.
  void Forget(int32_t pid);
  /// Writes buffered records and new names. Errors name the file.
  [[nodiscard]] Status Flush();
  uint64_t records_written() const { return written_; }

 private:
  EventLogWriter(int events_fd, int names_fd, std::string dir);
  int events_fd_ = -1;
  int names_fd_ = -1;
  std::string dir_;
  std::vector<LoggedEvent> buffer_;
  std::string names_buffer_;
  std::map<std::pair<int32_t, uint16_t>, bool> named_;
  std::map<int32_t, bool> processes_;
  uint64_t written_ = 0;
};

/// Reads a run directory's phase data: events.bin + events.names.jsonl when present, plus what
/// the rings in phases/ hold beyond them (the monitor was killed before the job ended: a
/// warning says how many), else (the monitor died before writing them) the rings directly. Meta
/// files are read from phases/*.meta.jsonl. A missing phases dir gives an empty log (a job without
/// hooks).
///
/// Damage is data (issue 27): an events.bin that cannot be read is a warning and
/// `events_bin_damage`, and the rings are read instead (B10). Names come from
/// events.names.jsonl, and every ring's name table fills what it lacks (the rings are the source
/// of truth: B09); a phase id named nowhere is a warning naming events.names.jsonl and what was
/// wrong with it. Files that are not regular (a FIFO) are never opened: a warning names them
/// (B14). JSON Lines over kMaxJsonLineBytes are skipped and counted (B16). Never fails.
[[nodiscard]] Result<EventLog> ReadEventLog(const std::string& run_dir);

}  // namespace stallscope::phase
