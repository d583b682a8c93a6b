#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stallscope::diagnose {

/// The bottleneck classes (report.json "class"; README "Findings").
enum class FindingClass {
  kGpuBound,                ///< "gpu_bound" (compute-bound on a CPU-only run)
  kDataBoundCpu,            ///< "data_bound_cpu"
  kDataBoundIo,             ///< "data_bound_io"
  kHostSyncOrLogging,       ///< "host_sync_or_logging"
  kPeriodicSideWork,        ///< "periodic_side_work"
  kEpochBoundaryStall,      ///< "epoch_boundary_stall"
  kPrefetchTooShallow,      ///< "prefetch_too_shallow"
  kThreadOversubscription,  ///< "thread_oversubscription"
  kGpuThrottled,            ///< "gpu_throttled"
  kUtilMisleading,          ///< "util_misleading"
  kLoadImbalance,           ///< "load_imbalance"
  kStraggler,               ///< "straggler"
  kSmallBatch,              ///< "small_batch"
  kGpuMemoryPressure,       ///< "gpu_memory_pressure"
  kHostLaunchBound,         ///< "host_launch_bound" (traces: the GPU waits for the host to launch)
  kCommunicationBound,      ///< "communication_bound" (traces: exposed collectives, dependencies)
  kHostStepBoundary,  ///< "host_step_boundary" (traces: deep queue in the step, idle between steps)
  kAllocatorChurn,    ///< "allocator_churn" (traces: cudaMalloc/cudaFree every step)
  /// "startup_window" (traces: the profiled window is CUDA start-up, not steady-state training;
  /// not a bottleneck: when it is found it is the whole verdict)
  kStartupWindow,
};

[[nodiscard]] std::string_view FindingClassName(FindingClass c);

/// A number that triggered a finding, with what it was compared to.
struct Evidence {
  std::string text;    ///< for people: "data_loading is 91% of step time (threshold 30%, seed 000)"
  std::string metric;  ///< machine name: "phase_share.data_loading"
  double value = 0;
  std::string unit;  ///< "fraction", "s", "%", "MHz", ...
  std::optional<double> threshold;
};

/// One change to make. `cost` orders them: 0 = a free knob (seed 001 order), 1 = a code change,
/// 2 = hardware or architecture.
struct Recommendation {
  std::string text;  ///< concrete for this run: "num_workers=0 → num_workers=4 (8 CPUs allowed)"
  int cost = 0;
};

struct Finding {
  FindingClass cls = FindingClass::kGpuBound;
  double confidence = 0;     ///< 0..1
  double cost_fraction = 0;  ///< estimated share of wall time lost to it, 0..1
  std::string reason;        ///< one sentence
  std::vector<Evidence> evidence;
  std::vector<Recommendation> recommendations;  ///< cheapest first
  /// For data-bound findings: predicted steps/s after the fix (checkable against a re-run).
  std::optional<double> predicted_steps_per_s;
  /// The DataLoader setting the prediction is for, "num_workers=4" (what `sweep` checks it on).
  std::string predicted_for;
  /// Its measure clears its rule's threshold (issue 39: a finding fades in below it, at less
  /// than half its confidence, and is then not significant). Only a significant finding of a part
  /// of the step lost to something makes that part outrank gpu_bound. Not in report.json.
  bool significant = true;
};

/// Which clock measured a run's compute phases (report.json "compute_time").
enum class ComputeTime : uint8_t {
  kUnknown,  ///< null: not said (a trace: its kernels are GPU time)
  kHost,     ///< "host": the host's clock
  kGpu,      ///< "gpu": CUDA events (the job used CUDA and most instances resolved)
};
/// Every clock with its report.json name, in enum order; kUnknown's "" is written as null.
inline constexpr std::pair<ComputeTime, std::string_view> kComputeTimeNames[] = {
    {ComputeTime::kUnknown, ""},
    {ComputeTime::kHost, "host"},
    {ComputeTime::kGpu, "gpu"},
};
[[nodiscard]] std::string_view ComputeTimeName(ComputeTime t);

/// The principal bottleneck and the secondaries, ranked by cost.
struct Verdict {
  std::optional<Finding> principal;
  std::vector<Finding> secondary;
  /// Which clock a run's compute phases' shares came from; kUnknown for a trace.
  /// `compute_time_note` says what GPU time changed.
  ComputeTime compute_time = ComputeTime::kUnknown;
  std::string compute_time_note;
  /// What limits how far the verdict can be trusted (corrupt phase records, other work on the
  /// host), one sentence each, for people; the confidences already carry the discount.
  std::vector<std::string> caveats;
  /// The run shared its host with other work (Facts::HostBusy; one of the caveats, starting
  /// kBusyHostCaveat, says how much): `compare` reads this, because a busy host changes speed
  /// between runs, which no run's own step times show.
  bool busy_host = false;
};

/// How the caveat of a run beside other work starts (verdict.cc), for people: code reads
/// Verdict::busy_host.
inline constexpr std::string_view kBusyHostCaveat = "busy host:";

}  // namespace stallscope::diagnose
