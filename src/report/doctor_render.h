#pragma once

#include <string>

#include "doctor/check.h"

namespace stallscope::report {

/// `stallscope doctor`: a verdict line, one aligned row per check (per-GPU checks with the same
/// outcome merged: "GPU 0-3, 5: on"), each problem's fix under it, and a last line saying what to
/// do next. Control characters in any text are escaped.
[[nodiscard]] std::string RenderDoctorText(const doctor::Report& report);

/// `stallscope doctor --json` (README "doctor --json, schema version 1"): the checks and the
/// facts behind them. Of the environment, only the variables doctor judges appear.
[[nodiscard]] std::string RenderDoctorJson(const doctor::Report& report);

}  // namespace stallscope::report
