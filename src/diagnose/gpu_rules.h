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
/// StragglerRule's finding at any wait in lockstep (the ledger's rank_wait when it is
/// principal); StragglerRule's otherwise.
[[nodiscard]] std::optional<Finding> StragglerFinding(const Facts& facts);
/// small_batch: low utilization with most GPU memory unused (seed 004).
[[nodiscard]] std::optional<Finding> SmallBatchRule(const Facts& facts);
/// gpu_memory_pressure: memory used ≥ 90% of the GPU's.
[[nodiscard]] std::optional<Finding> MemoryPressureRule(const Facts& facts);
/// gpu_bound: the GPU itself is the limit (compute-bound on a CPU-only run). Of a run: the model's
/// work (WorkShare) above half of gpu_bound_step_share, its confidence growing with the margin
/// over it (the verdict makes it principal above gpu_bound_step_share). Of a profiler trace: its
/// GPUs busy ≥ gpu_bound_util of the window (a CPU trace: compute ≥ cpu_compute_share).
[[nodiscard]] std::optional<Finding> GpuBoundRule(const Facts& facts);
/// GpuBoundRule's finding of a run at any share of the model's work (the ledger's compute part
/// when it is principal); a trace's as GpuBoundRule.
[[nodiscard]] std::optional<Finding> GpuBoundFinding(const Facts& facts);
/// The share of the steady step the model's own work takes: the ledger's compute (the GPU's
/// busy time by CUDA events, else the host's time in the compute phases); on a GPU run without
/// CUDA-event times, NVML's utilization of its least busy GPU (the host's compute phases then
/// time kernel launches, not the GPU's work).
[[nodiscard]] double WorkShare(const Facts& facts);

}  // namespace stallscope::diagnose
