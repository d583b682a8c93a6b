#include "phase/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/file_read.h"
#include "base/json_fields.h"
#include "base/units.h"

namespace stallscope::phase {
namespace {

// events.bin: a 16-byte header ("STLSEVT1", version, record size), then 32-byte LoggedEvents.
constexpr char kMagic[8] = {'S', 'T', 'L', 'S', 'E', 'V', 'T', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 16;

Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return MakeError(ErrorCode::kIo, "{}: write failed: {}", path, std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace

const std::string& EventLog::NameOf(const LoggedEvent& e) const {
  static const std::string kEmpty;  // immutable: not a mutable global
  auto it = names.find({e.pid, e.phase_id});
  return it == names.end() ? kEmpty : it->second;
}

Result<EventLogWriter> EventLogWriter::Open(const std::string& run_dir) {
  std::string events = run_dir + "/events.bin";
  std::string names = run_dir + "/events.names.jsonl";
  int efd = ::open(events.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (efd < 0)
    return MakeError(ErrorCode::kIo, "{}: cannot create: {}", events, std::strerror(errno));
  int nfd = ::open(names.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (nfd < 0) {
    ::close(efd);
    return MakeError(ErrorCode::kIo, "{}: cannot create: {}", names, std::strerror(errno));
  }
  char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  uint32_t version = kVersion, size = sizeof(LoggedEvent);
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 12, &size, 4);
  EventLogWriter writer(efd, nfd, run_dir);
  TRY_STATUS(WriteAll(efd, header, sizeof(header), events));
  return writer;
}

EventLogWriter::EventLogWriter(int events_fd, int names_fd, std::string dir)
    : events_fd_(events_fd), names_fd_(names_fd), dir_(std::move(dir)) {
  buffer_.reserve(4096);
}

EventLogWriter::EventLogWriter(EventLogWriter&& o) noexcept
    : events_fd_(o.events_fd_),
      names_fd_(o.names_fd_),
      dir_(std::move(o.dir_)),
      buffer_(std::move(o.buffer_)),
      names_buffer_(std::move(o.names_buffer_)),
      named_(std::move(o.named_)),
      processes_(std::move(o.processes_)),
      written_(o.written_) {
  o.events_fd_ = o.names_fd_ = -1;
}

EventLogWriter::~EventLogWriter() {
  (void)Flush();
  if (events_fd_ >= 0) ::close(events_fd_);
  if (names_fd_ >= 0) ::close(names_fd_);
}

void EventLogWriter::Add(PhaseReader& ring, const PhaseRecord& r) {
  const RingInfo& info = ring.info();
  if (!processes_.count(info.pid)) {
    processes_[info.pid] = true;
    names_buffer_ += fmt::format(
        "{{\"type\":\"process\",\"pid\":{},\"rank\":{},\"world_size\":{},\"start_monotonic_ns\":{}",
        info.pid, info.rank, info.world_size, info.start_monotonic_ns);
    // Only for a forked child: files of processes that were not forked stay as they were.
    if (info.forked_from > 0) names_buffer_ += fmt::format(",\"forked_from\":{}", info.forked_from);
    names_buffer_ += "}\n";
  }
  if (r.phase_id != 0 && !named_.count({info.pid, r.phase_id})) {
    named_[{info.pid, r.phase_id}] = true;
    names_buffer_ +=
        fmt::format("{{\"type\":\"name\",\"pid\":{},\"id\":{},\"name\":", info.pid, r.phase_id);
    AppendJsonString(names_buffer_, ring.Name(r.phase_id));
    names_buffer_ += "}\n";
  }
  LoggedEvent e;
  e.ts_ns = r.ts_ns;
  e.arg = r.arg;
  e.pid = info.pid;
  e.tid = r.tid;
  e.rank = info.rank;
  e.phase_id = r.phase_id;
  e.kind = r.kind;
  e.flags = r.flags;
  buffer_.push_back(e);
}

void EventLogWriter::Forget(int32_t pid) {
  processes_.erase(pid);
  named_.erase(named_.lower_bound({pid, 0}), named_.upper_bound({pid, UINT16_MAX}));
}

Status EventLogWriter::Flush() {
  // Names first: a record on disk never refers to a name that is not.
  if (!names_buffer_.empty() && names_fd_ >= 0) {
    auto st = WriteAll(names_fd_, names_buffer_.data(), names_buffer_.size(),
                       dir_ + "/events.names.jsonl");
    names_buffer_.clear();
    TRY_STATUS(st);
  }
  if (!buffer_.empty() && events_fd_ >= 0) {
    auto st = WriteAll(events_fd_, buffer_.data(), buffer_.size() * sizeof(LoggedEvent),
                       dir_ + "/events.bin");
    written_ += buffer_.size();
    buffer_.clear();
    TRY_STATUS(st);
  }
  return OkStatus();
}

namespace {

/// Reads events.bin into `log`. Fails, with `log` untouched, when the file cannot be opened,
/// is not a regular file, or its header is not this format's; the message names the file.
Status ReadBinary(const std::string& path, EventLog& log) {
  TRY(ReadOnlyFile file, ReadOnlyFile::Open(path));
  char header[kHeaderBytes] = {};
  TRY(size_t got, file.Read(header, kHeaderBytes));
  if (got < kHeaderBytes || std::memcmp(header, kMagic, 8) != 0) {
    return MakeError(ErrorCode::kParse, "{}: not a stallscope event log", path);
  }
  uint32_t size = 0;
  std::memcpy(&size, header + 12, 4);
  if (size != sizeof(LoggedEvent)) {
    return MakeError(ErrorCode::kUnsupported, "{}: record size {} (expected {})", path, size,
                     sizeof(LoggedEvent));
  }
  std::vector<LoggedEvent> chunk(4096);
  std::vector<LoggedEvent> events;
  uint64_t invalid = 0;
  size_t torn = 0;
  for (;;) {
    TRY(size_t n,
        file.Read(reinterpret_cast<char*>(chunk.data()), chunk.size() * sizeof(LoggedEvent)));
    const size_t whole = n / sizeof(LoggedEvent);
    for (size_t i = 0; i < whole; ++i) {
      const LoggedEvent& e = chunk[i];
      if (static_cast<uint8_t>(e.kind) == 0 || static_cast<uint8_t>(e.kind) > kMaxRecordKind) {
        ++invalid;
        continue;
      }
      events.push_back(e);
    }
    torn = n % sizeof(LoggedEvent);
    if (n < chunk.size() * sizeof(LoggedEvent)) break;  // Read fills the chunk but at the end
  }
  if (log.events.empty()) {
    log.events = std::move(events);
  } else {
    log.events.insert(log.events.end(), events.begin(), events.end());
  }
  log.invalid_records += invalid;
  if (torn > 0)
    log.warnings.push_back(fmt::format("{}: ends mid-record (monitor stopped); kept {} records",
                                       path, log.events.size()));
  return OkStatus();
}

/// j[key] into `out` when present (absent keeps the default); false when present but null, of
/// the wrong type or out of range: the line is then malformed.
template <typename T>
bool ReadField(const nlohmann::json& j, const char* key, T& out) {
  if (!j.contains(key)) return true;
  std::optional<T> v = JsonOpt<T>(j, key);
  if (v) out = std::move(*v);
  return v.has_value();
}

void WarnMalformed(const std::string& path, int64_t malformed, EventLog& log) {
  if (malformed > 0)
    log.warnings.push_back(fmt::format("{}: {} malformed line(s) skipped", path, malformed));
}

/// Reads events.names.jsonl into `log`; malformed and overlong lines are warned about here.
/// Returns what kept the file from naming anything ("missing", "empty", "cannot open: ...",
/// "no valid line in 3 lines"), "" otherwise: WarnNames says it when that mattered.
std::string ReadNames(const std::string& path, EventLog& log) {
  int64_t malformed = 0;
  int64_t names = 0;
  auto counts = ForEachLine(path, [&](const TextLine& line) {
    if (line.text.empty()) return;
    auto j = nlohmann::json::parse(line.text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      malformed += line.complete;  // a torn last line after a crash is no damage
      return;
    }
    std::string type, name;
    EventProcess p;
    uint16_t id = 0;
    bool ok = ReadField(j, "type", type) && ReadField(j, "pid", p.pid);
    if (ok && type == "name" && ReadField(j, "id", id) && ReadField(j, "name", name)) {
      log.names[{p.pid, id}] = name;
      ++names;
    } else if (ok && type == "process" && ReadField(j, "rank", p.rank) &&
               ReadField(j, "world_size", p.world_size) &&
               ReadField(j, "start_monotonic_ns", p.start_monotonic_ns) &&
               ReadField(j, "forked_from", p.forked_from)) {
      log.processes.push_back(p);
    } else if (!ok || type == "name" || type == "process") {
      ++malformed;
    }
  });
  if (!counts.ok()) {
    if (counts.error().code == ErrorCode::kNotFound) return "missing";
    // "{path}: cannot open: permission denied" → "cannot open: permission denied"
    const std::string& message = counts.error().message;
    return message.starts_with(path + ": ") ? message.substr(path.size() + 2) : message;
  }
  WarnMalformed(path, malformed, log);
  if (counts->overlong > 0) log.warnings.push_back(OverlongLinesWarning(path, counts->overlong));
  if (names > 0) return "";
  if (counts->lines == 0 && counts->overlong == 0) return "empty";
  const int64_t lines = counts->lines + counts->overlong;
  return malformed + counts->overlong > 0
             ? fmt::format("no valid line in {} line{}", lines, lines == 1 ? "" : "s")
             : "";  // process lines only: a job that named no phase
}

/// After names were read from events.names.jsonl (`from_file`) and the rings (log.names): a
/// warning naming the file when a phase id of a record has no name anywhere (it shows as
/// unnamed_<id>), or when the file's `problem` made the rings name phases in its place
/// (issue 27 B09: the names were lost silently and the verdict changed).
void WarnNames(const std::string& path, const std::string& problem,
               const std::map<std::pair<int32_t, uint16_t>, std::string>& from_file,
               EventLog& log) {
  std::set<std::pair<int32_t, uint16_t>> unnamed;
  bool from_rings = false;
  for (const LoggedEvent& e : log.events) {
    if (e.phase_id == 0) continue;
    if (!log.names.contains({e.pid, e.phase_id})) {
      unnamed.insert({e.pid, e.phase_id});
    } else if (!from_file.contains({e.pid, e.phase_id})) {
      from_rings = true;
    }
  }
  const std::string what = problem.empty() ? std::string() : problem + "; ";
  if (!unnamed.empty()) {
    std::set<int32_t> pids;
    for (const auto& key : unnamed) pids.insert(key.first);
    log.warnings.push_back(fmt::format(
        "{}: {}{} phase id{} of {} process{} named neither there nor in a ring in phases/: shown "
        "as unnamed_<id>",
        path, what, unnamed.size(), unnamed.size() == 1 ? "" : "s", pids.size(),
        pids.size() == 1 ? "" : "es"));
  } else if (!problem.empty() && from_rings) {
    log.warnings.push_back(
        fmt::format("{}: {}; the phase names were read from the rings in phases/", path, problem));
  }
}

/// False, with a warning naming it, for an entry of phases/ that is not a regular file (or a
/// link to one): opening a FIFO would wait for a writer forever (issue 27 B14).
bool RegularEntry(const std::filesystem::directory_entry& entry, EventLog& log) {
  std::error_code ec;
  if (entry.is_regular_file(ec)) return true;
  // Opened without blocking only to say what it is: "…: not a regular file (a FIFO); not read".
  auto file = ReadOnlyFile::Open(entry.path().string());
  if (!file.ok()) log.warnings.push_back(file.error().message);
  return file.ok();
}

/// Adds what `ring`'s writer dropped itself (its header's count) to the log (issue 27 B11).
void NoteDropped(const PhaseReader& ring, EventLog& log) {
  const uint64_t dropped = ring.writer_dropped();
  if (dropped == 0) return;
  log.writer_dropped += dropped;
  log.writer_dropped_pids.push_back(ring.info().pid);
}

// The monitor never wrote events.bin (killed before its first flush): read the rings themselves.
void ReadRings(const std::string& dir, EventLog& log) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || entry.path().extension() != ".ring") continue;
    if (!RegularEntry(entry, log)) continue;
    auto reader = PhaseReader::Open(entry.path().string());
    if (!reader.ok()) {
      log.warnings.push_back(reader.error().message);
      continue;
    }
    const RingInfo& info = reader->info();
    log.processes.push_back(
        {info.pid, info.rank, info.world_size, info.start_monotonic_ns, info.forked_from});
    DrainStats stats;
    for (const auto& r : reader->ReadAll(&stats)) {
      log.events.push_back(
          {r.ts_ns, r.arg, info.pid, r.tid, info.rank, r.phase_id, r.kind, r.flags});
    }
    const auto& names = reader->Names();
    for (size_t id = 1; id < names.size(); ++id)
      log.names[{info.pid, static_cast<uint16_t>(id)}] = names[id];
    log.lost_records += stats.lost();  // writer drops are no ring overrun: NoteDropped
    NoteDropped(*reader, log);
  }
}

// What the monitor had not saved when it stopped (SIGKILL, OOM): each ring's records past those
// events.bin holds for its process. The monitor drains every record of a ring in write order
// from index 0 (every 100 ms; a ring holds 64 Ki records), so the number of a process's records
// in events.bin is the write index its tail starts at. After a clean end there is no tail.
void ReadRingTails(const std::string& dir, EventLog& log) {
  std::unordered_map<int32_t, uint64_t> saved;
  for (const LoggedEvent& e : log.events) ++saved[e.pid];
  std::unordered_set<int32_t> known;
  for (const EventProcess& p : log.processes) known.insert(p.pid);
  uint64_t added = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || entry.path().extension() != ".ring") continue;
    if (!RegularEntry(entry, log)) continue;
    auto reader = PhaseReader::Open(entry.path().string());
    if (!reader.ok()) continue;  // events.bin already holds what it had
    const RingInfo& info = reader->info();
    // Known from its ring even when the monitor died before writing its "process" line.
    if (known.insert(info.pid).second)
      log.processes.push_back(
          {info.pid, info.rank, info.world_size, info.start_monotonic_ns, info.forked_from});
    // Every ring names its phases, tail or not: events.names.jsonl may be missing or damaged,
    // and the rings are the source of truth (issue 27 B09). What the file named stays.
    const auto& ring_names = reader->Names();
    for (size_t id = 1; id < ring_names.size(); ++id)
      log.names.try_emplace({info.pid, static_cast<uint16_t>(id)}, ring_names[id]);
    NoteDropped(*reader, log);
    const uint64_t from = saved[info.pid];
    if (reader->write_index() <= from) continue;
    std::vector<PhaseRecord> records = reader->ReadAll();
    // Overwritten before anyone read them: the ring lapped after the monitor stopped.
    if (!records.empty() && records.front().index > from)
      log.lost_records += records.front().index - from;
    for (const PhaseRecord& r : records) {
      if (r.index < from) continue;
      log.events.push_back(
          {r.ts_ns, r.arg, info.pid, r.tid, info.rank, r.phase_id, r.kind, r.flags});
      ++added;
    }
  }
  if (added > 0) {
    log.warnings.push_back(fmt::format(
        "{}: {} records the monitor had not saved (it stopped before the job) read from the rings",
        dir, added));
  }
}

void ReadMeta(const std::string& dir, EventLog& log) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() < 11 || name.substr(name.size() - 11) != ".meta.jsonl") continue;
    const std::string path = entry.path().string();
    int64_t malformed = 0;
    auto counts = ForEachLine(path, [&](const TextLine& line) {
      auto j = nlohmann::json::parse(line.text, nullptr, false);
      if (j.is_discarded() || !j.is_object()) return;  // a torn last line after a crash
      MetaItem m;
      if (!ReadField(j, "ts_ns", m.ts_ns) || !ReadField(j, "pid", m.pid) ||
          !ReadField(j, "rank", m.rank) || !ReadField(j, "kind", m.kind) ||
          !ReadField(j, "name", m.name)) {
        ++malformed;
        return;
      }
      m.data_json = j.contains("data") ? j["data"].dump() : "{}";
      log.meta.push_back(std::move(m));
    });
    if (!counts.ok()) {
      log.warnings.push_back(counts.error().message);  // unreadable, or a FIFO: not opened
      continue;
    }
    WarnMalformed(path, malformed, log);
    if (counts->overlong > 0) log.warnings.push_back(OverlongLinesWarning(path, counts->overlong));
  }
  std::stable_sort(log.meta.begin(), log.meta.end(),
                   [](const MetaItem& a, const MetaItem& b) { return a.ts_ns < b.ts_ns; });
}

