#pragma once

#include <string>

#include "experiment/passes.h"
#include "experiment/scaling.h"
#include "experiment/sweep.h"

namespace stallscope::report {

/// `stallscope passes`: seed 000's decision table (steps/s of each pass with its 95% interval,
/// the speed-up against pass A), what each pass removed, the conclusion and what to do next.
[[nodiscard]] std::string RenderPassesText(const experiment::PassesReport& r);
/// passes.json (README "passes --json").
[[nodiscard]] std::string RenderPassesJson(const experiment::PassesReport& r);

/// `stallscope passes --ranks 1,N`: one row per process count, each multi-rank run's ranks, the
/// conclusion with its evidence and fixes.
[[nodiscard]] std::string RenderScalingText(const experiment::ScalingReport& r);
/// passes.json of `passes --ranks` (README "passes --ranks --json").
[[nodiscard]] std::string RenderScalingJson(const experiment::ScalingReport& r);
/// "1-process", "8-processes": the run's folder in the experiment's folder.
[[nodiscard]] std::string ScalingRunDirName(const experiment::ScalingRun& r);

/// `stallscope sweep`: the combinations fastest first, a bar chart, the best and the recommended
/// setting, and the verdict's prediction against the measurement.
[[nodiscard]] std::string RenderSweepText(const experiment::SweepReport& r);
/// sweep.json (README "sweep --json").
[[nodiscard]] std::string RenderSweepJson(const experiment::SweepReport& r);

}  // namespace stallscope::report
