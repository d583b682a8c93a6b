#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "trace/timeline.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

// ---------------------------------------------------------------------------------------------
// Interval sets: sorted, disjoint, non-empty half-open [begin_ns, end_ns) ranges. The building
// block of the step breakdown and of the GPU idle attribution (sort + sweep, all linear merges).

/// A half-open time range [begin_ns, end_ns), ns.
struct Interval {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

/// A union of intervals: sorted by begin, disjoint, no empty members.
using IntervalSet = std::vector<Interval>;

/// Turns arbitrary intervals (any order, overlapping, empty or inverted ones) into their union,
/// in place. O(n) when already sorted by begin, else O(n log n). Allocates nothing.
void NormalizeIntervals(IntervalSet& intervals);

/// Total length of a normalized set, ns.
[[nodiscard]] int64_t TotalNs(const IntervalSet& set);

/// Length of `set` ∩ [begin_ns, end_ns), ns. O(log n + overlapping members).
[[nodiscard]] int64_t OverlapNs(const IntervalSet& set, int64_t begin_ns, int64_t end_ns);

/// out = a ∩ b (both normalized). `out` is cleared first; must not alias a or b.
void IntersectIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out);

/// out = a \ b (both normalized). `out` is cleared first; must not alias a or b.
void SubtractIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out);

/// out = a ∪ b (both normalized). `out` is cleared first; must not alias a or b.
void UniteIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out);

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

/// True for host-thread kinds that are neither runtime/driver calls nor GPU rows.
[[nodiscard]] constexpr bool IsHostOpKind(EventKind k) {
  return k == EventKind::kCpuOp || k == EventKind::kUserAnnotation ||
         k == EventKind::kPythonFunction;
}

/// True for CUDA runtime / driver API calls.
[[nodiscard]] constexpr bool IsRuntimeKind(EventKind k) {
  return k == EventKind::kRuntime || k == EventKind::kDriver;
}

// ---------------------------------------------------------------------------------------------
// Step breakdown (TensorBoard profiler plugin "overall" view).

/// Categories in claim priority (first claims first). TensorBoard profiler plugin's overall
/// breakdown: Kernel > Memcpy > Memset > Communication > Runtime > DataLoader > CPU Exec > Other.
enum class StepCategory : uint8_t {
  kKernel,         ///< GPU kernels that are not collectives
  kMemcpy,         ///< GPU memcpy rows
  kMemset,         ///< GPU memset rows
  kCommunication,  ///< collective kernels + host collective ops (kTraitCommKernel/kTraitCommOp)
  kRuntime,        ///< cuda_runtime / cuda_driver calls
  kDataLoader,     ///< host ranges named *DataLoader* (exposed: not hidden under the above)
  kCpuExec,        ///< other cpu_op / user_annotation / python_function (not ProfilerStep#)
  kOther,          ///< the rest of the step's wall time (host idle or untraced)
};
inline constexpr size_t kStepCategoryCount = 8;

/// "Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CPU Exec", "Other".
[[nodiscard]] std::string_view StepCategoryName(StepCategory c);

/// The category an event claims time for, or kOther when it claims none (GPU annotations,
/// cuda_sync rows, ProfilerStep ranges, kOther events such as Kineto's whole-trace span).
[[nodiscard]] StepCategory CategoryOf(const Event& e, uint8_t traits);

/// Time per category over a wall-time span. The categories sum exactly to `wall_ns`.
struct CategoryNs {
  std::array<int64_t, kStepCategoryCount> ns{};  ///< indexed by StepCategory
  int64_t wall_ns = 0;

  [[nodiscard]] int64_t Get(StepCategory c) const { return ns[static_cast<size_t>(c)]; }
  /// Share of wall time, 0..1 (0 when wall_ns is 0).
  [[nodiscard]] double Share(StepCategory c) const {
    return wall_ns > 0 ? static_cast<double>(Get(c)) / static_cast<double>(wall_ns) : 0.0;
  }
};

/// One step's breakdown.
struct StepBreakdownRow {
  int64_t step_number = 0;  ///< N of ProfilerStep#N
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  CategoryNs times;  ///< times.wall_ns = end_ns - begin_ns (0 when inverted)
};

/// Breakdown of every step in scope.
struct StepBreakdown {
  std::vector<StepBreakdownRow> steps;  ///< aligned with Timeline::steps
  /// Sum over `steps`; when the timeline has no steps, the analysed window as one span.
  CategoryNs total;
  bool whole_window = false;  ///< true when there were no steps (total covers the window)
};

/// Step breakdown of a prepared trace (`PrepareTimeline` sorted it; any order is accepted).
/// Per category the union of its events' intervals, clipped to each step; each category gets
/// its union minus everything claimed by higher-priority categories; Other is the remainder, so
/// each step's parts sum exactly to its wall time. Nested events never count twice. An event
/// straddling a step boundary is split between the steps. O(n log n); no per-event allocation.
[[nodiscard]] StepBreakdown ComputeStepBreakdown(const RankTrace& trace, const Timeline& timeline);

}  // namespace stallscope::trace
