#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_backend.h"
#include "gpu/nvml_abi.h"
#include "gpu/nvml_loader.h"
#include "gpu/pcie_poller.h"
#include "gpu/poll_plan.h"

namespace stallscope::gpu {

/// The per-sample metrics of an NVML GPU, each probed once at open (btop style: a call that is
/// unsupported is never made again).
enum class NvmlMetric : uint8_t {
  kMemory,              ///< nvmlDeviceGetMemoryInfo
  kUtilization,         ///< nvmlDeviceGetUtilizationRates
  kUtilSamples,         ///< nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)
  kPower,               ///< nvmlDeviceGetPowerUsage
  kPowerLimit,          ///< nvmlDeviceGetEnforcedPowerLimit / PowerManagementLimit
  kEnergy,              ///< nvmlDeviceGetTotalEnergyConsumption
  kTemperature,         ///< nvmlDeviceGetTemperature(GPU)
  kSmClock,             ///< nvmlDeviceGetClockInfo(SM)
  kMemClock,            ///< nvmlDeviceGetClockInfo(MEM)
  kClockEvents,         ///< nvmlDeviceGetCurrentClocksEventReasons / ThrottleReasons
  kPcieThroughput,      ///< nvmlDeviceGetPcieThroughput (TX and RX)
  kPcieLink,            ///< nvmlDeviceGetCurrPcieLinkGeneration / Width
  kEcc,                 ///< nvmlDeviceGetTotalEccErrors(volatile)
  kComputeProcesses,    ///< nvmlDeviceGetComputeRunningProcesses{_v3,_v2,}
  kGraphicsProcesses,   ///< nvmlDeviceGetGraphicsRunningProcesses{_v3,_v2,}
  kProcessUtilization,  ///< nvmlDeviceGetProcessUtilization
  kGpm,                 ///< nvmlGpmSampleGet + nvmlGpmMetricsGet (Hopper and later)
  kCount,
};

/// Stable lower-case name of a metric ("util_samples"), for diagnostics.
[[nodiscard]] std::string_view NvmlMetricName(NvmlMetric metric);

/// GpuBackend over a dlopen'ed NVML. Construct with OpenNvml (gpu_backend.h) or Open below.
/// Not thread-safe: one sampling thread owns it. Sample() does not allocate once its buffers have
/// grown to the number of processes seen.
class NvmlBackend final : public GpuBackend {
 public:
  /// Initialises NVML from `library`, reads static info and probes every metric of every GPU.
  /// Errors: nvmlInit or nvmlDeviceGetCount failing (message includes nvmlErrorString).
  [[nodiscard]] static Result<std::unique_ptr<NvmlBackend>> Open(
      std::unique_ptr<NvmlLibrary> library, const NvmlOptions& options);

  /// Calls nvmlShutdown (NVML reference-counts init), then closes the library.
  ~NvmlBackend() override;
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  size_t DeviceCount() const override { return gpus_.size(); }
  const GpuStatic& Static(size_t i) const override { return gpus_[i].info; }
  using GpuBackend::Sample;
  void Sample(size_t i, PollTiers due, GpuSample& out) override;
  TierCosts ProbedCosts() const override { return probed_costs_; }
  std::string DriverVersion() const override { return driver_version_; }
  std::optional<int32_t> CudaDriverVersion() const override { return cuda_driver_version_; }
  /// ECC history, retired pages / remapped rows, default power limit, the GPU's own PCIe maximum
  /// and its CPU affinity; each absent when unsupported. A lost GPU gives nothing.
  GpuHealth Health(size_t i) override;
  std::string_view Name() const override { return "nvml"; }

  /// Whether GPU `i` answered `metric` when probed (and has not stopped supporting it since).
  [[nodiscard]] bool Supports(size_t i, NvmlMetric metric) const;
  /// Whether GPU `i` is marked lost (GPU_IS_LOST, or 3 consecutive errors on its core call).
  [[nodiscard]] bool Lost(size_t i) const { return gpus_[i].lost; }
  /// The library path or name that was loaded.
  const std::string& LibraryPath() const { return library_->path(); }

 private:
  /// A versioned entry point: the first candidate that exists and does not answer
  /// NVML_ERROR_FUNCTION_NOT_FOUND is used from then on (nvtop: `_v3` → `_v2` → base).
  template <typename Fn, size_t N>
  struct Versioned {
    std::array<Fn*, N> candidates{};
    size_t pos = 0;
    template <typename... Args>
    nvml::nvmlReturn_t Call(Args... args);
  };

  using Metrics = std::bitset<static_cast<size_t>(NvmlMetric::kCount)>;

