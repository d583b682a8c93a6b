// The fake libnvidia-ml's health entry points, the ones `stallscope doctor` asks once per GPU:
// CUDA driver version, default power limit, the GPU's own PCIe maximum, retired pages, remapped
// rows and CPU affinity. Scenario keys: README.md next to this file.

#include <cmath>
#include <type_traits>

#include "fake_state.h"
#include "gpu/nvml_abi.h"
#include "scenario.h"

namespace stallscope::fake_nvml {
namespace {

nvmlReturn_t GetCudaDriverVersion(const char* fn, int* version) {
  return OnSystem(fn, [&](State& s) {
    if (version == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *version = s.scenario.cuda_driver_version;
    return nv::NVML_SUCCESS;
  });
}

}  // namespace

// ---- Exported entry points (names and signatures: nvml.h, CUDA 12.x) ----------------------

FAKE_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  return GetCudaDriverVersion(__func__, version);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nv::nvmlDevice_t device,
                                                                    unsigned int* limit) {
  return OnGpu(__func__, device, kFeaturePowerLimit, [&](const Ctx& c) {
    if (limit == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    const double watts = c.gpu.power_default_limit_w.value_or(c.gpu.power_limit_w);
    *limit = static_cast<unsigned int>(std::lround(watts * 1000.0));
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages(nv::nvmlDevice_t device,
                                                     nv::nvmlPageRetirementCause_t cause,
                                                     unsigned int* count,
                                                     unsigned long long* addresses) {
  return OnGpu(__func__, device, kFeatureRetiredPages, [&](const Ctx& c) {
    if (count == nullptr || cause >= nv::NVML_PAGE_RETIREMENT_CAUSE_COUNT) {
      return nv::NVML_ERROR_INVALID_ARGUMENT;
    }
    const unsigned int pages = cause == nv::NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
                                   ? c.gpu.retired_pages.double_bit
                                   : c.gpu.retired_pages.single_bit;
    // NVML API reference: pageCount is set to the number of pages; a buffer too small for them
    // gives INSUFFICIENT_SIZE.
    const unsigned int room = *count;
    *count = pages;
    if (room < pages || (pages > 0 && addresses == nullptr)) {
      return nv::NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int k = 0; k < pages; ++k) addresses[k] = 0x100000ULL * (k + 1);
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nv::nvmlDevice_t device,
                                                                  nv::nvmlEnableState_t* pending) {
  return OnGpu(__func__, device, kFeatureRetiredPages, [&](const Ctx& c) {
    if (pending == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *pending = c.gpu.retired_pages.pending ? nv::NVML_FEATURE_ENABLED : nv::NVML_FEATURE_DISABLED;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nv::nvmlDevice_t device,
                                                    unsigned int cpu_set_size,
                                                    unsigned long* cpu_set) {
  return OnGpu(__func__, device, 0, [&](const Ctx& c) {
    if (cpu_set == nullptr || cpu_set_size == 0) return nv::NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu.cpu_affinity) return nv::NVML_ERROR_NOT_SUPPORTED;
    constexpr unsigned int kBits = sizeof(unsigned long) * 8;
    for (unsigned int k = 0; k < cpu_set_size; ++k) cpu_set[k] = 0;
    for (const uint32_t cpu : *c.gpu.cpu_affinity) {
      if (cpu / kBits < cpu_set_size) cpu_set[cpu / kBits] |= 1UL << (cpu % kBits);
    }
    return nv::NVML_SUCCESS;
  });
}

#ifndef FAKE_NVML_LEGACY
// Added after the old driver the legacy build plays (418): the _v2 name, row remapping (450,
// Ampere) and the GPU's own PCIe maximum (510).

FAKE_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return GetCudaDriverVersion(__func__, version);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nv::nvmlDevice_t device,
                                                     unsigned int* corr_rows,
                                                     unsigned int* unc_rows,
                                                     unsigned int* is_pending,
                                                     unsigned int* failure_occurred) {
  return OnGpu(__func__, device, kFeatureRemappedRows, [&](const Ctx& c) {
    if (corr_rows == nullptr || unc_rows == nullptr || is_pending == nullptr ||
        failure_occurred == nullptr) {
      return nv::NVML_ERROR_INVALID_ARGUMENT;
    }
    const RemappedRows& rows = c.gpu.remapped_rows;
    *corr_rows = rows.correctable;
    *unc_rows = rows.uncorrectable;
    *is_pending = rows.pending ? 1 : 0;
    *failure_occurred = rows.failure ? 1 : 0;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nv::nvmlDevice_t device,
                                                                 unsigned int* gen) {
  return OnGpu(__func__, device, kFeaturePcieLink, [&](const Ctx& c) {
    if (gen == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *gen = c.gpu.pcie.gen_gpu_max.value_or(c.gpu.pcie.gen_max);
    return nv::NVML_SUCCESS;
  });
}

static_assert(
    std::is_same_v<decltype(nvmlSystemGetCudaDriverVersion_v2), nv::SystemGetCudaDriverVersionFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetRemappedRows), nv::DeviceGetRemappedRowsFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetGpuMaxPcieLinkGeneration), nv::DeviceGetUintFn>);
#endif  // FAKE_NVML_LEGACY

static_assert(
    std::is_same_v<decltype(nvmlSystemGetCudaDriverVersion), nv::SystemGetCudaDriverVersionFn>);
static_assert(
    std::is_same_v<decltype(nvmlDeviceGetPowerManagementDefaultLimit), nv::DeviceGetUintFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetRetiredPages), nv::DeviceGetRetiredPagesFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetRetiredPagesPendingStatus),
                             nv::DeviceGetRetiredPagesPendingStatusFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetCpuAffinity), nv::DeviceGetCpuAffinityFn>);

}  // namespace stallscope::fake_nvml
