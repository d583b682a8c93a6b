// `stallscope run -- CMD`: the job under the monitor (RunJob, cli/run_job.h), then the one
// analysis of its run directory and the report; `stallscope diagnose DIR`: the report again.

#include <fmt/format.h>

#include "base/units.h"
#include "cli/commands.h"
#include "cli/run_job.h"
#include "diagnose/run_analysis.h"
#include "diagnose/run_report.h"
#include "diagnose/thresholds.h"
#include "report/html_render.h"
#include "report/run_render.h"
#include "rundir/run_dir.h"

namespace stallscope::cli {

Result<diagnose::LoadedRun> AnalyzeAndWriteReports(const rundir::RunPaths& paths,
                                                   std::string_view who) {
  TRY(diagnose::LoadedRun run, diagnose::LoadAndAnalyzeRun(paths.dir));
  const diagnose::RunReport& report = run.analysis.report;
  auto st1 = rundir::WriteFileAtomic(paths.report_txt(), report::RenderRunReportText(report));
  auto st2 = rundir::WriteFileAtomic(paths.report_json(), report::RenderRunReportJson(report));
  auto st3 = rundir::WriteFileAtomic(paths.report_html(), report::RenderRunHtml(run.data, report));
  for (const Status* st : {&st1, &st2, &st3}) {
    if (!st->ok())
      fmt::print(stderr, "stallscope {}: {}\n", who, EscapeControl(st->error().message));
  }
  return run;
}

int RunRun(const RunOptions& o) {
  const JobOutcome job = RunJob(o);
  if (!job.started) return job.exit_code;
  if (job.dir_removed) {
    // The job (or someone) removed the run directory: nothing is left to report from.
    fmt::print(stderr,
               "stallscope run: {} was removed while the job ran: no report (the job's exit "
               "code, {}, is returned)\n",
               EscapeControl(job.paths.dir), job.exit_code);
    return job.exit_code;
  }
  auto run = AnalyzeAndWriteReports(job.paths, "run");
  if (!run.ok()) {
    fmt::print(stderr, "stallscope run: {}\n", EscapeControl(run.error().message));
  } else if (!o.quiet) {
    fmt::print(stderr, "\n{}", report::RenderRunReportText(run->analysis.report));
  }
  if (!job.recorded.ok()) {
    fmt::print(stderr,
               "[stallscope] warning: the recording stopped early ({}); the report covers the "
               "samples before that\n",
               EscapeControl(job.recorded.error().message));
  }
  return job.exit_code;
}

int RunDiagnose(const DiagnoseOptions& o) {
  if (o.thresholds) {
    fmt::print("| name | value | unit | source |\n|---|---|---|---|\n");
    for (const auto& t : diagnose::ThresholdTable())
      fmt::print("| `{}` | {} | {} | {} |\n", t.name, t.value, t.unit, t.source);
    return 0;
  }
  if (o.dirs.empty()) {
    fmt::print(stderr, "stallscope diagnose: give a run directory (stallscope diagnose RUN_DIR)\n");
    return 2;
  }
  if (o.dirs.size() > 1) return RunDiagnoseNodes(o);
  auto run = diagnose::LoadAndAnalyzeRun(o.dirs[0]);
  if (!run.ok()) {
    fmt::print(stderr, "stallscope diagnose: {}\n", EscapeControl(run.error().message));
    return 1;
  }
  const diagnose::RunReport& report = run->analysis.report;
  fmt::print("{}",
             o.json ? report::RenderRunReportJson(report) : report::RenderRunReportText(report));
  return 0;
}

}  // namespace stallscope::cli
