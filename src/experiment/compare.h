#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/step_rate.h"
#include "experiment/experiment.h"

namespace stallscope::experiment {

/// What the comparison of the steps/s says, decided once here (renderers only print it).
enum class CompareOutcome {
  kFaster,       ///< B faster, the 95% interval of B/A above 1
  kSlower,       ///< B slower, the interval below 1
  kNoChange,     ///< the interval includes 1: no significant change
  kTooFewSteps,  ///< a side has fewer than 3 steady steps: a ratio without an interval
  kNoSteps,      ///< a side has no steps at all: nothing to compare
};
[[nodiscard]] std::string_view CompareOutcomeName(CompareOutcome o);

/// One phase in A and B, per step (empty where that run has no such phase).
struct PhaseChange {
  std::string name;
  std::optional<double> a_ms_per_step;
  std::optional<double> b_ms_per_step;
  double delta_ms_per_step = 0;  ///< B − A, a missing side counted as 0
  double a_share = 0;
  double b_share = 0;
};

/// One thing recorded about the runs that differs between them. A value is empty where that run
/// did not record it (an environment variable set in one run only, a run without a DataLoader).
struct RunDifference {
  std::string name;  ///< "command", "dataloader.num_workers", "env.OMP_NUM_THREADS", ...
  std::optional<std::string> a;
  std::optional<std::string> b;
};

/// `stallscope compare A B`: two runs side by side.
struct CompareReport {
  RunDigest a;
  RunDigest b;
  CompareOutcome outcome = CompareOutcome::kNoSteps;
  std::optional<analysis::RateChange> change;  ///< B relative to A (analysis::CompareRates)
  /// One line: "B is 2.10× faster (95% interval 1.93–2.31×): significant", "no significant
  /// change (B/A 1.02×, 95% interval 0.95–1.09×)", "too few steps to say (...)".
  std::string conclusion;
  std::vector<PhaseChange> phases;  ///< the union of both runs' phases, largest (either side) first
  std::vector<RunDifference> differences;  ///< only what differs, in a fixed order (compare.cc)
  /// The run's verdict says its host was busy (RunDigest::busy_host, diagnose::Verdict::busy_host):
  /// other work took CPUs, and how much changes from run to run; the interval, from each run's
  /// own steps, does not include that.
  bool a_busy_host = false;
  bool b_busy_host = false;
};

/// Compares two digested runs. Pure: no I/O; the same digests give the same report (the bootstrap
/// has a fixed seed).
[[nodiscard]] CompareReport Compare(const RunDigest& a, const RunDigest& b);

}  // namespace stallscope::experiment
