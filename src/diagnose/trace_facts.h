#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trace/host_attribution.h"

namespace stallscope::diagnose {

/// What a profiler trace tells the verdict rules beyond step phases (diagnose/trace_report.cc
/// fills it from `stallscope trace`; a live `run` leaves rundir::RunData::trace empty). Shares are
/// fractions of the analysed window (the ProfilerStep range), averaged over ranks and devices.
struct TraceFacts {
  /// One GPU of one rank as its timeline shows it.
  struct Gpu {
    int32_t rank = 0;
    int32_t device = 0;
    std::string name;  ///< deviceProperties name, "" when absent
    double busy_share = 0;
  };
  std::vector<Gpu> gpus;

  int64_t ranks = 0;
  int64_t gpu_devices = 0;  ///< devices with GPU events (0: a CPU-only trace)
  /// GPU idle by what the host was doing meanwhile, indexed by trace::IdleCause (kDependency:
  /// the next kernel was already queued, waiting on a collective or another stream). Read it
  /// with Idle(cause); trace::IdleCauseName names a cause when rendering.
  std::array<double, trace::kIdleCauseCount> idle_share{};
  double comm_share = 0;                 ///< communication kernels (union) / window
  std::optional<double> overlap_share;   ///< computing while communicating / communicating
  std::optional<double> queue_mean;      ///< mean launch-queue length of the busiest stream
  std::optional<double> kernel_mean_us;  ///< mean kernel duration
  int64_t kernels = 0;
  int64_t cuda_graph_launches = 0;
  /// GPU idle by where in the step it fell, indexed by trace::IdlePosition (shares of the
  /// window, like idle_share). Read it with At(position).
  std::array<double, trace::kIdlePositionCount> idle_position_share{};
  /// Host time in runtime/driver calls by trace::RuntimeCallKind: the union of each kind's calls
  /// over the analysed window (summed over ranks, divided by their windows).
  std::array<double, trace::kRuntimeCallKindCount> runtime_share{};
  std::array<int64_t, trace::kRuntimeCallKindCount> runtime_calls{};  ///< calls, all ranks
  /// The runtime calls with the most time over all ranks, most first (≤ 8).
  std::vector<trace::RuntimeCallTotal> top_calls;
  int64_t steps = 0;                    ///< ProfilerSteps over all ranks
  int64_t steps_with_memory_calls = 0;  ///< of them, steps with a memory-management call
  int64_t memory_calls_in_steps = 0;    ///< memory-management calls inside steps
  int64_t host_syncs = 0;               ///< outermost host syncs in the windows (all ranks)

  [[nodiscard]] double At(trace::IdlePosition p) const {
    return idle_position_share[static_cast<size_t>(p)];
  }
  [[nodiscard]] double Runtime(trace::RuntimeCallKind k) const {
    return runtime_share[static_cast<size_t>(k)];
  }

  [[nodiscard]] double Idle(trace::IdleCause cause) const {
    return idle_share[static_cast<size_t>(cause)];
  }
};

}  // namespace stallscope::diagnose
