#pragma once
// The one analysis of a run (issue 26): every command that reports a run directory — `run`,
// `diagnose` (one directory, or many nodes merged), `report`, `passes`, `sweep`, `compare` —
// calls AnalyzeRun, so the steady window, the facts and the verdict are the same everywhere.

#include <string>

#include "base/result.h"
#include "diagnose/facts.h"
#include "diagnose/run_report.h"

namespace stallscope::diagnose {

/// A run analysed: its report (steady-state statistics, the life of the run, the verdict) and
/// the facts the verdict's rules read.
struct RunAnalysis {
  RunReport report;
  Facts facts;
};

/// BuildRunReport, BuildRunFacts and Diagnose, in that order, once. Pure: no I/O.
[[nodiscard]] RunAnalysis AnalyzeRun(const rundir::RunData& data);

/// A run directory loaded (rundir::LoadRun) and analysed.
struct LoadedRun {
  rundir::RunData data;
  RunAnalysis analysis;
};

/// rundir::LoadRun + AnalyzeRun; fails as rundir::LoadRun does.
[[nodiscard]] Result<LoadedRun> LoadAndAnalyzeRun(const std::string& dir);

}  // namespace stallscope::diagnose
