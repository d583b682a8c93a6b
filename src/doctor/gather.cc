#include "doctor/gather.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "base/units.h"
#include "doctor/space.h"
#include "doctor/stacks_check.h"
#include "host/file_reader.h"
#include "host/proc_parse.h"

namespace stallscope::doctor {
namespace {

/// The first line of `dir` + `file`, trimmed; empty when it cannot be read.
std::string FirstLine(host::FileReader& reader, std::string_view dir, std::string_view file) {
  if (reader.ReadPath(dir, file) != 0) return {};
  const std::string_view text = reader.data();
  return std::string(Trim(text.substr(0, text.find('\n'))));
}

/// The version in /proc/driver/nvidia/version's first line ("NVRM version: NVIDIA UNIX x86_64
/// Kernel Module  550.54.15  Tue Mar  5 ..." or "... Open Kernel Module for x86_64  550.54.15
/// Release Build ..."): the first token after "Module" that starts with a digit.
std::string KernelModuleVersion(std::string_view line) {
  const size_t module = line.find("Module");
  if (module == std::string_view::npos) return std::string(line);
  size_t pos = module;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    const size_t end = std::min(line.find(' ', pos), line.size());
    const std::string_view token = line.substr(pos, end - pos);
    if (!token.empty() && token.front() >= '0' && token.front() <= '9') return std::string(token);
    pos = end;
  }
  return std::string(line);
}

std::optional<uint32_t> NumaNodeOf(host::FileReader& reader, const host::ProcFs& fs,
                                   const std::string& bus_id) {
  const std::string address = SysfsPciAddress(bus_id);
  if (address.empty()) return std::nullopt;
  const std::string line =
      FirstLine(reader, fs.sys_root, fmt::format("/bus/pci/devices/{}/numa_node", address));
  int32_t node = -1;
  const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), node);
  // -1: the platform gives no NUMA information (a single-node machine).
  if (ec != std::errc() || p != line.data() + line.size() || node < 0) return std::nullopt;
  return static_cast<uint32_t>(node);
}

std::vector<NumaNode> ReadNumaNodes(host::FileReader& reader, const host::ProcFs& fs) {
  std::vector<NumaNode> nodes;
  const std::filesystem::path dir = std::filesystem::path(fs.sys_root) / "devices/system/node";
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    uint32_t id = 0;
    const char* digits = name.data() + 4;
    const auto [p, err] = std::from_chars(digits, name.data() + name.size(), id);
    if (!name.starts_with("node") || name.size() == 4 || err != std::errc() ||
        p != name.data() + name.size()) {
      continue;
    }
    NumaNode node{id, {}};
    if (reader.ReadPath(it->path().string(), "/cpulist") != 0 ||
        !host::ParseCpuList(reader.data(), node.cpus)) {
      continue;
    }
    nodes.push_back(std::move(node));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return nodes;
}

/// NVIDIA GPUs on the PCI bus: vendor 0x10de (PCI-SIG) with class VGA (0x0300xx) or 3D
/// controller (0x0302xx, the data-center GPUs); empty when the bus cannot be listed.
std::optional<uint32_t> CountNvidiaPciGpus(host::FileReader& reader, const host::ProcFs& fs) {
  const std::filesystem::path dir = std::filesystem::path(fs.sys_root) / "bus/pci/devices";
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return std::nullopt;
  uint32_t count = 0;
  for (const std::filesystem::directory_iterator end; !ec && it != end; it.increment(ec)) {
    const std::string device = it->path().string();
    if (FirstLine(reader, device, "/vendor") != "0x10de") continue;
    const std::string cls = FirstLine(reader, device, "/class");
    if (cls.starts_with("0x0300") || cls.starts_with("0x0302")) ++count;
  }
  return count;
}

