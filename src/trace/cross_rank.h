#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "trace/kernels.h"
#include "trace/timeline.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

/// What cross-rank analysis needs of one rank (a few KB, so all ranks fit at once).
struct CrossRankInput {
  int32_t rank = 0;
  std::vector<Step> steps;                    ///< sorted by begin
  std::vector<CollectiveKernel> collectives;  ///< sorted by begin
};

/// A rank's input: its steps and the collective kernels AnalyzeKernels already labelled.
[[nodiscard]] CrossRankInput MakeCrossRankInput(const RankTrace& trace, const Timeline& timeline,
                                                const KernelReport& kernels);

/// One ProfilerStep number across the ranks that have it.
struct StepSpread {
  int64_t step = 0;  ///< N of ProfilerStep#N
  int32_t ranks = 0;
  int64_t min_ns = 0;
  int64_t max_ns = 0;
  double median_ns = 0;
  double spread = 0;  ///< (max − min) / median
  double cv_pct = 0;  ///< population std / mean × 100
  int32_t slowest_rank = 0;
};

/// How one rank compares with the others.
struct RankSkew {
  int32_t rank = 0;
  int64_t steps = 0;  ///< steps it shares with at least one other rank
  int64_t times_slowest = 0;
  /// Straggler score: mean over its steps of (its time − median) / median. 0.10 = 10% slower
  /// than the typical rank.
  double straggler_score = 0;
  int64_t collectives = 0;  ///< matched collective instances it took part in
  int64_t times_last = 0;   ///< instances it arrived at last
  /// When last: its arrival − the second-last arrival (how long everyone else was held up by it
  /// alone), summed.
  int64_t held_up_ns = 0;
  /// Lateness = arrival − earliest arrival of the instance, over all its instances.
  double mean_lateness_ns = 0;
  double p95_lateness_ns = 0;
};

struct CrossRankReport {
  std::vector<StepSpread> steps;        ///< step numbers present on ≥ 2 ranks, ascending
  std::vector<RankSkew> ranks;          ///< by rank
  std::optional<int32_t> slowest_rank;  ///< highest straggler score; empty without shared steps
  /// Most often last at collectives (ties: most held_up_ns); empty without matched instances.
  std::optional<int32_t> latest_rank;
  int64_t collectives_matched = 0;  ///< instances present on every rank
  /// Instances present on only some ranks (sampled traces, different windows): skipped.
  int64_t collectives_unmatched = 0;
  /// The step whose begin every rank's clock was aligned on; empty: raw timestamps were used.
  std::optional<int64_t> aligned_on_step;
};

/// Compares ranks. Collective instances are matched as the k-th kernel of the same collective
/// name on every rank; arrival = kernel begin. Kineto clocks are per host, so each rank's times
/// are shifted to its own begin of the first ProfilerStep number all ranks share (this also
/// absorbs the ranks' real skew at that step begin). Fewer than 2 ranks → nullopt.
[[nodiscard]] std::optional<CrossRankReport> AnalyzeCrossRank(
    std::span<const CrossRankInput> ranks);

}  // namespace stallscope::trace
