#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "gpu/poll_plan.h"

namespace stallscope::gpu {

/// Clock-event (throttle) reasons, as named flags. Bit values are NVML's
/// nvmlClocksEventReason* / nvmlClocksThrottleReason* constants, so the raw mask passes through.
enum ClockEventReason : uint64_t {
  kClockEventGpuIdle = 0x1,
  kClockEventAppClocksSetting = 0x2,
  kClockEventSwPowerCap = 0x4,
  kClockEventHwSlowdown = 0x8,
  kClockEventSyncBoost = 0x10,
  kClockEventSwThermal = 0x20,
  kClockEventHwThermal = 0x40,
  kClockEventHwPowerBrake = 0x80,
  kClockEventDisplayClockSetting = 0x100,
};

/// One named clock-event flag. Names are stable (recordings and reports use them).
struct ClockEventReasonInfo {
  uint64_t bit;
  std::string_view name;
};

/// Every known flag, in bit order. Shared by ClockEventReasonNames and the fake NVML's scenarios.
inline constexpr std::array<ClockEventReasonInfo, 9> kClockEventReasons{{
    {kClockEventGpuIdle, "gpu_idle"},
    {kClockEventAppClocksSetting, "app_clocks_setting"},
    {kClockEventSwPowerCap, "sw_power_cap"},
    {kClockEventHwSlowdown, "hw_slowdown"},
    {kClockEventSyncBoost, "sync_boost"},
    {kClockEventSwThermal, "sw_thermal"},
    {kClockEventHwThermal, "hw_thermal"},
    {kClockEventHwPowerBrake, "hw_power_brake"},
    {kClockEventDisplayClockSetting, "display_clock_setting"},
}};

/// Names of the set flags in `mask`, e.g. {"sw_power_cap", "hw_thermal"}; unknown bits are
/// reported as "0x...".
[[nodiscard]] std::vector<std::string> ClockEventReasonNames(uint64_t mask);

/// MIG state of a GPU.
enum class MigMode { kUnsupported, kDisabled, kEnabled };

/// What does not change while a GPU is sampled. Read once at open.
struct GpuStatic {
  uint32_t index = 0;
  std::string name;        ///< "NVIDIA H100 80GB HBM3"
  std::string uuid;        ///< "GPU-..."
  std::string pci_bus_id;  ///< "00000000:17:00.0"
  std::optional<uint64_t> mem_total_bytes;
  std::optional<uint32_t> power_limit_mw;  ///< enforced power limit
  std::optional<uint32_t> sm_clock_max_mhz;
  std::optional<uint32_t> mem_clock_max_mhz;
  std::optional<uint32_t> pcie_gen_max;
  std::optional<uint32_t> pcie_width_max;
  std::optional<bool> persistence_mode;
  MigMode mig_mode = MigMode::kUnsupported;
  /// Whether GPM metrics (GpuSample::gpm) are sampled; when not, gpm_note says why in one line
  /// ("not supported by this GPU (GPM needs Hopper or later)", "MIG is enabled", ...).
  bool gpm = false;
  std::string gpm_note;
};

/// One point of the driver's sub-second utilization buffer (nvmlDeviceGetSamples).
struct UtilSample {
  int64_t ts_us = 0;  ///< driver timestamp, µs since the Unix epoch (CPU wall clock)
  uint32_t util_pct = 0;
};

/// Per-process GPU use (compute and graphics processes; utilization when the driver gives it).
struct GpuProcess {
  uint32_t pid = 0;
  bool graphics = false;  ///< from the graphics list, else compute
  /// Absent when the driver hides it (NVML_VALUE_NOT_AVAILABLE, e.g. under WDDM).
  std::optional<uint64_t> mem_used_bytes;
  std::optional<uint32_t> sm_util_pct;  ///< from nvmlDeviceGetProcessUtilization
  std::optional<uint32_t> mem_util_pct;
};

/// GPM metrics (NVML GPU Performance Monitoring, Hopper and later): exact averages over the
/// window between two GPM samples, computed by the driver from hardware counters. Unlike the
/// utilization rate (the share of time *any* kernel ran), SM active says how much of the GPU the
/// kernels filled. Each is absent when the driver does not give it.
struct GpmMetrics {
  int64_t window_ns = 0;  ///< the window the averages cover
  std::optional<double>
      graphics_active_pct;                 ///< graphics/compute engine busy (DCGM GR_ENGINE_ACTIVE)
  std::optional<double> sm_active_pct;     ///< SMs with a warp resident (DCGM SM_ACTIVE)
  std::optional<double> sm_occupancy_pct;  ///< warps resident vs the maximum (SM_OCCUPANCY)
  std::optional<double> tensor_active_pct;  ///< any tensor pipe busy (PIPE_TENSOR_ACTIVE)
  std::optional<double> tensor_hmma_pct;    ///< HMMA (fp16/bf16/tf32) tensor pipe busy
  std::optional<double> dram_active_pct;    ///< DRAM bandwidth used vs peak (DRAM_ACTIVE)
  std::optional<double> fp64_active_pct;    ///< non-tensor FP64 pipe (PIPE_FP64_ACTIVE)
  std::optional<double> fp32_active_pct;    ///< non-tensor FP32 pipe (PIPE_FP32_ACTIVE)
  std::optional<double> fp16_active_pct;    ///< non-tensor FP16 pipe (PIPE_FP16_ACTIVE)
  std::optional<double> pcie_tx_mibps;      ///< PCIe from the GPU, MiB/s
  std::optional<double> pcie_rx_mibps;      ///< PCIe to the GPU, MiB/s
  std::optional<double> nvlink_tx_mibps;    ///< NVLink, all links, MiB/s
  std::optional<double> nvlink_rx_mibps;
};

/// Capacity of the sub-second buffer kept per sample: NVML keeps about 100 entries; at 1 s
/// polling and a ~1/6 s driver period we see ~6 new ones; longer intervals keep the newest.
inline constexpr size_t kMaxUtilSamples = 128;

/// One reading of one GPU. Fields the GPU does not support stay empty (never 0 or -1).
/// Reused across samples: containers are cleared, not freed, so steady state does not allocate.
struct GpuSample {
  bool lost = false;  ///< GPU stopped answering (GPU_IS_LOST or repeated errors); all else empty
  std::optional<uint32_t> util_gpu_pct;
  std::optional<uint32_t> util_mem_pct;
  std::optional<uint64_t> mem_used_bytes;
  std::optional<uint64_t> mem_total_bytes;
  std::optional<uint32_t> power_mw;
  std::optional<uint32_t> power_limit_mw;
  std::optional<uint64_t> energy_mj;  ///< total energy since driver load, millijoules
  std::optional<uint32_t> temperature_c;
  std::optional<uint32_t> sm_clock_mhz;
  std::optional<uint32_t> mem_clock_mhz;
  std::optional<uint64_t> clock_event_reasons;  ///< ClockEventReason mask
  std::optional<uint32_t> pcie_tx_kbps;         ///< KB/s, as NVML reports
  std::optional<uint32_t> pcie_rx_kbps;
  std::optional<uint32_t> pcie_gen;
  std::optional<uint32_t> pcie_width;
  std::optional<uint64_t> ecc_volatile_corrected;
  std::optional<uint64_t> ecc_volatile_uncorrected;
  /// New entries of the driver's utilization buffer since the previous sample, oldest first.
  std::array<UtilSample, kMaxUtilSamples> util_samples{};
  size_t util_sample_count = 0;
  std::vector<GpuProcess> processes;
  /// Present on the samples where a GPM window closed (PollTier::kGpm).
  std::optional<GpmMetrics> gpm;

