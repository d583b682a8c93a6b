#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "doctor/check.h"
#include "doctor/facts.h"

namespace stallscope::doctor {

/// host.shm, host.cpus, host.memory, host.nofile.
[[nodiscard]] std::vector<Check> HostChecks(const Facts& facts);

/// storage.checkpoint, and storage.data with --data.
[[nodiscard]] std::vector<Check> StorageChecks(const Facts& facts);

/// CPUs the job can keep busy: min(online, affinity, ceil(cgroup quota)); at least 1.
[[nodiscard]] uint32_t UsableCpus(const HostFacts& host);

/// "2 usable CPUs (online 8, affinity 0-3, cgroup quota 2.0)".
[[nodiscard]] std::string UsableCpusText(const HostFacts& host);

}  // namespace stallscope::doctor
