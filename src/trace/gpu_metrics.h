#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "trace/timeline.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

/// HTA's default `consecutive_kernel_delay` for the idle-time breakdown: a gap between two
/// kernels on a stream shorter than this is launch overhead ("kernel wait"). Source: HTA
/// `get_idle_time_breakdown(consecutive_kernel_delay=30)` on µs timestamps (EXPECTED.md).
inline constexpr int64_t kKernelWaitThresholdNs = 30'000;
/// HTA `cuda_kernel_launch_stats(runtime_cutoff=50)`: a runtime launch call longer than this is
/// an outlier.
inline constexpr int64_t kLongRuntimeCallNs = 50'000;
/// HTA `cuda_kernel_launch_stats(launch_delay_cutoff=100)`.
inline constexpr int64_t kLongLaunchDelayNs = 100'000;

/// What a GPU row is, for the temporal breakdown (HTA `get_kernel_type`, EXPECTED.md).
enum class KernelClass : uint8_t {
  kCompute,        ///< every other kernel
  kCommunication,  ///< names ^nccl, ^hip, ^hccl, or containing ncclKernel / ncclDevKernel
  kMemory,         ///< memcpy/memset rows, or names ^Memcpy, ^Memset, ^dma
  kSync,           ///< cuda_sync rows (HTA type OTHER): neither compute nor communication
  kNotKernel,      ///< gpu_user_annotation and all CPU-side kinds
};

/// Classifies one event by kind and name. Pure; no allocation.
[[nodiscard]] KernelClass ClassifyKernel(EventKind kind, std::string_view name);

/// GPU time split of one rank (or one device of it).
struct TemporalBreakdown {
  std::optional<int32_t> device;   ///< empty: all devices of the rank
  int64_t span_ns = 0;             ///< first GPU event start → last GPU event end
  int64_t busy_ns = 0;             ///< |union of busy rows|
  int64_t idle_ns = 0;             ///< span − busy
  int64_t compute_ns = 0;          ///< |union of compute kernels|
  int64_t non_compute_ns = 0;      ///< span − compute − idle
  std::optional<double> idle_pct;  ///< empty when span_ns == 0
  std::optional<double> compute_pct;
  std::optional<double> non_compute_pct;
};

/// Idle gaps of one (device, stream), classified as HTA does.
struct StreamIdle {
  int32_t device = 0;
  int64_t stream = 0;
  int64_t host_wait_ns = 0;    ///< the launching runtime call started after the previous end
  int64_t kernel_wait_ns = 0;  ///< else a gap < kKernelWaitThresholdNs
  int64_t other_ns = 0;        ///< everything else
  uint64_t gaps = 0;           ///< consecutive pairs looked at
  /// Shares of this stream's idle time; empty when the stream had no idle time.
  std::optional<double> host_wait_share;
  std::optional<double> kernel_wait_share;
  std::optional<double> other_share;
};

/// Launch-queue depth of one stream (HTA `get_queue_length_summary`): a sample per change.
struct QueueLength {
  int32_t device = 0;
  int64_t stream = 0;
  uint64_t samples = 0;
  double mean = 0;    ///< mean over samples (HTA `describe()`, not time-weighted)
  double median = 0;  ///< median over samples
  int64_t max = 0;
  /// Launch calls to this stream that started while its queue was full (see LaunchStats).
  uint64_t blocked_launches = 0;
  int64_t blocked_ns = 0;
};

/// Host → GPU launch behaviour of one rank.
struct LaunchStats {
  uint64_t launches = 0;        ///< (launch call, GPU event) pairs
  uint64_t graph_launches = 0;  ///< cudaGraphLaunch/cuGraphLaunch calls with ≥ 1 GPU event
  uint64_t graph_kernels = 0;   ///< GPU events those graph launches ran
  uint64_t kernels_shorter_than_launch = 0;       ///< GPU duration < launch call duration
  uint64_t long_runtime_calls = 0;                ///< launch calls > kLongRuntimeCallNs
  uint64_t long_launch_delays = 0;                ///< delays > kLongLaunchDelayNs
  std::optional<int64_t> launch_delay_median_ns;  ///< empty without launches
  std::optional<int64_t> launch_delay_p99_ns;
  std::vector<QueueLength> queues;  ///< sorted by (device, stream)
  /// Host time lost to a full launch queue: the summed excess (duration − median launch-call
  /// duration) of launch calls that started while their stream's queue was ≥ 90% of its
  /// maximum and that maximum was ≥ kFullQueueMinDepth. CUDA blocks the launching thread when
  /// the per-stream pending-launch queue is full; the queue's depth never exceeds that limit, so
  /// "near the observed max of a deep queue" is where the blocking happens.
  int64_t blocked_on_full_queue_ns = 0;
  uint64_t blocked_launches = 0;
};

/// A queue shallower than this at its deepest cannot have blocked the host.
inline constexpr int64_t kFullQueueMinDepth = 128;

/// All GPU metrics of one prepared rank trace.
struct GpuMetrics {
  TemporalBreakdown temporal;                   ///< the whole rank
  std::vector<TemporalBreakdown> per_device;    ///< only when the rank used > 1 device
  std::vector<StreamIdle> idle;                 ///< sorted by (device, stream)
  int64_t comm_ns = 0;                          ///< |union of communication kernels|
  int64_t comm_overlap_ns = 0;                  ///< |comm union ∩ compute union|
  std::optional<double> comm_comp_overlap_pct;  ///< empty without communication
  LaunchStats launch;
  uint64_t gpu_events = 0;                 ///< GPU rows analysed
  uint64_t gpu_events_without_launch = 0;  ///< no runtime/driver event with their correlation
};

/// Computes every metric of `trace`, which must have gone through `PrepareTimeline(trace,
/// options)` (events sorted by (ts, -dur), `timeline` its result). Pure; O(n log n) in the
/// number of events. With `options.hta_compat` the numbers follow HTA's definitions
/// (EXPECTED.md); otherwise stallscope's clean ones (README "Trace: clean vs HTA-compatible").
[[nodiscard]] GpuMetrics ComputeGpuMetrics(const RankTrace& trace, const Timeline& timeline,
                                           const AnalysisOptions& options);

}  // namespace stallscope::trace
