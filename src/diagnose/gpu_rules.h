#pragma once
// The GPU rules (gpu_rules.cc). Private to src/diagnose; listed in Rules() (verdict_rules.cc).

#include <optional>

#include "diagnose/verdict.h"

namespace stallscope::diagnose {

/// gpu_throttled: clock-event reasons of thermal/power slowdown in ≥ 10% of samples.
[[nodiscard]] std::optional<Finding> ThrottledRule(const Facts& facts);
/// util_misleading: high utilization with low SM clock and power (seed 001 T2/U21).
[[nodiscard]] std::optional<Finding> UtilMisleadingRule(const Facts& facts);
/// load_imbalance: utilization CV across GPUs (seed 002 classes).
[[nodiscard]] std::optional<Finding> ImbalanceRule(const Facts& facts);
/// straggler: one rank's mean step ≥ 1.15× the median rank's.
[[nodiscard]] std::optional<Finding> StragglerRule(const Facts& facts);
/// small_batch: low utilization with most GPU memory unused (seed 004).
[[nodiscard]] std::optional<Finding> SmallBatchRule(const Facts& facts);
/// gpu_memory_pressure: memory used ≥ 90% of the GPU's.
[[nodiscard]] std::optional<Finding> MemoryPressureRule(const Facts& facts);
/// gpu_bound: the GPU itself is the limit (compute-bound on a CPU-only run).
[[nodiscard]] std::optional<Finding> GpuBoundRule(const Facts& facts);

}  // namespace stallscope::diagnose
