#pragma once

#include <string>
#include <string_view>

#include "doctor/check.h"
#include "doctor/code_check.h"

namespace stallscope::report {

/// `stallscope doctor`: a verdict line, one aligned row per check (per-GPU checks with the same
/// outcome merged: "GPU 0-3, 5: on"), each problem's fix under it, and a last line saying what to
/// do next. Control characters in any text are escaped.
[[nodiscard]] std::string RenderDoctorText(const doctor::Report& report);

/// `stallscope doctor --json` (README "doctor --json, schema version 1"): the checks and the
/// facts behind them. Of the environment, only the variables doctor judges appear.
[[nodiscard]] std::string RenderDoctorJson(const doctor::Report& report);

/// `doctor --code`: the verdict first, then each finding (file:line, id, the line, why, fix), the
/// warnings, and what to do next. Control characters from the code are escaped.
[[nodiscard]] std::string RenderCodeText(const doctor::CodeReport& report);

/// `doctor --code --json`: schema_version 1 (src/doctor/README.md), stable key order.
[[nodiscard]] std::string RenderCodeJson(const doctor::CodeReport& report,
                                         std::string_view tool_version);

}  // namespace stallscope::report
