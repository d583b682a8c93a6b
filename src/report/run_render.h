#pragma once

#include <string>

#include "diagnose/run_report.h"

namespace stallscope::report {

/// report.txt of a run: job line, step rate, per-rank phase table (seed 003 statistics), host
/// syncs, DataLoader settings, per-process table, GPU/host summary, and what to do next.
[[nodiscard]] std::string RenderRunReportText(const diagnose::RunReport& report);

/// report.json (README "report.json"): stable key order, fixed float formats.
[[nodiscard]] std::string RenderRunReportJson(const diagnose::RunReport& report);

/// The compact per-rank phase table alone (interim reports while the job runs).
[[nodiscard]] std::string RenderPhaseTable(const analysis::PhaseAnalysis& phases);

}  // namespace stallscope::report
