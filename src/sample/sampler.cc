#include "sample/sampler.h"

#include <algorithm>

namespace stallscope::sample {

Sampler::Sampler(gpu::GpuBackend& gpus, host::HostSampler& host, host::ProcessTracker* processes,
                 Clock& clock)
    : gpus_(gpus), host_(host), processes_(processes), clock_(clock) {}

void Sampler::SampleOnce(Sample& out) { SampleTiers(out, {}); }

void Sampler::SampleTiers(Sample& out, gpu::PollTiers due) {
  out.mono_ns = clock_.MonotonicNs();
  out.wall_ns = clock_.WallNs();
  out.gpus.resize(gpus_.DeviceCount());
  if (due.none()) due = poll_ ? poll_->Due(out.mono_ns) : gpu::AllTiers();
  for (size_t i = 0; i < out.gpus.size(); ++i) gpus_.Sample(i, due, out.gpus[i]);
  host_.Sample(out.mono_ns, out.host);
  out.has_processes = processes_ != nullptr;
  if (processes_ != nullptr) {
    processes_->Sample(out.mono_ns, out.processes);
  } else {
    out.processes.clear();
  }
}

void Sampler::Run(int64_t interval_ns, StopFlag& stop, const Sink& sink, int64_t max_samples) {
  interval_ns = std::max(interval_ns, kMinIntervalNs);
  Sample sample;
  int64_t next = clock_.MonotonicNs();
  int64_t n = 0;
  for (; !stop.requested(); ++n) {
    if (max_samples > 0 && n >= max_samples) return;
    SampleOnce(sample);
    if (!sink(sample)) return;
    next += interval_ns;
    // Fell behind (a slow NVML call, a suspended process): skip missed ticks, keep the grid.
    int64_t now = clock_.MonotonicNs();
    if (next < now) next += ((now - next) / interval_ns + 1) * interval_ns;
    clock_.SleepUntil(next, stop);
  }
  if (n > 0 && poll_) {
    if (const gpu::PollTiers last = poll_->Final(); last.any()) {
      SampleTiers(sample, last);
      sink(sample);
    }
  }
}

AggregateStats Aggregate(const std::vector<gpu::GpuSample>& gpus) {
  AggregateStats agg;
  double util_sum = 0;
  uint32_t util_n = 0;
  for (const auto& g : gpus) {
    if (g.lost) continue;
    ++agg.gpu_count;
    if (g.mem_used_bytes)
      agg.total_memory_used_mib += static_cast<double>(*g.mem_used_bytes) / kMiB;
    if (g.mem_total_bytes)
      agg.total_memory_total_mib += static_cast<double>(*g.mem_total_bytes) / kMiB;
    if (g.util_gpu_pct) {
      util_sum += *g.util_gpu_pct;
      ++util_n;
    }
    if (g.power_mw) agg.total_power_w = agg.total_power_w.value_or(0) + *g.power_mw / 1000.0;
    if (g.temperature_c)
      agg.max_temperature_c = std::max(agg.max_temperature_c.value_or(0), *g.temperature_c);
  }
  if (util_n > 0) agg.average_utilization_pct = util_sum / util_n;
  if (agg.total_memory_total_mib > 0) {
    agg.total_memory_percent = agg.total_memory_used_mib / agg.total_memory_total_mib * 100.0;
  }
  return agg;
}

}  // namespace stallscope::sample
