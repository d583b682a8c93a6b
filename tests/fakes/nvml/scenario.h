#pragma once

// The scenario a fake libnvidia-ml.so.1 plays: GPUs, their load pattern over time, what they do
// not support. Schema: tests/fakes/nvml/README.md. Time `t` is scenario seconds since nvmlInit.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace stallscope::fake_nvml {

/// Metrics a GPU may lack ("not_supported" names in the scenario).
enum Feature : uint32_t {
  kFeatureMemory = 1U << 0,           ///< "memory"
  kFeatureUtilization = 1U << 1,      ///< "utilization"
  kFeatureSamples = 1U << 2,          ///< "samples"
  kFeaturePower = 1U << 3,            ///< "power"
  kFeaturePowerLimit = 1U << 4,       ///< "power_limit"
  kFeatureEnergy = 1U << 5,           ///< "energy"
  kFeatureTemperature = 1U << 6,      ///< "temperature"
  kFeatureClocks = 1U << 7,           ///< "clocks" (current SM/memory clocks)
  kFeatureMaxClocks = 1U << 8,        ///< "max_clocks"
  kFeatureClockEvents = 1U << 9,      ///< "clock_events"
  kFeaturePcieThroughput = 1U << 10,  ///< "pcie_throughput"
  kFeaturePcieLink = 1U << 11,        ///< "pcie_link" (current and max generation/width)
  kFeaturePersistence = 1U << 12,     ///< "persistence"
  kFeatureEcc = 1U << 13,             ///< "ecc"
  kFeatureProcesses = 1U << 14,       ///< "processes" (compute and graphics lists)
  kFeatureProcessUtil = 1U << 15,     ///< "process_util"
  kFeatureRetiredPages = 1U << 16,    ///< "retired_pages" (Ampere and later: not supported)
  kFeatureRemappedRows = 1U << 17,    ///< "remapped_rows" (before Ampere: not supported)
  kFeatureGpm = 1U << 18,             ///< "gpm" (every GPM device call)
};

enum class PatternKind { kSteady, kSawtooth, kDips };

/// GPU utilization over time: `util_high` for a while, then `util_low`, repeating.
struct Pattern {
  PatternKind kind = PatternKind::kSteady;
  double util_high = 100;
  double util_low = 0;
  double period_s = 2.0;      ///< sawtooth: one high+low cycle
  double duty = 0.5;          ///< sawtooth: high fraction of the period (high first)
  double dip_every_s = 10.0;  ///< dips: one dip (low) at the end of every such interval
  double dip_length_s = 1.0;
};

/// A window in which clocks are held down for `reasons` (ClockEventReason mask).
struct Throttle {
  double start_s = 0;
  double end_s = 0;
  uint64_t reasons = 0;
  std::optional<uint32_t> sm_clock_mhz;  ///< SM clock inside the window; default: unchanged
};

struct Process {
  uint32_t pid = 0;
  std::optional<uint64_t> used_memory_mib;  ///< absent → NVML_VALUE_NOT_AVAILABLE
  bool graphics = false;
  std::optional<uint32_t> sm_util;   ///< absent → follows the GPU's pattern
  std::optional<uint32_t> mem_util;  ///< absent → half of sm_util
};

enum class Mig { kDisabled, kEnabled, kUnsupported };

struct Pcie {
  uint32_t gen = 5;
  uint32_t width = 16;
  uint32_t gen_max = 5;
  uint32_t width_max = 16;
  uint32_t tx_kbps = 1000;
  uint32_t rx_kbps = 2000;
  std::optional<uint32_t> gen_gpu_max;  ///< the GPU's own maximum; absent → gen_max
};

/// Pages retired after ECC errors (pre-Ampere GPUs).
struct RetiredPages {
  uint32_t single_bit = 0;  ///< for multiple single-bit errors
  uint32_t double_bit = 0;
  bool pending = false;  ///< waiting for a GPU reset
};

/// Rows remapped after ECC errors (Ampere and later).
struct RemappedRows {
  uint32_t correctable = 0;
  uint32_t uncorrectable = 0;
  bool pending = false;  ///< waiting for a GPU reset
  bool failure = false;  ///< a remapping failed
};

