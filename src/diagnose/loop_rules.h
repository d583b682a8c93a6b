#pragma once
// The training loop's rules (loop_rules.cc). Private to src/diagnose; listed in Rules()
// (verdict_rules.cc).

#include <optional>

#include "diagnose/verdict.h"

namespace stallscope::diagnose {

/// host_sync_or_logging: time outside the phases with host syncs every step (seed 000 §2, §5);
/// the fix names the job's sync call sites.
[[nodiscard]] std::optional<Finding> HostSyncRule(const Facts& facts);
/// host_sync_or_logging whatever the share of `other` (HostSyncRule's finding, ungated).
[[nodiscard]] std::optional<Finding> HostSyncFinding(const Facts& facts);
/// periodic_side_work: steps slow in turn from checkpointing, sampling or eval (seed 000 §3).
[[nodiscard]] std::optional<Finding> PeriodicRule(const Facts& facts);

// The ledger's parts at any share (issue 39): the principal part's finding when no rule speaks
// for it (verdict.cc). nullopt when the part is empty.
/// host_work: with host syncs every step HostSyncFinding; without, the host's own work outside
/// the phases (what `other`, the job's own phases and launch overhead hold).
[[nodiscard]] std::optional<Finding> HostWorkFinding(const Facts& facts);
/// side_work: PeriodicRule's finding, else the side-work phases' share of every step.
[[nodiscard]] std::optional<Finding> SideWorkFinding(const Facts& facts);
/// communication_bound of a run: ranks in lockstep (DDP) waiting alike in comm_wait ≥
/// comm_wait_share of the step (the ledger's communication part).
[[nodiscard]] std::optional<Finding> CommWaitRule(const Facts& facts);
/// CommWaitRule's finding at any share.
[[nodiscard]] std::optional<Finding> CommWaitFinding(const Facts& facts);

}  // namespace stallscope::diagnose
