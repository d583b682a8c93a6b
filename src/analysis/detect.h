#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "analysis/phases.h"
#include "base/thresholds.h"

namespace stallscope::analysis {

/// Robust outliers of a series: values above median + k × MAD (scaled to σ: 1.4826 × MAD), k =
/// thresholds.outlier_robust_z.
struct Outliers {
  double median = 0;
  double mad = 0;               ///< median absolute deviation (unscaled)
  double threshold = 0;         ///< median + k × 1.4826 × MAD
  std::vector<size_t> indices;  ///< positions above threshold, ascending
};

/// Outliers of `values` (any order kept): above median + t.outlier_robust_z robust σ. Empty input
/// → empty result. A zero MAD (most values equal) uses a floor of t.robust_sigma_floor (1%) of
/// the median so exact repeats are not all outliers (the floor applies to any MAD below it;
/// `mad` reports the unfloored value).
[[nodiscard]] Outliers FindOutliers(std::span<const double> values,
                                    const ThresholdSet& t = kThresholds);

/// A detected period of a series.
struct Period {
  double period = 0;         ///< in samples (steps, or samples of a time series)
  double strength = 0;       ///< autocorrelation at the period, 0..1
  double p_value = 1;        ///< significance of the periodogram peak (Fisher's g test)
  bool significant = false;  ///< p_value < period_alpha and strength >= period_min_strength
};

/// Period detection on an evenly spaced series: periodogram peak (Fisher's g test for
/// significance) confirmed and refined by the autocorrelation peak near it (t.period_*). Needs ≥
/// t.period_min_cycles (3) full periods and ≥ t.period_min_points (16) points; returns nullopt
/// when there is no candidate at all.
[[nodiscard]] std::optional<Period> DetectPeriod(std::span<const double> values,
                                                 const ThresholdSet& t = kThresholds);

/// Periodic side work: a phase whose long occurrences recur every N steps
/// ("every 20 steps: checkpointing, +0.9 s each, 21% of wall time").
struct PeriodicPhase {
  int32_t rank = 0;
  std::string phase;           ///< the phase that makes the outlier steps slow
  int64_t every_steps = 0;     ///< period in steps (0: irregular, or < 3 occurrences)
  int64_t occurrences = 0;     ///< outlier steps explained by this phase
  double extra_s_each = 0;     ///< mean extra time per occurrence vs the median step
  double share_of_wall = 0;    ///< occurrences × extra / sum of step times
  std::vector<int64_t> steps;  ///< step indices (1-based) of the occurrences
  /// What an occurrence holds beyond an ordinary step (the median step), as means over the
  /// occurrences: each phase's extra seconds ("other" is host work outside every phase) and
  /// extra instances (40 eval_forward calls), each counter's extra growth (host syncs).
  /// Only what grew: positive values.
  std::map<std::string, double> extra_phase_s;
  std::map<std::string, double> extra_phase_n;
  std::map<std::string, double> extra_counters;
  /// The occurrences' windows (CLOCK_MONOTONIC), in order: to place what else happened in them.
  std::vector<std::pair<int64_t, int64_t>> windows;
};

/// Outlier steps (median + MAD on step times) matched to the phase that made each slow (the
/// phase with the largest excess over its own median in that step, "other" included), grouped
/// by phase, with the period of their step indices (regular spacing, or DetectPeriod on the
/// phase's per-step series; t.regular_gap_share, t.gap_jitter_steps). Only groups of ≥ 2
/// occurrences.
[[nodiscard]] std::vector<PeriodicPhase> FindPeriodicPhases(const PhaseAnalysis& phases,
                                                            const ThresholdSet& t = kThresholds);

/// Step stalls tied to DataLoader epochs or worker round-robin.
struct LoaderStall {
  int32_t rank = 0;
  int64_t stalls = 0;       ///< number of slow data_loading steps matching the pattern
  double extra_s_each = 0;  ///< mean extra data_loading time of those steps
  double share_of_wall = 0;
  int64_t every_steps = 0;  ///< the spacing (steps per epoch, or num_workers)
  std::vector<int64_t> steps;
};

/// Seed 001 T5: the first step of every epoch stalls in data_loading (workers re-spawned when
/// persistent_workers=False). `steps_per_epoch` from the loader (dataset_len / batch_size,
/// drop_last aware). nullopt unless ≥ 2 epoch starts are slow outliers, and at least
/// t.loader_pattern_share of the later ones.
[[nodiscard]] std::optional<LoaderStall> FindEpochStartStalls(const RankSteps& rank,
                                                              int64_t steps_per_epoch,
                                                              const ThresholdSet& t = kThresholds);

/// Seed 001 T7: with workers, every num_workers-th step has a long data_loading stall (all
/// workers busy producing the next batch). nullopt unless the slow data_loading steps recur with
/// period num_workers (± 0) in ≥ t.loader_pattern_share (60%) of the cycles.
[[nodiscard]] std::optional<LoaderStall> FindPrefetchStalls(const RankSteps& rank,
                                                            int64_t num_workers,
                                                            const ThresholdSet& t = kThresholds);

}  // namespace stallscope::analysis
