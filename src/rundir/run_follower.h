#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "analysis/live_stats.h"
#include "base/result.h"
#include "phase/phase_aggregator.h"
#include "rundir/run_dir.h"

namespace stallscope::rundir {

/// Where a followed run stands.
enum class RunState : uint8_t {
  kRunning,   ///< run.json says "running" and the job's process exists
  kFinished,  ///< run.json has its end, or the job's process is gone (the monitor died)
  kRemoved,   ///< the run directory disappeared while followed
};

/// What `top --run DIR` shows of a run now.
struct RunFollowStatus {
  /// Phase statistics of the busiest process over the last kWindowNs of polls; after the run
  /// ends (or its directory goes), the last numbers seen. Empty until a step is seen.
  std::optional<analysis::LiveWindow> window;
  RunState state = RunState::kRunning;
  std::string note;  ///< "finished (exit 0)", "run directory removed", ... ("" while running)
};

/// Follows a run directory that `stallscope run` writes (or wrote) without writing to it: tails
/// events.bin (the records the monitor already drained from the rings, appended with one
/// write(2) per flush) and events.names.jsonl by offset, and re-reads run.json. It never opens
/// the rings, so it neither competes with the monitor nor depends on the job's pid namespace.
///
/// Cost per Poll: what was appended since the last one (at most kMaxReadBytes; beyond that it
/// skips ahead), plus run.json. Memory: one aggregator per process seen within the window, and
/// the sums of the last few polls. Thread-compatible.
class RunFollower {
 public:
  static constexpr int64_t kWindowNs = 5'000'000'000;  ///< steps/s and shares over the last 5 s
  /// Bytes of events.bin read at most per Poll (32 Ki records); more and the oldest are skipped.
  static constexpr uint64_t kMaxReadBytes = 1 << 20;

  /// Opens `dir`: fails as ReadRunMeta ("DIR: not a stallscope run directory (no run.json)", a
  /// parse error naming run.json) when it is not a run directory.
  [[nodiscard]] static Result<RunFollower> Open(const std::string& dir);

  /// Reads what was appended since the last Poll; `now_mono_ns` is CLOCK_MONOTONIC (the first
  /// Poll reads the last kMaxReadBytes of events.bin and times them by their own timestamps).
  const RunFollowStatus& Poll(int64_t now_mono_ns);

  const RunMeta& meta() const { return meta_; }
  const RunFollowStatus& status() const { return status_; }

 private:
  struct PidSums {
    uint64_t steps = 0;
    std::map<uint16_t, int64_t> phase_ns;  ///< by phase id
  };
  struct Slot {  ///< one poll's records, summed per process
    int64_t duration_ns = 0;
    std::map<int32_t, PidSums> pids;
  };
  struct Proc {
    phase::PhaseAggregator agg;
    uint64_t last_poll = 0;  ///< the poll that last gave it a record
  };

  explicit RunFollower(RunPaths paths) : paths_(std::move(paths)) {}
  /// Reads new events.bin records into the aggregators; returns their first and last
  /// timestamps, empty when there was none.
  std::optional<std::pair<int64_t, int64_t>> ReadEvents();
  void ReadNames();
  void UpdateState();
  std::optional<analysis::LiveWindow> Window() const;

  RunPaths paths_;
  RunMeta meta_;
  RunFollowStatus status_;
  uint64_t events_offset_ = 0;  ///< 0: not opened yet
  uint64_t names_offset_ = 0;
  std::map<std::pair<int32_t, uint16_t>, std::string> names_;
  std::map<int32_t, Proc> procs_;
  std::map<int32_t, analysis::StageTracker> stages_;  ///< by pid, kept for the whole run
  std::deque<Slot> slots_;
  uint64_t polls_ = 0;
  bool started_ = false;  ///< a record was seen: windows count from the job's first record
  int64_t last_poll_ns_ = 0;
};

}  // namespace stallscope::rundir
