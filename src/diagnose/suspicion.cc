#include "diagnose/suspicion.h"

namespace stallscope::diagnose {

Suspicion Suspect(const analysis::LiveWindow& window, const ThresholdSet& thresholds) {
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
    case Suspicion::kInputPipeline:
      return "suspect: input pipeline";
    case Suspicion::kOutsidePhases:
      return "suspect: work outside the training phases (logging, syncs, side work)";
    case Suspicion::kComputeBound:
      return "compute-bound so far";
  }
  return "";
}

}  // namespace stallscope::diagnose
