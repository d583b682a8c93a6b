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
  bool demo = false;         ///< --demo: the demo GPUs (DemoGpuDir), never loaded unless asked
};

/// What a sampling command needs: GPUs (real or none), host, and the static header.
struct Machine {
  std::unique_ptr<gpu::GpuBackend> gpus;
  host::ProcFs fs;
  sample::RecordingHeader header;
};

/// Opens NVML (or falls back to no GPU, printing once to stderr
/// "no NVIDIA GPU: libnvidia-ml.so.1 not found — GPU metrics unavailable"; with --demo the demo
/// GPUs' library of DemoGpuDir, its scenario set in $STALLSCOPE_FAKE_NVML_SCENARIO), plans how
/// often each GPU field is read at `interval_ns` from the costs NVML's probe measured
/// (gpu/poll_plan.h) and fills the header. Errors: a malformed --gpm-interval (kInvalidArgument,
/// the message names it);
/// --demo without its files (kNotFound).
[[nodiscard]] Result<Machine> OpenMachine(const SamplingOptions& options, const Clock& clock,
                                          int64_t interval_ns);

/// Where the demo GPUs are (issue 41: `top --demo`, `record --demo`, `serve --demo` let a user
/// without a GPU see the GPU views): stallscope's fake NVML (tests/fakes/nvml), named
/// libnvidia-ml.so.1, and its scenario.json, two made-up GPUs named "DEMO ... (fake NVML)".
/// The folder demo-gpu beside the executable (a build tree) or <exe>/../lib/stallscope/demo-gpu
/// (the bundle, the wheel, `cmake --install`). Errors: kNotFound, naming the folders looked in.
[[nodiscard]] Result<std::string> DemoGpuDir();

/// Checks the sampling options a user typed (today: --gpm-interval), so a command can refuse
/// them before it creates anything.
[[nodiscard]] Status CheckSamplingOptions(const SamplingOptions& options);

/// The shortest --gpm-interval: DCGM's profiling fields have a 100 ms floor (issue 28).
inline constexpr int64_t kMinGpmIntervalNs = 100'000'000;

/// The tool's version string, e.g. "stallscope 0.1.0".
[[nodiscard]] std::string ToolVersion();

}  // namespace stallscope::cli
