#pragma once

#include <string>

#include "diagnose/passes.h"
#include "diagnose/sweep.h"

namespace stallscope::report {

/// `stallscope passes`: seed 000's decision table (steps/s of each pass with its 95% interval,
/// the speed-up against pass A), what each pass removed, the conclusion and what to do next.
[[nodiscard]] std::string RenderPassesText(const diagnose::PassesReport& r);
/// passes.json (README "passes --json").
[[nodiscard]] std::string RenderPassesJson(const diagnose::PassesReport& r);

/// `stallscope sweep`: the combinations fastest first, a bar chart, the best and the recommended
/// setting, and the verdict's prediction against the measurement.
[[nodiscard]] std::string RenderSweepText(const diagnose::SweepReport& r);
/// sweep.json (README "sweep --json").
[[nodiscard]] std::string RenderSweepJson(const diagnose::SweepReport& r);

}  // namespace stallscope::report
