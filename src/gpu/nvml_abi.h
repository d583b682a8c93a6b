#pragma once

// The subset of the NVML C ABI that stallscope calls, declared by hand so that no NVIDIA header is
// needed to build (nvtop does the same). Source of every layout, value and signature below:
// nvml.h (CUDA 12.x), cross-checked against the public NVML API reference
// (docs.nvidia.com/deploy/nvml-api). The names stay NVML's so they can be grepped against nvml.h.
//
// Used by the dlopen backend (nvml_backend.cc) and by the fake libnvidia-ml.so.1
// (tests/fakes/nvml/), which implements these exact signatures.

#include <cstddef>

namespace stallscope::gpu::nvml {

// NOLINTBEGIN(readability-identifier-naming): NVML's own spelling, on purpose.

/// nvmlReturn_t (nvml.h, CUDA 12.x). Values are part of the ABI.
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

/// Opaque device handle (nvml.h: `typedef struct nvmlDevice_st* nvmlDevice_t`).
struct nvmlDevice_st;
typedef struct nvmlDevice_st* nvmlDevice_t;

/// nvml.h: "#define NVML_VALUE_NOT_AVAILABLE (-1)"; usedGpuMemory holds it as unsigned long long.
inline constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE_ULL = ~0ULL;

// Buffer sizes (nvml.h, CUDA 12.x).
inline constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;

/// nvmlMemory_t (v1; nvmlDeviceGetMemoryInfo). Bytes.
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

/// nvmlUtilization_t (nvmlDeviceGetUtilizationRates). Percent over the last sample period.
typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

/// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v2 and _v3 (nvml.h, CUDA 12.x).
typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/// The pre-v2 layout that the unversioned nvmlDeviceGetPciInfo still writes (nvml.h before NVML 9:
/// busId[16] then four reserved words). Its busId sits where busIdLegacy sits in nvmlPciInfo_t.
typedef struct nvmlPciInfoLegacy_st {
  char busId[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  unsigned int reserved0;
  unsigned int reserved1;
  unsigned int reserved2;
  unsigned int reserved3;
} nvmlPciInfoLegacy_t;

/// nvmlValueType_t (CUDA 12.x added SIGNED_INT and UNSIGNED_SHORT).
typedef enum nvmlValueType_enum {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
  NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
  NVML_VALUE_TYPE_COUNT
} nvmlValueType_t;

/// nvmlValue_t: which member is valid is told by an nvmlValueType_t next to it.
typedef union nvmlValue_st {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} nvmlValue_t;

/// nvmlSample_t (nvmlDeviceGetSamples). timeStamp: CPU wall clock, µs since the Unix epoch.
typedef struct nvmlSample_st {
  unsigned long long timeStamp;
  nvmlValue_t sampleValue;
} nvmlSample_t;

/// nvmlSamplingType_t.
typedef enum nvmlSamplingType_enum {
  NVML_TOTAL_POWER_SAMPLES = 0,
  NVML_GPU_UTILIZATION_SAMPLES = 1,
  NVML_MEMORY_UTILIZATION_SAMPLES = 2,
  NVML_ENC_UTILIZATION_SAMPLES = 3,
  NVML_DEC_UTILIZATION_SAMPLES = 4,
  NVML_PROCESSOR_CLK_SAMPLES = 5,
  NVML_MEMORY_CLK_SAMPLES = 6,
  NVML_SAMPLINGTYPE_COUNT
} nvmlSamplingType_t;

/// nvmlProcessInfo_v1_t: what the unversioned Get{Compute,Graphics}RunningProcesses fill.
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;  ///< bytes, or NVML_VALUE_NOT_AVAILABLE
} nvmlProcessInfo_v1_t;

/// nvmlProcessInfo_t (= nvmlProcessInfo_v2_t): what the _v2 and _v3 entry points fill.
typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;  ///< bytes, or NVML_VALUE_NOT_AVAILABLE
  unsigned int gpuInstanceId;        ///< 0xFFFFFFFF unless MIG is enabled
  unsigned int computeInstanceId;    ///< 0xFFFFFFFF unless MIG is enabled
} nvmlProcessInfo_t;

/// nvmlProcessUtilizationSample_t (nvmlDeviceGetProcessUtilization).
typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  ///< CPU wall clock, µs since the Unix epoch
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/// nvmlTemperatureSensors_t.
typedef enum nvmlTemperatureSensors_enum {
  NVML_TEMPERATURE_GPU = 0,
  NVML_TEMPERATURE_COUNT
} nvmlTemperatureSensors_t;

