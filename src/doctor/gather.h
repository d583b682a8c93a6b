#pragma once

// Gathering doctor's facts from the machine: NVML (through GpuBackend), /proc and /sys under
// fixture-able roots (host::ProcFs), statvfs and getrlimit. Each function reads once; none fails:
// what cannot be read stays empty or carries its reason.

#include <map>
#include <string>

#include "doctor/facts.h"
#include "gpu/gpu_backend.h"
#include "host/host.h"

namespace stallscope::doctor {

/// GPU facts from an open backend: per GPU its static info, health, one sample and its NUMA
/// node (<fs.sys_root>/bus/pci/devices/<bus id>/numa_node). Sets driver = kOk.
[[nodiscard]] GpuFacts GpuFactsFrom(gpu::GpuBackend& backend, const host::ProcFs& fs);

/// Opens NVML (`options`) and gathers GpuFactsFrom it; when NVML cannot be used, says why
/// (kNoDriver / kLibraryMissing / kInitFailed), telling a machine without an NVIDIA driver from
/// one whose driver is loaded (<fs.proc_root>/driver/nvidia/version) but unusable. Either way,
/// counts the NVIDIA GPUs on the PCI bus (<fs.sys_root>/bus/pci/devices).
[[nodiscard]] GpuFacts GatherGpus(const gpu::NvmlOptions& options, const host::ProcFs& fs);

/// Host facts: CPUs (/proc/stat, <proc>/self/status Cpus_allowed_list, cgroup cpu.max), memory,
/// NUMA nodes (<sys>/devices/system/node), /dev/shm (fs.shm_path), RLIMIT_NOFILE of this process
/// (the job inherits it), the space at `checkpoint_dir`, and whether Python stacks can be read
/// (GatherStackRead of stacks_check.h: forks one short-lived child).
[[nodiscard]] HostFacts GatherHost(const host::ProcFs& fs, const std::string& checkpoint_dir);

/// The sysfs name of an NVML PCI bus id: "00000000:17:00.0" → "0000:17:00.0" (domain of 4 hex
/// digits, lower case); "" when malformed.
[[nodiscard]] std::string SysfsPciAddress(const std::string& nvml_bus_id);

/// "KEY=VALUE" strings (environ) as a map; entries without '=' are skipped.
[[nodiscard]] std::map<std::string, std::string> EnvironmentMap(const char* const* environ_list);

}  // namespace stallscope::doctor
