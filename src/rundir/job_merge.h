#pragma once
// One job over many nodes: `stallscope diagnose DIR1 DIR2 ...` with the run directories each node
// of one `torchrun --nnodes N` job wrote. The runs are checked to be the same job, each node is
// identified (hostname from run.json, node rank from the global ranks it ran), and the ranks are
// merged into one RunData, so the facts and rules see the whole job. README.md "Many nodes"
// documents it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/phases.h"
#include "analysis/summary.h"
#include "base/result.h"
#include "rundir/run_data.h"

namespace stallscope::rundir {

/// One node of the job: one run directory.
struct JobNode {
  std::string dir;
  std::string hostname;
  int node_rank = 0;                   ///< by the lowest global rank it ran: 0 holds rank 0
  std::vector<int32_t> ranks;          ///< global ranks of its processes, ascending
  int32_t world_size = 0;              ///< as its ranks saw it (WORLD_SIZE)
  std::optional<double> gpu_util_pct;  ///< mean over its GPUs; empty without GPUs
  // Filled by diagnose::SummarizeJob from the merged phases:
  int64_t steps = 0;       ///< over its ranks
  double steps_per_s = 0;  ///< mean over its ranks
  double step_s = 0;       ///< mean step time over its ranks
  double comm_wait_s = 0;  ///< comm_wait per step, mean over its ranks
  double work_s = 0;       ///< step_s − comm_wait_s: what the node itself takes per step
};

/// One rank of the merged job.
struct JobRank {
  int32_t rank = 0;
  int node_rank = 0;
  int64_t steps = 0;
  double steps_per_s = 0;
  double step_s = 0;       ///< mean step
  double comm_wait_s = 0;  ///< per step
  double work_s = 0;       ///< step_s − comm_wait_s
};

/// The node-level view of a merged job: what `diagnose DIR1 DIR2 ...` adds to a run report.
struct JobNodes {
  std::vector<JobNode> nodes;  ///< by node rank
  std::vector<JobRank> ranks;  ///< by rank
  int32_t world_size = 0;
  /// Seed 002 balance (CV of per-node means, classes at 5/10/20%): of the work per step (step
  /// time less comm_wait: in lockstep DDP every rank's step time is the same, the work is not)
  /// and of the GPU utilization (empty without GPUs on every node).
  analysis::Balance work_balance;
  analysis::Balance util_balance;
  /// Set when the verdict found a straggler: the rank it named and that rank's node.
  std::optional<int32_t> straggler_rank;
  std::optional<int> straggler_node;
  double straggler_work_ratio = 0;  ///< its work per step / the median other rank's
};

/// The runs merged into one job.
struct MergedJob {
  RunData data;    ///< the lead node's (node 0) meta and recording; every node's ranks and events
  JobNodes nodes;  ///< identity only (dir, hostname, ranks, GPU use) until diagnose::SummarizeJob
};

/// The command without a node's own arguments (`--node-rank K`, `--node_rank=K`): what every
/// node of one job runs alike.
[[nodiscard]] std::vector<std::string> JobCommand(const std::vector<std::string>& command);

/// Merges the runs of one job's nodes. Fails with one line naming the directory when a run is not
/// of the same job (another world size or command), has no ranks, or holds a rank another run
/// holds too; with `force` these are warnings and the runs are merged anyway. Node k's event
/// times are moved onto node 0's monotonic clock through the wall clocks run.json noted at
/// start; its pids are moved out of the way (+ k·2^22) when they clash with another node's.
[[nodiscard]] Result<MergedJob> MergeRuns(std::vector<RunData> runs, bool force);

}  // namespace stallscope::rundir
