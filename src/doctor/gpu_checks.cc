#include "doctor/gpu_checks.h"

#include <algorithm>
#include <array>
#include <functional>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope::doctor {
namespace {

using S = CheckStatus;

Check GpuCheck(const GpuFact& g, std::string id, std::string title, S status, std::string detail,
               std::string fix = {}) {
  Check c = MakeCheck(std::move(id), std::move(title), status, std::move(detail), std::move(fix));
  c.gpu = g.info.index;
  return c;
}

std::string CudaVersionText(int32_t v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

/// The fix for an nvmlInit failure, from the return code NvmlBackend::Init puts at the end of its
/// message ("nvmlInit failed: <nvmlErrorString> (N)").
std::string InitFailureFix(const std::string& error) {
  if (error.ends_with("(18)")) {
    return "the NVIDIA kernel module and its libraries are different versions, usually after a "
           "driver upgrade without a reboot: reboot (or unload and reload the nvidia modules)";
  }
  if (error.ends_with("(9)")) {
    return "load the NVIDIA kernel module (sudo modprobe nvidia) and read `dmesg | grep -i "
           "nvrm` for why it did not load";
  }
  if (error.ends_with("(4)")) {
    return "this user may not open /dev/nvidia*: check the devices' group (video) and, in a "
           "container, that the GPUs were passed in (--gpus)";
  }
  return "run `nvidia-smi`: it prints the driver's own error";
}

/// "2 NVIDIA GPUs are on the PCI bus" when sysfs shows some.
std::string PciGpus(const GpuFacts& g) {
  const uint32_t n = g.nvidia_pci_gpus.value_or(0);
  return fmt::format("{} NVIDIA GPU{} on the PCI bus", n, n == 1 ? " is" : "s are");
}

Check DriverCheck(const GpuFacts& g) {
  const std::string id = "gpu.driver";
  const std::string title = "NVIDIA driver";
  const bool hardware = g.nvidia_pci_gpus.value_or(0) > 0;
  // A driver that is not loaded (NVML's 9), or none at all, matters only where there is a GPU.
  const bool init_no_driver = g.driver == DriverState::kInitFailed && g.nvml_error.ends_with("(9)");
  if ((g.driver == DriverState::kNoDriver || init_no_driver) && !hardware) {
    return MakeCheck(
        id, title, S::kSkip,
        g.nvidia_pci_gpus
            ? fmt::format("no NVIDIA GPU on the PCI bus ({}); GPU checks skipped", g.nvml_error)
            : fmt::format("no NVIDIA GPU: {} and no NVIDIA kernel module is loaded; GPU checks "
                          "skipped",
                          g.nvml_error));
  }
  switch (g.driver) {
    case DriverState::kNoDriver:
      return MakeCheck(
          id, title, S::kFail,
          fmt::format("{}, but no NVIDIA driver is loaded ({})", PciGpus(g), g.nvml_error),
          "install the NVIDIA driver (the distribution's package or NVIDIA's), then "
          "check `nvidia-smi`");
    case DriverState::kLibraryMissing:
      return MakeCheck(
          id, title, S::kFail,
          fmt::format("the NVIDIA kernel module is loaded ({}) but NVML is not usable: {}",
                      g.kernel_module_version.empty() ? "/dev/nvidia*" : g.kernel_module_version,
                      g.nvml_error),
          "in a container: start it with the NVIDIA runtime (docker run --gpus all; "
          "nvidia-container-toolkit); on the host: install the driver's user-space libraries of "
          "the same version as the module (ldconfig -p | grep libnvidia-ml)");
    case DriverState::kInitFailed:
      return MakeCheck(id, title, S::kFail, g.nvml_error, InitFailureFix(g.nvml_error));
    case DriverState::kOk:
      break;
  }
  if (g.gpus.empty()) {
    return MakeCheck(
        id, title, S::kFail, fmt::format("driver {} is loaded but lists no GPU", g.driver_version),
        "run `nvidia-smi -L`; in a container, check NVIDIA_VISIBLE_DEVICES and --gpus");
  }
  std::set<std::string> names;
  for (const GpuFact& gpu : g.gpus) names.insert(gpu.info.name);
  std::string detail = fmt::format("driver {}", g.driver_version);
  if (g.cuda_driver_version) {
    detail += fmt::format(" (CUDA {} or older)", CudaVersionText(*g.cuda_driver_version));
  }
  detail += fmt::format(", {} GPU{}: {}", g.gpus.size(), g.gpus.size() == 1 ? "" : "s",
                        fmt::join(names, ", "));
  return MakeCheck(id, title, S::kOk, std::move(detail));
}

Check VisibleCheck(const Facts& f, const Visibility& v) {
  const std::string id = "gpu.visible";
  const std::string title = "GPUs visible to CUDA";
  const size_t n = f.gpu.gpus.size();
  if (!v.set) {
    return MakeCheck(id, title, S::kOk,
                     fmt::format("all {} (CUDA_VISIBLE_DEVICES is not set)",
                                 n == 1 ? "1 GPU" : fmt::format("{} GPUs", n)));
  }
  const std::string value = f.env.at("CUDA_VISIBLE_DEVICES");
  std::string seen = v.gpus.empty() ? "" : fmt::format("GPU {} of {}", FormatIdList(v.gpus), n);
  if (!v.mig_instances.empty()) {
    seen += fmt::format("{}{} MIG instance{}", seen.empty() ? "" : " and ", v.mig_instances.size(),
                        v.mig_instances.size() == 1 ? "" : "s");
  }
  if (seen.empty()) seen = "no GPU";
  if (!v.stop_reason.empty()) {
    return MakeCheck(
        id, title, S::kFail,
        fmt::format("CUDA_VISIBLE_DEVICES={}: {}, and CUDA ignores that entry and every one after "
                    "it: the job sees {}",
                    value, v.stop_reason, seen),
        fmt::format("list only GPUs that exist, each once: indices 0-{} or UUIDs from "
                    "`nvidia-smi -L`",
                    n == 0 ? 0 : n - 1));
  }
  if (v.gpus.empty() && v.mig_instances.empty()) {
    return MakeCheck(id, title, S::kFail,
                     fmt::format("CUDA_VISIBLE_DEVICES='{}' hides every GPU: "
                                 "torch.cuda.is_available() is False and training runs on the CPU",
                                 value),
                     "unset CUDA_VISIBLE_DEVICES, or list the GPUs to use (e.g. 0,1)");
  }
  return MakeCheck(id, title, S::kOk,
                   fmt::format("{} (CUDA_VISIBLE_DEVICES={}); CUDA numbers them from 0 in that "
                               "order",
                               seen, value));
}

/// CUDA's default order is FASTEST_FIRST, NVML's and nvidia-smi's is the PCI bus (CUDA C++
/// Programming Guide, CUDA_DEVICE_ORDER): on mixed GPUs the same index means different GPUs.
std::optional<Check> DeviceOrderCheck(const Facts& f) {
  std::set<std::string> names;
  for (const GpuFact& g : f.gpu.gpus) names.insert(g.info.name);
  const auto order = f.env.find("CUDA_DEVICE_ORDER");
  if (names.size() < 2 || (order != f.env.end() && order->second == "PCI_BUS_ID")) {
    return std::nullopt;
  }
  return MakeCheck("gpu.device_order", "CUDA device order", S::kWarn,
                   fmt::format("the GPUs differ ({}): CUDA numbers them fastest first, nvidia-smi "
                               "and stallscope by PCI bus, so one index can mean two GPUs",
                               fmt::join(names, ", ")),
                   "export CUDA_DEVICE_ORDER=PCI_BUS_ID");
}

Check PersistenceCheck(const GpuFact& g) {
  const std::string id = "gpu.persistence";
  const std::string title = "persistence mode";
  if (!g.info.persistence_mode) return GpuCheck(g, id, title, S::kSkip, "not reported");
  if (*g.info.persistence_mode) return GpuCheck(g, id, title, S::kOk, "on");
  // NVIDIA driver documentation, "Persistence Daemon": without a client the driver tears the
  // GPU's state down, and the next client pays its initialisation (and ECC scrubbing).
  return GpuCheck(
      g, id, title, S::kWarn,
      "off: the driver deinitialises the GPU whenever no process holds it, so each "
      "job start and each nvidia-smi call waits for it to initialise again",
      fmt::format("sudo nvidia-smi -i {} -pm 1 (or enable nvidia-persistenced)", g.info.index));
}

/// Idle by the driver's own account (the gpu_idle clock-event reason) or by utilization.
bool Idle(const GpuFact& g) {
  if (g.now.clock_event_reasons && (*g.now.clock_event_reasons & gpu::kClockEventGpuIdle) != 0) {
    return true;
  }
  return g.now.util_gpu_pct && *g.now.util_gpu_pct == 0;
}

std::string LinkText(uint32_t gen, uint32_t width) {
  const std::optional<double> gbps = PcieGBps(gen, width);
  return gbps ? fmt::format("gen{} x{} ({:.1f} GB/s each way)", gen, width, *gbps)
              : fmt::format("gen{} x{}", gen, width);
}

Check PcieCheck(const GpuFact& g) {
  const std::string id = "gpu.pcie_link";
  const std::string title = "PCIe link";
  const auto& s = g.info;
  if (!g.now.pcie_gen || !g.now.pcie_width || !s.pcie_gen_max || !s.pcie_width_max) {
    return GpuCheck(g, id, title, S::kSkip, "not reported");
  }
  const uint32_t gen = *g.now.pcie_gen, width = *g.now.pcie_width;
  const uint32_t gen_max = *s.pcie_gen_max, width_max = *s.pcie_width_max;
  const std::string now = LinkText(gen, width);
  const std::string best = LinkText(gen_max, width_max);
  if (width < width_max) {
    return GpuCheck(g, id, title, S::kWarn,
                    fmt::format("{} of {}: fewer lanes than the link supports", now, best),
                    "reseat the GPU, its riser or cable; check that the slot is wired x16 "
                    "(board manual); `nvidia-smi -q -d PCIE` shows the link");
  }
  if (gen < gen_max && !Idle(g)) {
    return GpuCheck(g, id, title, S::kWarn, fmt::format("{} of {} while busy", now, best),
                    "check the slot's PCIe speed in the BIOS and the riser: a link that stays "
                    "below its generation under load is set or trained down");
  }
  if (g.health.pcie_gen_gpu_max && *g.health.pcie_gen_gpu_max > gen_max) {
    return GpuCheck(g, id, title, S::kWarn,
                    fmt::format("{}; the GPU supports gen{} but the slot or platform allows gen{}",
                                best, *g.health.pcie_gen_gpu_max, gen_max),
                    fmt::format("a gen{} slot (or the slot's BIOS setting) doubles host-GPU "
                                "bandwidth, if the platform has one",
                                *g.health.pcie_gen_gpu_max));
  }
  if (gen < gen_max) {
    return GpuCheck(
        g, id, title, S::kOk,
        fmt::format("{} now, {} at most: idle links slow down to save power", now, best));
  }
  return GpuCheck(g, id, title, S::kOk, fmt::format("{} (its maximum)", now));
}

/// "N uncorrectable (M corrected) since the driver loaded", and the lifetime counts when known.
std::string EccCounts(const GpuFact& g) {
  std::string text = fmt::format("{} uncorrectable, {} corrected since the driver loaded",
                                 g.now.ecc_volatile_uncorrected.value_or(0),
                                 g.now.ecc_volatile_corrected.value_or(0));
  if (g.health.ecc_aggregate_uncorrected.value_or(0) > 0) {
    text += fmt::format("; {} uncorrectable in the GPU's lifetime",
                        *g.health.ecc_aggregate_uncorrected);
  }
  return text;
}

/// What the GPU did about bad memory so far: retired pages (pre-Ampere), remapped rows (Ampere+).
std::string MemoryRepairs(const gpu::GpuHealth& h) {
  std::string text;
  if (h.retired_pages_sbe.value_or(0) + h.retired_pages_dbe.value_or(0) > 0) {
    text += fmt::format("; {} pages retired ({} single-bit, {} double-bit)",
                        h.retired_pages_sbe.value_or(0) + h.retired_pages_dbe.value_or(0),
                        h.retired_pages_sbe.value_or(0), h.retired_pages_dbe.value_or(0));
  }
  if (h.remapped_rows_correctable.value_or(0) + h.remapped_rows_uncorrectable.value_or(0) > 0) {
    text += fmt::format(
        "; {} rows remapped ({} for uncorrectable errors)",
        h.remapped_rows_correctable.value_or(0) + h.remapped_rows_uncorrectable.value_or(0),
        h.remapped_rows_uncorrectable.value_or(0));
  }
  return text;
}

Check EccCheck(const GpuFact& g, const ThresholdSet& t) {
  const std::string id = "gpu.ecc";
  const std::string title = "memory errors";
  const gpu::GpuHealth& h = g.health;
  const bool any = g.now.ecc_volatile_uncorrected || h.ecc_aggregate_uncorrected ||
                   h.retired_pages_sbe || h.remapped_rows_correctable;
  if (!any) return GpuCheck(g, id, title, S::kSkip, "not reported (no ECC, or ECC off)");
  const std::string detail = EccCounts(g) + MemoryRepairs(h);
  const std::string reset = fmt::format(
      "with no process on it, reset the GPU (sudo nvidia-smi -r -i {}) or reboot", g.info.index);
  if (h.remap_failed.value_or(false)) {
    return GpuCheck(g, id, title, S::kFail, detail + "; a row remapping FAILED",
                    "the GPU has run out of spare memory rows: it needs service (RMA)");
  }
  if (g.now.ecc_volatile_uncorrected.value_or(0) > 0) {
    return GpuCheck(g, id, title, S::kFail,
                    detail + ": a job on this GPU may have read corrupt memory or been killed",
                    reset + "; if the errors come back, the GPU needs service");
  }
  if (h.remap_pending.value_or(false) || h.retired_pages_pending.value_or(false)) {
    return GpuCheck(g, id, title, S::kFail,
                    detail +
                        "; a repair is pending: the bad memory stays in use until the GPU "
                        "is reset",
                    reset);
  }
  // DCGM's limits (gpu_hardware_limits.h): retired_pages_fail, retired_pages_warn.
  const auto retired =
      static_cast<double>(h.retired_pages_sbe.value_or(0) + h.retired_pages_dbe.value_or(0));
  const double warn = t.retired_pages_warn.value, fail = t.retired_pages_fail.value;
  if (retired >= fail) {
    return GpuCheck(g, id, title, S::kFail, detail + fmt::format(" (DCGM fails a GPU at {})", fail),
                    "the GPU needs service (RMA)");
  }
  if (retired >= warn) {
    return GpuCheck(g, id, title, S::kWarn,
                    detail + fmt::format(" (DCGM warns at {}, fails at {})", warn, fail),
                    "watch the count; plan to replace the GPU");
  }
  return GpuCheck(g, id, title, S::kOk, detail);
}

Check ThrottleCheck(const GpuFact& g) {
  const std::string id = "gpu.throttle";
  const std::string title = "clock throttling";
  if (!g.now.clock_event_reasons) return GpuCheck(g, id, title, S::kSkip, "not reported");
  const uint64_t mask = *g.now.clock_event_reasons;
  const uint64_t hw =
      gpu::kClockEventHwSlowdown | gpu::kClockEventHwThermal | gpu::kClockEventHwPowerBrake;
  const uint64_t slow = hw | gpu::kClockEventSwThermal;
  std::string state;
  if (g.now.sm_clock_mhz && g.info.sm_clock_max_mhz) {
    state = fmt::format("SM clock {} of {} MHz", *g.now.sm_clock_mhz, *g.info.sm_clock_max_mhz);
  }
  if (g.now.temperature_c)
    state += fmt::format("{}{} C", state.empty() ? "" : ", ", *g.now.temperature_c);
  const std::string reasons = fmt::format(
      "{}", fmt::join(gpu::ClockEventReasonNames(mask & ~gpu::kClockEventGpuIdle), ", "));
  if ((mask & slow) != 0) {
    const bool brake = (mask & gpu::kClockEventHwPowerBrake) != 0;
    return GpuCheck(g, id, title, (mask & hw) != 0 ? S::kFail : S::kWarn,
                    fmt::format("slowed now by {}{}{}", reasons, state.empty() ? "" : ": ", state),
                    brake ? "the power brake is asserted by the system (power supply or "
                            "chassis): check the PSUs and the BMC's event log"
                          : "cooling: fans, airflow, inlet temperature "
                            "(nvidia-smi -q -d TEMPERATURE,PERFORMANCE; seed 001 U23)");
  }
  std::string detail = Idle(g) ? "none (idle)" : "none";
  if ((mask & gpu::kClockEventSwPowerCap) != 0) detail = "at its power limit (sw_power_cap)";
  if (!state.empty()) detail += fmt::format(": {}", state);
  return GpuCheck(g, id, title, S::kOk, std::move(detail));
}

Check PowerLimitCheck(const GpuFact& g, const ThresholdSet& t) {
  const std::string id = "gpu.power_limit";
  const std::string title = "power limit";
  const auto limit = g.info.power_limit_mw;
  const auto standard = g.health.power_limit_default_mw;
  if (!limit) return GpuCheck(g, id, title, S::kSkip, "not reported");
  const double watts = *limit / 1000.0;
  if (!standard) return GpuCheck(g, id, title, S::kOk, fmt::format("{:.0f} W", watts));
  const double default_w = *standard / 1000.0;
  // power_limit_cut: boards report limits rounded to a few watts; a cap someone set is a round,
  // large cut.
  if (watts < t.power_limit_cut.value * default_w) {
    return GpuCheck(g, id, title, S::kWarn,
                    fmt::format("{:.0f} W of its default {:.0f} W: clocks drop at the lower limit "
                                "under load",
                                watts, default_w),
                    fmt::format("sudo nvidia-smi -i {} -pl {:.0f} (unless the cap is deliberate, "
                                "e.g. the rack's power budget)",
                                g.info.index, default_w));
  }
  return GpuCheck(g, id, title, S::kOk,
                  fmt::format("{:.0f} W (default {:.0f} W)", watts, default_w));
}

Check MigCheck(const GpuFact& g) {
  const std::string id = "gpu.mig";
  const std::string title = "MIG";
  switch (g.info.mig_mode) {
    case gpu::MigMode::kUnsupported:
      return GpuCheck(g, id, title, S::kOk, "not a MIG-capable GPU");
    case gpu::MigMode::kDisabled:
      return GpuCheck(g, id, title, S::kOk, "off");
    case gpu::MigMode::kEnabled:
      break;
  }
  return GpuCheck(g, id, title, S::kWarn,
                  "on: a process gets one MIG instance (a slice of the GPU's SMs and memory), "
                  "not the whole GPU, and NVML reports no utilization for it",
                  fmt::format("if the job should have the whole GPU: sudo nvidia-smi -i {} -mig 0 "
                              "(with no process on the GPU)",
                              g.info.index));
}

std::vector<uint32_t> Intersect(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::vector<uint32_t> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

Check NumaCheck(const GpuFact& g, const HostFacts& host) {
  const std::string id = "gpu.numa";
  const std::string title = "NUMA placement";
  // The GPU's CPUs: its node's (sysfs), else NVML's affinity mask.
  std::vector<uint32_t> near;
  std::string where;
  if (g.numa_node) {
    for (const NumaNode& node : host.numa_nodes) {
      if (node.id == *g.numa_node) near = node.cpus;
    }
    where = fmt::format("NUMA node {}", *g.numa_node);
  }
  if (near.empty() && !g.health.ideal_cpus.empty()) {
    near = g.health.ideal_cpus;
    where = "its CPU affinity";
  }
  if (host.numa_nodes.size() <= 1 && (!g.numa_node || near.empty())) {
    return GpuCheck(g, id, title, S::kOk, "one NUMA node: every CPU is equally close");
  }
  if (near.empty() || host.allowed_cpus.empty()) {
    return GpuCheck(g, id, title, S::kSkip, "the GPU's NUMA node is not known");
  }
  const std::vector<uint32_t> both = Intersect(host.allowed_cpus, near);
  if (both.empty()) {
    return GpuCheck(g, id, title, S::kWarn,
                    fmt::format("on {} (CPUs {}), but this process may only run on CPUs {}: "
                                "host-to-GPU copies and the input pipeline cross the socket link",
                                where, FormatIdList(near), FormatIdList(host.allowed_cpus)),
                    g.numa_node ? fmt::format("run this GPU's rank on its node: numactl "
                                              "--cpunodebind={0} --membind={0} python train.py",
                                              *g.numa_node)
                                : fmt::format("widen the CPU affinity to CPUs {} (taskset, "
                                              "cpuset)",
                                              FormatIdList(near)));
  }
  return GpuCheck(g, id, title, S::kOk,
                  fmt::format("on {} (CPUs {}); {} of them allowed here", where, FormatIdList(near),
                              both.size()));
}

Check InUseCheck(const GpuFact& g, const ThresholdSet& t) {
  const std::string id = "gpu.in_use";
  const std::string title = "other processes";
  if (g.now.lost)
    return GpuCheck(g, id, title, S::kFail, "the GPU stopped answering (lost)",
                    "reset the GPU or reboot; check `dmesg | grep -i xid`");
  const double used = static_cast<double>(g.now.mem_used_bytes.value_or(0));
  const std::string fix =
      "find the owner (nvidia-smi; ps -o user,etime,cmd -p PID); use another GPU "
      "(CUDA_VISIBLE_DEVICES) or wait: two jobs on one GPU each run slower";
  if (!g.now.processes.empty()) {
    std::vector<std::string> who;
    for (const gpu::GpuProcess& p : g.now.processes) {
      who.push_back(p.mem_used_bytes
                        ? fmt::format("pid {} ({})", p.pid,
                                      FormatBytes(static_cast<double>(*p.mem_used_bytes)))
                        : fmt::format("pid {}", p.pid));
    }
    return GpuCheck(g, id, title, S::kWarn,
                    fmt::format("in use by {}; {} of its memory used: another job, or yours if "
                                "it is already running",
                                fmt::join(who, ", "), FormatBytes(used)),
                    fix);
  }
  // The driver reserves a few hundred MiB; more (unseen_gpu_mem_gib) with no listed process is a
  // process this container cannot see.
  if (used > t.unseen_gpu_mem_gib.value * kGiB ||
      g.now.util_gpu_pct.value_or(0) > t.unseen_gpu_util_pct.value) {
    return GpuCheck(
        g, id, title, S::kWarn,
        fmt::format("{} of memory used, {}% busy, by processes not visible here (another "
                    "container?)",
                    FormatBytes(used), g.now.util_gpu_pct.value_or(0)),
        fix);
  }
  return GpuCheck(g, id, title, S::kOk,
                  g.now.mem_used_bytes ? fmt::format("none ({} used)", FormatBytes(used)) : "none");
}

}  // namespace

std::optional<double> PcieGBps(uint32_t gen, uint32_t width) {
  // GB/s per lane and direction after line coding.
  constexpr std::array<double, 7> kPerLane{0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.563};
  if (gen == 0 || gen >= kPerLane.size()) return std::nullopt;
  return kPerLane[gen] * width;
}

std::string FormatIdList(const std::vector<uint32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? fmt::format("{}", ids[i])
                  : fmt::format("{}{}{}", ids[i], j == i + 1 ? ", " : "-", ids[j]);
    i = j + 1;
  }
  return out;
}

Visibility VisibleGpus(const Facts& f) {
  std::vector<std::string> uuids;
  for (const GpuFact& g : f.gpu.gpus) uuids.push_back(g.info.uuid);
  const auto it = f.env.find("CUDA_VISIBLE_DEVICES");
  return ResolveVisibleDevices(
      it == f.env.end() ? std::nullopt : std::optional<std::string_view>(it->second), uuids);
}

std::vector<Check> GpuChecks(const Facts& f, const ThresholdSet& t) {
  std::vector<Check> out{DriverCheck(f.gpu)};
  if (f.gpu.driver != DriverState::kOk || f.gpu.gpus.empty()) return out;
  const Visibility visible = VisibleGpus(f);
  out.push_back(VisibleCheck(f, visible));
  if (auto order = DeviceOrderCheck(f)) out.push_back(std::move(*order));
  // Per-GPU checks cover the GPUs the job will use; with MIG instances named, every GPU.
  std::vector<const GpuFact*> gpus;
  for (const GpuFact& g : f.gpu.gpus) {
    const bool shown =
        std::find(visible.gpus.begin(), visible.gpus.end(), g.info.index) != visible.gpus.end();
    if (shown || !visible.mig_instances.empty()) gpus.push_back(&g);
  }
  auto ecc = [&t](const GpuFact& g) { return EccCheck(g, t); };
  auto power = [&t](const GpuFact& g) { return PowerLimitCheck(g, t); };
  using One = std::function<Check(const GpuFact&)>;
  for (const One& check : {One{PersistenceCheck}, One{PcieCheck}, One{ecc}, One{ThrottleCheck},
                           One{power}, One{MigCheck}}) {
    for (const GpuFact* g : gpus) out.push_back(check(*g));
  }
  for (const GpuFact* g : gpus) out.push_back(NumaCheck(*g, f.host));
  for (const GpuFact* g : gpus) out.push_back(InUseCheck(*g, t));
  return out;
}

}  // namespace stallscope::doctor
