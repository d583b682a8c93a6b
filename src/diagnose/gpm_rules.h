#pragma once
// What GPM's hardware counters (Hopper+: SM active, tensor pipes; gpu::GpmMetrics) add to the GPU
// rules (gpu_rules.cc). Private to src/diagnose.

#include <optional>
#include <string>

#include "diagnose/facts.h"
#include "diagnose/verdict.h"

namespace stallscope::diagnose {

/// util_misleading with hardware evidence: NVML utilization high while GPM says the SMs are
/// mostly idle ("kernels too small to fill the GPU"). Empty when GPM says nothing.
[[nodiscard]] std::optional<Finding> UtilMisleadingByGpm(const Facts& facts, const GpuFacts& gpu);

/// Whether GPM measured the SMs of `gpu` busy (>= gpm_sm_active_busy): a low clock or power
/// then does not mean a trickle of small kernels.
[[nodiscard]] bool GpmSaysSmsBusy(const GpuFacts& gpu);

/// The precision advice of a gpu_bound finding on `gpu`: without GPM the generic one (bf16
/// autocast, TF32); with tensor pipes nearly idle, why (FP32 on CUDA cores, the TF32 switch, or
/// half precision off the tensor path); nothing when the tensor pipes already do the math.
[[nodiscard]] std::optional<std::string> PrecisionAdvice(const Facts& facts, const GpuFacts& gpu);

/// The GPM evidence lines of a gpu_bound finding on `gpu` (SM active, tensor, FP32 pipes).
void AddGpmEvidence(const GpuFacts& gpu, Finding& finding);

}  // namespace stallscope::diagnose
