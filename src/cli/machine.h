#pragma once

#include <memory>
#include <string>

#include "base/clock.h"
#include "gpu/gpu_backend.h"
#include "host/host.h"
#include "sample/sample.h"

namespace stallscope::cli {

/// Options every sampling subcommand shares.
struct SamplingOptions {
  std::string nvml_lib;  ///< --nvml-lib, else $STALLSCOPE_NVML_LIB, else the default search
  std::string proc_root = "/proc";
};

/// What a sampling command needs: GPUs (real or none), host, and the static header.
struct Machine {
  std::unique_ptr<gpu::GpuBackend> gpus;
  host::ProcFs fs;
  sample::RecordingHeader header;
};

/// Opens NVML (or falls back to no GPU, printing once to stderr
/// "no NVIDIA GPU: libnvidia-ml.so.1 not found — GPU metrics unavailable") and fills the header.
[[nodiscard]] Machine OpenMachine(const SamplingOptions& options, const Clock& clock,
                                  int64_t interval_ns);

/// The tool's version string, e.g. "stallscope 0.1.0".
[[nodiscard]] std::string ToolVersion();

}  // namespace stallscope::cli
