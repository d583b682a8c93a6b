#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "doctor/check.h"
#include "doctor/facts.h"

namespace stallscope::doctor {

/// python.interpreter, python.torch, python.cuda (torch's CUDA against the driver and the GPUs
/// CUDA shows).
[[nodiscard]] std::vector<Check> PythonChecks(const Facts& facts);

/// "12.1" → 12010 (NVML's encoding: 1000 x major + 10 x minor); empty when not "N.M".
[[nodiscard]] std::optional<int32_t> ParseCudaVersion(std::string_view text);

}  // namespace stallscope::doctor