  /// Empties every field, keeping container capacity.
  void Clear();
};

/// For live views (top, serve): fills the fields of the slower tiers that `now` lacks from
/// `before` (the view's previous state), so a value read every 5 s stays on screen between reads.
/// The event-like utilization buffer is not carried; a lost GPU carries nothing. Recordings keep
/// samples as read: this is never applied to them.
void CarrySlowFields(const GpuSample& before, GpuSample& now);

/// Health facts of one GPU that `stallscope doctor` asks once, outside the sampling path (each
/// is a call or two per GPU that no sample needs). Absent = not supported by the GPU or driver.
struct GpuHealth {
  /// The GPU's own maximum PCIe generation; GpuStatic::pcie_gen_max is the link's (the lower of
  /// the GPU's and the slot's), so a smaller value there means the slot or platform limits it.
  std::optional<uint32_t> pcie_gen_gpu_max;
  std::optional<uint32_t> power_limit_default_mw;     ///< the board's default power limit
  std::optional<uint64_t> ecc_aggregate_corrected;    ///< over the GPU's lifetime
  std::optional<uint64_t> ecc_aggregate_uncorrected;  ///< over the GPU's lifetime
  /// Retired pages (pre-Ampere): for multiple single-bit errors, and for double-bit errors.
  std::optional<uint32_t> retired_pages_sbe;
  std::optional<uint32_t> retired_pages_dbe;
  std::optional<bool> retired_pages_pending;  ///< retirement waiting for a GPU reset
  /// Remapped rows (Ampere and later).
  std::optional<uint32_t> remapped_rows_correctable;
  std::optional<uint32_t> remapped_rows_uncorrectable;
  std::optional<bool> remap_pending;  ///< a remapping waiting for a GPU reset
  std::optional<bool> remap_failed;   ///< a remapping failed: the GPU needs service
  /// CPUs close to the GPU (nvmlDeviceGetCpuAffinity), ascending; empty when unknown.
  std::vector<uint32_t> ideal_cpus;
};

/// A source of GPU readings. Implementations: NVML (dlopen), and fakes for tests.
/// Not thread-safe: one sampling thread owns it.
class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  /// Number of GPUs found at open. Fixed for the backend's life (a lost GPU stays, marked lost).
  virtual size_t DeviceCount() const = 0;
  /// Static info of GPU `i` (< DeviceCount()).
  virtual const GpuStatic& Static(size_t i) const = 0;
  /// Reads the fields of the `due` tiers of GPU `i` into `out` (cleared first; the fields of
  /// other tiers stay empty). Never fails: an error marks the GPU lost or leaves the metric
  /// empty. Must not allocate once `out`'s containers have grown.
  virtual void Sample(size_t i, PollTiers due, GpuSample& out) = 0;
  /// Reads every tier (a one-off sample).
  void Sample(size_t i, GpuSample& out) { Sample(i, AllTiers(), out); }
  /// CPU µs each tier cost per GPU when the GPUs were probed at open (gpu/poll_plan.h); the
  /// default knows nothing, so plans use the base periods.
  virtual TierCosts ProbedCosts() const { return {}; }
  /// Driver version ("550.54.15") or empty; NVML version likewise.
  virtual std::string DriverVersion() const = 0;
  /// The newest CUDA version the driver supports, as 1000 x major + 10 x minor (12040 = 12.4);
  /// empty when unknown.
  virtual std::optional<int32_t> CudaDriverVersion() const { return std::nullopt; }
  /// Health facts of GPU `i` (< DeviceCount()), queried now (a few driver calls: not for the
  /// sampling loop). The default knows nothing.
  virtual GpuHealth Health(size_t /*i*/) { return {}; }
  /// Human name of the backend ("nvml", "none", "fake").
  virtual std::string_view Name() const = 0;
};

