#pragma once

#include <memory>
#include <string>

#include "base/clock.h"
#include "base/result.h"
#include "gpu/gpu_backend.h"
#include "host/host.h"
#include "sample/sample.h"

namespace stallscope::cli {

/// Options every sampling subcommand shares.
struct SamplingOptions {
  std::string nvml_lib;  ///< --nvml-lib, else $STALLSCOPE_NVML_LIB, else the default search
  std::string proc_root = "/proc";
  bool pcie = false;         ///< --pcie: PCIe throughput on its own thread
  bool no_gpm = false;       ///< --no-gpm
  std::string gpm_interval;  ///< --gpm-interval (a duration), empty = by cost
};

/// What a sampling command needs: GPUs (real or none), host, and the static header.
struct Machine {
  std::unique_ptr<gpu::GpuBackend> gpus;
  host::ProcFs fs;
  sample::RecordingHeader header;
};

/// Opens NVML (or falls back to no GPU, printing once to stderr
/// "no NVIDIA GPU: libnvidia-ml.so.1 not found — GPU metrics unavailable"), plans how often each
/// GPU field is read at `interval_ns` from the costs NVML's probe measured (gpu/poll_plan.h) and
/// fills the header. Errors: a malformed --gpm-interval (kInvalidArgument, the message names it).
[[nodiscard]] Result<Machine> OpenMachine(const SamplingOptions& options, const Clock& clock,
                                          int64_t interval_ns);

/// Checks the sampling options a user typed (today: --gpm-interval), so a command can refuse
/// them before it creates anything.
[[nodiscard]] Status CheckSamplingOptions(const SamplingOptions& options);

/// The shortest --gpm-interval: DCGM's profiling fields have a 100 ms floor (issue 28).
inline constexpr int64_t kMinGpmIntervalNs = 100'000'000;

/// The tool's version string, e.g. "stallscope 0.1.0".
[[nodiscard]] std::string ToolVersion();

}  // namespace stallscope::cli
