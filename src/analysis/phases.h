#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/thresholds.h"
#include "base/vocabulary.h"
#include "phase/event_log.h"

namespace stallscope::analysis {

// The phase vocabulary (base/vocabulary.h), under the names analysis' users know.
inline constexpr std::string_view kCommWaitPhase = phase_name::kCommWait;
using ::stallscope::IsComputePhase;

/// GPU-side time of a phase: CUDA events recorded on the current stream at each instance's
/// begin and end (python/stallscope/_cuda.py). Under CUDA's asynchrony forward_pass and
/// backward_pass return once their kernels are queued, so their host time is short and the
/// GPU's work shows up here instead (and as host time in whatever synchronizes next).
struct GpuPhaseTime {
  int64_t count = 0;  ///< instances with a GPU time (≤ the phase's count: the last may be pending)
  double total_s = 0;
  double mean_s = 0;
  double max_s = 0;
  double share = 0;  ///< total / the same denominator as PhaseStats::share
};

/// Seed 003 timing statistics of one phase on one rank, over the steps of the run.
/// All durations in seconds. `share` is total / (sum of step times of that rank), 0..1.
struct PhaseStats {
  std::string name;  ///< "data_loading", ..., or "other" (step time covered by no phase)
  int32_t rank = 0;
  int64_t count = 0;
  double total_s = 0;
  double share = 0;
  double mean_s = 0;
  double std_s = 0;
  double min_s = 0;
  double max_s = 0;
  double p50_s = 0;
  double p95_s = 0;
  double p99_s = 0;
  std::optional<GpuPhaseTime> gpu;  ///< empty: no GPU time recorded for this phase
};

/// One step of one rank: its window and the time each phase took inside it.
struct StepRecord {
  int64_t index = 0;     ///< 1-based step number of that rank
  int64_t begin_ns = 0;  ///< end of the previous step (or the rank's first event)
  int64_t end_ns = 0;
  std::map<std::string, double> phase_s;  ///< per phase, clipped to the window; includes "other"
  /// Instances per phase that began in the window, where more than one did (one is the usual:
  /// a phase with time in the step and no entry here had one, InstancesIn); kept sparse, as a
  /// long run has millions of steps.
  std::map<std::string, int64_t> phase_n;
  std::map<std::string, int64_t> counters;  ///< counter growth inside the step (e.g. host syncs)
};

/// Where one rank's start-up, warm-up, steady state and tail lie (analysis/life.h), on the
/// CLOCK_MONOTONIC of the phase records. Start-up runs from the job's start (run.json; not known
/// here) to `steps_begin_ns`; warm-up is RankSteps::warmup; the steady state is RankSteps::steps,
/// [steady_begin_ns, steady_end_ns]; the tail follows.
struct RankLife {
  int64_t first_event_ns = 0;   ///< the rank's first phase record
  int64_t steps_begin_ns = 0;   ///< step 1 begins: its first batch in hand (see AnalyzePhases)
  int64_t steady_begin_ns = 0;  ///< the first steady step begins
  int64_t steady_end_ns = 0;    ///< the last step ends
  int64_t last_event_ns = 0;    ///< the rank's last phase record
  /// Host time per phase before step 1 (first_event → steps_begin: the iterator's creation,
  /// which starts the DataLoader workers, and the first batch), and after the last step.
  std::map<std::string, double> startup_phase_s;
  std::map<std::string, double> tail_phase_s;
};

/// Instances of `phase` that began in step `s`: phase_n's count, else 1 when the phase has time
/// in the step (a phase that began in the step before and crosses into it counts there too).
[[nodiscard]] int64_t InstancesIn(const StepRecord& s, const std::string& phase);

/// One closed phase instance of one process, for drawing (the HTML report's phase bands) and for
/// placing a sample in its phase (the stacks' attribution).
struct PhaseInterval {
  std::string name;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

/// Per-rank step series (seed 003: steps/s, variation ratio, oscillation flag), over the steady
/// state: the warm-up steps are apart, and every statistic here and in PhaseStats leaves them out.
struct RankSteps {
  int32_t rank = 0;
  int32_t pid = 0;        ///< the process that marked the steps
  int64_t count = 0;      ///< steady steps
  double duration_s = 0;  ///< sum of steady step windows
  double per_second = 0;
  double mean_step_s = 0;
  double std_step_s = 0;
  double variation_ratio = 0;      ///< std/mean
  bool oscillating = false;        ///< variation_ratio > thresholds.oscillation_ratio (seed 003)
  std::vector<StepRecord> steps;   ///< the steady steps (StepRecord::index counts from step 1)
  std::vector<StepRecord> warmup;  ///< the warm-up steps before them (WarmupSteps)
  RankLife life;
  /// Every closed phase instance of the rank's main process over the whole run (nested ones
  /// included), by begin: kept from the one scan of the event log (issue 39), for the readers
  /// that place a moment in its phase.
  std::vector<PhaseInterval> intervals;
};

/// Phases of processes that mark no steps (e.g. DataLoader workers with user markers).
struct ProcessPhases {
  int32_t pid = 0;
  int32_t rank = 0;
  std::vector<PhaseStats> phases;  ///< share relative to the span of that process's events
};

/// What the job said from inside, analysed.
struct PhaseAnalysis {
  std::vector<RankSteps> ranks;    ///< by rank
  std::vector<PhaseStats> phases;  ///< by rank, then by total descending; "other" last
  std::vector<ProcessPhases> other_processes;
  std::map<std::string, int64_t> counters_total;  ///< e.g. "host_sync.item" → 1234
  /// Phase time outside the steady steps: start-up, warm-up, and after the last step (final save).
  double outside_steps_s = 0;
  int64_t unmatched_begins =
      0;  ///< phases still open at the end (crash) — clipped to the last event
  int64_t unmatched_ends = 0;
  uint64_t lost_records = 0;
  std::vector<std::string> warnings;
};

/// Pairs begin/end per (pid, tid) (nested phases allowed; an end closes the innermost open phase
/// of the same id), cuts each rank's main process (the pid of that rank with the most step
/// records) into steps at its kStep records, and computes per-phase statistics and the
/// per-step series. A process without step records but with phases lands in other_processes.
/// With no step records at all, the whole span of each rank's busiest process is one "step".
/// A rank oscillates when its variation ratio exceeds `t.oscillation_ratio`.
///
/// The life of a run (analysis/life.h): step 1 begins once its first batch is in hand (the
/// data_loading that opens the rank's records, before any other phase and the first step mark,
/// is start-up: the iterator's creation starts the workers); the leading steps WarmupSteps
/// names are warm-up (RankSteps::warmup), and step 1 always when its batch came with the
/// start-up (it waited for no data: no ordinary step). Step and phase statistics (shares, counts,
/// GPU times, "other") cover the steady steps only; phase time before and after them is
/// outside_steps_s.
[[nodiscard]] PhaseAnalysis AnalyzePhases(const phase::EventLog& log, const ThresholdSet& t);

/// The same analysis for steps measured elsewhere (a profiler trace): each rank's `steps` come
/// with their windows, per-phase seconds (including "other") and counters; fills each rank's
/// step statistics, the per-phase statistics (share of that rank's step time) and the counter
/// totals, as AnalyzePhases does.
[[nodiscard]] PhaseAnalysis PhasesFromSteps(std::vector<RankSteps> ranks, const ThresholdSet& t);

}  // namespace stallscope::analysis
