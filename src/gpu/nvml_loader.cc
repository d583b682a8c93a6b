#include "gpu/nvml_loader.h"

#include <dlfcn.h>

#include <utility>

namespace stallscope::gpu {
namespace {

/// dlsym into a typed function pointer; null when the symbol is absent.
template <typename Fn>
void Sym(void* handle, const char* name, Fn*& out) {
  void* symbol = dlsym(handle, name);
  // POSIX guarantees a dlsym result converts to a function pointer (dlsym(3), "Application usage").
  out = reinterpret_cast<Fn*>(symbol);
}

}  // namespace

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(const std::string& explicit_path,
                                                       std::span<const char* const> default_names) {
  void* handle = nullptr;
  std::string loaded;
  if (!explicit_path.empty()) {
    handle = dlopen(explicit_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return MakeError(ErrorCode::kNotFound, "cannot load NVML from {}: {}", explicit_path,
                       why != nullptr ? why : "unknown dlopen error");
    }
    loaded = explicit_path;
  } else {
    for (const char* name : default_names) {
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        loaded = name;
        break;
      }
    }
    // The CLI prints this after "no NVIDIA GPU: " (contract in gpu_backend.h).
    if (handle == nullptr) return Error{ErrorCode::kNotFound, "libnvidia-ml.so.1 not found"};
  }

