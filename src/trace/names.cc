#include "trace/names.h"

#include <initializer_list>

namespace stallscope::trace {

uint8_t NameTraitsOf(std::string_view n) {
  uint8_t t = kTraitNone;
  // HTA's communication kernel pattern (EXPECTED.md: "^nccl|ncclKernel|^hip|^hccl"), plus
  // NCCL ≥ 2.19's ncclDevKernel_*.
  if (n.starts_with("nccl") || n.find("ncclKernel") != std::string_view::npos ||
      n.find("ncclDevKernel") != std::string_view::npos || n.starts_with("hccl") ||
      n.starts_with("hip")) {
    t |= kTraitCommKernel;
  }
  if (n.starts_with("nccl:") || n.find("c10d::") != std::string_view::npos ||
      n.find("record_param_comms") != std::string_view::npos || n.starts_with("ProcessGroup")) {
    t |= kTraitCommOp;
  }
  if (n.find("DataLoader") != std::string_view::npos) t |= kTraitDataLoader;
  if (n.starts_with("ProfilerStep#")) t |= kTraitProfilerStep;
  bool copy =
      n.starts_with("cudaMemcpy") || n.starts_with("cuMemcpy") || n.starts_with("hipMemcpy");
  if (n.ends_with("Synchronize") || (copy && n.find("Async") == std::string_view::npos)) {
    t |= kTraitSyncCall;
  }
  if (n == "aten::item" || n == "aten::_local_scalar_dense" || n == "aten::nonzero") {
    t |= kTraitSyncOp;
  }
  if (n == "Stream Wait Event" || n == "cudaStreamWaitEvent" || n == "cuStreamWaitEvent" ||
      n == "hipStreamWaitEvent") {
    t |= kTraitStreamWait;
  }
  return t;
}

NameTraits ClassifyNames(const StringTable& names) {
  NameTraits traits(names.size(), kTraitNone);
  for (size_t id = 0; id < names.size(); ++id) {
    traits[id] = NameTraitsOf(names.Get(static_cast<uint32_t>(id)));
  }
  return traits;
}

bool IsCommKernelName(std::string_view name) {
  return (NameTraitsOf(name) & kTraitCommKernel) != 0;
}

bool IsCpuCollectiveName(std::string_view name) { return (NameTraitsOf(name) & kTraitCommOp) != 0; }

bool IsGraphLaunchName(std::string_view name) {
  return name.starts_with("cudaGraphLaunch") || name.starts_with("cuGraphLaunch");
}

std::string_view RuntimeCallKindName(RuntimeCallKind k) {
  switch (k) {
    case RuntimeCallKind::kLaunch:
      return "launch";
    case RuntimeCallKind::kSync:
      return "sync";
    case RuntimeCallKind::kMemory:
      return "memory";
    case RuntimeCallKind::kSetup:
      return "setup";
    case RuntimeCallKind::kOther:
      return "other";
  }
  return "other";
}

namespace {

// The call's name without its API prefix: "cudaMalloc" → "Malloc", "cuMemAlloc_v2" →
// "MemAlloc_v2", "hipFree" → "Free"; empty for a name of no CUDA/HIP API.
std::string_view ApiStem(std::string_view n) {
  for (std::string_view prefix : {"cuda", "hip", "cu"}) {
    if (n.starts_with(prefix)) return n.substr(prefix.size());
  }
  return {};
}

bool StartsWithAny(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes) {
    if (s.starts_with(p)) return true;
  }
  return false;
}

}  // namespace

RuntimeCallKind RuntimeCallKindOf(std::string_view name) {
  if (NameTraitsOf(name) & kTraitSyncCall) return RuntimeCallKind::kSync;
  std::string_view s = ApiStem(name);
  if (s.empty()) return RuntimeCallKind::kOther;
  if (StartsWithAny(s, {"LaunchKernel", "LaunchCooperativeKernel", "LaunchHostFunc", "GraphLaunch",
                        "ExtLaunchKernel", "ModuleLaunchKernel"}) ||
      StartsWithAny(s, {"Memset"}) ||
      (s.starts_with("Memcpy") && s.find("Async") != std::string_view::npos)) {
    return RuntimeCallKind::kLaunch;
  }
  if (StartsWithAny(s, {"Malloc",
                        "Free",
                        "HostAlloc",
                        "HostRegister",
                        "HostUnregister",
                        "MemAlloc",
                        "MemFree",
                        "MemHostAlloc",
                        "MemHostRegister",
                        "MemHostUnregister",
                        "MemCreate",
                        "MemMap",
                        "MemUnmap",
                        "MemRelease",
                        "MemAddressReserve",
                        "MemAddressFree",
                        "MemSetAccess",
                        "MemGetInfo",
                        "MemPool",
                        "DeviceSetMemPool",
                        "DeviceGetMemPool"})) {
    return RuntimeCallKind::kMemory;
  }
  if (StartsWithAny(s, {"Init",
                        "Ctx",
                        "DevicePrimaryCtx",
                        "SetDevice",
                        "GetDeviceCount",
                        "GetDeviceProperties",
                        "DeviceGet",
                        "DeviceSet",
                        "StreamCreate",
                        "StreamDestroy",
                        "EventCreate",
                        "EventDestroy",
                        "Module",
                        "Library",
                        "FuncGetAttribute",
                        "FuncSetAttribute",
                        "FuncSetCacheConfig",
                        "GetProcAddress",
                        "GetDriverEntryPoint",
                        "StreamBeginCapture",
                        "StreamEndCapture",
                        "GraphInstantiate",
                        "GraphCreate",
                        "GraphDestroy",
                        "GraphExecDestroy",
                        "DriverGetVersion",
                        "RuntimeGetVersion",
                        "ProfilerStart",
                        "ProfilerStop",
                        "DeviceEnablePeerAccess",
                        "DeviceCanAccessPeer",
                        "IpcOpen",
                        "IpcGet"})) {
    // cuDeviceGet (an ordinal lookup) and cudaDeviceGetAttribute are cheap after start-up; a
    // long one is the context's lazy initialization, which is what the class is for.
    return RuntimeCallKind::kSetup;
  }
  return RuntimeCallKind::kOther;
}

std::vector<uint8_t> ClassifyRuntimeCalls(const StringTable& names) {
  std::vector<uint8_t> kinds(names.size(), static_cast<uint8_t>(RuntimeCallKind::kOther));
  for (size_t id = 0; id < names.size(); ++id) {
    kinds[id] = static_cast<uint8_t>(RuntimeCallKindOf(names.Get(static_cast<uint32_t>(id))));
  }
  return kinds;
}

}  // namespace stallscope::trace
