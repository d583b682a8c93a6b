#include "phase/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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
        "{{\"type\":\"process\",\"pid\":{},\"rank\":{},\"world_size\":{},\"start_monotonic_ns\":{}}"
        "}\n",
        info.pid, info.rank, info.world_size, info.start_monotonic_ns);
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

Status ReadBinary(const std::string& path, EventLog& log) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeError(ErrorCode::kNotFound, "{}: cannot open", path);
  char header[kHeaderBytes] = {};
  in.read(header, kHeaderBytes);
  if (in.gcount() < static_cast<std::streamsize>(kHeaderBytes) ||
      std::memcmp(header, kMagic, 8) != 0) {
    return MakeError(ErrorCode::kParse, "{}: not a stallscope event log", path);
  }
  uint32_t size = 0;
  std::memcpy(&size, header + 12, 4);
  if (size != sizeof(LoggedEvent)) {
    return MakeError(ErrorCode::kUnsupported, "{}: record size {} (expected {})", path, size,
                     sizeof(LoggedEvent));
  }
  LoggedEvent e;
  while (in.read(reinterpret_cast<char*>(&e), sizeof(e))) {
    if (static_cast<uint8_t>(e.kind) == 0 || static_cast<uint8_t>(e.kind) > kMaxRecordKind) {
      ++log.invalid_records;
      continue;
    }
    log.events.push_back(e);
  }
  if (in.gcount() > 0)
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

void ReadNames(const std::string& path, EventLog& log) {
  std::ifstream in(path);
  std::string line;
  int64_t malformed = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;  // a torn last line after a crash
    std::string type, name;
    EventProcess p;
    uint16_t id = 0;
    bool ok = ReadField(j, "type", type) && ReadField(j, "pid", p.pid);
    if (ok && type == "name" && ReadField(j, "id", id) && ReadField(j, "name", name)) {
      log.names[{p.pid, id}] = name;
    } else if (ok && type == "process" && ReadField(j, "rank", p.rank) &&
               ReadField(j, "world_size", p.world_size) &&
               ReadField(j, "start_monotonic_ns", p.start_monotonic_ns)) {
      log.processes.push_back(p);
    } else if (!ok || type == "name" || type == "process") {
      ++malformed;
    }
  }
  WarnMalformed(path, malformed, log);
}

// The monitor never wrote events.bin (killed before its first flush): read the rings themselves.
void ReadRings(const std::string& dir, EventLog& log) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || entry.path().extension() != ".ring") continue;
    auto reader = PhaseReader::Open(entry.path().string());
    if (!reader.ok()) {
      log.warnings.push_back(reader.error().message);
      continue;
    }
    const RingInfo& info = reader->info();
    log.processes.push_back({info.pid, info.rank, info.world_size, info.start_monotonic_ns});
    DrainStats stats;
    for (const auto& r : reader->ReadAll(&stats)) {
      log.events.push_back(
          {r.ts_ns, r.arg, info.pid, r.tid, info.rank, r.phase_id, r.kind, r.flags});
    }
    const auto& names = reader->Names();
    for (size_t id = 1; id < names.size(); ++id)
      log.names[{info.pid, static_cast<uint16_t>(id)}] = names[id];
    log.lost_records += stats.lost() + reader->writer_dropped();
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
    auto reader = PhaseReader::Open(entry.path().string());
    if (!reader.ok()) continue;  // events.bin already holds what it had
    const RingInfo& info = reader->info();
    // Known from its ring even when the monitor died before writing its "process" line.
    if (known.insert(info.pid).second)
      log.processes.push_back({info.pid, info.rank, info.world_size, info.start_monotonic_ns});
    const uint64_t from = saved[info.pid];
    if (reader->write_index() <= from) continue;
    std::vector<PhaseRecord> records = reader->ReadAll();
    // Overwritten before anyone read them: the ring lapped after the monitor stopped.
    if (!records.empty() && records.front().index > from)
      log.lost_records += records.front().index - from;
    bool any = false;
    for (const PhaseRecord& r : records) {
      if (r.index < from) continue;
      log.events.push_back(
          {r.ts_ns, r.arg, info.pid, r.tid, info.rank, r.phase_id, r.kind, r.flags});
      any = true;
      ++added;
    }
    if (!any) continue;
    const auto& names = reader->Names();
    for (size_t id = 1; id < names.size(); ++id)
      log.names.try_emplace({info.pid, static_cast<uint16_t>(id)}, names[id]);
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
    std::ifstream in(entry.path());
    std::string line;
    int64_t malformed = 0;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;  // a torn last line after a crash
      MetaItem m;
      if (!ReadField(j, "ts_ns", m.ts_ns) || !ReadField(j, "pid", m.pid) ||
          !ReadField(j, "rank", m.rank) || !ReadField(j, "kind", m.kind) ||
          !ReadField(j, "name", m.name)) {
        ++malformed;
        continue;
      }
      m.data_json = j.contains("data") ? j["data"].dump() : "{}";
      log.meta.push_back(std::move(m));
    }
    WarnMalformed(entry.path().string(), malformed, log);
  }
  std::stable_sort(log.meta.begin(), log.meta.end(),
                   [](const MetaItem& a, const MetaItem& b) { return a.ts_ns < b.ts_ns; });
}

}  // namespace

Result<EventLog> ReadEventLog(const std::string& run_dir) {
  EventLog log;
  std::string bin = run_dir + "/events.bin";
  std::error_code ec;
  // A header alone is a monitor that died before its first drain: its rings are a tail too.
  bool have_bin =
      std::filesystem::exists(bin, ec) && std::filesystem::file_size(bin, ec) >= kHeaderBytes;
  if (have_bin) {
    TRY_STATUS(ReadBinary(bin, log));
    ReadNames(run_dir + "/events.names.jsonl", log);
    ReadRingTails(run_dir + "/phases", log);
  } else {
    ReadRings(run_dir + "/phases", log);
  }
  ReadMeta(run_dir + "/phases", log);
  return log;
}

}  // namespace stallscope::phase
