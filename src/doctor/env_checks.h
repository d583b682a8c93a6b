#pragma once

#include <string_view>
#include <vector>

#include "doctor/check.h"
#include "doctor/facts.h"

namespace stallscope::doctor {

/// env.omp_num_threads (threads against the usable CPUs and the planned workers), then one check
/// per variable set that slows training (env.cuda_launch_blocking, env.nccl_debug, ...), or
/// env.variables when none is.
[[nodiscard]] std::vector<Check> EnvChecks(const Facts& facts);

/// The variables EnvChecks judges by value (for the OK line and the README).
[[nodiscard]] std::vector<std::string_view> JudgedVariables();

}  // namespace stallscope::doctor
