#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "phase/phase_reader.h"
#include "phase/ring_format.h"

namespace stallscope::phase {

/// Time spent in one phase (or one counter's growth) over a window.
struct PhaseTotal {
  uint16_t phase_id = 0;
  uint64_t count = 0;    ///< Completed phases (begin matched with end); counter increments.
  int64_t total_ns = 0;  ///< Sum of durations; for a counter, the sum of its deltas.
  int64_t max_ns = 0;    ///< Longest single phase (0 for counters).
};

/// One window of a ring's records, summed: what a trainer's built-in profiler prints.
struct PhaseWindow {
  std::vector<PhaseTotal> phases;    ///< Phases that ended in the window, by total_ns desc.
  std::vector<PhaseTotal> counters;  ///< Counters that grew in the window, by total_ns desc.
  uint64_t steps = 0;                ///< Step records in the window.
  int64_t first_step = 0;            ///< Step count after the first step of the window (0: none).
  int64_t last_step = 0;             ///< Step count after the last step of the window.
  uint64_t unmatched = 0;            ///< Ends without a begin, begins abandoned (lost records).
};

/// Pairs begin/end records per thread and sums durations per phase id. Records of one ring
/// only (ids are per ring). A phase is counted in the window in which it ends.
/// Thread-compatible. Allocates only for a thread it has not seen yet.
/// Memory: fixed per-phase sums (2 x 256 entries) plus an open-phase stack per thread; Take()
/// drops the stacks of threads with nothing open once more than kMaxThreads are known (threads
/// come and go in a long job), and beyond that any others, their open phases counted unmatched.
/// So at most kMaxThreads stacks of kMaxDepth entries survive a Take.
class PhaseAggregator {
 public:
  /// Feeds one record (in write order).
  void Add(const PhaseRecord& record);
  /// Returns the window since the last Take and starts a new one (open phases carry over).
  PhaseWindow Take();

 private:
  struct Open {
    uint16_t phase_id;
    int64_t begin_ns;
  };
  /// Nesting deeper than this on one thread is a bug or lost ends; older entries are dropped.
  static constexpr size_t kMaxDepth = 64;
  /// Threads whose stacks are kept across a Take (see the class comment).
  static constexpr size_t kMaxThreads = 256;

  void AddEnd(const PhaseRecord& record);
  void PruneThreads();

  std::unordered_map<uint32_t, std::vector<Open>> stacks_;  // by tid
  std::array<PhaseTotal, kNameCapacity> phases_{};
  std::array<PhaseTotal, kNameCapacity> counters_{};
  uint64_t steps_ = 0;
  int64_t first_step_ = 0;
  int64_t last_step_ = 0;
  uint64_t unmatched_ = 0;
};

}  // namespace stallscope::phase
