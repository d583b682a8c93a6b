#include "trace/gpu_metrics.h"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "base/units.h"

namespace stallscope::trace {
namespace {

// Builds a RankTrace from hand-written events (times in µs unless a _ns helper is used).
class TraceBuilder {
 public:
  TraceBuilder& Gpu(EventKind kind, std::string_view name, int64_t ts_ns, int64_t dur_ns,
                    int64_t stream, int64_t correlation, int32_t device = 0) {
    Event e;
    e.kind = kind;
    e.ts_ns = ts_ns;
    e.set_dur_ns(dur_ns);
    e.tid = stream;
    e.pid = device;
    e.correlation = correlation;
    e.name_id = trace_.names.Intern(name);
    trace_.events.push_back(e);
    return *this;
  }
  TraceBuilder& Kernel(int64_t ts_us, int64_t dur_us, int64_t stream, int64_t correlation,
                       std::string_view name = "gemm") {
    return Gpu(EventKind::kKernel, name, ts_us * kNsPerUs, dur_us * kNsPerUs, stream, correlation);
  }
  TraceBuilder& Cpu(EventKind kind, std::string_view name, int64_t ts_us, int64_t dur_us,
                    int64_t correlation = -1) {
    Event e;
    e.kind = kind;
    e.ts_ns = ts_us * kNsPerUs;
    e.set_dur_ns(dur_us * kNsPerUs);
    e.tid = 1;
    e.pid = 100;
    e.correlation = correlation;
    e.name_id = trace_.names.Intern(name);
    trace_.events.push_back(e);
    return *this;
  }
  TraceBuilder& Launch(int64_t ts_us, int64_t dur_us, int64_t correlation,
                       std::string_view name = "cudaLaunchKernel") {
    return Cpu(EventKind::kRuntime, name, ts_us, dur_us, correlation);
  }
  GpuMetrics Compute(bool hta = false) {
    AnalysisOptions options;
    options.hta_compat = hta;
    Timeline timeline = PrepareTimeline(trace_, options);
    return ComputeGpuMetrics(trace_, timeline, options);
  }
  RankTrace& trace() { return trace_; }

