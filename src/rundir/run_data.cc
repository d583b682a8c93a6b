#include "rundir/run_data.h"

#include <filesystem>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include "base/file_read.h"
#include "base/units.h"

namespace stallscope::rundir {
namespace {

/// Drops phase records that cannot be this run's: from a process no ring or names line knows,
/// or timed more than a second outside the run (before its start; after its end, when run.json
/// has one). What corrupt bytes in events.bin turn into; a warning says how many.
void DropImplausibleEvents(RunData& d) {
  constexpr int64_t kSlackNs = kNsPerSec;
  std::unordered_set<int32_t> pids;
  for (const auto& p : d.events.processes) pids.insert(p.pid);
  const int64_t first = d.meta.start_mono_ns - kSlackNs;
  const int64_t last =
      d.meta.end_mono_ns ? *d.meta.end_mono_ns + kSlackNs : std::numeric_limits<int64_t>::max();
  const size_t before = d.events.events.size();
  std::erase_if(d.events.events, [&](const phase::LoggedEvent& e) {
    return !pids.contains(e.pid) || e.ts_ns < first || e.ts_ns > last;
  });
  const uint64_t invalid = d.events.invalid_records;  // of no known kind, skipped on read
  d.implausible_events = static_cast<int64_t>(before - d.events.events.size() + invalid);
  if (d.implausible_events > 0) {
    d.warnings.push_back(fmt::format(
        "{}/events.bin: {} of {} phase records cannot be this run's (no known kind, an unknown "
        "process or a time outside the run): skipped; the file may be corrupt, and no verdict is "
        "confident",
        d.paths.dir, d.implausible_events, before + invalid));
  }
}

}  // namespace

Result<RunData> LoadRun(const std::string& dir) {
  RunData d;
  d.paths.dir = dir;
  while (d.paths.dir.size() > 1 && d.paths.dir.back() == '/') d.paths.dir.pop_back();
  std::error_code ec;
  if (!std::filesystem::is_directory(d.paths.dir, ec)) {
    return MakeError(ErrorCode::kNotFound, "{}: no such run directory", dir);
  }
  TRY(d.meta, ReadRunMeta(d.paths));
  // ReadRecording reads pipes too (`summary <(zcat ...)`); a FIFO in a run directory would hang
  // it (issue 27 B14): only a regular recording.jsonl is opened.
  auto regular = ReadOnlyFile::Open(d.paths.recording());
  auto rec = regular.ok() || regular.error().code == ErrorCode::kNotFound
                 ? sample::ReadRecording(d.paths.recording())
                 : Result<sample::Recording>(regular.error());
  if (rec.ok()) {
    d.recording = std::move(rec.value());
    for (const auto& w : d.recording.warnings) d.warnings.push_back(w);
  } else {
    d.warnings.push_back(rec.error().message);
  }
  auto events = phase::ReadEventLog(d.paths.dir);
  if (events.ok()) {
    d.events = std::move(events.value());
    for (const auto& w : d.events.warnings) d.warnings.push_back(w);
    DropImplausibleEvents(d);
    d.info = DecodeInfoRecords(d.events);
    if (d.info.malformed > 0) {
      d.warnings.push_back(fmt::format(
          "{}/events.bin: {} info record(s) of the job's Python side could not be decoded: skipped",
          d.paths.dir, d.info.malformed));
    }
  } else {
    d.warnings.push_back(events.error().message);
  }
  d.python = ReadPythonNotes(d.paths.dir);
  if (!d.python.error.empty()) d.warnings.push_back(d.python.error);
  if (d.python.malformed_lines > 0) {
    d.warnings.push_back(fmt::format("{}/{}: {} malformed line(s) skipped", d.paths.dir,
                                     kPythonNotesFile, d.python.malformed_lines));
  }
  if (d.python.overlong_lines > 0) {
    d.warnings.push_back(
        OverlongLinesWarning(d.paths.dir + "/" + kPythonNotesFile, d.python.overlong_lines));
  }
  d.stacks = stacks::ReadStackLog(d.paths.dir);
  for (const auto& w : d.stacks.warnings) d.warnings.push_back(w);
  return d;
}

}  // namespace stallscope::rundir
