#pragma once
// The life of a run (issue 26): start-up, warm-up, steady state and tail. On a GPU most short
// runs are mostly start-up (interpreter, imports, data set, CUDA context, DataLoader workers, the
// first batch) and warm-up (torch.compile, cuDNN autotuning, the allocator growing); statistics
// over the whole run describe those, not training. Every fact the verdict reads is taken over
// the steady state; this file decides where it begins, for a finished run (WarmupSteps, used by
// AnalyzePhases) and for a live one (StageTracker, used by `run`'s status line, `top --run` and
// `serve`), by the same rule.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/thresholds.h"

namespace stallscope::analysis {

/// Where a run, or one of its ranks, is in its life.
enum class RunStage : uint8_t {
  kStartup,  ///< job start → the first step's work begins (its first batch in hand)
  kWarmup,   ///< the first steps, until the step time settles
  kSteady,   ///< training at its steady rate: every verdict fact is taken here
  kTail,     ///< after the last step: final save, teardown
};

/// "start-up", "warm-up", "steady", "tail".
[[nodiscard]] std::string_view RunStageName(RunStage stage);

/// How many leading steps of `step_s` (durations in seconds, in step order) are warm-up: a
/// robust change point. The steady level is the median of the second half of the steps and its
/// scale 1.4826 × their MAD (at least robust_sigma_floor of the median); a step is above that
/// level when it is longer than median + warmup_robust_z σ, than (1 + warmup_min_excess) ×
/// median and than median + warmup_min_excess_s.
/// Warm-up ends at the first step that is not above the level while the median of it and the
/// next warmup_settle_steps − 1 steps is not either: a slow first step, a compile spike over
/// steps 1–3 or a slow ramp end up in warm-up; a later epoch boundary, a periodic checkpoint or
/// one noisy step stay in the steady state. At most warmup_max_share of the steps (a run still
/// slowing down at its middle keeps its second half); 0 for fewer than 2 steps.
[[nodiscard]] size_t WarmupSteps(std::span<const double> step_s,
                                 const ThresholdSet& t = kThresholds);

/// The stage of a live process from its step boundaries as they come: start-up until its first
/// step ends, warm-up while WarmupSteps of the steps seen so far leaves fewer than
/// warmup_settle_steps steady steps, then steady (for good: warm-up is a prefix). The tail is
/// the caller's to say (the job ended). Memory: the first kMaxTracked step durations.
class StageTracker {
 public:
  static constexpr size_t kMaxTracked = 1024;

  explicit StageTracker(const ThresholdSet& t = kThresholds) : t_(&t) {}

  /// The process's first phase record (the start of its first step); later calls are ignored.
  void Begin(int64_t ts_ns);
  /// A step boundary at `ts_ns` (CLOCK_MONOTONIC): the end of a step.
  void Step(int64_t ts_ns);

  [[nodiscard]] RunStage stage() const { return stage_; }
  [[nodiscard]] int64_t steps() const { return steps_; }
  /// Warm-up steps as decided so far (final once steady).
  [[nodiscard]] size_t warmup_steps() const { return warmup_; }

 private:
  const ThresholdSet* t_;
  RunStage stage_ = RunStage::kStartup;
  int64_t first_ns_ = -1;
  int64_t last_ns_ = -1;
  int64_t steps_ = 0;
  size_t warmup_ = 0;
  std::vector<double> step_s_;
};

}  // namespace stallscope::analysis
