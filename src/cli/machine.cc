#include "cli/machine.h"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "base/units.h"
#include "base/version.h"

namespace stallscope::cli {

std::string ToolVersion() { return fmt::format("stallscope {}", kVersion); }

Machine OpenMachine(const SamplingOptions& options, const Clock& clock, int64_t interval_ns) {
  Machine m;
  m.fs.proc_root = options.proc_root;
  gpu::NvmlOptions nvml;
  nvml.library_path = options.nvml_lib;
  // NVML measures PCIe throughput over a 20 ms window per direction (nvml.h), so 8 GPUs cost
  // ~320 ms of wall time per sample: only worth it when sampling at 2 Hz or slower.
  nvml.query_pcie_throughput = interval_ns >= 500'000'000;
  if (nvml.library_path.empty()) {
    if (const char* env = std::getenv("STALLSCOPE_NVML_LIB")) nvml.library_path = env;
  }
  auto opened = gpu::OpenNvml(nvml);
  if (opened.ok()) {
    m.gpus = std::move(opened.value());
  } else {
    m.header.gpu_note =
        fmt::format("no NVIDIA GPU: {} — GPU metrics unavailable", opened.error().message);
    fmt::print(stderr, "{}\n", EscapeControl(m.header.gpu_note));  // dlerror() may carry a path
    m.gpus = gpu::MakeNoGpuBackend();
  }
  auto& h = m.header;
  h.tool_version = ToolVersion();
  char hostname[256] = {};
  if (gethostname(hostname, sizeof(hostname) - 1) == 0) h.hostname = hostname;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  h.cpu_count = cpus > 0 ? static_cast<uint32_t>(cpus) : 0;
  h.interval_ns = interval_ns;
  h.start_wall_ns = clock.WallNs();
  h.start_mono_ns = clock.MonotonicNs();
  h.gpu_backend = std::string(m.gpus->Name());
  h.driver_version = m.gpus->DriverVersion();
  for (size_t i = 0; i < m.gpus->DeviceCount(); ++i) h.gpus.push_back(m.gpus->Static(i));
  return m;
}

}  // namespace stallscope::cli