/// The recorder's own troubles, as warnings naming the cause and the remedy: events dropped for
/// a full name table (B11), and processes that could not create their ring (B20), whose
/// kRingErrorInfo lines ReadMeta read.
void WarnRecorderTrouble(EventLog& log) {
  std::sort(log.writer_dropped_pids.begin(), log.writer_dropped_pids.end());
  log.writer_dropped_pids.erase(
      std::unique(log.writer_dropped_pids.begin(), log.writer_dropped_pids.end()),
      log.writer_dropped_pids.end());
  if (log.writer_dropped > 0) {
    log.warnings.push_back(fmt::format(
        "{} phase events were dropped, not recorded: process{} {} named more than {} distinct "
        "phases, marks and counters, and a ring's name table holds no more; events of the later "
        "names are lost. Use a fixed set of names (an index or epoch belongs in the data of "
        "stallscope.mark(name, i=...), not in the name)",
        log.writer_dropped, log.writer_dropped_pids.size() == 1 ? "" : "es",
        fmt::join(log.writer_dropped_pids, ", "), kNameCapacity - 1));
  }
  for (const MetaItem& m : log.meta) {
    if (m.kind != "info" || m.name != kRingErrorInfo) continue;
    auto data = nlohmann::json::parse(m.data_json, nullptr, false);
    std::string why = "unknown cause", err;
    if (data.is_object()) {
      if (data.contains("error") && data["error"].is_string())
        why = data["error"].get<std::string>();
      if (data.contains("errno") && data["errno"].is_string())
        err = data["errno"].get<std::string>();
    }
    const bool full = err == "ENOSPC" || err == "EDQUOT";
    log.ring_errors.push_back(fmt::format("process {} (rank {}): {}", m.pid, m.rank, why));
    log.warnings.push_back(fmt::format(
        "process {} (rank {}) recorded no phases: its phase ring could not be created{} ({}); "
        "its steps and phases are missing from this report. {}, and run again",
        m.pid, m.rank, full ? ", the disk is full" : "", why,
        full ? "Free space on the run directory's disk, or pass --out on another one"
             : "Check that the job can write the run directory's phases/ folder"));
  }
}

}  // namespace

