#pragma once
// `RunJob`: the job started and supervised under the monitor, its run directory written
// (run.json at the start and at the end, the recording, events.bin, the phases), and nothing
// rendered. `run` renders the report after it; `passes`, `sweep` and `passes --ranks` digest each
// run after it. One analysis per run follows, never two.

#include <string>

#include "base/result.h"
#include "cli/commands.h"
#include "diagnose/run_analysis.h"
#include "rundir/run_dir.h"

namespace stallscope::cli {

/// What RunJob did.
struct JobOutcome {
  /// False when the run was refused or the job could not start: `exit_code` is then stallscope's
  /// (2: usage, 1: a file or port problem, 127: the command could not start), already said on
  /// stderr, and the run directory holds nothing of this run.
  bool started = false;
  int exit_code = 0;  ///< the job's (128+N when killed by signal N) once started
  rundir::RunPaths paths;
  rundir::RunStatus status = rundir::RunStatus::kRunning;
  /// SIGINT/SIGTERM/SIGHUP the monitor forwarded to the job (the third is a SIGKILL).
  int interrupts = 0;
  bool dir_removed = false;      ///< the run directory was gone when the job ended: nothing to read
  Status recorded = OkStatus();  ///< the recording's end: an error when it stopped early
};

/// Starts `options.command` as `stallscope run` does and supervises it to its end (status lines
/// unless quiet, --tui, --serve, --duration, --steps, signals forwarded). Writes no report.
[[nodiscard]] JobOutcome RunJob(const RunOptions& options);

/// The one analysis of a finished run directory, and its report.txt, report.json and
/// report.html written into it (a write failure is said on stderr, prefixed "stallscope WHO:").
/// Fails as diagnose::LoadAndAnalyzeRun.
[[nodiscard]] Result<diagnose::LoadedRun> AnalyzeAndWriteReports(const rundir::RunPaths& paths,
                                                                 std::string_view who);

}  // namespace stallscope::cli
