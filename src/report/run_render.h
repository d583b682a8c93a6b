#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/json_writer.h"
#include "diagnose/run_report.h"

namespace stallscope::report {

/// report.txt of a run: job line, step rate, per-rank phase table (seed 003 statistics), host
/// syncs, DataLoader settings, per-process table, GPU/host summary, and what to do next.
[[nodiscard]] std::string RenderRunReportText(const diagnose::RunReport& report);

/// report.json (README "report.json"): stable key order, fixed float formats.
[[nodiscard]] std::string RenderRunReportJson(const diagnose::RunReport& report);

/// report.json's fields, in its order, into an object the caller opened (and closes): the job
/// report of `diagnose DIR1 DIR2 ...` adds its "nodes" after them.
void WriteRunReportFields(JsonWriter& w, const diagnose::RunReport& report);

/// The verdict block shared by every report (run, diagnose, trace): VERDICT, FIX (cheapest first),
/// EVIDENCE, ALSO. `steps_per_s`: the current rate, printed next to a predicted one.
[[nodiscard]] std::string RenderVerdictText(const diagnose::Verdict& verdict,
                                            std::optional<double> steps_per_s);

/// The "verdict" object of report.json, also written by `stallscope trace --json`.
void WriteVerdictJson(JsonWriter& w, const diagnose::Verdict& verdict);

/// report.json's "dataloaders" and "processes" arrays (the HTML page's data reuses them).
void WriteLoadersJson(JsonWriter& w, const std::vector<rundir::LoaderInfo>& loaders);
void WriteProcessesJson(JsonWriter& w, const std::vector<diagnose::ProcessRow>& processes);

/// The compact per-rank phase table alone (interim reports while the job runs).
[[nodiscard]] std::string RenderPhaseTable(const analysis::PhaseAnalysis& phases);

}  // namespace stallscope::report
