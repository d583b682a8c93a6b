#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "analysis/phases.h"
#include "base/thresholds.h"

namespace stallscope::analysis {

/// Steps/s of a run with its 95% interval.
struct RateEstimate {
  int64_t steps = 0;
  double per_s = 0;  ///< steps / Σ step durations
  double lo = 0;     ///< 95% interval; lo == hi == per_s when there are too few steps for one
  double hi = 0;
};

/// Steps/s over step durations (seconds): n / Σ. The interval comes from a moving-block bootstrap
/// (2000 resamples of blocks of ⌈√n⌉ consecutive steps, so that runs of slow steps — periodic side
/// work, epoch starts — stay together), with a fixed seed: the same steps give the same interval.
/// Fewer than t.rate_min_steps (3) steps: no interval (lo = hi = per_s). Empty, or no positive
/// duration: nullopt. The interval's ends are the nearest resamples (QuantileMethod::kNearest).
[[nodiscard]] std::optional<RateEstimate> EstimateRate(std::span<const double> step_s,
                                                       const ThresholdSet& t = kThresholds);

/// How b's steps/s compare with a's.
struct RateChange {
  double ratio = 1;  ///< b / a
  double lo = 1;     ///< 95% interval of the ratio
  double hi = 1;
  /// The interval lies wholly outside [1/min_ratio, min_ratio]: beyond what two runs of the
  /// same job differ by (each run's bootstrap cannot see that run-to-run spread).
  bool significant = false;
};

/// b relative to a, from independent block bootstraps of both (as EstimateRate). `min_ratio`
/// (≥ 1): the smallest change called significant (thresholds.rate_change_min). Either side with
/// fewer than t.rate_min_steps (3) steps: the ratio without an interval, never significant.
/// nullopt when either side has no rate.
[[nodiscard]] std::optional<RateChange> CompareRates(std::span<const double> a,
                                                     std::span<const double> b,
                                                     double min_ratio = 1.0,
                                                     const ThresholdSet& t = kThresholds);

/// The durations of a rank's steps, in seconds: its steady steps (AnalyzePhases leaves the
/// warm-up apart, analysis/life.h), what every rate is measured over.
[[nodiscard]] std::vector<double> StepSeconds(const RankSteps& rank);

}  // namespace stallscope::analysis