std::vector<uint32_t> AllowedCpus(host::FileReader& reader, const host::ProcFs& fs) {
  std::vector<uint32_t> cpus;
  if (reader.ReadPath(fs.proc_root, "/self/status") != 0) return cpus;
  const std::string_view text = reader.data();
  size_t pos = 0;
  while (auto line = host::NextLine(text, pos)) {
    constexpr std::string_view kKey = "Cpus_allowed_list:";
    if (!line->starts_with(kKey)) continue;
    if (!host::ParseCpuList(Trim(line->substr(kKey.size())), cpus)) cpus.clear();
    break;
  }
  return cpus;
}

}  // namespace

std::string SysfsPciAddress(const std::string& nvml_bus_id) {
  unsigned int domain = 0, bus = 0, device = 0, function = 0;
  char tail = 0;
  if (std::sscanf(nvml_bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) !=
          4 ||
      domain > 0xffff || bus > 0xff || device > 0x1f || function > 7) {
    return {};
  }
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, device, function);
}

GpuFacts GpuFactsFrom(gpu::GpuBackend& backend, const host::ProcFs& fs) {
  GpuFacts out;
  out.driver = DriverState::kOk;
  out.driver_version = backend.DriverVersion();
  out.cuda_driver_version = backend.CudaDriverVersion();
  host::FileReader reader;
  for (size_t i = 0; i < backend.DeviceCount(); ++i) {
    GpuFact& g = out.gpus.emplace_back();
    g.info = backend.Static(i);
    g.health = backend.Health(i);
    backend.Sample(i, g.now);
    g.numa_node = NumaNodeOf(reader, fs, g.info.pci_bus_id);
  }
  return out;
}

GpuFacts GatherGpus(const gpu::NvmlOptions& options, const host::ProcFs& fs) {
  host::FileReader reader;
  const std::string module = FirstLine(reader, fs.proc_root, "/driver/nvidia/version");
  Result<std::unique_ptr<gpu::GpuBackend>> opened = gpu::OpenNvml(options);
  GpuFacts out = opened.ok() ? GpuFactsFrom(**opened, fs) : GpuFacts{};
  out.kernel_module_version = module.empty() ? "" : KernelModuleVersion(module);
  out.nvidia_pci_gpus = CountNvidiaPciGpus(reader, fs);
  if (opened.ok()) return out;
  out.nvml_error = opened.error().message;
  if (opened.error().code != ErrorCode::kNotFound) {
    out.driver = DriverState::kInitFailed;
  } else if (!module.empty() || !options.library_path.empty()) {
    out.driver = DriverState::kLibraryMissing;  // a driver, or a library the user named
  } else {
    out.driver = DriverState::kNoDriver;
  }
  return out;
}

HostFacts GatherHost(const host::ProcFs& fs, const std::string& checkpoint_dir) {
  HostFacts out;
  host::HostSampler sampler(fs);
  host::HostSample sample;
  sampler.Sample(0, sample);
  out.online_cpus = sample.cpu_count;
  out.cgroup_quota_cpus = sample.cgroup_cpu_quota_cpus;
  out.cgroup_mem_limit_bytes = sample.cgroup_mem_limit_bytes;
  out.mem_total_bytes = sample.mem_total_bytes;
  out.mem_available_bytes = sample.mem_available_bytes;
  host::FileReader reader;
  out.allowed_cpus = AllowedCpus(reader, fs);
  out.numa_nodes = ReadNumaNodes(reader, fs);
  out.shm = ExamineSpace(fs.shm_path);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    if (limit.rlim_cur != RLIM_INFINITY) out.nofile_soft = limit.rlim_cur;
    if (limit.rlim_max != RLIM_INFINITY) out.nofile_hard = limit.rlim_max;
  }
  out.checkpoint = ExamineSpace(checkpoint_dir);
  out.python_stacks = GatherStackRead(fs);
  return out;
}

std::map<std::string, std::string> EnvironmentMap(const char* const* environ_list) {
  std::map<std::string, std::string> env;
  for (const char* const* e = environ_list; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

}  // namespace stallscope::doctor
