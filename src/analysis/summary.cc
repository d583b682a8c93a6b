#include "analysis/summary.h"

#include <cmath>
#include <limits>

namespace stallscope::analysis {
namespace {

// Clock-event reasons that mean "slowed down" rather than "idle" or "user set clocks".
constexpr uint64_t kThrottleMask = gpu::kClockEventSwPowerCap | gpu::kClockEventHwSlowdown |
                                   gpu::kClockEventSwThermal | gpu::kClockEventHwThermal |
                                   gpu::kClockEventHwPowerBrake;

/// The fields that arrive after their time: the driver's sub-second utilization samples (driver
/// timestamps in wall-clock µs) and GPM windows (ending at the sample), each only inside
/// [fine_begin, fine_end] (monotonic).
void AddBufferedGpu(GpuSummary& s, const gpu::GpuSample& g, const sample::Sample& at,
                    int64_t fine_begin_ns, int64_t fine_end_ns) {
  const int64_t mono_ns = at.mono_ns;
  for (size_t k = 0; k < g.util_sample_count; ++k) {
    const int64_t mono = at.DriverMonoNs(g.util_samples[k].ts_us);
    if (mono >= fine_begin_ns && mono <= fine_end_ns)
      s.util_fine_pct.Add(g.util_samples[k].util_pct);
  }
  if (!g.gpm || mono_ns > fine_end_ns || mono_ns - g.gpm->window_ns < fine_begin_ns) return;
  const gpu::GpmMetrics& m = *g.gpm;
  auto add = [](RunningStats& stats, const std::optional<double>& v) {
    if (v) stats.Add(*v);
  };
  add(s.gpm_sm_active_pct, m.sm_active_pct);
  add(s.gpm_sm_occupancy_pct, m.sm_occupancy_pct);
  add(s.gpm_tensor_active_pct, m.tensor_active_pct);
  add(s.gpm_dram_active_pct, m.dram_active_pct);
  add(s.gpm_fp32_active_pct, m.fp32_active_pct);
  add(s.gpm_fp16_active_pct, m.fp16_active_pct);
}

void AddGpuSample(GpuSummary& s, const gpu::GpuSample& g, const sample::Sample& at,
                  int64_t fine_begin_ns, int64_t fine_end_ns) {
  if (g.lost) {
    ++s.lost_samples;
    return;
  }
  ++s.samples;
  if (g.mem_used_bytes) s.memory_used_mib.Add(static_cast<double>(*g.mem_used_bytes) / kMiB);
  if (g.mem_total_bytes) s.memory_total_mib = static_cast<double>(*g.mem_total_bytes) / kMiB;
  if (g.util_gpu_pct) s.util_pct.Add(*g.util_gpu_pct);
  AddBufferedGpu(s, g, at, fine_begin_ns, fine_end_ns);
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

SummaryBuilder::SummaryBuilder(const sample::RecordingHeader& header, const ThresholdSet& t)
    : t_(&t) {
  out_.hostname = header.hostname;
  out_.gpu_note = header.gpu_note;
  out_.gpus.resize(header.gpus.size());
  for (size_t i = 0; i < out_.gpus.size(); ++i) {
    out_.gpus[i].index = header.gpus[i].index;
    out_.gpus[i].name = header.gpus[i].name;
  }
}

void SummaryBuilder::Add(const sample::Sample& s) {
  if (out_.samples == 0) first_mono_ns_ = s.mono_ns;
  last_mono_ns_ = s.mono_ns;
  ++out_.samples;
  for (size_t i = 0; i < s.gpus.size() && i < out_.gpus.size(); ++i)
    AddGpuSample(out_.gpus[i], s.gpus[i], s, fine_begin_ns_, fine_end_ns_);
  if (s.host.cpu) {
    out_.cpu_busy_pct.Add(s.host.cpu->busy_pct);
    out_.cpu_iowait_pct.Add(s.host.cpu->iowait_pct);
  }
  if (s.host.mem_used_bytes) out_.mem_used_bytes.Add(static_cast<double>(*s.host.mem_used_bytes));
}

void SummaryBuilder::AddBuffered(const sample::Sample& s) {
  for (size_t i = 0; i < s.gpus.size() && i < out_.gpus.size(); ++i) {
    if (s.gpus[i].lost) continue;
    AddBufferedGpu(out_.gpus[i], s.gpus[i], s, fine_begin_ns_, fine_end_ns_);
  }
}

RecordingSummary SummaryBuilder::Finish(std::optional<int> exit_code,
                                        std::vector<std::string> warnings) && {
  RecordingSummary out = std::move(out_);
  out.exit_code = exit_code;
  out.warnings = std::move(warnings);
  if (out.samples >= 2) out.duration_ns = last_mono_ns_ - first_mono_ns_;
  std::vector<double> mem_means, util_means;
  for (const auto& g : out.gpus) {
    if (g.memory_used_mib.count() > 0) {
      out.total_memory_used_mib += g.memory_used_mib.mean();
      mem_means.push_back(g.memory_used_mib.mean());
    }
    if (g.util_pct.count() > 0) util_means.push_back(g.util_pct.mean());
  }
  // Balance is only meaningful when every GPU reported the metric.
  if (mem_means.size() == out.gpus.size()) out.memory_balance = ComputeBalance(mem_means, *t_);
  if (util_means.size() == out.gpus.size()) out.util_balance = ComputeBalance(util_means, *t_);
  return out;
}

RecordingSummary Summarize(const sample::Recording& rec, const ThresholdSet& t) {
  SummaryBuilder builder(rec.header, t);
  for (const auto& s : rec.samples) builder.Add(s);
  return std::move(builder).Finish(rec.exit_code, rec.warnings);
}

RecordingSummary SummarizeWindow(const sample::RecordingHeader& header,
                                 std::span<const sample::Sample> samples, int64_t fine_begin_ns,
                                 int64_t fine_end_ns, const ThresholdSet& t,
                                 std::span<const sample::Sample> after) {
  SummaryBuilder builder(header, t);
  builder.SetFineWindow(fine_begin_ns, fine_end_ns);
  for (const auto& s : samples) builder.Add(s);
  for (const auto& s : after) builder.AddBuffered(s);
  return std::move(builder).Finish(std::nullopt, {});
}

namespace {

/// Feeds a SummaryBuilder from StreamRecording; the header comes first, so the builder exists
/// before the first sample.
class SummaryConsumer final : public sample::RecordingConsumer {
 public:
  explicit SummaryConsumer(const ThresholdSet& t) : t_(t) {}
  void OnHeader(const sample::RecordingHeader& header) override { builder_.emplace(header, t_); }
  void OnSample(const sample::Sample& s) override { builder_->Add(s); }
  std::optional<SummaryBuilder>& builder() { return builder_; }

 private:
  const ThresholdSet& t_;
  std::optional<SummaryBuilder> builder_;
};

}  // namespace

Result<RecordingSummary> SummarizeFile(const std::string& path, const ThresholdSet& t) {
  SummaryConsumer consumer(t);
  TRY(sample::RecordingTail tail, sample::StreamRecording(path, consumer));
  // StreamRecording succeeds only after a header, so the builder exists.
  return std::move(*consumer.builder()).Finish(tail.exit_code, std::move(tail.warnings));
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
