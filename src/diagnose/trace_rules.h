#pragma once
// Rules that need a GPU timeline (rundir::RunData::trace, from `stallscope trace`). They return
// nullopt for live runs, which carry no timeline. Private to src/diagnose; listed in Rules().

#include <optional>

#include "diagnose/verdict.h"

namespace stallscope::diagnose {

/// host_launch_bound: the GPU idles while the host launches kernels or runs CPU ops, with a
/// shallow launch queue (the host cannot stay ahead of the GPU). A deep queue rules it out.
[[nodiscard]] std::optional<Finding> HostLaunchRule(const Facts& facts);

/// startup_window: more than half the window in one-time set-up calls (and memory calls that do
/// not recur every step): the trace shows CUDA start-up, not training.
[[nodiscard]] std::optional<Finding> StartupRule(const Facts& facts);

/// allocator_churn: memory-management calls in most steps with the GPU idle during them.
[[nodiscard]] std::optional<Finding> AllocatorChurnRule(const Facts& facts);

/// host_sync_or_logging from a GPU timeline: the GPU idles during host syncs or in the gaps that
/// begin at one (the queue drained). HostSyncRule calls it for traces with GPU rows.
[[nodiscard]] std::optional<Finding> TraceSyncRule(const Facts& facts);

/// host_step_boundary: a deep launch queue inside the step, the GPU idle at its start or end.
[[nodiscard]] std::optional<Finding> StepBoundaryRule(const Facts& facts);

/// communication_bound: GPU time lost to collectives that compute does not hide, or to waiting on
/// dependencies while the next kernels are already queued (a deep launch queue).
[[nodiscard]] std::optional<Finding> CommunicationRule(const Facts& facts);

/// Issue 26: a window whose GPU idles ≥ trace_idle_share of it, that no rule above (nor
/// data_bound) explains, is named by the largest attributed cause of its idle, priced at the share
/// of the window that cause explains: sync → host_sync_or_logging, dataloader → data_bound_cpu,
/// dependency → communication_bound, setup → startup_window, memory → allocator_churn,
/// launch_overhead + cpu_other → host_launch_bound (the host falls behind in stretches of the
/// step, whatever its mean queue). Idle with no attributed cause (the host idle or not traced)
/// names nothing: there is no cause to name.
[[nodiscard]] std::optional<Finding> TraceIdleRule(const Facts& facts);

}  // namespace stallscope::diagnose
