#pragma once

#include <string>

#include "analysis/summary.h"
#include "sample/sample.h"

namespace stallscope::report {

/// Renderers are pure functions of data: no I/O, no clocks, no environment.

/// `top --once`: a header line, a GPU table (aligned, units in the cells), host lines.
[[nodiscard]] std::string RenderTopText(const sample::RecordingHeader& header,
                                        const sample::Sample& sample);

/// `top --once --json`: one object, numbers as numbers, units in key names (README "top --json").
[[nodiscard]] std::string RenderTopJson(const sample::RecordingHeader& header,
                                        const sample::Sample& sample);

/// Seed 004 status line: `GPU: 85% | VRAM:12.3/24.0GB(51.2%) | CPU: 45.2% | RAM:18.4/64.0GB(28.8%)`
/// (GB = GiB, as nvidia-smi and the seed print them). Several GPUs: `GPU0: ...| GPU1: ...`.
[[nodiscard]] std::string RenderStatusLine(const sample::Sample& sample);

/// Seed 004 low-utilization warning for a window mean `util_pct`, with what to check next.
[[nodiscard]] std::string RenderLowUtilWarning(double util_pct, size_t window);

/// `summary`: seed 002 "Per-GPU Breakdown" plus utilization, host and balance lines.
[[nodiscard]] std::string RenderSummaryText(const analysis::RecordingSummary& summary);

/// `summary --json` (README "summary --json").
[[nodiscard]] std::string RenderSummaryJson(const analysis::RecordingSummary& summary);

}  // namespace stallscope::report