 private:
  RankTrace trace_;
};

TEST(ClassifyKernelTest, Table) {
  struct Case {
    EventKind kind;
    const char* name;
    KernelClass want;
  };
  const Case cases[] = {
      {EventKind::kKernel, "ncclKernel_AllReduce_RING_LL_Sum_float", KernelClass::kCommunication},
      {EventKind::kKernel, "ncclDevKernel_AllGather_RING_LL", KernelClass::kCommunication},
      {EventKind::kKernel, "void ncclKernel<...>", KernelClass::kCommunication},
      {EventKind::kKernel, "hipKernel", KernelClass::kCommunication},
      {EventKind::kKernel, "hccl_allreduce", KernelClass::kCommunication},
      {EventKind::kKernel, "Memcpy DtoD (Device -> Device)", KernelClass::kMemory},
      {EventKind::kKernel, "dma_copy", KernelClass::kMemory},
      {EventKind::kMemcpy, "anything", KernelClass::kMemory},
      {EventKind::kMemset, "Memset (Device)", KernelClass::kMemory},
      {EventKind::kCudaSync, "Stream Sync", KernelClass::kSync},
      {EventKind::kKernel, "void at::native::vectorized_elementwise_kernel", KernelClass::kCompute},
      {EventKind::kKernel, "my_nccl_like", KernelClass::kCompute},
      {EventKind::kKernel, "", KernelClass::kCompute},
      {EventKind::kGpuUserAnnotation, "## forward ##", KernelClass::kNotKernel},
      {EventKind::kRuntime, "cudaLaunchKernel", KernelClass::kNotKernel},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ClassifyKernel(c.kind, c.name), c.want) << c.name;
  }
}

TEST(GpuMetricsTest, OverlappingStreamsUnion) {
  TraceBuilder b;
  b.Kernel(0, 10, 7, 1).Kernel(5, 15, 8, 2).Kernel(30, 10, 7, 3);
  GpuMetrics m = b.Compute();
  EXPECT_EQ(m.temporal.span_ns, 40 * kNsPerUs);
  EXPECT_EQ(m.temporal.busy_ns, 30 * kNsPerUs);  // [0,20] ∪ [30,40]
  EXPECT_EQ(m.temporal.idle_ns, 10 * kNsPerUs);
  EXPECT_EQ(m.temporal.compute_ns, 30 * kNsPerUs);
  EXPECT_EQ(m.temporal.non_compute_ns, 0);
  EXPECT_DOUBLE_EQ(*m.temporal.idle_pct, 25.0);
  EXPECT_TRUE(m.per_device.empty());
}

TEST(GpuMetricsTest, ZeroLengthEventsExtendSpanButAddNoBusyTime) {
  TraceBuilder b;
  b.Kernel(0, 10, 7, 1).Kernel(50, 0, 7, 2).Kernel(5, 0, 7, 3);
  GpuMetrics m = b.Compute();
  EXPECT_EQ(m.temporal.span_ns, 50 * kNsPerUs);
  EXPECT_EQ(m.temporal.busy_ns, 10 * kNsPerUs);
  EXPECT_EQ(m.temporal.idle_ns, 40 * kNsPerUs);
}

TEST(GpuMetricsTest, EmptyTraceHasNoPercentages) {
  TraceBuilder b;
  b.Launch(0, 5, 1);
  GpuMetrics m = b.Compute();
  EXPECT_EQ(m.temporal.span_ns, 0);
  EXPECT_FALSE(m.temporal.idle_pct.has_value());
  EXPECT_FALSE(m.comm_comp_overlap_pct.has_value());
  EXPECT_FALSE(m.launch.launch_delay_median_ns.has_value());
  EXPECT_TRUE(m.idle.empty());
}

TEST(GpuMetricsTest, UnsortedInputGivesSameResult) {
  TraceBuilder sorted;
  sorted.Launch(0, 2, 1).Launch(3, 2, 2).Kernel(4, 10, 7, 1).Kernel(20, 5, 7, 2);
  TraceBuilder shuffled;
  shuffled.Kernel(20, 5, 7, 2).Launch(3, 2, 2).Kernel(4, 10, 7, 1).Launch(0, 2, 1);
  GpuMetrics a = sorted.Compute();
  GpuMetrics b = shuffled.Compute();
  EXPECT_EQ(a.temporal.span_ns, b.temporal.span_ns);
  EXPECT_EQ(a.temporal.idle_ns, b.temporal.idle_ns);
  ASSERT_EQ(a.idle.size(), 1u);
  ASSERT_EQ(b.idle.size(), 1u);
  EXPECT_EQ(a.idle[0].other_ns, b.idle[0].other_ns);
  EXPECT_EQ(a.launch.launch_delay_median_ns, b.launch.launch_delay_median_ns);
  EXPECT_EQ(b.temporal.span_ns, 21 * kNsPerUs);
}

TEST(GpuMetricsTest, MissingCorrelationIsNeverHostWait) {
  TraceBuilder b;
  // The second kernel has no correlation, the third one's launch is absent from the trace.
  b.Launch(0, 1, 1).Kernel(1, 10, 7, 1).Kernel(100, 10, 7, -1).Kernel(200, 10, 7, 99);
  GpuMetrics m = b.Compute();
  EXPECT_EQ(m.gpu_events, 3u);
  EXPECT_EQ(m.gpu_events_without_launch, 2u);
  ASSERT_EQ(m.idle.size(), 1u);
  EXPECT_EQ(m.idle[0].host_wait_ns, 0);
  EXPECT_EQ(m.idle[0].other_ns, (89 + 90) * kNsPerUs);
  EXPECT_EQ(m.launch.launches, 1u);
}

TEST(GpuMetricsTest, IdleGapClassesAndThirtyMicrosecondThreshold) {
  TraceBuilder b;
  b.Launch(0, 1, 1).Kernel(1, 9, 7, 1);  // ends at 10
  // Launched before 10 (not host wait); gap exactly 30 µs → not < threshold → other.
  b.Launch(2, 1, 2).Kernel(40, 10, 7, 2);  // ends at 50
  // Gap 29.999 µs → kernel wait.
  b.Launch(3, 1, 3).Gpu(EventKind::kKernel, "gemm", 50 * kNsPerUs + 29'999, 1, 7, 3);
  // Launched at 100, after the previous end (≈80): host wait, gap 120 − 79.999... = 40.001 µs.
  b.Launch(100, 5, 4).Kernel(120, 10, 7, 4);
  GpuMetrics m = b.Compute();
  ASSERT_EQ(m.idle.size(), 1u);
  const StreamIdle& s = m.idle[0];
  EXPECT_EQ(s.other_ns, 30 * kNsPerUs);
  EXPECT_EQ(s.kernel_wait_ns, 29'999);
  EXPECT_EQ(s.host_wait_ns, 120 * kNsPerUs - (50 * kNsPerUs + 30'000));
  EXPECT_EQ(s.gaps, 3u);
  EXPECT_NEAR(*s.other_share + *s.kernel_wait_share + *s.host_wait_share, 1.0, 1e-12);
}

TEST(GpuMetricsTest, CommComputeOverlap) {
  TraceBuilder b;
  b.Kernel(0, 100, 20, 1, "ncclKernel_AllReduce").Kernel(200, 100, 20, 2, "ncclDevKernel_Send");
  b.Kernel(50, 100, 7, 3, "gemm");
  b.Gpu(EventKind::kMemcpy, "Memcpy HtoD", 250 * kNsPerUs, 50 * kNsPerUs, 7,
        4);  // memory: not compute
  GpuMetrics m = b.Compute();
  EXPECT_EQ(m.comm_ns, 200 * kNsPerUs);
  EXPECT_EQ(m.comm_overlap_ns, 50 * kNsPerUs);
  EXPECT_DOUBLE_EQ(*m.comm_comp_overlap_pct, 25.0);
  EXPECT_EQ(m.temporal.compute_ns, 100 * kNsPerUs);
  EXPECT_EQ(m.temporal.non_compute_ns, 300 * kNsPerUs - 100 * kNsPerUs - m.temporal.idle_ns);
}

TEST(GpuMetricsTest, CudaSyncIsBusyOnlyInHtaMode) {
  auto build = [](TraceBuilder& b) {
    b.Kernel(0, 10, 7, 1);
    b.Gpu(EventKind::kCudaSync, "Stream Sync", 10 * kNsPerUs, 20 * kNsPerUs, 7, 2);
    b.Launch(0, 1, 1).Launch(1, 1, 2, "cudaStreamSynchronize");
  };
  TraceBuilder clean;
  build(clean);
  TraceBuilder hta;
  build(hta);
  GpuMetrics c = clean.Compute(false);
  GpuMetrics h = hta.Compute(true);
  EXPECT_EQ(c.temporal.span_ns, 10 * kNsPerUs);
  EXPECT_EQ(h.temporal.span_ns, 30 * kNsPerUs);
  EXPECT_EQ(h.temporal.idle_ns, 0);
  EXPECT_EQ(h.temporal.compute_ns, 10 * kNsPerUs);  // sync is HTA type OTHER: non-compute
  EXPECT_EQ(h.temporal.non_compute_ns, 20 * kNsPerUs);
}

TEST(GpuMetricsTest, SeveralDevicesGetTheirOwnBreakdown) {
  TraceBuilder b;
  b.Gpu(EventKind::kKernel, "gemm", 0, 10 * kNsPerUs, 7, 1, /*device=*/0);
  b.Gpu(EventKind::kKernel, "gemm", 20 * kNsPerUs, 10 * kNsPerUs, 7, 2, /*device=*/1);
  GpuMetrics m = b.Compute();
  EXPECT_EQ(m.temporal.span_ns, 30 * kNsPerUs);
  ASSERT_EQ(m.per_device.size(), 2u);
  EXPECT_EQ(m.per_device[0].device, 0);
  EXPECT_EQ(m.per_device[0].span_ns, 10 * kNsPerUs);
  EXPECT_EQ(m.per_device[1].idle_ns, 0);
  EXPECT_EQ(m.idle.size(), 2u);  // (device 0, stream 7) and (device 1, stream 7)
}

TEST(GpuMetricsTest, HtaDropsKernelsLaunchedInTheLastStep) {
  TraceBuilder b;
  b.Cpu(EventKind::kUserAnnotation, "ProfilerStep#1", 0, 100);
  b.Cpu(EventKind::kUserAnnotation, "ProfilerStep#2", 100, 100);
  b.Launch(10, 2, 1).Kernel(150, 10, 7, 1);   // launched in step 1, runs in step 2: kept
  b.Launch(120, 2, 2).Kernel(170, 10, 7, 2);  // launched in step 2: dropped
  GpuMetrics m = b.Compute(true);
  EXPECT_EQ(m.gpu_events, 1u);
  EXPECT_EQ(m.temporal.span_ns, 10 * kNsPerUs);
  EXPECT_EQ(m.launch.launches, 1u);
}

TEST(GpuMetricsTest, LaunchStatisticsBothModes) {
  TraceBuilder b;
  b.Launch(0, 10, 1).Kernel(20, 5, 7, 1);      // delay: hta 10, clean 20; shorter than call
  b.Launch(10, 60, 2).Kernel(200, 100, 7, 2);  // long call (60 > 50); delay hta 130 clean 190
  b.Launch(80, 1, 3, "cudaGraphLaunch").Kernel(400, 5, 7, 3).Kernel(410, 5, 7, 3);
  b.Cpu(EventKind::kRuntime, "cudaStreamSynchronize", 90, 5, 4);
  GpuMetrics c = b.Compute(false);
  EXPECT_EQ(c.launch.launches, 4u);
  EXPECT_EQ(c.launch.graph_launches, 1u);
  EXPECT_EQ(c.launch.graph_kernels, 2u);
  EXPECT_EQ(c.launch.long_runtime_calls, 1u);
  EXPECT_EQ(c.launch.kernels_shorter_than_launch, 1u);
  // Clean delays (once per call): 20, 190, 320 µs → median 190, two > 100 µs.
  EXPECT_EQ(c.launch.launch_delay_median_ns, 190 * kNsPerUs);
  EXPECT_EQ(c.launch.long_launch_delays, 2u);
  ASSERT_EQ(c.launch.queues.size(), 1u);
  // Steps: +1@0 +1@10 −1@25 +1@80 +1@80 −1@300 −1@405 −1@415 → depths 1 2 1 2 3 2 1 0.
  EXPECT_EQ(c.launch.queues[0].max, 3);
  EXPECT_EQ(c.launch.queues[0].samples, 8u);
  EXPECT_DOUBLE_EQ(c.launch.queues[0].mean, 12.0 / 8.0);
  EXPECT_DOUBLE_EQ(c.launch.queues[0].median, 1.5);
  EXPECT_EQ(c.launch.blocked_launches, 0u);  // a queue of 3 cannot block the host
}

TEST(GpuMetricsTest, LaunchStatisticsHtaMode) {
  TraceBuilder b;
  b.Launch(0, 10, 1).Kernel(20, 5, 7, 1);
  b.Launch(10, 60, 2).Kernel(200, 100, 7, 2);
  b.Launch(80, 1, 3, "cudaGraphLaunch").Kernel(400, 5, 7, 3);  // not an HTA launch name
  GpuMetrics h = b.Compute(true);
  EXPECT_EQ(h.launch.launches, 2u);
  EXPECT_EQ(h.launch.graph_launches, 0u);
  // HTA: delay = GPU start − call end: 10 and 130 µs → median 70 µs; p99 = 10 + 0.99 × 120.
  EXPECT_EQ(h.launch.launch_delay_median_ns, 70 * kNsPerUs);
  EXPECT_EQ(h.launch.launch_delay_p99_ns, 10 * kNsPerUs + 118'800);
  EXPECT_EQ(h.launch.long_launch_delays, 1u);
  ASSERT_EQ(h.launch.queues.size(), 1u);
  // +1@0 +1@10 −1@20 −1@200 → 1 2 1 0.
  EXPECT_EQ(h.launch.queues[0].max, 2);
  EXPECT_DOUBLE_EQ(h.launch.queues[0].mean, 1.0);
}

TEST(GpuMetricsTest, FullQueueBlocksTheHost) {
  TraceBuilder b;
  // 200 launches of 2 µs each enqueue faster than the GPU drains them; the last ones are long.
  for (int i = 0; i < 200; ++i) {
    int64_t dur = i >= 190 ? 102 : 2;
    b.Launch(i * 2, dur, i + 1).Kernel(10'000 + i * 10, 10, 7, i + 1);
  }
  GpuMetrics m = b.Compute();
  ASSERT_EQ(m.launch.queues.size(), 1u);
  EXPECT_EQ(m.launch.queues[0].max, 200);
  // Full = depth ≥ 180 before the launch: launches 180..199 (20 of them); the 10 long ones
  // exceed the median call (2 µs) by 100 µs each.
  EXPECT_EQ(m.launch.blocked_launches, 20u);
  EXPECT_EQ(m.launch.blocked_on_full_queue_ns, 10 * 100 * kNsPerUs);
}

}  // namespace
}  // namespace stallscope::trace
