#pragma once
// What an event's name says: the name rules every trace analysis shares (comm kernels, host
// collectives, DataLoader ranges, syncs, graph launches), classified once per interned name.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "trace/trace_model.h"

namespace stallscope::trace {

// ---------------------------------------------------------------------------------------------
// What an event's name says (classified once per interned name, not per event).

/// Bits of `NameTraits`.
enum NameTrait : uint8_t {
  kTraitNone = 0,
  /// Kernel name of a collective (HTA's comm pattern plus NCCL's newer names):
  /// ^nccl | ncclKernel | ncclDevKernel | ^hccl | ^hip.
  kTraitCommKernel = 1 << 0,
  /// Host op of a collective: nccl:* | *c10d::* | *record_param_comms* | ProcessGroup*.
  kTraitCommOp = 1 << 1,
  /// Host range of the data loader: the name contains "DataLoader" (torch:
  /// "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__").
  kTraitDataLoader = 1 << 2,
  kTraitProfilerStep = 1 << 3,  ///< "ProfilerStep#…"
  /// Runtime/driver call that blocks the host until the GPU is done: *Synchronize
  /// (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, cuCtxSynchronize, hip…)
  /// or a synchronous copy (cudaMemcpy*, cuMemcpy* without "Async").
  kTraitSyncCall = 1 << 4,
  /// aten op that reads a device value on the host: aten::item, aten::_local_scalar_dense,
  /// aten::nonzero. A sync only when a runtime/driver call runs inside it (CPU tensors: no sync).
  kTraitSyncOp = 1 << 5,
  /// GPU-side wait on another stream's event: the cuda_sync row "Stream Wait Event" or
  /// cudaStreamWaitEvent (the host does not block).
  kTraitStreamWait = 1 << 6,
};

/// Traits per name id (index = StringTable id).
using NameTraits = std::vector<uint8_t>;

/// Classifies every name of `names` once.
[[nodiscard]] NameTraits ClassifyNames(const StringTable& names);

/// Traits of one name (what ClassifyNames stores).
[[nodiscard]] uint8_t NameTraitsOf(std::string_view name);

/// Collective kernel name (kTraitCommKernel): the one rule every analysis uses.
[[nodiscard]] bool IsCommKernelName(std::string_view name);
/// Host-side collective range (kTraitCommOp): nccl:*, *c10d::*, *record_param_comms*,
/// ProcessGroup*.
[[nodiscard]] bool IsCpuCollectiveName(std::string_view name);
/// A CUDA-graph launch call: cudaGraphLaunch*, cuGraphLaunch*.
[[nodiscard]] bool IsGraphLaunchName(std::string_view name);

// ---------------------------------------------------------------------------------------------
// Runtime / driver calls by what they do (issue 16): GPU idle attribution, the step breakdown's
// notes and the verdict read these kinds, not the bare "runtime" category.

enum class RuntimeCallKind : uint8_t {
  /// Enqueues GPU work: kernel launches (cudaLaunchKernel*, cuLaunchKernel*, cooperative), CUDA
  /// graph launches, asynchronous copies and sets (cudaMemcpyAsync, cudaMemsetAsync, ...).
  kLaunch,
  /// Blocks the host until the GPU is done: *Synchronize, synchronous cudaMemcpy* / cuMemcpy*,
  /// blocking cudaMemset (kTraitSyncCall).
  kSync,
  /// Memory management: cudaMalloc*, cudaFree*, cudaHostAlloc, cudaMallocHost, cudaFreeHost,
  /// cudaHostRegister/Unregister, cuMemAlloc*, cuMemFree*, cuMemCreate/Map/Unmap/Release/
  /// AddressReserve/AddressFree/SetAccess (expandable segments), cudaMemGetInfo, hip*.
  kMemory,
  /// Context, stream, event and module set-up: cuInit, cuCtx*,
  /// cuDevicePrimaryCtx*, cudaSetDevice, cudaGetDeviceCount, cudaDeviceGet*/cudaGetDeviceProperties
  /// (the first runtime call initializes the context), cudaStreamCreate*/Destroy,
  /// cudaEventCreate*/Destroy, cuModule*, cuLibrary*, cudaFuncGetAttributes/SetAttribute,
  /// cuGetProcAddress, cudaGetDriverEntryPoint, graph capture and instantiation. Many repeat
  /// cheaply in steady state (PyTorch asks cudaDeviceGetStreamPriorityRange per stream lookup);
  /// a long one is start-up (the first runtime call creates the context): the rules read time.
  kSetup,
  kOther,  ///< everything else: cudaEventRecord, cudaStreamWaitEvent, cudaGetDevice, queries
};
inline constexpr size_t kRuntimeCallKindCount = 5;

/// "launch", "sync", "memory", "setup", "other".
[[nodiscard]] std::string_view RuntimeCallKindName(RuntimeCallKind k);

/// What a runtime/driver call named `name` does (the name alone decides; "cuda", "cu", "hip"
/// prefixes alike).
[[nodiscard]] RuntimeCallKind RuntimeCallKindOf(std::string_view name);

/// RuntimeCallKindOf per name id (index = StringTable id), as uint8_t.
[[nodiscard]] std::vector<uint8_t> ClassifyRuntimeCalls(const StringTable& names);

/// True for host-thread kinds that are neither runtime/driver calls nor GPU rows.
[[nodiscard]] constexpr bool IsHostOpKind(EventKind k) {
  return k == EventKind::kCpuOp || k == EventKind::kUserAnnotation ||
         k == EventKind::kPythonFunction;
}

/// True for CUDA runtime / driver API calls.
[[nodiscard]] constexpr bool IsRuntimeKind(EventKind k) {
  return k == EventKind::kRuntime || k == EventKind::kDriver;
}

}  // namespace stallscope::trace
