#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include "base/clock.h"
#include "gpu/gpu_backend.h"
#include "host/host.h"
#include "sample/sample.h"

namespace stallscope::sample {

/// Shortest interval the sampler accepts (the issue: "down to 50 ms").
inline constexpr int64_t kMinIntervalNs = 50'000'000;

/// Reads GPUs, host and (optionally) a process tree into one Sample. Owns no thread: Run()
/// is meant to be called on the one sampling thread. Not thread-safe.
class Sampler {
 public:
  /// `processes` may be null (no tree followed). The references must outlive the sampler.
  Sampler(gpu::GpuBackend& gpus, host::HostSampler& host, host::ProcessTracker* processes,
          Clock& clock);

  /// How often each tier of GPU fields is read (gpu/poll_plan.h). Without a plan every sample
  /// reads every tier; with one, the first sample reads every tier and then each tier comes at
  /// its period.
  void SetPlan(const gpu::PollPlan& plan) { poll_.emplace(plan); }

  /// Fills `out` with one reading taken now. Steady state does not allocate.
  void SampleOnce(Sample& out);

  /// Called with each sample; returns false to stop.
  using Sink = std::function<bool(const Sample&)>;

  /// Samples every `interval_ns` (aligned to an absolute schedule, no drift) until `stop` is
  /// requested (it ends the sleep at once), `sink` returns false, or `max_samples` (> 0) samples
  /// were taken. Reuses one Sample; sleeps without polling between samples. When `stop` ends it
  /// and the plan reads some tier less often than every sample, one last sample reads those
  /// tiers (PollClock::Final), so the utilization buffer's newest entries are not lost.
  void Run(int64_t interval_ns, StopFlag& stop, const Sink& sink, int64_t max_samples = 0);

 private:
  gpu::GpuBackend& gpus_;
  host::HostSampler& host_;
  host::ProcessTracker* processes_;
  void SampleTiers(Sample& out, gpu::PollTiers due);

  Clock& clock_;
  std::optional<gpu::PollClock> poll_;
};

}  // namespace stallscope::sample
