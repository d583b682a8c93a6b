#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/units.h"
#include "gpu/gpu_backend.h"
#include "host/host.h"

namespace stallscope::sample {

/// Version of the recording schema (README "Recording format"). Bump on incompatible change.
inline constexpr int kRecordingSchemaVersion = 1;

/// One moment of the whole machine: every GPU, the host, and the followed process tree.
/// The one sample model every command uses (record, top, run, later serve/HTML).
/// Reused across samples (containers cleared, not freed) so steady-state sampling does not
/// allocate.
struct Sample {
  int64_t mono_ns = 0;               ///< CLOCK_MONOTONIC: the clock phase events use too
  int64_t wall_ns = 0;               ///< CLOCK_REALTIME, ns since the Unix epoch
  std::vector<gpu::GpuSample> gpus;  ///< indexed like RecordingHeader::gpus
  host::HostSample host;
  bool has_processes = false;  ///< a process tree was followed (--pid or -- CMD)
  /// A driver timestamp of this sample (the sub-second utilization samples: wall-clock µs) on
  /// CLOCK_MONOTONIC, through this sample's own wall − monotonic offset.
  int64_t DriverMonoNs(int64_t ts_us) const { return ts_us * 1000 - (wall_ns - mono_ns); }
  std::vector<host::ProcessSample> processes;
};

/// What a recording says about itself once, before its samples.
struct RecordingHeader {
  int schema_version = kRecordingSchemaVersion;
  std::string tool_version;
  std::string hostname;
  uint32_t cpu_count = 0;
  int64_t interval_ns = 0;
  int64_t start_wall_ns = 0;
  int64_t start_mono_ns = 0;
  std::string gpu_backend;  ///< "nvml", "none"
  std::string gpu_note;     ///< why there are no GPU metrics, when there are none
  std::string driver_version;
  std::vector<std::string> command;  ///< the followed command (record -- CMD), else empty
  std::optional<int32_t> root_pid;   ///< the followed process tree, if any
  std::vector<gpu::GpuStatic> gpus;
  /// Which GPU fields come at which rate (issue 28), as planned at open from measured costs.
  gpu::PollPlan poll;
  /// How often the host's slow files are read (host::HostSampler::SetSlowPeriod); 0 = every
  /// sample.
  int64_t host_slow_ns = 0;
};

/// Seed 002 "aggregate_stats" over the GPUs of one sample that are not lost.
struct AggregateStats {
  double total_memory_used_mib = 0;
  double total_memory_total_mib = 0;
  std::optional<double> total_memory_percent;
  std::optional<double> average_utilization_pct;
  std::optional<double> total_power_w;
  std::optional<uint32_t> max_temperature_c;
  uint32_t gpu_count = 0;
};

/// Computes the aggregate over `gpus` (lost GPUs and absent metrics are skipped).
[[nodiscard]] AggregateStats Aggregate(const std::vector<gpu::GpuSample>& gpus);

}  // namespace stallscope::sample
