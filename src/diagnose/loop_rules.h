#pragma once
// The training loop's rules (loop_rules.cc). Private to src/diagnose; listed in Rules()
// (verdict_rules.cc).

#include <optional>

#include "diagnose/verdict.h"

namespace stallscope::diagnose {

/// host_sync_or_logging: time outside the phases with host syncs every step (seed 000 §2, §5);
/// the fix names the job's sync call sites.
[[nodiscard]] std::optional<Finding> HostSyncRule(const Facts& facts);
/// periodic_side_work: steps slow in turn from checkpointing, sampling or eval (seed 000 §3).
[[nodiscard]] std::optional<Finding> PeriodicRule(const Facts& facts);

}  // namespace stallscope::diagnose
