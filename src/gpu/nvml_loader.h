#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>

#include "base/result.h"
#include "gpu/nvml_abi.h"

namespace stallscope::gpu {

/// Entry points resolved from libnvidia-ml with dlsym. A null pointer means the symbol is absent
/// (an older driver): the metric it serves is unsupported, which is not an error. Versioned entry
/// points keep every version found (`_v3`, `_v2`, base); NvmlBackend picks one.
struct NvmlApi {
  nvml::InitFn* init_v2 = nullptr;
  nvml::InitFn* init = nullptr;
  nvml::ShutdownFn* shutdown = nullptr;
  nvml::ErrorStringFn* error_string = nullptr;
  nvml::SystemGetDriverVersionFn* system_get_driver_version = nullptr;
  nvml::SystemGetCudaDriverVersionFn* system_get_cuda_driver_version_v2 = nullptr;
  nvml::SystemGetCudaDriverVersionFn* system_get_cuda_driver_version = nullptr;
  nvml::DeviceGetCountFn* get_count_v2 = nullptr;
  nvml::DeviceGetCountFn* get_count = nullptr;
  nvml::DeviceGetHandleByIndexFn* get_handle_by_index_v2 = nullptr;
  nvml::DeviceGetHandleByIndexFn* get_handle_by_index = nullptr;
  nvml::DeviceGetStringFn* get_name = nullptr;
  nvml::DeviceGetStringFn* get_uuid = nullptr;
  nvml::DeviceGetPciInfoFn* get_pci_info_v3 = nullptr;
  nvml::DeviceGetPciInfoFn* get_pci_info_v2 = nullptr;
  nvml::DeviceGetPciInfoLegacyFn* get_pci_info = nullptr;
  nvml::DeviceGetMemoryInfoFn* get_memory_info = nullptr;
  nvml::DeviceGetUtilizationRatesFn* get_utilization_rates = nullptr;
  nvml::DeviceGetSamplesFn* get_samples = nullptr;
  nvml::DeviceGetUintFn* get_power_usage = nullptr;
  nvml::DeviceGetUintFn* get_enforced_power_limit = nullptr;
  nvml::DeviceGetUintFn* get_power_management_limit = nullptr;
  nvml::DeviceGetUintFn* get_power_management_default_limit = nullptr;
  nvml::DeviceGetUllFn* get_total_energy_consumption = nullptr;
  nvml::DeviceGetTemperatureFn* get_temperature = nullptr;
  nvml::DeviceGetClockFn* get_clock_info = nullptr;
  nvml::DeviceGetClockFn* get_max_clock_info = nullptr;
  nvml::DeviceGetUllFn* get_clocks_event_reasons = nullptr;
  nvml::DeviceGetUllFn* get_clocks_throttle_reasons = nullptr;
  nvml::DeviceGetPcieThroughputFn* get_pcie_throughput = nullptr;
  nvml::DeviceGetUintFn* get_curr_pcie_link_generation = nullptr;
  nvml::DeviceGetUintFn* get_curr_pcie_link_width = nullptr;
  nvml::DeviceGetUintFn* get_max_pcie_link_generation = nullptr;
  nvml::DeviceGetUintFn* get_max_pcie_link_width = nullptr;
  nvml::DeviceGetUintFn* get_gpu_max_pcie_link_generation = nullptr;
  nvml::DeviceGetPersistenceModeFn* get_persistence_mode = nullptr;
  nvml::DeviceGetTotalEccErrorsFn* get_total_ecc_errors = nullptr;
  nvml::DeviceGetRetiredPagesFn* get_retired_pages = nullptr;
  nvml::DeviceGetRetiredPagesPendingStatusFn* get_retired_pages_pending_status = nullptr;
  nvml::DeviceGetRemappedRowsFn* get_remapped_rows = nullptr;
  nvml::DeviceGetCpuAffinityFn* get_cpu_affinity = nullptr;
  nvml::DeviceGetProcessUtilizationFn* get_process_utilization = nullptr;
  nvml::DeviceGetMigModeFn* get_mig_mode = nullptr;
  nvml::DeviceGetRunningProcessesFn* get_compute_processes_v3 = nullptr;
  nvml::DeviceGetRunningProcessesFn* get_compute_processes_v2 = nullptr;
  nvml::DeviceGetRunningProcessesV1Fn* get_compute_processes = nullptr;
  nvml::DeviceGetRunningProcessesFn* get_graphics_processes_v3 = nullptr;
  nvml::DeviceGetRunningProcessesFn* get_graphics_processes_v2 = nullptr;
  nvml::DeviceGetRunningProcessesV1Fn* get_graphics_processes = nullptr;
  nvml::GpmQueryDeviceSupportFn* gpm_query_device_support = nullptr;
  nvml::GpmSampleAllocFn* gpm_sample_alloc = nullptr;
  nvml::GpmSampleFreeFn* gpm_sample_free = nullptr;
  nvml::GpmSampleGetFn* gpm_sample_get = nullptr;
  nvml::GpmMetricsGetFn* gpm_metrics_get = nullptr;
};

/// A dlopen'ed libnvidia-ml (RTLD_NOW | RTLD_LOCAL) and its resolved entry points. Closes the
/// library on destruction: destroy it only after nvmlShutdown. Not thread-safe.
class NvmlLibrary {
 public:
  /// Names tried in order when no explicit path is given: the driver installs the versioned
  /// soname; the unversioned one exists where the development package is installed.
  static constexpr std::array<const char*, 2> kDefaultNames{"libnvidia-ml.so.1", "libnvidia-ml.so"};

  /// Loads `explicit_path` when non-empty (and nothing else), else the first of `default_names`
  /// that loads. Errors (kNotFound): "libnvidia-ml.so.1 not found" when no default name loads;
  /// "cannot load NVML from PATH: <dlerror>" for an explicit path. kUnsupported when the library
  /// lacks the entry points every NVML has (nvmlInit, nvmlShutdown, device count and handle).
  [[nodiscard]] static Result<std::unique_ptr<NvmlLibrary>> Open(
      const std::string& explicit_path, std::span<const char* const> default_names = kDefaultNames);

  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlApi& api() const { return api_; }
  /// The path or name that was loaded.
  const std::string& path() const { return path_; }

 private:
  NvmlLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void Resolve();

  void* handle_;
  std::string path_;
  NvmlApi api_;
};

}  // namespace stallscope::gpu
