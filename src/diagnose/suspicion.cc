#include "diagnose/suspicion.h"

#include <algorithm>

#include "diagnose/findings.h"

namespace stallscope::diagnose {

Suspicion Suspect(const analysis::LiveWindow& window, const ThresholdSet& thresholds) {
  // A slow first batch or a compile is no input pipeline or compute verdict (issue 26).
  if (window.stage != analysis::RunStage::kSteady) return Suspicion::kWarmingUp;
  if (window.data_share > thresholds.data_bound_share.value) return Suspicion::kInputPipeline;
  if (1.0 - window.covered_share > thresholds.live_outside_phases_share.value)
    return Suspicion::kOutsidePhases;
  if (window.compute_share > thresholds.cpu_compute_share.value) return Suspicion::kComputeBound;
  return Suspicion::kNone;
}

std::string_view SuspicionText(Suspicion suspicion) {
  switch (suspicion) {
    case Suspicion::kNone:
      return "";
    case Suspicion::kWarmingUp:
      return "warming up: no hint before the step time settles";
    case Suspicion::kInputPipeline:
      return "suspect: input pipeline";
    case Suspicion::kOutsidePhases:
      return "suspect: work outside the training phases (logging, syncs, side work)";
    case Suspicion::kComputeBound:
      return "compute-bound so far";
  }
  return "";
}

SuspectedVerdict VerdictOfSuspicion(const analysis::LiveWindow& w) {
  switch (Suspect(w)) {
    case Suspicion::kInputPipeline:
      return {FindingClassName(FindingClass::kDataBoundCpu), w.data_share};
    case Suspicion::kOutsidePhases:
      return {FindingClassName(FindingClass::kHostSyncOrLogging),
              std::max(0.0, 1 - w.covered_share)};
    case Suspicion::kComputeBound:
      return {FindingClassName(FindingClass::kGpuBound), 0};
    case Suspicion::kNone:
    case Suspicion::kWarmingUp:
      break;
  }
  return {"none", 0};
}

std::string_view WindowSuspicionText(const std::optional<analysis::LiveWindow>& window) {
  return window ? SuspicionText(Suspect(*window)) : SuspicionText(Suspicion::kNone);
}

}  // namespace stallscope::diagnose
