#pragma once
// A run directory loaded: run.json, the recording, the event log and python.jsonl, with every
// problem found on the way as a warning.

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "phase/event_log.h"
#include "rundir/info_records.h"
#include "rundir/python_notes.h"
#include "rundir/run_dir.h"
#include "sample/recording.h"
#include "stacks/stack_log.h"

namespace stallscope::rundir {

/// Everything a run directory holds, loaded.
struct RunData {
  RunPaths paths;
  RunMeta meta;
  sample::Recording recording;  ///< empty (no samples) when recording.jsonl is missing
  phase::EventLog events;
  InfoRecords info;         ///< the info records of events.bin, decoded (DecodeInfoRecords)
  PythonNotes python;       ///< the job's Python interpreters (python.jsonl); empty for old runs
  stacks::StackLog stacks;  ///< the Python stacks sampled (stacks.jsonl); empty without
  std::vector<std::string> warnings;
  /// Phase records that cannot be this run's (an unknown process, a time outside the run):
  /// skipped; a sign of a corrupt events.bin, and no verdict is confident then.
  int64_t implausible_events = 0;
};

/// Loads a run directory. Fails (naming the directory and the problem) only when it is not a run
/// directory; a missing or torn recording or event log is a warning: the report shows what exists.
[[nodiscard]] Result<RunData> LoadRun(const std::string& dir);

}  // namespace stallscope::rundir
