#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trace/names.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

/// Statistics of one kernel name on one rank.
struct KernelStats {
  uint32_t name_id = 0;  ///< into RankTrace::names
  std::string name;      ///< full name as in the trace (shorten with ShortKernelName)
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t max_ns = 0;
  double mean_ns = 0;
  /// total_ns / KernelReport::gpu_busy_ns (0 when the GPU was never busy). Kernels on
  /// concurrent streams overlap, so shares of different kernels can add up to more than 1.
  double busy_share = 0;
  bool tensor_core = false;    ///< the name matches kTensorCoreKernelPatterns
  bool communication = false;  ///< the name matches IsCommKernelName
};

/// Copy direction, from the Kineto name "Memcpy HtoD (Pageable -> Device)".
enum class MemcpyDirection : uint8_t { kHtoD, kDtoH, kDtoD, kHtoH, kPtoP, kOther };
/// Host side of a copy, from the parenthesised part of the name.
enum class HostMemory : uint8_t {
  kPageable,  ///< "Pageable": staged through a bounce buffer, synchronous w.r.t. the host
  kPinned,    ///< "Pinned": page-locked, truly asynchronous
  kManaged,   ///< "Managed": unified memory
  kNone,      ///< no host side ("Device -> Device", peer copies)
  kUnknown,   ///< not a Kineto memcpy name
};
[[nodiscard]] std::string_view MemcpyDirectionName(MemcpyDirection d);
[[nodiscard]] std::string_view HostMemoryName(HostMemory m);

struct MemcpyKind {
  MemcpyDirection direction = MemcpyDirection::kOther;
  HostMemory host_memory = HostMemory::kUnknown;
};
/// Parses "Memcpy HtoD (Pageable -> Device)" → {kHtoD, kPageable}. Never fails: unknown
/// parts come back as kOther / kUnknown.
[[nodiscard]] MemcpyKind ParseMemcpyName(std::string_view name);

/// Copies of one (direction, host memory) kind.
struct MemcpyStats {
  MemcpyKind kind;
  int64_t count = 0;
  uint64_t bytes = 0;  ///< sum of args.bytes
  int64_t time_ns = 0;
  /// bytes / time (1 byte per ns = 1 GB/s, decimal); empty when time_ns is 0.
  std::optional<double> effective_gbps;
};

struct MemsetStats {
  int64_t count = 0;
  uint64_t bytes = 0;
  int64_t time_ns = 0;
};

/// One collective kind on one rank: its GPU kernels and its outermost CPU-side calls.
struct CollectiveStats {
  /// Normalised name (NormalizeCollective): "all_reduce", "all_gather", "reduce_scatter",
  /// "all_to_all", "broadcast", "send_recv", "reduce", "gather", "scatter", "barrier", "other".
  std::string_view collective;
  int64_t kernel_count = 0;
  int64_t kernel_time_ns = 0;  ///< GPU time of the collective's kernels
  int64_t kernel_max_ns = 0;
  int64_t cpu_calls = 0;  ///< outermost CPU collective ranges (c10d::*, record_param_comms, nccl:*)
  int64_t cpu_time_ns = 0;  ///< their summed duration
  /// Sums over the kernels that carry collective metadata (RankTrace::collectives); empty when
  /// none does.
  std::optional<int64_t> in_nelems;
  std::optional<int64_t> out_nelems;
  /// in_nelems × element size, summed over kernels whose dtype has a known size.
  std::optional<uint64_t> in_bytes;
};

/// One communication kernel, labelled with its collective (for cross-rank matching).
struct CollectiveKernel {
  std::string_view collective;  ///< as CollectiveStats::collective
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t stream = 0;
};

/// Kernel, memory and communication statistics of one rank.
struct KernelReport {
  std::vector<KernelStats> kernels;  ///< every kernel name, by total_ns descending, then name
  int64_t kernel_count = 0;
  int64_t kernel_time_ns = 0;  ///< sum of kernel durations
  /// |union of kernel, memcpy and memset intervals| over all streams and devices.
  int64_t gpu_busy_ns = 0;
  int64_t tensor_core_time_ns = 0;
  /// tensor_core_time_ns / kernel_time_ns, as the TensorBoard plugin computes it; empty
  /// ("unknown") when the trace has no named kernels.
  std::optional<double> tensor_core_share;
  std::vector<MemcpyStats> memcpy;  ///< by direction then host memory
  MemsetStats memset;
  std::vector<CollectiveStats> collectives;  ///< by kernel_time_ns descending, then name
  /// Every communication kernel with its collective, sorted by begin (ListCollectiveKernels'
  /// result, from the same labelling pass as `collectives`).
  std::vector<CollectiveKernel> collective_kernels;
  int64_t cuda_graph_launches = 0;  ///< cudaGraphLaunch runtime calls
  int64_t cuda_graph_kernels = 0;   ///< kernels flagged kFlagCudaGraph
};

/// Computes the report over all events of `trace` (prepared or not; events that straddle a
/// timeline window count whole). Negative durations (HTA rounding) count as 0. Pure.
[[nodiscard]] KernelReport AnalyzeKernels(const RankTrace& trace);

/// The communication kernels of `trace`, sorted by begin. The collective comes from, in order:
/// the kernel's RankTrace::collectives metadata; the CPU collective range enclosing the runtime
/// call that launched it (same correlation); the kernel name.
[[nodiscard]] std::vector<CollectiveKernel> ListCollectiveKernels(const RankTrace& trace);

/// Maps any collective spelling to one name with static storage: "allreduce",
/// "nccl:all_reduce", "c10d::allreduce_", "ncclKernel_AllReduce_RING_LL_Sum_float" → "all_reduce".
/// Unrecognised (record_param_comms, ncclDevKernel_Generic) → "other".
[[nodiscard]] std::string_view NormalizeCollective(std::string_view name);

/// Kernel-name substrings of Tensor-core kernels. The first 18 are the TensorBoard profiler
/// plugin's list (pytorch/kineto tb_plugin/torch_tb_profiler/profiler/tensor_core.py, taken from
/// NVIDIA PyProf's tc.py); the rest cover Ampere/Hopper cuBLAS/CUTLASS names that list predates.
inline constexpr std::string_view kTensorCoreKernelPatterns[] = {
    // TensorBoard plugin TC_Allowlist.
    "h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816", "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1", "direct_group", "xmma_implicit_gemm",
    "xmma_sparse_conv", "xmma_warp_specialized_implicit_gemm", "xmma_gemm", "xmma_sparse_gemm",
    "c1688",
    // Newer names: sm80_xmma_*/sm90_xmma_* (cuBLAS), cutlass_*_tensorop_*, Hopper wgmma/gmma.
    "xmma", "tensorop", "wgmma", "gmma"};

/// True when `name` contains one of kTensorCoreKernelPatterns (case-sensitive, as TensorBoard).
[[nodiscard]] bool IsTensorCoreKernelName(std::string_view name);

/// A kernel name for tables: drops a leading "void "; when still longer than `max_len`, replaces
/// template arguments with "<...>", then the parameter list with "(...)", then cuts the end to
/// "...". The result is at most max(max_len, 3) characters.
[[nodiscard]] std::string ShortKernelName(std::string_view name, size_t max_len = 60);

}  // namespace stallscope::trace