/// nvmlClockType_t.
typedef enum nvmlClockType_enum {
  NVML_CLOCK_GRAPHICS = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
  NVML_CLOCK_VIDEO = 3,
  NVML_CLOCK_COUNT
} nvmlClockType_t;

/// nvmlPcieUtilCounter_t. Throughput is in KB/s (1 KB granularity).
typedef enum nvmlPcieUtilCounter_enum {
  NVML_PCIE_UTIL_TX_BYTES = 0,
  NVML_PCIE_UTIL_RX_BYTES = 1,
  NVML_PCIE_UTIL_COUNT
} nvmlPcieUtilCounter_t;

/// nvmlMemoryErrorType_t.
typedef enum nvmlMemoryErrorType_enum {
  NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
  NVML_MEMORY_ERROR_TYPE_COUNT
} nvmlMemoryErrorType_t;

/// nvmlEccCounterType_t.
typedef enum nvmlEccCounterType_enum {
  NVML_VOLATILE_ECC = 0,
  NVML_AGGREGATE_ECC = 1,
  NVML_ECC_COUNTER_TYPE_COUNT
} nvmlEccCounterType_t;

/// nvmlEnableState_t.
typedef enum nvmlEnableState_enum {
  NVML_FEATURE_DISABLED = 0,
  NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

/// nvmlPageRetirementCause_t (nvmlDeviceGetRetiredPages; pre-Ampere GPUs retire pages, Ampere and
/// later remap rows instead).
typedef enum nvmlPageRetirementCause_enum {
  NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0,
  NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1,
  NVML_PAGE_RETIREMENT_CAUSE_COUNT
} nvmlPageRetirementCause_t;

/// MIG modes returned by nvmlDeviceGetMigMode (nvml.h: NVML_DEVICE_MIG_DISABLE/ENABLE).
inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;

// GPM (GPU Performance Monitoring, Hopper and later; nvml.h "GPM" section, NVML 12.x). A GPM
// sample is an opaque driver snapshot of counters; nvmlGpmMetricsGet turns two snapshots into
// exact averages over the time between them.

/// nvmlGpmMetricId_t: the metrics stallscope asks for (values are part of the ABI).
typedef enum nvmlGpmMetricId_enum {
  NVML_GPM_METRIC_GRAPHICS_UTIL = 1,             ///< % of time the graphics/compute engine was busy
  NVML_GPM_METRIC_SM_UTIL = 2,                   ///< % of SMs that were busy ("SM active")
  NVML_GPM_METRIC_SM_OCCUPANCY = 3,              ///< % of warps active vs the theoretical maximum
  NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5,           ///< % of time the SMs did any tensor operation
  NVML_GPM_METRIC_HMMA_TENSOR_UTIL = 7,          ///< % of time the SMs did HMMA (fp16/bf16/tf32)
  NVML_GPM_METRIC_DRAM_BW_UTIL = 10,             ///< % of DRAM bandwidth used vs the maximum
  NVML_GPM_METRIC_FP64_UTIL = 11,                ///< % of time doing non-tensor FP64 math
  NVML_GPM_METRIC_FP32_UTIL = 12,                ///< % of time doing non-tensor FP32 math
  NVML_GPM_METRIC_FP16_UTIL = 13,                ///< % of time doing non-tensor FP16 math
  NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20,          ///< PCIe traffic from the GPU, MiB/s
  NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21,          ///< PCIe traffic to the GPU, MiB/s
  NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60,  ///< NVLink read bandwidth, all links, MiB/s
  NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61,  ///< NVLink write bandwidth, all links, MiB/s
} nvmlGpmMetricId_t;

/// nvmlGpmSample_t: a handle (one pointer) to a sample buffer from nvmlGpmSampleAlloc.
struct nvmlGpmSample_st;
typedef struct {
  struct nvmlGpmSample_st* handle;
} nvmlGpmSample_t;

/// nvmlGpmMetric_t: one metric of a nvmlGpmMetricsGet request.
typedef struct {
  unsigned int metricId;    ///< in: a nvmlGpmMetricId_t
  nvmlReturn_t nvmlReturn;  ///< out: this metric's status; value is valid only when 0
  double value;             ///< out
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;  ///< out: may be NULL
} nvmlGpmMetric_t;

/// nvml.h sizes metrics[] with NVML_GPM_METRIC_MAX, which grew between releases (98 in CUDA
/// 12.0, 210 later) without a new version number; the driver reads numMetrics entries. Ours is
/// the larger size, so any driver writing up to its own maximum stays inside the struct.
inline constexpr unsigned int kGpmMetricsCapacity = 210;
inline constexpr unsigned int NVML_GPM_METRICS_GET_VERSION = 1;
inline constexpr unsigned int NVML_GPM_SUPPORT_VERSION = 1;

/// nvmlGpmMetricsGet_t.
typedef struct {
  unsigned int version;     ///< in: NVML_GPM_METRICS_GET_VERSION
  unsigned int numMetrics;  ///< in: entries of metrics[] to fill
  nvmlGpmSample_t sample1;  ///< in: the older sample
  nvmlGpmSample_t sample2;  ///< in: the newer sample
  nvmlGpmMetric_t metrics[kGpmMetricsCapacity];
} nvmlGpmMetricsGet_t;

/// nvmlGpmSupport_t.
typedef struct {
  unsigned int version;            ///< in: NVML_GPM_SUPPORT_VERSION
  unsigned int isSupportedDevice;  ///< out
} nvmlGpmSupport_t;

// Layout checks (LP64: x86-64 and aarch64 Linux, the platforms NVML ships for).
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlPciInfo_t) == 68 && offsetof(nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(nvmlPciInfoLegacy_t) == 52);
static_assert(sizeof(nvmlValue_t) == 8 && sizeof(nvmlSample_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16 && sizeof(nvmlProcessInfo_t) == 24);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(sizeof(nvmlReturn_t) == 4 && sizeof(nvmlValueType_t) == 4);
static_assert(sizeof(nvmlPageRetirementCause_t) == 4 && sizeof(nvmlEnableState_t) == 4);
static_assert(sizeof(nvmlGpmSample_t) == 8 && sizeof(nvmlGpmMetric_t) == 40);
static_assert(offsetof(nvmlGpmMetric_t, value) == 8 &&
              offsetof(nvmlGpmMetricsGet_t, metrics) == 24);
static_assert(sizeof(nvmlGpmSupport_t) == 8);

// Function types of the entry points we call (nvml.h, CUDA 12.x). The backend holds pointers to
// them (dlsym); the fake library static_asserts that its definitions have exactly these types.
// Where NVML has versioned symbols, the comment lists the exported names sharing the type.

using InitFn = nvmlReturn_t();  ///< nvmlInit_v2, nvmlInit
using ShutdownFn = nvmlReturn_t();
using ErrorStringFn = const char*(nvmlReturn_t result);
using SystemGetDriverVersionFn = nvmlReturn_t(char* version, unsigned int length);
/// nvmlSystemGetCudaDriverVersion_v2, base: the newest CUDA the driver supports, as
/// 1000 x major + 10 x minor (12040 = CUDA 12.4).
using SystemGetCudaDriverVersionFn = nvmlReturn_t(int* cuda_driver_version);
using DeviceGetCountFn = nvmlReturn_t(unsigned int* device_count);  ///< _v2, base
using DeviceGetHandleByIndexFn = nvmlReturn_t(unsigned int index,
                                              nvmlDevice_t* device);  ///< _v2, base
using DeviceGetStringFn = nvmlReturn_t(nvmlDevice_t device, char* buf,
                                       unsigned int length);  ///< GetName, GetUUID
using DeviceGetPciInfoFn = nvmlReturn_t(nvmlDevice_t device, nvmlPciInfo_t* pci);  ///< _v3, _v2
using DeviceGetPciInfoLegacyFn = nvmlReturn_t(nvmlDevice_t device,
                                              nvmlPciInfoLegacy_t* pci);  ///< base
using DeviceGetMemoryInfoFn = nvmlReturn_t(nvmlDevice_t device, nvmlMemory_t* memory);
using DeviceGetUtilizationRatesFn = nvmlReturn_t(nvmlDevice_t device,
                                                 nvmlUtilization_t* utilization);
using DeviceGetSamplesFn = nvmlReturn_t(nvmlDevice_t device, nvmlSamplingType_t type,
                                        unsigned long long last_seen_time_stamp,
                                        nvmlValueType_t* sample_val_type,
                                        unsigned int* sample_count, nvmlSample_t* samples);
/// GetPowerUsage (mW), GetEnforcedPowerLimit, GetPowerManagementLimit,
/// GetPowerManagementDefaultLimit (mW), GetCurrPcieLinkGeneration/Width,
/// GetMaxPcieLinkGeneration/Width (the link's maximum: the lower of the GPU's and the slot's),
/// GetGpuMaxPcieLinkGeneration (the GPU's own maximum).
using DeviceGetUintFn = nvmlReturn_t(nvmlDevice_t device, unsigned int* value);
/// GetTotalEnergyConsumption (mJ), GetCurrentClocksEventReasons, GetCurrentClocksThrottleReasons.
using DeviceGetUllFn = nvmlReturn_t(nvmlDevice_t device, unsigned long long* value);
using DeviceGetTemperatureFn = nvmlReturn_t(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                            unsigned int* temp);
using DeviceGetClockFn = nvmlReturn_t(nvmlDevice_t device, nvmlClockType_t type,
                                      unsigned int* clock_mhz);  ///< GetClockInfo, GetMaxClockInfo
using DeviceGetPcieThroughputFn = nvmlReturn_t(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                               unsigned int* value);
using DeviceGetPersistenceModeFn = nvmlReturn_t(nvmlDevice_t device, nvmlEnableState_t* mode);
using DeviceGetTotalEccErrorsFn = nvmlReturn_t(nvmlDevice_t device,
                                               nvmlMemoryErrorType_t error_type,
                                               nvmlEccCounterType_t counter_type,
                                               unsigned long long* ecc_counts);
/// pageCount in: the size of `addresses` (0: only count); out: the pages retired for `cause`.
using DeviceGetRetiredPagesFn = nvmlReturn_t(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                             unsigned int* page_count,
                                             unsigned long long* addresses);
/// nvmlDeviceGetRetiredPagesPendingStatus: a retirement that takes effect at the next reset.
using DeviceGetRetiredPagesPendingStatusFn = nvmlReturn_t(nvmlDevice_t device,
                                                          nvmlEnableState_t* is_pending);
/// nvmlDeviceGetRemappedRows (Ampere and later): rows remapped for correctable and uncorrectable
/// errors, a remapping pending until the next reset, and whether a remapping failed.
using DeviceGetRemappedRowsFn = nvmlReturn_t(nvmlDevice_t device, unsigned int* corr_rows,
                                             unsigned int* unc_rows, unsigned int* is_pending,
                                             unsigned int* failure_occurred);
/// nvmlDeviceGetCpuAffinity: the CPUs close to the GPU, as a bitmask of `cpu_set_size` words
/// (CPU c is bit c % 64 of word c / 64 on LP64).
using DeviceGetCpuAffinityFn = nvmlReturn_t(nvmlDevice_t device, unsigned int cpu_set_size,
                                            unsigned long* cpu_set);
using DeviceGetProcessUtilizationFn = nvmlReturn_t(nvmlDevice_t device,
                                                   nvmlProcessUtilizationSample_t* utilization,
                                                   unsigned int* process_samples_count,
                                                   unsigned long long last_seen_time_stamp);
using DeviceGetMigModeFn = nvmlReturn_t(nvmlDevice_t device, unsigned int* current_mode,
                                        unsigned int* pending_mode);
/// Get{Compute,Graphics}RunningProcesses_v3 and _v2.
using DeviceGetRunningProcessesFn = nvmlReturn_t(nvmlDevice_t device, unsigned int* info_count,
                                                 nvmlProcessInfo_t* infos);
/// Get{Compute,Graphics}RunningProcesses (unversioned).
using DeviceGetRunningProcessesV1Fn = nvmlReturn_t(nvmlDevice_t device, unsigned int* info_count,
                                                   nvmlProcessInfo_v1_t* infos);
/// nvmlGpmQueryDeviceSupport: whether the GPU has GPM (Hopper and later, not under vGPU).
using GpmQueryDeviceSupportFn = nvmlReturn_t(nvmlDevice_t device, nvmlGpmSupport_t* gpm_support);
using GpmSampleAllocFn = nvmlReturn_t(nvmlGpmSample_t* gpm_sample);
using GpmSampleFreeFn = nvmlReturn_t(nvmlGpmSample_t gpm_sample);
/// nvmlGpmSampleGet: snapshot the GPU's counters into `gpm_sample`.
using GpmSampleGetFn = nvmlReturn_t(nvmlDevice_t device, nvmlGpmSample_t gpm_sample);
/// nvmlGpmMetricsGet: the metrics between metrics_get->sample1 and ->sample2.
using GpmMetricsGetFn = nvmlReturn_t(nvmlGpmMetricsGet_t* metrics_get);

// NOLINTEND(readability-identifier-naming)

}  // namespace stallscope::gpu::nvml