Result<EventLog> ReadEventLog(const std::string& run_dir) {
  EventLog log;
  const std::string bin = run_dir + "/events.bin";
  const std::string names = run_dir + "/events.names.jsonl";
  std::error_code ec;
  // A header alone is a monitor that died before its first drain: its rings are a tail too.
  // Anything else there (a FIFO, a directory) is for ReadBinary to refuse, never to open.
  const std::filesystem::file_status status = std::filesystem::status(bin, ec);
  const bool have_bin =
      std::filesystem::exists(status) && (!std::filesystem::is_regular_file(status) ||
                                          std::filesystem::file_size(bin, ec) >= kHeaderBytes);
  Status binary = have_bin ? ReadBinary(bin, log) : OkStatus();
  if (have_bin && binary.ok()) {
    // The monitor writes names before the records that use them: with no record saved (killed
    // before its first drain) an empty or missing names file is no damage.
    const bool saved_any = !log.events.empty();
    std::string problem = ReadNames(names, log);
    if (!saved_any) problem.clear();
    const auto from_file = log.names;
    ReadRingTails(run_dir + "/phases", log);
    WarnNames(names, problem, from_file, log);
  } else {
    if (!binary.ok()) {
      // Issue 27 B10: a damaged events.bin hid the rings (phases lost, a confident verdict).
      // The rings hold each process's last records (64 Ki by default): read them instead.
      const std::string& message = binary.error().message;
      std::string_view damage = message;
      if (damage.starts_with(bin + ": ")) damage.remove_prefix(bin.size() + 2);
      if (damage.ends_with("; not read")) damage.remove_suffix(10);
      log.events_bin_damage = std::string(damage);
      log.warnings.push_back(fmt::format(
          "{}: {}; the phases were read from the rings in phases/ instead", bin, damage));
    }
    ReadRings(run_dir + "/phases", log);
  }
  ReadMeta(run_dir + "/phases", log);
  WarnRecorderTrouble(log);
  return log;
}

}  // namespace stallscope::phase
