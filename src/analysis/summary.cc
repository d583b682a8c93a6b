#include "analysis/summary.h"

#include <cmath>
#include <limits>

namespace stallscope::analysis {
namespace {

// Clock-event reasons that mean "slowed down" rather than "idle" or "user set clocks".
constexpr uint64_t kThrottleMask = gpu::kClockEventSwPowerCap | gpu::kClockEventHwSlowdown |
                                   gpu::kClockEventSwThermal | gpu::kClockEventHwThermal |
                                   gpu::kClockEventHwPowerBrake;

void AddGpuSample(GpuSummary& s, const gpu::GpuSample& g) {
  if (g.lost) {
    ++s.lost_samples;
    return;
  }
  ++s.samples;
  if (g.mem_used_bytes)
    s.memory_used_mib.Add(static_cast<double>(*g.mem_used_bytes) / sample::kBytesPerMiB);
  if (g.mem_total_bytes)
    s.memory_total_mib = static_cast<double>(*g.mem_total_bytes) / sample::kBytesPerMiB;
  if (g.util_gpu_pct) s.util_pct.Add(*g.util_gpu_pct);
  for (size_t k = 0; k < g.util_sample_count; ++k) s.util_fine_pct.Add(g.util_samples[k].util_pct);
  if (g.power_mw) s.power_w.Add(*g.power_mw / 1000.0);
  if (g.temperature_c) s.temperature_c.Add(*g.temperature_c);
  if (g.sm_clock_mhz) s.sm_clock_mhz.Add(*g.sm_clock_mhz);
  if (g.clock_event_reasons && (*g.clock_event_reasons & kThrottleMask) != 0) ++s.throttled_samples;
}

}  // namespace

Balance ComputeBalance(const std::vector<double>& per_gpu_means, const ThresholdSet& t) {
  Balance b;
  if (per_gpu_means.size() < 2) return b;
  b.cv_pct = CoefficientOfVariationPct(per_gpu_means);
  if (b.cv_pct) b.quality = ClassifyCv(*b.cv_pct, t);
  return b;
}

RecordingSummary Summarize(const sample::Recording& rec, const ThresholdSet& t) {
  RecordingSummary out;
  out.hostname = rec.header.hostname;
  out.gpu_note = rec.header.gpu_note;
  out.samples = static_cast<int64_t>(rec.samples.size());
  out.exit_code = rec.exit_code;
  out.warnings = rec.warnings;
  if (rec.samples.size() >= 2) {
    out.duration_ns = rec.samples.back().mono_ns - rec.samples.front().mono_ns;
  }
  out.gpus.resize(rec.header.gpus.size());
  for (size_t i = 0; i < out.gpus.size(); ++i) {
    out.gpus[i].index = rec.header.gpus[i].index;
    out.gpus[i].name = rec.header.gpus[i].name;
  }
  for (const auto& s : rec.samples) {
    for (size_t i = 0; i < s.gpus.size() && i < out.gpus.size(); ++i)
      AddGpuSample(out.gpus[i], s.gpus[i]);
    if (s.host.cpu) {
      out.cpu_busy_pct.Add(s.host.cpu->busy_pct);
      out.cpu_iowait_pct.Add(s.host.cpu->iowait_pct);
    }
    if (s.host.mem_used_bytes) out.mem_used_bytes.Add(static_cast<double>(*s.host.mem_used_bytes));
  }
  std::vector<double> mem_means, util_means;
  for (const auto& g : out.gpus) {
    if (g.memory_used_mib.count() > 0) {
      out.total_memory_used_mib += g.memory_used_mib.mean();
      mem_means.push_back(g.memory_used_mib.mean());
    }
    if (g.util_pct.count() > 0) util_means.push_back(g.util_pct.mean());
  }
  // Balance is only meaningful when every GPU reported the metric.
  if (mem_means.size() == out.gpus.size()) out.memory_balance = ComputeBalance(mem_means, t);
  if (util_means.size() == out.gpus.size()) out.util_balance = ComputeBalance(util_means, t);
  return out;
}

LowUtilWatch::LowUtilWatch(double threshold_pct, size_t window)
    : threshold_pct_(threshold_pct), ring_(std::max<size_t>(window, 1), 0.0) {}

void LowUtilWatch::Add(double util_pct) {
  ring_[next_] = util_pct;
  next_ = (next_ + 1) % ring_.size();
  if (filled_ < ring_.size()) ++filled_;
}

double LowUtilWatch::WindowMean() const {
  if (filled_ == 0) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (size_t i = 0; i < filled_; ++i) sum += ring_[i];
  return sum / static_cast<double>(filled_);
}

bool LowUtilWatch::Low() const { return filled_ == ring_.size() && WindowMean() < threshold_pct_; }

}  // namespace stallscope::analysis
