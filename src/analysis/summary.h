#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/stats.h"
#include "sample/recording.h"

namespace stallscope::analysis {

/// Per-GPU statistics over a recording (lost samples excluded).
struct GpuSummary {
  uint32_t index = 0;
  std::string name;
  RunningStats memory_used_mib;
  RunningStats util_pct;       ///< polled utilization (nvmlDeviceGetUtilizationRates)
  RunningStats util_fine_pct;  ///< the driver's sub-second buffer, when recorded
  RunningStats power_w;
  RunningStats temperature_c;
  RunningStats sm_clock_mhz;
  std::optional<double> memory_total_mib;
  int64_t samples = 0;
  int64_t lost_samples = 0;
  int64_t throttled_samples = 0;  ///< any clock-event reason other than idle/app-clocks
  /// GPM (Hopper+): one entry per GPM window that lies wholly inside the fine window, in %.
  RunningStats gpm_sm_active_pct;
  RunningStats gpm_sm_occupancy_pct;
  RunningStats gpm_tensor_active_pct;
  RunningStats gpm_dram_active_pct;
  RunningStats gpm_fp32_active_pct;
  RunningStats gpm_fp16_active_pct;
};

/// Seed 002 load balance across GPUs: CV of the per-GPU means.
struct Balance {
  std::optional<double> cv_pct;  ///< empty with < 2 GPUs or a zero mean
  std::optional<BalanceClass> quality;
};

/// Summary of one recording: what `stallscope summary` prints.
struct RecordingSummary {
  std::string hostname;
  std::string gpu_note;
  int64_t samples = 0;
  int64_t duration_ns = 0;
  std::vector<GpuSummary> gpus;
  double total_memory_used_mib = 0;  ///< sum of per-GPU means
  Balance memory_balance;
  Balance util_balance;
  RunningStats cpu_busy_pct;
  RunningStats cpu_iowait_pct;
  RunningStats mem_used_bytes;
  std::optional<int> exit_code;
  std::vector<std::string> warnings;  ///< from reading the file
};

/// Builds a RecordingSummary one sample at a time: O(GPUs) memory, whatever the recording's
/// length (every statistic is a RunningStats: mean, std, min, max, count; no percentiles).
/// Adding the samples of a Recording in order gives exactly Summarize(rec). Not thread-safe.
class SummaryBuilder {
 public:
  /// `t` must outlive the builder; balance classes cut at its balance_*_cv.
  explicit SummaryBuilder(const sample::RecordingHeader& header,
                          const ThresholdSet& t = kThresholds);
  void Add(const sample::Sample& s);
  /// Only the fields that arrive after their time (the utilization buffer, GPM windows) of a
  /// sample taken after the window: a slower tier read after the window's end still holds data
  /// of its inside (gpu/poll_plan.h). Use with SetFineWindow.
  void AddBuffered(const sample::Sample& s);
  /// From now on, the driver's sub-second utilization samples count only when their own time
  /// (converted to CLOCK_MONOTONIC) lies in [begin_ns, end_ns]: a sample taken just after a
  /// window's end carries the driver's samples of the time before it, some of them outside.
  void SetFineWindow(int64_t begin_ns, int64_t end_ns) {
    fine_begin_ns_ = begin_ns;
    fine_end_ns_ = end_ns;
  }
  /// The summary, with the trailer's exit code and the reader's warnings.
  [[nodiscard]] RecordingSummary Finish(std::optional<int> exit_code,
                                        std::vector<std::string> warnings) &&;

 private:
  const ThresholdSet* t_;
  RecordingSummary out_;
  int64_t first_mono_ns_ = 0;
  int64_t last_mono_ns_ = 0;
  int64_t fine_begin_ns_ = std::numeric_limits<int64_t>::min();
  int64_t fine_end_ns_ = std::numeric_limits<int64_t>::max();
};

/// Statistics of `rec`. Never fails: an empty recording gives zero samples. Balance classes cut
/// at `t`'s balance_*_cv.
[[nodiscard]] RecordingSummary Summarize(const sample::Recording& rec,
                                         const ThresholdSet& t = kThresholds);

/// Statistics of `samples` (a window of a recording with `header`, e.g. the steady state of a
/// run), the sub-second utilization samples and GPM windows only within [fine_begin_ns,
/// fine_end_ns] (SummaryBuilder::SetFineWindow), including those that samples `after` the
/// window carry (SummaryBuilder::AddBuffered). No exit code, no warnings.
[[nodiscard]] RecordingSummary SummarizeWindow(const sample::RecordingHeader& header,
                                               std::span<const sample::Sample> samples,
                                               int64_t fine_begin_ns, int64_t fine_end_ns,
                                               const ThresholdSet& t = kThresholds,
                                               std::span<const sample::Sample> after = {});

/// Statistics of the recording at `path`, streamed (sample::StreamRecording): memory is one
/// sample plus O(GPUs), not the file. Fails like StreamRecording (unreadable, no header, CSV).
[[nodiscard]] Result<RecordingSummary> SummarizeFile(const std::string& path,
                                                     const ThresholdSet& t = kThresholds);

/// Balance of `per_gpu_means` (seed 002: CV = std/mean × 100%, classes at `t`'s 5/10/20%).
[[nodiscard]] Balance ComputeBalance(const std::vector<double>& per_gpu_means,
                                     const ThresholdSet& t);

/// Seed 004: warn when GPU utilization stayed low. Feed one average utilization per sample;
/// Low() is true once the mean of the last `window` samples is under `threshold_pct`.
class LowUtilWatch {
 public:
  /// Seed 004: "Automatic warnings if GPU util < 30%", over the last 10 samples
  /// (base/thresholds.h: low_util_warn, low_util_window).
  static constexpr double kDefaultThresholdPct = kThresholds.low_util_warn.value;
  static constexpr auto kDefaultWindow = static_cast<size_t>(kThresholds.low_util_window.value);

  explicit LowUtilWatch(double threshold_pct = kDefaultThresholdPct,
                        size_t window = kDefaultWindow);
  void Add(double util_pct);
  bool Low() const;
  /// Mean over the window (nan before any value).
  double WindowMean() const;

 private:
  double threshold_pct_;
  std::vector<double> ring_;
  size_t next_ = 0;
  size_t filled_ = 0;
};

}  // namespace stallscope::analysis
