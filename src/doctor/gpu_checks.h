#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/thresholds.h"
#include "doctor/check.h"
#include "doctor/facts.h"
#include "doctor/visible_devices.h"

namespace stallscope::doctor {

/// The driver (gpu.driver), what CUDA will see (gpu.visible, gpu.device_order), then per GPU that
/// CUDA shows the job: gpu.persistence, gpu.pcie_link, gpu.ecc, gpu.throttle, gpu.power_limit,
/// gpu.mig, gpu.numa, gpu.in_use. Limits: `t`'s retired_pages_*, power_limit_cut, unseen_gpu_*.
[[nodiscard]] std::vector<Check> GpuChecks(const Facts& facts, const ThresholdSet& t = kThresholds);

/// The GPUs CUDA will show the job: CUDA_VISIBLE_DEVICES resolved against NVML's GPUs.
[[nodiscard]] Visibility VisibleGpus(const Facts& facts);

/// Per-direction bandwidth of a PCIe link in GB/s (PCI-SIG: 2.5/5 GT/s with 8b/10b for gen 1-2,
/// 8/16/32 GT/s with 128b/130b for gen 3-5, 64 GT/s FLIT mode for gen 6); empty for unknown gens.
[[nodiscard]] std::optional<double> PcieGBps(uint32_t gen, uint32_t width);

/// "0-3, 8, 10-11": a CPU or GPU list for people.
[[nodiscard]] std::string FormatIdList(const std::vector<uint32_t>& ids);

}  // namespace stallscope::doctor
