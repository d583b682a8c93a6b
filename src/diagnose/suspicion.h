#pragma once

#include <optional>
#include <string_view>

#include "analysis/live_stats.h"
#include "diagnose/thresholds.h"

namespace stallscope::diagnose {

/// What a live window of phase shares points at, before the full verdict of the report.
enum class Suspicion {
  kNone,
  kWarmingUp,      ///< the window is the process's start-up or warm-up (analysis/life.h): no hint
  kInputPipeline,  ///< data_loading > data_bound_share
  kOutsidePhases,  ///< time outside every phase > live_outside_phases_share
  kComputeBound,   ///< compute phases > cpu_compute_share
};

/// The suspicion for `window` (checked in the order above, kWarmingUp first), against
/// `thresholds`.
[[nodiscard]] Suspicion Suspect(const analysis::LiveWindow& window,
                                const ThresholdSet& thresholds = kThresholds);

/// A suspicion as the report's verdict class (FindingClassName; "none" for kNone) and the share
/// of step time its cause takes: data_loading for the input pipeline, the time outside every
/// phase for kOutsidePhases, 0 for compute-bound. What `serve` exports as the live verdict.
struct SuspectedVerdict {
  std::string_view cls;
  double cost = 0;
};
[[nodiscard]] SuspectedVerdict VerdictOfSuspicion(const analysis::LiveWindow& window);

/// How the status line says it ("" for kNone): "suspect: input pipeline", ...
[[nodiscard]] std::string_view SuspicionText(Suspicion suspicion);

/// The status line's hint for a live window (a followed run's, `top --run`): "" without one.
[[nodiscard]] std::string_view WindowSuspicionText(
    const std::optional<analysis::LiveWindow>& window);

}  // namespace stallscope::diagnose