  struct Gpu {
    nvml::nvmlDevice_t handle = nullptr;
    GpuStatic info;
    Metrics supported;
    bool lost = false;
    int core_errors = 0;                     ///< consecutive errors on the core call
    unsigned long long last_util_ts_us = 0;  ///< newest nvmlDeviceGetSamples timestamp seen
    unsigned long long last_proc_ts_us = 0;  ///< newest process-utilization timestamp seen
    // GPM: two driver sample buffers; `gpm_prev` was taken at gpm_prev_ns (CLOCK_MONOTONIC).
    nvml::nvmlGpmSample_t gpm_prev{};
    nvml::nvmlGpmSample_t gpm_next{};
    int64_t gpm_prev_ns = 0;
  };

  explicit NvmlBackend(std::unique_ptr<NvmlLibrary> library);
  Status Init();
  void AddGpu(uint32_t index, const NvmlOptions& options);
  const char* ErrorString(nvml::nvmlReturn_t rc) const;

  void ReadStatic(Gpu& gpu);
  void ReadMemoryHealth(const Gpu& gpu, GpuHealth& out) const;
  void ReadAll(Gpu& gpu, PollTiers due, GpuSample& out);
  void ReadCore(Gpu& gpu, GpuSample& out);
  void ReadPowerAndThermal(Gpu& gpu, GpuSample& out);
  void ReadClocks(Gpu& gpu, GpuSample& out);
  void ReadEnergy(Gpu& gpu, GpuSample& out);
  void ReadSlow(Gpu& gpu, GpuSample& out);
  /// The probe at open: every tier once, each timed in thread CPU, added to `cost_sum_us`.
  void Probe(Gpu& gpu, TierCosts& cost_sum_us);
  void StartPcie(int64_t period_ns);
  // GPM (nvml_gpm.cc).
  void OpenGpm(Gpu& gpu);
  /// Reads the GPM window since the last read; `force` even when it is under 100 ms (the probe).
  void ReadGpm(Gpu& gpu, GpuSample& out, bool force = false);
  void CloseGpm(Gpu& gpu);
  void ReadUtilSamples(Gpu& gpu, GpuSample& out);
  void ReadProcesses(Gpu& gpu, bool graphics, GpuSample& out);
  void MergeProcessUtilization(Gpu& gpu, GpuSample& out);
  nvml::nvmlReturn_t ListProcesses(Gpu& gpu, bool graphics, unsigned int* count);

  /// Books the outcome of a call for `metric`: true on success; unsupported-type answers clear the
  /// metric for good; GPU_IS_LOST marks the GPU lost.
  static bool Check(Gpu& gpu, NvmlMetric metric, nvml::nvmlReturn_t rc);
  /// Reads one scalar metric through `call(Raw*)` into `field` when the metric is supported.
  template <typename Raw, typename T, typename Call>
  static void ReadScalar(Gpu& gpu, NvmlMetric metric, std::optional<T>& field, Call call);
  static bool Has(const Gpu& gpu, NvmlMetric metric) {
    return gpu.supported.test(static_cast<size_t>(metric));
  }

  std::unique_ptr<NvmlLibrary> library_;  // declared first: closed last
  const NvmlApi& api_;
  Versioned<nvml::InitFn, 2> init_;
  Versioned<nvml::SystemGetCudaDriverVersionFn, 2> get_cuda_version_;
  Versioned<nvml::DeviceGetCountFn, 2> get_count_;
  Versioned<nvml::DeviceGetHandleByIndexFn, 2> get_handle_;
  Versioned<nvml::DeviceGetPciInfoFn, 2> get_pci_;
  Versioned<nvml::DeviceGetUintFn, 2> get_power_limit_;
  Versioned<nvml::DeviceGetUllFn, 2> get_clock_events_;
  Versioned<nvml::DeviceGetRunningProcessesFn, 2> get_compute_;
  Versioned<nvml::DeviceGetRunningProcessesFn, 2> get_graphics_;
  bool initialized_ = false;
  std::string driver_version_;
  std::optional<int32_t> cuda_driver_version_;
  std::vector<Gpu> gpus_;

  // Buffers reused by every Sample() (shared by all GPUs: one sampling thread).
  std::vector<nvml::nvmlSample_t> sample_buf_;
  std::vector<nvml::nvmlProcessInfo_t> proc_buf_;
  std::vector<nvml::nvmlProcessInfo_v1_t> proc_buf_v1_;
  std::vector<nvml::nvmlProcessUtilizationSample_t> proc_util_buf_;
  std::unique_ptr<nvml::nvmlGpmMetricsGet_t> gpm_request_;  // 8 KiB: one for every GPU
  TierCosts probed_costs_{};
  std::unique_ptr<PciePoller> pcie_;  // last: its thread stops before the rest goes
};

}  // namespace stallscope::gpu
