#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "trace/step_breakdown.h"
#include "trace/timeline.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

/// What the host was doing while a GPU was idle, in claim priority (first claims first).
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
  kLaunchOverhead,  ///< any other runtime/driver call in progress (launches, allocations, ...)
  kCpuOther,        ///< any other host op (cpu_op, user_annotation, python_function)
  kUnattributed,    ///< none of the above: host idle, or its activity was not traced
};
inline constexpr size_t kIdleCauseCount = 6;

/// "sync", "dataloader", "dependency", "launch_overhead", "cpu_other", "unattributed".
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

/// One GPU's idle time in the analysed window. Busy = union over all its streams of kernel,
/// memcpy and memset rows (cuda_sync and GPU annotation rows are not work).
struct DeviceIdle {
  int32_t device = 0;     ///< pid of its GPU rows
  int64_t window_ns = 0;  ///< the analysed window
  int64_t busy_ns = 0;    ///< busy time within the window
  int64_t gaps = 0;       ///< maximal idle intervals within the window (leading/trailing too)
  IdleCauseNs idle;       ///< idle.idle_ns = window_ns - busy_ns
};

/// Synchronizing host calls (kSync's host part: calls and confirmed aten ops, not GPU rows).
/// Nested ones (cudaStreamSynchronize inside aten::item) count once, as the outermost.
struct HostSyncs {
  int64_t count = 0;                    ///< outermost sync calls starting in the window
  int64_t ns = 0;                       ///< union of their intervals within the window
  std::vector<int64_t> count_per_step;  ///< aligned with Timeline::steps (by start time)
  std::vector<int64_t> ns_per_step;     ///< union clipped to each step
};

/// GPU idle gaps attributed to host activity, and host syncs.
struct HostAttribution {
  std::vector<DeviceIdle> devices;  ///< by device id; empty for CPU-only traces
  IdleCauseNs total;                ///< summed over devices
  /// Idle time per step (aligned with Timeline::steps), summed over devices: for the usual
  /// one-GPU rank, the step's wall time minus the time any stream of its GPU was busy.
  std::vector<int64_t> gpu_idle_ns_per_step;
  HostSyncs syncs;
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
