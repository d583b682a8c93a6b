#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::doctor {

/// Which GPUs CUDA shows a process, from CUDA_VISIBLE_DEVICES (CUDA C++ Programming Guide, "CUDA
/// Environment Variables"; NVIDIA MPS guide): a comma-separated list of GPU indices or UUIDs ("the
/// first few characters of the UUID (including GPU-)" suffice), enumerated in the order listed;
/// CUDA stops at the first entry that names no GPU ("0,2,-1,1" shows GPUs 0 and 2). "MIG-..."
/// entries name MIG instances. NVML ignores the variable, so stallscope resolves it itself.
struct Visibility {
  bool set = false;                        ///< the variable is set (even to "")
  std::vector<uint32_t> gpus;              ///< NVML indices CUDA shows, in CUDA's order
  std::vector<std::string> mig_instances;  ///< "MIG-..." entries, as written
  std::string stopped_at;                  ///< the entry where CUDA stops listing; "" when none
  std::string stop_reason;                 ///< why it names no usable GPU ("no GPU 9", ...)
};

/// Resolves `value` (empty optional: the variable is unset, every GPU is visible) against the
/// UUIDs of the GPUs NVML lists, in NVML index order. Indices are mapped to NVML's order, which
/// is CUDA's when CUDA_DEVICE_ORDER=PCI_BUS_ID or the GPUs are all alike.
[[nodiscard]] Visibility ResolveVisibleDevices(std::optional<std::string_view> value,
                                               const std::vector<std::string>& uuids);

}  // namespace stallscope::doctor
