#include "cli/machine.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "base/thresholds.h"
#include "base/units.h"
#include "base/version.h"

namespace stallscope::cli {

std::string ToolVersion() { return fmt::format("stallscope {}", kVersion); }

namespace {

Result<std::optional<int64_t>> GpmIntervalNs(const SamplingOptions& options) {
  if (options.gpm_interval.empty()) return std::optional<int64_t>();
  auto parsed = ParseDurationNs(options.gpm_interval);
  if (!parsed.ok()) {
    return MakeError(ErrorCode::kInvalidArgument, "--gpm-interval: {}", parsed.error().message);
  }
  if (*parsed < kMinGpmIntervalNs) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--gpm-interval {} is below the 100ms minimum (DCGM's profiling floor)",
                     EscapeControl(options.gpm_interval));
  }
  if (options.no_gpm) {
    return MakeError(ErrorCode::kInvalidArgument, "give either --gpm-interval or --no-gpm");
  }
  return std::optional<int64_t>(*parsed);
}

}  // namespace

Status CheckSamplingOptions(const SamplingOptions& options) {
  TRY(auto gpm_ns, GpmIntervalNs(options));
  (void)gpm_ns;
  if (options.demo && !options.nvml_lib.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "give either --demo or --nvml-lib");
  }
  return OkStatus();
}

Result<std::string> DemoGpuDir() {
  // POSIX calls, not <filesystem>: this file is in the front binary (src/front.cc).
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf);
  if (n <= 0 || static_cast<size_t>(n) == sizeof buf) {
    return MakeError(ErrorCode::kNotFound, "--demo: cannot find this executable's folder");
  }
  // /proc/self/exe is absolute: "/" + the folders to the executable.
  std::string exe_dir(buf, static_cast<size_t>(n));
  exe_dir.resize(exe_dir.rfind('/'));
  const std::string prefix = exe_dir.substr(0, exe_dir.rfind('/'));
  const std::string dirs[] = {exe_dir + "/demo-gpu", prefix + "/lib/stallscope/demo-gpu"};
  for (const std::string& dir : dirs) {
    if (access((dir + "/libnvidia-ml.so.1").c_str(), R_OK) == 0 &&
        access((dir + "/scenario.json").c_str(), R_OK) == 0) {
      return dir;
    }
  }
  return MakeError(ErrorCode::kNotFound,
                   "--demo: the demo GPUs are not in this installation (no libnvidia-ml.so.1 and "
                   "scenario.json in {} or {})",
                   EscapeControl(dirs[0]), EscapeControl(dirs[1]));
}

Result<Machine> OpenMachine(const SamplingOptions& options, const Clock& clock,
                            int64_t interval_ns) {
  TRY(const std::optional<int64_t> gpm_ns, GpmIntervalNs(options));
  Machine m;
  m.fs.proc_root = options.proc_root;
  gpu::NvmlOptions nvml;
  nvml.library_path = options.nvml_lib;
  // PCIe throughput blocks 20 ms per direction (nvml.h; 20.7 ms on an H100): only when asked,
  // and then on its own thread (gpu/pcie_poller.h).
  nvml.query_pcie_throughput = options.pcie;
  nvml.pcie_period_ns = static_cast<int64_t>(kThresholds.poll_pcie_s.value * 1e9);
  nvml.gpm = !options.no_gpm;
  if (options.demo) {
    TRY(const std::string dir, DemoGpuDir());
    nvml.library_path = dir + "/libnvidia-ml.so.1";
    // The fake reads its scenario at nvmlInit (tests/fakes/nvml/README.md).
    setenv("STALLSCOPE_FAKE_NVML_SCENARIO", (dir + "/scenario.json").c_str(), 1);
    fmt::print(stderr, "demo GPUs: stallscope's fake NVML, not real hardware ({})\n",
               EscapeControl(dir));
  } else if (nvml.library_path.empty()) {
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
  h.poll = gpu::PlanPolling({.tick_ns = interval_ns,
                             .gpus = m.gpus->DeviceCount(),
                             .cost_us = m.gpus->ProbedCosts(),
                             .gpm_ns = gpm_ns,
                             .pcie = options.pcie && m.gpus->DeviceCount() > 0},
                            kThresholds);
  h.host_slow_ns =
      std::max(interval_ns, static_cast<int64_t>(kThresholds.poll_host_slow_s.value * 1e9));
  return m;
}

}  // namespace stallscope::cli
