#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/life.h"
#include "phase/phase_aggregator.h"
#include "phase/phase_reader.h"

namespace stallscope::analysis {

/// One phase's time in a live window.
struct LivePhase {
  std::string name;
  int64_t total_ns = 0;  ///< time spent in the phase during the window
  double share = 0;      ///< total_ns / the window's wall time
};

/// Phase statistics of one process (the one with the most steps) over a window of wall time:
/// what `run` prints while the job runs and what an exporter publishes. Computed once here; the
/// CLI only formats it, diagnose::Suspect judges it.
struct LiveWindow {
  uint64_t steps = 0;
  double window_s = 0;
  double steps_per_s = 0;
  std::vector<LivePhase> phases;  ///< TakeWindow: by total_ns, largest first; else by phase id
  double data_share = 0;          ///< the data_loading phase's share
  double compute_share = 0;       ///< sum of the compute phases' shares (IsComputePhase)
  double covered_share = 0;       ///< sum of all phases' shares (1 − covered: outside phases)
  /// Where that process is in its life (analysis/life.h StageTracker): a window of start-up or
  /// warm-up says nothing about training yet.
  RunStage stage = RunStage::kSteady;
  int64_t warmup_steps = 0;  ///< its warm-up steps, as decided so far
};

/// Upper bounds (seconds) of the per-process step-duration histogram (`serve`'s
/// stallscope_step_duration_seconds): 10 ms to 60 s, roughly x2.5 apart, which covers a small
/// CPU model's step and a large model's. Fixed, so a process's histogram is a fixed size.
inline constexpr std::array<double, 12> kStepBucketsS = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                         1,    2.5,   5,    10,  30,   60};

/// Durations between consecutive steps of one process (the first step has none).
struct StepHistogram {
  std::array<uint64_t, kStepBucketsS.size() + 1> counts{};  ///< per bucket (not cumulative);
                                                            ///< the last one is > 60 s
  uint64_t count = 0;
  double sum_s = 0;
  void Add(double seconds);
};

/// Totals of one process since its ring was first read: what an exporter publishes as
/// counters. Phases by id, share 0 (a total has no window).
struct ProcessTotals {
  int32_t pid = 0;
  int32_t rank = 0;  ///< from the ring's header (0 when not distributed)
  uint64_t steps = 0;
  std::vector<LivePhase> phases;
  StepHistogram step_durations;
};

/// The window of one process between two of its totals (`before` taken `window_ns` earlier):
/// steps, steps/s and phase shares, as TakeWindow gives them (phases largest first). Empty when
/// no step was made in between or `window_ns` <= 0.
[[nodiscard]] std::optional<LiveWindow> WindowBetween(const ProcessTotals& before,
                                                      const ProcessTotals& after,
                                                      int64_t window_ns);

/// Live phase statistics of a job's processes, fed with the records drained from their rings.
/// Per process: the current window, the interim totals (since the last TakeInterim) and the
/// totals since the start. Thread-compatible (the monitor session serialises access).
///
/// Memory: one entry per process whose ring is open (about 20 KiB: the aggregator's per-phase
/// sums plus at most 2 x 256 phase sums), whatever the number of steps; Forget drops a process
/// once its ring is retired. The run's report reads events.bin, never these statistics.
class LiveStats {
 public:
  /// Feeds one record of `ring` (in write order). `ring` must outlive this object.
  void Add(phase::PhaseReader& ring, const phase::PhaseRecord& record);

  /// Drops process `pid` (its ring was retired: the process is gone and was read to the end).
  /// Its steps no longer count in later windows, interims or totals.
  void Forget(int32_t pid) { procs_.erase(pid); }

  /// The window since the last call, of the process with the most steps in it, and adds every
  /// process's window to its interim and total sums. Empty when no process made a step or
  /// `window_ns` <= 0.
  [[nodiscard]] std::optional<LiveWindow> TakeWindow(int64_t window_ns);

  /// The interim totals of the process with the most steps since the last interim, once it has
  /// at least `every_steps` (> 0) of them over `since_ns` (> 0); then every process's interim
  /// totals restart. Empty (and nothing restarts) otherwise. Phases by id.
  [[nodiscard]] std::optional<LiveWindow> TakeInterim(int64_t every_steps, int64_t since_ns);

  /// Totals since the start of the process with the most steps (windows taken so far), over
  /// `since_start_ns` of wall time; does not restart anything. Empty when no step was seen.
  [[nodiscard]] std::optional<LiveWindow> Totals(int64_t since_start_ns) const;

  /// From now on, keep every process's totals for AllTotals (a second pairing of each record
  /// and a step-duration histogram: only an exporter needs them, so `run` without `--serve`
  /// does not pay for them). Call before the first Add.
  void TrackTotals() { track_totals_ = true; }

  /// Every process's totals up to the last record added, by pid (independent of the windows
  /// and interims: taking these restarts nothing the other readers see). Empty unless
  /// TrackTotals was called.
  [[nodiscard]] std::vector<ProcessTotals> AllTotals();

 private:
  struct Proc {
    phase::PhaseReader* ring = nullptr;
    phase::PhaseAggregator agg;
    std::map<uint16_t, int64_t> interim_ns;  ///< by phase id
    uint64_t interim_steps = 0;
    std::map<uint16_t, int64_t> total_ns;
    uint64_t total_steps = 0;
    // AllTotals' own sums (its aggregator pairs the same records, read at its own pace).
    phase::PhaseAggregator all_agg;
    std::map<uint16_t, int64_t> all_ns;
    uint64_t all_steps = 0;
    StepHistogram step_durations;
    int64_t last_step_ns = 0;
    StageTracker stage;
  };
  std::map<int32_t, Proc> procs_;  ///< by pid
  bool track_totals_ = false;
};

}  // namespace stallscope::analysis
