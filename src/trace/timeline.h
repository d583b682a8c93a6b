#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "trace/trace_model.h"

namespace stallscope::trace {

/// How numbers are computed. The defaults are stallscope's clean definitions; `hta_compat`
/// switches to Holistic Trace Analysis' conventions (README "Trace: clean vs HTA-compatible").
struct AnalysisOptions {
  /// HTA conventions: ts ceiled and ts+dur floored to whole µs, the last ProfilerStep dropped
  /// (when there are ≥ 2), cuda_sync rows counted as GPU busy time.
  bool hta_compat = false;
  /// --steps A:B: only steps with ProfilerStep numbers in [first, last] (inclusive).
  std::optional<int64_t> first_step;
  std::optional<int64_t> last_step;
};

/// One ProfilerStep#N range of the host thread that marked it.
struct Step {
  int64_t number = 0;  ///< N of ProfilerStep#N
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int32_t pid = 0;
  int64_t tid = 0;
};

/// ProfilerStep#N events (user_annotation / cpu_op / legacy bare events), sorted by begin.
/// Duplicates of the same N (e.g. both a CPU and a GPU annotation) keep the CPU one.
[[nodiscard]] std::vector<Step> FindSteps(const RankTrace& trace);

/// A rank's trace made ready for analysis: events in scope, sorted by (ts, -dur), with the
/// options' conventions applied.
struct Timeline {
  std::vector<Step> steps;  ///< steps in scope
  /// The analysed window: [first step begin, last step end] when there are steps in scope,
  /// else the span of all events.
  int64_t window_begin_ns = 0;
  int64_t window_end_ns = 0;
  bool last_step_dropped = false;  ///< hta_compat dropped the final step
  /// The lowest and highest ProfilerStep numbers in the trace, before --steps and hta_compat
  /// narrowed them; empty when the trace has no steps.
  std::optional<int64_t> trace_first_step;
  std::optional<int64_t> trace_last_step;
};

/// Sorts `trace.events` by (ts, -dur) in place, applies the conventions of `options` to them
/// (rounding; events outside the steps in scope removed) and returns the step scope.
/// Events that straddle the window's edge are kept (they are clipped by the analyses that need
/// to, not here). The trace's other fields are untouched.
[[nodiscard]] Timeline PrepareTimeline(RankTrace& trace, const AnalysisOptions& options);

}  // namespace stallscope::trace