  std::unique_ptr<NvmlLibrary> library(new NvmlLibrary(handle, std::move(loaded)));
  library->Resolve();
  const NvmlApi& api = library->api_;
  const char* missing = nullptr;
  if (api.init_v2 == nullptr && api.init == nullptr) {
    missing = "nvmlInit";
  } else if (api.shutdown == nullptr) {
    missing = "nvmlShutdown";
  } else if (api.get_count_v2 == nullptr && api.get_count == nullptr) {
    missing = "nvmlDeviceGetCount";
  } else if (api.get_handle_by_index_v2 == nullptr && api.get_handle_by_index == nullptr) {
    missing = "nvmlDeviceGetHandleByIndex";
  }
  if (missing != nullptr) {
    return MakeError(ErrorCode::kUnsupported, "{} is not a usable NVML: {} not found",
                     library->path_, missing);
  }
  return library;
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

void NvmlLibrary::Resolve() {
  void* h = handle_;
  NvmlApi& a = api_;
  // Exported names: nvml.h (CUDA 12.x); versioned ones newest first, as nvtop resolves them.
  Sym(h, "nvmlInit_v2", a.init_v2);
  Sym(h, "nvmlInit", a.init);
  Sym(h, "nvmlShutdown", a.shutdown);
  Sym(h, "nvmlErrorString", a.error_string);
  Sym(h, "nvmlSystemGetDriverVersion", a.system_get_driver_version);
  Sym(h, "nvmlSystemGetCudaDriverVersion_v2", a.system_get_cuda_driver_version_v2);
  Sym(h, "nvmlSystemGetCudaDriverVersion", a.system_get_cuda_driver_version);
  Sym(h, "nvmlDeviceGetCount_v2", a.get_count_v2);
  Sym(h, "nvmlDeviceGetCount", a.get_count);
  Sym(h, "nvmlDeviceGetHandleByIndex_v2", a.get_handle_by_index_v2);
  Sym(h, "nvmlDeviceGetHandleByIndex", a.get_handle_by_index);
  Sym(h, "nvmlDeviceGetName", a.get_name);
  Sym(h, "nvmlDeviceGetUUID", a.get_uuid);
  Sym(h, "nvmlDeviceGetPciInfo_v3", a.get_pci_info_v3);
  Sym(h, "nvmlDeviceGetPciInfo_v2", a.get_pci_info_v2);
  Sym(h, "nvmlDeviceGetPciInfo", a.get_pci_info);
  Sym(h, "nvmlDeviceGetMemoryInfo", a.get_memory_info);
  Sym(h, "nvmlDeviceGetUtilizationRates", a.get_utilization_rates);
  Sym(h, "nvmlDeviceGetSamples", a.get_samples);
  Sym(h, "nvmlDeviceGetPowerUsage", a.get_power_usage);
  Sym(h, "nvmlDeviceGetEnforcedPowerLimit", a.get_enforced_power_limit);
  Sym(h, "nvmlDeviceGetPowerManagementLimit", a.get_power_management_limit);
  Sym(h, "nvmlDeviceGetPowerManagementDefaultLimit", a.get_power_management_default_limit);
  Sym(h, "nvmlDeviceGetTotalEnergyConsumption", a.get_total_energy_consumption);
  Sym(h, "nvmlDeviceGetTemperature", a.get_temperature);
  Sym(h, "nvmlDeviceGetClockInfo", a.get_clock_info);
  Sym(h, "nvmlDeviceGetMaxClockInfo", a.get_max_clock_info);
  // Renamed in CUDA 12.2 ("throttle" → "event"); the old name is still exported.
  Sym(h, "nvmlDeviceGetCurrentClocksEventReasons", a.get_clocks_event_reasons);
  Sym(h, "nvmlDeviceGetCurrentClocksThrottleReasons", a.get_clocks_throttle_reasons);
  Sym(h, "nvmlDeviceGetPcieThroughput", a.get_pcie_throughput);
  Sym(h, "nvmlDeviceGetCurrPcieLinkGeneration", a.get_curr_pcie_link_generation);
  Sym(h, "nvmlDeviceGetCurrPcieLinkWidth", a.get_curr_pcie_link_width);
  Sym(h, "nvmlDeviceGetMaxPcieLinkGeneration", a.get_max_pcie_link_generation);
  Sym(h, "nvmlDeviceGetMaxPcieLinkWidth", a.get_max_pcie_link_width);
  Sym(h, "nvmlDeviceGetGpuMaxPcieLinkGeneration", a.get_gpu_max_pcie_link_generation);
  Sym(h, "nvmlDeviceGetPersistenceMode", a.get_persistence_mode);
  Sym(h, "nvmlDeviceGetTotalEccErrors", a.get_total_ecc_errors);
  Sym(h, "nvmlDeviceGetRetiredPages", a.get_retired_pages);
  Sym(h, "nvmlDeviceGetRetiredPagesPendingStatus", a.get_retired_pages_pending_status);
  Sym(h, "nvmlDeviceGetRemappedRows", a.get_remapped_rows);
  Sym(h, "nvmlDeviceGetCpuAffinity", a.get_cpu_affinity);
  Sym(h, "nvmlDeviceGetProcessUtilization", a.get_process_utilization);
  Sym(h, "nvmlDeviceGetMigMode", a.get_mig_mode);
  Sym(h, "nvmlDeviceGetComputeRunningProcesses_v3", a.get_compute_processes_v3);
  Sym(h, "nvmlDeviceGetComputeRunningProcesses_v2", a.get_compute_processes_v2);
  Sym(h, "nvmlDeviceGetComputeRunningProcesses", a.get_compute_processes);
  Sym(h, "nvmlDeviceGetGraphicsRunningProcesses_v3", a.get_graphics_processes_v3);
  Sym(h, "nvmlDeviceGetGraphicsRunningProcesses_v2", a.get_graphics_processes_v2);
  Sym(h, "nvmlDeviceGetGraphicsRunningProcesses", a.get_graphics_processes);
  Sym(h, "nvmlGpmQueryDeviceSupport", a.gpm_query_device_support);
  Sym(h, "nvmlGpmSampleAlloc", a.gpm_sample_alloc);
  Sym(h, "nvmlGpmSampleFree", a.gpm_sample_free);
  Sym(h, "nvmlGpmSampleGet", a.gpm_sample_get);
  Sym(h, "nvmlGpmMetricsGet", a.gpm_metrics_get);
}

}  // namespace stallscope::gpu
