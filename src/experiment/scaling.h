#pragma once
// `stallscope passes --ranks 1,N`: seed 000 §1, the same job with one process and with N.
// "Single smooth, multi sawtooth → cross-rank sync or main-rank side work is primary."

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/step_rate.h"
#include "base/result.h"
#include "experiment/experiment.h"
#include "experiment/launcher.h"

namespace stallscope::experiment {

/// One run of the job with a process count.
struct ScalingRun {
  int processes = 0;
  std::vector<std::string> command;
  std::optional<RunDigest> run;
  std::string failure;  ///< why it gave no steps/s, or ""
};

/// The variation ratio above which a run saws (seed 003's oscillation threshold).
[[nodiscard]] bool Sawtooth(const RunDigest& d);
/// The spread of the job's GPUs' mean utilization (max - min, points); empty with < 2 GPUs.
[[nodiscard]] std::optional<double> GpuUtilSpread(const RunDigest& d);
/// Mean utilization of the job's GPUs; empty without GPU metrics.
[[nodiscard]] std::optional<double> JobGpuUtil(const RunDigest& d);

/// What one process against N says, in seed 000 §1's terms.
enum class ScalingClass : uint8_t {
  kNone,                    ///< a run gave no steps/s: no conclusion
  kMainRankSideWork,        ///< one rank works at some steps while the others wait for it
  kCrossRankSync,           ///< one process smooth, N saw
  kSawtoothInEveryProcess,  ///< the sawtooth is there with one process too
  kMultiProcessOverhead,    ///< both smooth, N slower per step
  kScales,                  ///< N step as fast as one
};
/// Every class with its name (passes.txt and passes.json), in enum order.
inline constexpr std::pair<ScalingClass, std::string_view> kScalingClassNames[] = {
    {ScalingClass::kNone, "none"},
    {ScalingClass::kMainRankSideWork, "main_rank_side_work"},
    {ScalingClass::kCrossRankSync, "cross_rank_sync"},
    {ScalingClass::kSawtoothInEveryProcess, "sawtooth_in_every_process"},
    {ScalingClass::kMultiProcessOverhead, "multi_process_overhead"},
    {ScalingClass::kScales, "scales"},
};
[[nodiscard]] std::string_view ScalingClassName(ScalingClass cls);

/// What the runs say, in seed 000 §1's terms.
struct ScalingConclusion {
  ScalingClass cls = ScalingClass::kNone;
  std::string text;  ///< one sentence
  std::vector<std::string> evidence;
  std::vector<std::string> fixes;  ///< cheapest first
  /// Steps/s of the largest process count relative to the smallest.
  std::optional<analysis::RateChange> change;
  std::optional<double> cost_fraction;  ///< of the larger run's wall time, when known
};

[[nodiscard]] ScalingConclusion ConcludeScaling(const std::vector<ScalingRun>& runs);

/// What `stallscope passes --ranks` prints and writes (passes.txt, passes.json).
struct ScalingReport {
  std::string dir;
  std::vector<std::string> command;
  std::string launcher;
  std::string bound;
  std::vector<ScalingRun> runs;  ///< ascending process counts
  ScalingConclusion conclusion;
};

}  // namespace stallscope::experiment
