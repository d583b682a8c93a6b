#include "rundir/run_follower.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/phases.h"
#include "base/file_read.h"
#include "phase/event_log.h"
#include "phase/phase_reader.h"

namespace stallscope::rundir {
namespace {

// events.bin (phase/event_log.cc): a 16-byte header ("STLSEVT1", version, record size), then
// 32-byte LoggedEvents appended whole, one write(2) per flush; a torn tail is left for later.
constexpr char kEventsMagic[8] = {'S', 'T', 'L', 'S', 'E', 'V', 'T', '1'};
constexpr uint64_t kEventsHeaderBytes = 16;
constexpr uint64_t kRecordBytes = sizeof(phase::LoggedEvent);
constexpr uint64_t kForgetAfterPolls = 10;  // a process silent this long leaves the window

/// Reads [offset, offset + size) of `path` (fewer bytes when the file is shorter); empty when it
/// cannot be opened or is not a regular file (issue 27 B14: a FIFO is never opened for a read
/// that would wait for a writer; base/file_read.h). Read-only: no locks.
std::string ReadRange(const std::string& path, uint64_t offset, uint64_t max_bytes,
                      uint64_t* file_size) {
  std::string out;
  *file_size = 0;
  auto file = ReadOnlyFile::Open(path);
  if (!file.ok()) return out;
  struct stat st {};
  if (::fstat(file->fd(), &st) == 0) *file_size = static_cast<uint64_t>(st.st_size);
  if (*file_size > offset) {
    out.resize(std::min<uint64_t>(*file_size - offset, max_bytes));
    ssize_t n = ::pread(file->fd(), out.data(), out.size(), static_cast<off_t>(offset));
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  return out;
}

}  // namespace

Result<RunFollower> RunFollower::Open(const std::string& dir) {
  RunFollower follower(RunPaths{dir});
  auto meta = ReadRunMeta(follower.paths_);
  if (!meta.ok()) return meta.error();  // "DIR: not a stallscope run directory (no run.json)"
  follower.meta_ = std::move(*meta);
  return follower;
}

std::optional<std::pair<int64_t, int64_t>> RunFollower::ReadEvents() {
  const std::string path = paths_.dir + "/events.bin";
  uint64_t size = 0;
  if (events_offset_ == 0) {
    std::string header = ReadRange(path, 0, kEventsHeaderBytes, &size);
    if (header.size() < kEventsHeaderBytes || std::memcmp(header.data(), kEventsMagic, 8) != 0)
      return std::nullopt;  // not there yet (a job without hooks has none)
    events_offset_ = kEventsHeaderBytes;
  }
  ReadRange(path, 0, 0, &size);
  if (size < events_offset_) {  // replaced (run --force into the same folder): start over
    events_offset_ = kEventsHeaderBytes;
    procs_.clear();
  }
  uint64_t pending = (size - events_offset_) / kRecordBytes * kRecordBytes;
  if (pending > kMaxReadBytes) {
    // Too far behind (or the first look at a long run): skip to the newest records. Phases cut
    // in half count as unmatched in the aggregator, as after a ring overrun.
    events_offset_ += pending - kMaxReadBytes;
    pending = kMaxReadBytes;
  }
  std::string bytes = ReadRange(path, events_offset_, pending, &size);
  const size_t count = bytes.size() / kRecordBytes;
  int64_t min_ts = std::numeric_limits<int64_t>::max(), max_ts = 0;
  for (size_t i = 0; i < count; ++i) {
    phase::LoggedEvent e;
    std::memcpy(&e, bytes.data() + i * kRecordBytes, sizeof(e));
    const auto kind = static_cast<uint8_t>(e.kind);
    if (kind == 0 || kind > phase::kMaxRecordKind) continue;  // corrupt: ReadEventLog counts it
    started_ = true;
    Proc& p = procs_[e.pid];
    p.last_poll = polls_;
    p.agg.Add(phase::PhaseRecord{0, e.ts_ns, e.arg, e.tid, e.phase_id, e.kind, e.flags});
    analysis::StageTracker& stage = stages_[e.pid];
    if (e.kind == phase::RecordKind::kStep) {
      stage.Step(e.ts_ns);
    } else if (e.kind != phase::RecordKind::kGpuSpan) {
      stage.Begin(e.ts_ns);
    }
    min_ts = std::min(min_ts, e.ts_ns);
    max_ts = std::max(max_ts, e.ts_ns);
  }
  events_offset_ += count * kRecordBytes;
  if (count == 0) return std::nullopt;
  return std::pair{min_ts, max_ts};
}

void RunFollower::ReadNames() {
  uint64_t size = 0;
  // At most one line's cap per poll (issue 27 B16): the rest comes at the next polls.
  std::string text =
      ReadRange(paths_.dir + "/events.names.jsonl", names_offset_, kMaxJsonLineBytes, &size);
  if (size < names_offset_) names_offset_ = 0;  // replaced: read again next poll
  size_t start = 0;
  for (size_t end = text.find('\n'); end != std::string::npos;
       start = end + 1, end = text.find('\n', start)) {
    auto j = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(start),
                                   text.begin() + static_cast<std::ptrdiff_t>(end), nullptr, false);
    if (!j.is_object() || j.value("type", "") != "name") continue;  // ReadEventLog warns
    const auto pid = j.find("pid"), id = j.find("id"), name = j.find("name");
    if (pid == j.end() || id == j.end() || name == j.end() || !pid->is_number_integer() ||
        !id->is_number_unsigned() || !name->is_string() || id->get<uint64_t>() > 0xffff)
      continue;
    names_[{pid->get<int32_t>(), id->get<uint16_t>()}] = name->get<std::string>();
  }
  // A line without its newline yet is read again next time, unless it is over the cap: then
  // it is passed over (what follows of it fails to parse and is skipped as above).
  names_offset_ += start == 0 && text.size() >= kMaxJsonLineBytes ? text.size() : start;
}

void RunFollower::UpdateState() {
  std::error_code ec;
  if (!std::filesystem::is_directory(paths_.dir, ec)) {
    status_.state = RunState::kRemoved;
    status_.note = "run directory removed";
    return;
  }
  // run.json is replaced atomically (WriteFileAtomic); a failed read keeps what was known.
  if (auto meta = ReadRunMeta(paths_); meta.ok()) meta_ = std::move(*meta);
  if (meta_.status != RunStatus::kRunning || meta_.end_mono_ns) {
    status_.state = RunState::kFinished;
    status_.note = meta_.exit_code ? fmt::format("finished: {}, exit {}",
                                                 RunStatusName(meta_.status), *meta_.exit_code)
                                   : fmt::format("finished: {}", RunStatusName(meta_.status));
  } else if (meta_.pid > 0 && !phase::ProcessExists(meta_.pid)) {
    status_.state = RunState::kFinished;
    status_.note = "finished: the job is gone (its monitor did not finish run.json)";
  }
}

const RunFollowStatus& RunFollower::Poll(int64_t now_mono_ns) {
  if (status_.state != RunState::kRunning) return status_;  // keep the last numbers
  const bool first = polls_++ == 0;
  UpdateState();
  if (status_.state == RunState::kRemoved) return status_;
  const bool started = started_;
  const auto span = ReadEvents();
  ReadNames();
  Slot slot;
  if (first) {  // a run seen late (or finished): timed by its own records
    slot.duration_ns = span ? span->second - span->first : 0;
  } else if (!started && span) {  // the job's first records: from the first one on
    slot.duration_ns = std::max(now_mono_ns - span->first, span->second - span->first);
  } else {
    slot.duration_ns = now_mono_ns - last_poll_ns_;
  }
  last_poll_ns_ = now_mono_ns;
  for (auto it = procs_.begin(); it != procs_.end();) {
    phase::PhaseWindow w = it->second.agg.Take();
    if (w.steps > 0 || !w.phases.empty()) {
      PidSums& sums = slot.pids[it->first];
      sums.steps = w.steps;
      for (const auto& t : w.phases) sums.phase_ns[t.phase_id] += t.total_ns;
    }
    const bool silent = polls_ - it->second.last_poll > kForgetAfterPolls;
    it = silent ? procs_.erase(it) : std::next(it);
  }
  // Time before the job's first record (imports, start-up) is no part of its speed.
  if (slot.duration_ns > 0 && started_) slots_.push_back(std::move(slot));
  int64_t total_ns = 0;
  for (const Slot& s : slots_) total_ns += s.duration_ns;
  while (slots_.size() > 1 && total_ns - slots_.front().duration_ns >= kWindowNs) {
    total_ns -= slots_.front().duration_ns;
    slots_.pop_front();
  }
  auto window = Window();
  if (window) {
    status_.window = std::move(window);
  } else if (status_.state == RunState::kRunning && status_.window) {
    status_.window.reset();
    status_.note = "no step in the last 5 s";
  }
  if (status_.state == RunState::kRunning && status_.window) status_.note.clear();
  return status_;
}

std::optional<analysis::LiveWindow> RunFollower::Window() const {
  int64_t total_ns = 0;
  std::map<int32_t, PidSums> sums;
  for (const Slot& s : slots_) {
    total_ns += s.duration_ns;
    for (const auto& [pid, p] : s.pids) {
      sums[pid].steps += p.steps;
      for (const auto& [id, ns] : p.phase_ns) sums[pid].phase_ns[id] += ns;
    }
  }
  // The busiest process, as LiveStats picks it (the main process; DataLoader workers take no
  // steps).
  auto main = std::max_element(sums.begin(), sums.end(), [](const auto& a, const auto& b) {
    return a.second.steps < b.second.steps;
  });
  if (main == sums.end() || main->second.steps == 0 || total_ns <= 0) return std::nullopt;
  analysis::LiveWindow w;
  w.steps = main->second.steps;
  w.window_s = static_cast<double>(total_ns) / 1e9;
  w.steps_per_s = static_cast<double>(w.steps) / w.window_s;
  for (const auto& [id, ns] : main->second.phase_ns) {
    auto name = names_.find({main->first, id});
    analysis::LivePhase p{name == names_.end() ? fmt::format("phase {}", id) : name->second, ns,
                          static_cast<double>(ns) / static_cast<double>(total_ns)};
    w.covered_share += p.share;
    if (p.name == "data_loading") w.data_share = p.share;
    if (analysis::IsComputePhase(p.name)) w.compute_share += p.share;
    w.phases.push_back(std::move(p));
  }
  std::stable_sort(w.phases.begin(), w.phases.end(),
                   [](const auto& a, const auto& b) { return a.total_ns > b.total_ns; });
  if (auto st = stages_.find(main->first); st != stages_.end()) {
    w.stage = st->second.stage();
    w.warmup_steps = static_cast<int64_t>(st->second.warmup_steps());
  }
  return w;
}

}  // namespace stallscope::rundir
