// `stallscope diagnose DIR1 DIR2 ...`: one job's nodes, each a run directory, merged into one job
// report (docs/commands/diagnose.md).

#include <fmt/format.h>

#include "base/units.h"
#include "cli/commands.h"
#include "diagnose/job_summary.h"
#include "diagnose/run_analysis.h"
#include "report/job_render.h"
#include "rundir/job_merge.h"

namespace stallscope::cli {

int RunDiagnoseNodes(const DiagnoseOptions& o) {
  std::vector<rundir::RunData> runs;
  for (const auto& dir : o.dirs) {
    auto data = rundir::LoadRun(dir);
    if (!data.ok()) {
      fmt::print(stderr, "stallscope diagnose: {}\n", EscapeControl(data.error().message));
      return 1;
    }
    runs.push_back(std::move(data.value()));
  }
  auto job = rundir::MergeRuns(std::move(runs), o.force);
  if (!job.ok()) {
    fmt::print(stderr, "stallscope diagnose: {}\n", EscapeControl(job.error().message));
    return 1;
  }
  diagnose::RunReport report = diagnose::AnalyzeRun(job->data).report;
  diagnose::SummarizeJob(job->nodes, report.phases, report.verdict);
  fmt::print("{}", o.json ? report::RenderJobReportJson(report, job->nodes)
                          : report::RenderJobReportText(report, job->nodes));
  return 0;
}

}  // namespace stallscope::cli