/// Where to look for NVML.
struct NvmlOptions {
  /// Explicit library path (--nvml-lib or STALLSCOPE_NVML_LIB); empty → the default search:
  /// libnvidia-ml.so.1, then libnvidia-ml.so.
  std::string library_path;
  /// Query nvmlDeviceGetPcieThroughput every `pcie_period_ns` on a thread of its own. The driver
  /// measures over a 20 ms window inside the call (NVML API reference; 20.7 ms on an H100), so it
  /// never runs on the sampling thread; off unless asked (`--pcie`). GPM gives PCIe bytes/s
  /// without blocking on Hopper and later.
  bool query_pcie_throughput = false;
  int64_t pcie_period_ns = 5'000'000'000;
  /// Sample GPM metrics where the GPU supports them.
  bool gpm = true;
};

/// Loads NVML with dlopen, initialises it, probes every metric of every GPU once.
/// Errors: kNotFound when the library cannot be loaded (message: "libnvidia-ml.so.1 not found"),
/// kUnsupported/kInternal when nvmlInit fails (message includes nvmlErrorString).
[[nodiscard]] Result<std::unique_ptr<GpuBackend>> OpenNvml(const NvmlOptions& options);

/// A backend with no GPUs (when NVML is absent): every command keeps working on host data.
[[nodiscard]] std::unique_ptr<GpuBackend> MakeNoGpuBackend();

}  // namespace stallscope::gpu
