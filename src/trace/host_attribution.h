#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trace/names.h"
#include "trace/step_breakdown.h"
#include "trace/timeline.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

/// What the host was doing while a GPU was idle, in claim priority (first claims first).
/// Runtime/driver calls count by their RuntimeCallKind (trace/names.h).
enum class IdleCause : uint8_t {
  /// A synchronizing call was in progress: a runtime/driver *Synchronize or synchronous cudaMemcpy,
  /// an aten::item / _local_scalar_dense / nonzero that ran a runtime call, or a cuda_sync GPU
  /// row other than "Stream Wait Event". The host waited for the GPU, which had nothing queued.
  kSync,
  kDataLoader,  ///< a *DataLoader* host range (the GPU starved for input)
  /// The GPU had work queued but waited on a dependency: the kernel/copy that ended the gap had
  /// its launch call started before the gap began (deep launch queue, waiting on a
  /// collective or another stream), or a "Stream Wait Event" row covered the gap.
  kDependency,
  /// A context / stream / module set-up call was in progress (RuntimeCallKind::kSetup: CUDA
  /// start-up, lazy initialization, graph capture).
  kSetup,
  /// A memory-management call was in progress (RuntimeCallKind::kMemory: cudaMalloc/cudaFree,
  /// host allocations and registrations): the caching allocator asking the driver.
  kMemory,
  /// A launch call or another runtime call was in progress (RuntimeCallKind::kLaunch, kOther:
  /// cudaLaunchKernel, cudaMemcpyAsync, cudaEventRecord, ...).
  kLaunchOverhead,
  kCpuOther,      ///< any other host op (cpu_op, user_annotation, python_function)
  kUnattributed,  ///< none of the above: host idle, or its activity was not traced
};
inline constexpr size_t kIdleCauseCount = 8;

/// "sync", "dataloader", "dependency", "setup", "memory", "launch_overhead", "cpu_other",
/// "unattributed".
[[nodiscard]] std::string_view IdleCauseName(IdleCause c);

/// Idle time split by cause; the causes sum exactly to `idle_ns`.
struct IdleCauseNs {
  std::array<int64_t, kIdleCauseCount> ns{};  ///< indexed by IdleCause
  int64_t idle_ns = 0;

  [[nodiscard]] int64_t Get(IdleCause c) const { return ns[static_cast<size_t>(c)]; }
  /// Share of idle time, 0..1 (0 when idle_ns is 0).
  [[nodiscard]] double Share(IdleCause c) const {
    return idle_ns > 0 ? static_cast<double>(Get(c)) / static_cast<double>(idle_ns) : 0.0;
  }
};

/// Where in the step a GPU was idle (issue 16: when the launch queue is deep on average but the
/// GPU still idles, *when* it idles names the cause). A gap is first classed whole: it began
/// while a host sync was in progress (or within kAfterSyncSlackNs of one) → kAfterSync; it
/// overlaps a DataLoader range → kDataLoader. Otherwise its parts are split at step boundaries:
/// the part that touches its step's start → kStepStart, its end → kStepEnd, else kMidStep; time
/// outside every step → kOutsideSteps.
enum class IdlePosition : uint8_t {
  kAfterSync,
  kDataLoader,
  kStepStart,
  kStepEnd,
  kMidStep,
  kOutsideSteps,
};
inline constexpr size_t kIdlePositionCount = 6;
/// How close to a host sync a gap must begin to be "after" it: the sync returns when the GPU
/// has drained, give or take the host's and GPU's clock skew.
inline constexpr int64_t kAfterSyncSlackNs = 5'000;

/// "after_sync", "dataloader", "step_start", "step_end", "mid_step", "outside_steps".
[[nodiscard]] std::string_view IdlePositionName(IdlePosition p);

