#include "trace/names.h"

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

}  // namespace stallscope::trace