/// GPM (GPU Performance Monitoring, Hopper and later): what nvmlGpmMetricsGet reports. Defaults:
/// a real H100 during a bf16 matmul burn (shared/gpu/h100-2026-11-26/README.md, section 2:
/// SM active 95.9-96.2%, occupancy 14.2%, tensor 93.1-93.4%, DRAM 22.6-26.8%, PCIe TX 5-7 and
/// RX 15-18 MiB/s at 99.3-99.6% graphics utilization).
struct Gpm {
  double sm_active_ratio = 0.96;      ///< SM active % = util(t) x this
  double sm_occupancy_pct = 14.2;     ///< at util 100; scaled by util(t) / 100
  double tensor_active_ratio = 0.93;  ///< any-tensor and HMMA % = util(t) x this
  double dram_active_ratio = 0.25;    ///< DRAM bandwidth % = util(t) x this
  double fp32_active_ratio = 0;
  double fp16_active_ratio = 0;
  double fp64_active_ratio = 0;
  double pcie_tx_mibps = 6;  ///< constant
  double pcie_rx_mibps = 16;
  double nvlink_tx_mibps = 0;
  double nvlink_rx_mibps = 0;
};

struct Gpu {
  std::string name;
  std::string uuid;
  std::string pci_bus_id;  ///< "00000000:17:00.0"
  uint64_t memory_total_mib = 81559;
  uint64_t memory_used_mib = 0;
  double power_limit_w = 700;
  double power_w_at_full = 650;
  double power_w_idle = 70;
  double temperature_c_idle = 35;
  double temperature_c_at_full = 75;
  double mem_util_ratio = 0.5;  ///< memory utilization = GPU utilization x this
  uint32_t sm_clock_max_mhz = 1980;
  uint32_t sm_clock_idle_mhz = 345;
  uint32_t mem_clock_max_mhz = 2619;
  bool persistence = true;
  uint64_t ecc_corrected = 0;                         ///< volatile (since the driver loaded)
  uint64_t ecc_uncorrected = 0;                       ///< volatile
  std::optional<uint64_t> ecc_aggregate_corrected;    ///< lifetime; absent → the volatile count
  std::optional<uint64_t> ecc_aggregate_uncorrected;  ///< lifetime; absent → the volatile count
  std::optional<double> power_default_limit_w;        ///< absent → power_limit_w
  RetiredPages retired_pages;
  RemappedRows remapped_rows;
  std::optional<std::vector<uint32_t>> cpu_affinity;  ///< absent → NOT_SUPPORTED
  Pcie pcie;
  Mig mig = Mig::kDisabled;
  uint32_t not_supported = 0;         ///< Feature mask
  std::optional<double> lost_at_s;    ///< every call from then on: GPU_IS_LOST
  std::optional<double> fail_from_s;  ///< every device call from then on: NVML_ERROR_UNKNOWN
  Pattern pattern;
  std::vector<Throttle> throttle;
  std::vector<Process> processes;
  std::optional<Gpm> gpm;  ///< absent: no GPM (a pre-Hopper GPU)
};

struct Scenario {
  std::string driver_version = "550.54.15";
  int32_t cuda_driver_version = 12040;  ///< nvmlSystemGetCudaDriverVersion: 12.4, as 550 drivers
  /// When set, nvmlInit fails with this return code ("driver_not_loaded" = 9,
  /// "no_permission" = 4, "lib_rm_version_mismatch" = 18).
  std::optional<int> init_error;
  double time_scale = 1.0;  ///< scenario seconds per real second
  /// One driver utilization sample per this many scenario seconds (nvmlDeviceGetSamples,
  /// nvmlDeviceGetUtilizationRates). 1/6 s was observed on Ampere/Hopper; the H100 of
  /// shared/gpu/h100-2026-11-26 recorded one every 200 ms.
  double driver_sample_period_s = 1.0 / 6.0;
  std::optional<double> frozen_at_s;                   ///< when set, time stands still at this t
  std::set<std::string, std::less<>> missing_symbols;  ///< answer FUNCTION_NOT_FOUND
  /// When set, nvmlDeviceGetCount reports this instead of gpus.size() (a broken driver; handles
  /// past the listed GPUs answer INVALID_ARGUMENT).
  std::optional<uint32_t> device_count;
  std::vector<Gpu> gpus;
};

/// Parses a scenario. Errors (kParse) name the JSON path: "gpus[1].pattern.kind: unknown 'saw'".
[[nodiscard]] Result<Scenario> ParseScenario(std::string_view json_text);
/// Reads and parses `path`; errors name the file.
[[nodiscard]] Result<Scenario> LoadScenario(const std::string& path);

/// Instantaneous utilization (percent) at scenario time `t`.
[[nodiscard]] double UtilAt(const Pattern& pattern, double t);
/// Integral of utilization over [0, t], in percent-seconds (closed form, O(1)).
[[nodiscard]] double UtilIntegral(const Pattern& pattern, double t);

}  // namespace stallscope::fake_nvml