/// One GPU's idle time in the analysed window. Busy = union over all its streams of kernel,
/// memcpy and memset rows (cuda_sync and GPU annotation rows are not work).
struct DeviceIdle {
  int32_t device = 0;     ///< pid of its GPU rows
  int64_t window_ns = 0;  ///< the analysed window
  int64_t busy_ns = 0;    ///< busy time within the window
  int64_t gaps = 0;       ///< maximal idle intervals within the window (leading/trailing too)
  IdleCauseNs idle;       ///< idle.idle_ns = window_ns - busy_ns
  /// Idle time by IdlePosition; sums to idle.idle_ns.
  std::array<int64_t, kIdlePositionCount> position_ns{};
};

/// Synchronizing host calls (kSync's host part: calls and confirmed aten ops, not GPU rows).
/// Nested ones (cudaStreamSynchronize inside aten::item) count once, as the outermost.
struct HostSyncs {
  int64_t count = 0;                    ///< outermost sync calls starting in the window
  int64_t ns = 0;                       ///< union of their intervals within the window
  std::vector<int64_t> count_per_step;  ///< aligned with Timeline::steps (by start time)
  std::vector<int64_t> ns_per_step;     ///< union clipped to each step
};

/// One runtime/driver call name's total within the analysed window.
struct RuntimeCallTotal {
  std::string name;
  RuntimeCallKind kind = RuntimeCallKind::kOther;
  int64_t count = 0;  ///< calls starting in the window
  int64_t ns = 0;     ///< their durations, clipped to the window (nested calls count twice)
};

/// Runtime/driver calls by RuntimeCallKind within the analysed window (every host thread).
struct RuntimeCalls {
  int64_t window_ns = 0;
  std::array<int64_t, kRuntimeCallKindCount> count{};  ///< calls starting in the window
  std::array<int64_t, kRuntimeCallKindCount> ns{};     ///< union of the kind's calls, clipped
  /// The names with the most time, most first (kMaxTopCalls at most).
  std::vector<RuntimeCallTotal> top;
  /// Memory-management calls starting in each step (aligned with Timeline::steps).
  std::vector<int64_t> memory_calls_per_step;
  static constexpr size_t kMaxTopCalls = 8;

  [[nodiscard]] int64_t Count(RuntimeCallKind k) const { return count[static_cast<size_t>(k)]; }
  [[nodiscard]] int64_t Ns(RuntimeCallKind k) const { return ns[static_cast<size_t>(k)]; }
};

/// GPU idle gaps attributed to host activity, and host syncs.
struct HostAttribution {
  std::vector<DeviceIdle> devices;  ///< by device id; empty for CPU-only traces
  IdleCauseNs total;                ///< summed over devices
  std::array<int64_t, kIdlePositionCount> position_ns{};  ///< summed over devices
  /// Idle time per step (aligned with Timeline::steps), summed over devices: for the usual
  /// one-GPU rank, the step's wall time minus the time any stream of its GPU was busy.
  std::vector<int64_t> gpu_idle_ns_per_step;
  HostSyncs syncs;
  RuntimeCalls runtime;
};

/// Finds each device's idle gaps in the analysed window and splits them by what the host did
/// meanwhile (IdleCause priority; host events from every thread of the trace count for every
/// device). Also counts host syncs. Expects a prepared trace (any event order is accepted).
/// O(n log n); no per-event allocation beyond reserved vectors.
[[nodiscard]] HostAttribution AttributeGpuIdle(const RankTrace& trace, const Timeline& timeline);

/// Per-step series for outlier / period detection, each aligned with Timeline::steps.
struct StepSeries {
  std::vector<int64_t> step_number;
  std::vector<int64_t> step_ns;        ///< wall time of the step
  std::vector<int64_t> dataloader_ns;  ///< exposed DataLoader time (its breakdown claim)
  std::vector<int64_t> gpu_idle_ns;    ///< HostAttribution::gpu_idle_ns_per_step (0: no GPU)
  std::vector<int64_t> sync_ns;        ///< HostSyncs::ns_per_step
};

/// Assembles the series from the two analyses of the same timeline.
[[nodiscard]] StepSeries BuildStepSeries(const StepBreakdown& breakdown,
                                         const HostAttribution& attribution);

}  // namespace stallscope::trace
