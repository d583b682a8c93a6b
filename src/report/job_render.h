#pragma once

#include <string>

#include "diagnose/run_report.h"
#include "rundir/job_merge.h"

namespace stallscope::report {

/// The text report of `diagnose DIR1 DIR2 ...`: the merged job's verdict, the per-node table,
/// the per-rank table, the balance across nodes (seed 002 CV classes), the per-rank phase table
/// and what to do next. `report` is the merged run's (its verdict already diagnosed).
[[nodiscard]] std::string RenderJobReportText(const diagnose::RunReport& report,
                                              const rundir::JobNodes& job);

/// report.json of the merged run (every field as `diagnose DIR --json` writes it) plus "nodes"
/// (docs/formats.md): stable key order, fixed float formats.
[[nodiscard]] std::string RenderJobReportJson(const diagnose::RunReport& report,
                                              const rundir::JobNodes& job);

}  // namespace stallscope::report
