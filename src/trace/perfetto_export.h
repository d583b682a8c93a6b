#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

/// Puts the intervals of one track on lanes so that, within a lane, any two intervals are
/// either disjoint or nested (Perfetto drops X events that overlap without nesting). Feed the
/// intervals in (begin ascending, duration descending) order; greedy first fit. O(lanes) per
/// interval; allocates only when a lane or a nesting level is new.
class LaneAssigner {
 public:
  /// Returns the 0-based lane for [begin_ns, end_ns]; end_ns < begin_ns is treated as begin_ns.
  uint32_t Add(int64_t begin_ns, int64_t end_ns);
  [[nodiscard]] uint32_t lanes() const { return static_cast<uint32_t>(open_.size()); }

 private:
  /// Per lane, the ends of the open (enclosing) intervals, outermost first; nested intervals
  /// end no later than their parents, so the back is the earliest end.
  std::vector<std::vector<int64_t>> open_;
};

struct PerfettoExportOptions {
  /// Subtracts the earliest timestamp of all ranks from every timestamp (ranks keep their
  /// relative clock offsets). Viewers parse ts as a double µs; absolute Kineto times (~1.7e18 ns)
  /// would lose ~256 ns and break nesting. Ranks ending more than 2^51 ns (26 days) after that
  /// origin (another job's traces) form a group with its own origin: its first event.
  bool rebase = true;
};

struct PerfettoExportStats {
  int64_t slices = 0;       ///< X events written
  int64_t flows = 0;        ///< launch → GPU flow pairs written
  int64_t tracks = 0;       ///< (pid, tid) tracks, sub-lanes included
  int64_t extra_lanes = 0;  ///< tracks added to untangle partial overlaps
  /// Subtracted from every timestamp (0 without rebase); written as otherData.origin_ns, with
  /// each rank's own origin in otherData.ranks[].origin_ns.
  int64_t origin_ns = 0;
  int64_t ranks_rebased_alone = 0;  ///< ranks too far from origin_ns, on an origin of their own
};

/// Writes one Chrome-trace JSON of all `ranks` (as read or prepared) that ui.perfetto.dev opens:
/// per rank, each host process and each GPU is a process (pids numbered from 1 across ranks,
/// named "rank R host NAME (pid P)" / "rank R GPU D"), each thread / stream a thread ("rank R
/// stream S", a sub-lane "rank R stream S (2)"); X events with ts/dur in µs with 3 decimals
/// (exact from ns); flow events (s/f, bp "e") from each runtime launch to the GPU event with
/// its correlation, ids unique across ranks. Streams through a buffer: memory O(events of one
/// rank). Errors: kIo when a write fails.
[[nodiscard]] Result<PerfettoExportStats> WritePerfettoJson(
    std::span<const RankTrace> ranks, std::FILE* out, const PerfettoExportOptions& options = {});

/// As above, to a file `path` (created or truncated). Errors name the path.
[[nodiscard]] Result<PerfettoExportStats> WritePerfettoJsonFile(
    std::span<const RankTrace> ranks, const std::string& path,
    const PerfettoExportOptions& options = {});

/// Appends `ns` as µs with exactly 3 decimals ("-1.500" for -1500), for tests and writers.
void AppendMicros(std::string& out, int64_t ns);

}  // namespace stallscope::trace
