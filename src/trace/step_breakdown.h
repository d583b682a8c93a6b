#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "trace/intervals.h"
#include "trace/names.h"
#include "trace/timeline.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

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
