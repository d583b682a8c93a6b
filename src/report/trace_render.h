#pragma once

#include <string>

#include "diagnose/trace_report.h"

namespace stallscope::report {

/// How much to show in the text report.
struct TraceTextOptions {
  size_t top_kernels = 8;  ///< rows of the top-kernels table per rank
  size_t max_streams = 8;  ///< rows of the per-stream idle table per rank
  bool per_step = false;   ///< one breakdown row per step (default: run totals per rank)
};

/// The text report of `stallscope trace`: the verdict first (the block `run` prints), then per
/// rank the step breakdown, GPU time, idle attribution, streams, launches, kernels, memory
/// copies, collectives, host syncs and step-series findings, then the cross-rank comparison.
[[nodiscard]] std::string RenderTraceText(const diagnose::TraceReport& report,
                                          const TraceTextOptions& options = {});

/// `stallscope trace --json` (README "trace --json"): stable keys, integer ns, fixed decimals.
/// Its "verdict" object is the one report.json of `run` holds.
[[nodiscard]] std::string RenderTraceJson(const diagnose::TraceReport& report);

}  // namespace stallscope::report
