#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/thresholds.h"
#include "doctor/check.h"
#include "doctor/facts.h"

namespace stallscope::doctor {

/// host.shm, host.cpus, host.memory, host.nofile; their limits are `t`'s doctor entries
/// (shm_min_gib, cpu_quota_short_cpus, worker_headroom_cpus, nofile_min).
[[nodiscard]] std::vector<Check> HostChecks(const Facts& facts,
                                            const ThresholdSet& t = kThresholds);

/// storage.checkpoint (checkpoint_free_*_gib), and storage.data (data_*) with --data.
[[nodiscard]] std::vector<Check> StorageChecks(const Facts& facts,
                                               const ThresholdSet& t = kThresholds);

/// CPUs the job can keep busy: min(online, affinity, ceil(cgroup quota)); at least 1.
[[nodiscard]] uint32_t UsableCpus(const HostFacts& host);

/// "2 usable CPUs (online 8, affinity 0-3, cgroup quota 2.0)".
[[nodiscard]] std::string UsableCpusText(const HostFacts& host);

}  // namespace stallscope::doctor
