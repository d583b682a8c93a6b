#include "analysis/summary.h"

#include <gtest/gtest.h>

#include "host_test_util.h"

namespace stallscope::analysis {
namespace {

sample::Recording FourGpuRecording(const std::vector<double>& mem_mib) {
  sample::Recording rec;
  for (uint32_t i = 0; i < mem_mib.size(); ++i) {
    gpu::GpuStatic g;
    g.index = i;
    g.name = "NVIDIA A10G";
    rec.header.gpus.push_back(g);
  }
  for (int t = 0; t < 4; ++t) {
    sample::Sample s;
    s.mono_ns = t * 1'000'000'000LL;
    s.gpus.resize(mem_mib.size());
    for (size_t i = 0; i < mem_mib.size(); ++i) {
      // ±10 MiB around the mean: mean exact, std 10.
      double mem = mem_mib[i] + (t % 2 == 0 ? 10 : -10);
      s.gpus[i].mem_used_bytes = static_cast<uint64_t>(mem * kMiB);
      s.gpus[i].util_gpu_pct = 80;
    }
    rec.samples.push_back(s);
  }
  return rec;
}

TEST(Summarize, SeedExampleIsExcellent) {
  auto sum = Summarize(FourGpuRecording({12800, 12750, 12825, 12780}));
  ASSERT_EQ(sum.gpus.size(), 4u);
  EXPECT_NEAR(sum.gpus[0].memory_used_mib.mean(), 12800, 1e-6);
  EXPECT_NEAR(sum.gpus[0].memory_used_mib.stddev(), 10, 1e-6);
  EXPECT_NEAR(sum.total_memory_used_mib, 51155, 1e-6);
  ASSERT_TRUE(sum.memory_balance.cv_pct);
  EXPECT_EQ(sum.memory_balance.quality, BalanceClass::kExcellent);
  EXPECT_EQ(sum.duration_ns, 3'000'000'000);
  // Equal utilization everywhere: CV 0.
  EXPECT_NEAR(*sum.util_balance.cv_pct, 0, 1e-9);
}

TEST(Summarize, ImbalanceIsPoor) {
  auto sum = Summarize(FourGpuRecording({20000, 10000, 10000, 10000}));
  EXPECT_EQ(sum.memory_balance.quality, BalanceClass::kPoor);
  EXPECT_NEAR(*sum.memory_balance.cv_pct, 34.64, 0.01);
}

TEST(Summarize, SingleGpuHasNoBalance) {
  auto sum = Summarize(FourGpuRecording({5000}));
  EXPECT_FALSE(sum.memory_balance.cv_pct.has_value());
}

TEST(Summarize, LostSamplesAreCountedNotAveraged) {
  auto rec = FourGpuRecording({1000, 1000});
  rec.samples[3].gpus[1] = gpu::GpuSample{};
  rec.samples[3].gpus[1].lost = true;
  auto sum = Summarize(rec);
  EXPECT_EQ(sum.gpus[1].samples, 3);
  EXPECT_EQ(sum.gpus[1].lost_samples, 1);
}

void ExpectSameStats(const RunningStats& a, const RunningStats& b, const std::string& what) {
  EXPECT_EQ(a.count(), b.count()) << what;
  EXPECT_EQ(a.mean(), b.mean()) << what;
  EXPECT_EQ(a.stddev(), b.stddev()) << what;
  EXPECT_EQ(a.min(), b.min()) << what;
  EXPECT_EQ(a.max(), b.max()) << what;
}

void ExpectSameSummary(const RecordingSummary& a, const RecordingSummary& b) {
  EXPECT_EQ(a.hostname, b.hostname);
  EXPECT_EQ(a.gpu_note, b.gpu_note);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.duration_ns, b.duration_ns);
  EXPECT_EQ(a.total_memory_used_mib, b.total_memory_used_mib);
  EXPECT_EQ(a.memory_balance.cv_pct, b.memory_balance.cv_pct);
  EXPECT_EQ(a.memory_balance.quality, b.memory_balance.quality);
  EXPECT_EQ(a.util_balance.cv_pct, b.util_balance.cv_pct);
  EXPECT_EQ(a.util_balance.quality, b.util_balance.quality);
  ExpectSameStats(a.cpu_busy_pct, b.cpu_busy_pct, "cpu_busy_pct");
  ExpectSameStats(a.cpu_iowait_pct, b.cpu_iowait_pct, "cpu_iowait_pct");
  ExpectSameStats(a.mem_used_bytes, b.mem_used_bytes, "mem_used_bytes");
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.warnings, b.warnings);
  ASSERT_EQ(a.gpus.size(), b.gpus.size());
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    const GpuSummary& x = a.gpus[i];
    const GpuSummary& y = b.gpus[i];
    const std::string gpu = "GPU " + std::to_string(i) + " ";
    EXPECT_EQ(x.index, y.index) << gpu;
    EXPECT_EQ(x.name, y.name) << gpu;
    EXPECT_EQ(x.memory_total_mib, y.memory_total_mib) << gpu;
    EXPECT_EQ(x.samples, y.samples) << gpu;
    EXPECT_EQ(x.lost_samples, y.lost_samples) << gpu;
    EXPECT_EQ(x.throttled_samples, y.throttled_samples) << gpu;
    ExpectSameStats(x.memory_used_mib, y.memory_used_mib, gpu + "memory_used_mib");
    ExpectSameStats(x.util_pct, y.util_pct, gpu + "util_pct");
    ExpectSameStats(x.util_fine_pct, y.util_fine_pct, gpu + "util_fine_pct");
    ExpectSameStats(x.power_w, y.power_w, gpu + "power_w");
    ExpectSameStats(x.temperature_c, y.temperature_c, gpu + "temperature_c");
    ExpectSameStats(x.sm_clock_mhz, y.sm_clock_mhz, gpu + "sm_clock_mhz");
  }
}

/// A varied recording: lost GPUs, throttling, sub-second buffers, absent metrics, host stats.
sample::Recording MixedRecording() {
  sample::Recording rec = FourGpuRecording({1000, 2000, 3000});
  rec.header.hostname = "node-7";
  uint64_t x = 12345;
  auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
  for (int t = 4; t < 200; ++t) {
    sample::Sample s;
    s.mono_ns = t * 250'000'000LL;
    s.gpus.resize(t % 7 == 0 ? 2 : 3);  // a short sample now and then
    for (auto& g : s.gpus) {
      if (next() % 11 == 0) {
        g.lost = true;
        continue;
      }
      if (next() % 5 != 0) g.mem_used_bytes = (next() % 80'000) << 20;
      g.mem_total_bytes = 80'000ull << 20;
      g.util_gpu_pct = static_cast<uint32_t>(next() % 101);
      g.power_mw = static_cast<uint32_t>(next() % 700'000);
      if (next() % 3 == 0) g.temperature_c = static_cast<uint32_t>(next() % 90);
      g.sm_clock_mhz = 1980;
      g.clock_event_reasons = next() % 4 == 0 ? uint64_t{gpu::kClockEventHwThermal} : uint64_t{0};
      g.util_sample_count = static_cast<uint32_t>(next() % 4);
      for (uint32_t k = 0; k < g.util_sample_count; ++k)
        g.util_samples[k] = {t * 1000LL + k, static_cast<uint32_t>(next() % 101)};
    }
    if (t % 3 != 0)
      s.host.cpu = host::CpuShares{static_cast<double>(next() % 1000) / 10.0, 0, 0,
                                   static_cast<double>(next() % 100) / 10.0, 0};
    s.host.mem_used_bytes = next() % (64ull << 30);
    rec.samples.push_back(s);
  }
  rec.exit_code = 3;
  rec.warnings = {"a.jsonl: skipped 1 malformed line(s)"};
  return rec;
}

// Fed sample by sample, the builder gives what Summarize gives for the recording read whole (the
// numbers themselves are checked by hand above and by the summary goldens).
// Issue 28: the utilization buffer and GPM arrive every few seconds, so the samples after a
// window still carry its last entries; GPM windows count only when wholly inside it.
TEST(SummarizeWindow, BufferedFieldsReadAfterTheWindowStillCount) {
  constexpr int64_t kS = 1'000'000'000;
  sample::RecordingHeader header;
  header.gpus.resize(1);
  std::vector<sample::Sample> samples(12);
  for (int t = 0; t < 12; ++t) {
    sample::Sample& s = samples[static_cast<size_t>(t)];
    s.mono_ns = t * kS;
    s.wall_ns = s.mono_ns;  // wall = mono: driver µs stamps convert 1:1
    s.gpus.resize(1);
    s.gpus[0].util_gpu_pct = 50;
  }
  // Read at t=10 s: buffer entries of 8.5 s and 9.5 s (inside [2 s, 9 s]: only 8.5 s).
  gpu::GpuSample& late = samples[10].gpus[0];
  late.util_samples[0] = {8'500'000, 90};
  late.util_samples[1] = {9'500'000, 10};
  late.util_sample_count = 2;
  // GPM windows: [1 s, 4 s] starts before the window (dropped), [4 s, 8 s] is inside.
  samples[4].gpus[0].gpm.emplace();
  samples[4].gpus[0].gpm->window_ns = 3 * kS;
  samples[4].gpus[0].gpm->sm_active_pct = 10;
  samples[8].gpus[0].gpm.emplace();
  samples[8].gpus[0].gpm->window_ns = 4 * kS;
  samples[8].gpus[0].gpm->sm_active_pct = 90;
  samples[8].gpus[0].gpm->tensor_active_pct = 80;
  const std::span<const sample::Sample> all(samples);
  const RecordingSummary r =
      SummarizeWindow(header, all.subspan(2, 8), 2 * kS, 9 * kS, kThresholds, all.subspan(10));
  const GpuSummary& g = r.gpus[0];
  EXPECT_EQ(g.samples, 8);  // the window's samples only
  ASSERT_EQ(g.util_fine_pct.count(), 1);
  EXPECT_EQ(g.util_fine_pct.mean(), 90);
  ASSERT_EQ(g.gpm_sm_active_pct.count(), 1);
  EXPECT_EQ(g.gpm_sm_active_pct.mean(), 90);
  EXPECT_EQ(g.gpm_tensor_active_pct.mean(), 80);
}

TEST(SummaryBuilder, MatchesTheWholeRecordingSummary) {
  for (const auto& rec :
       {FourGpuRecording({12800, 12750, 12825, 12780}), MixedRecording(), sample::Recording{}}) {
    SummaryBuilder builder(rec.header);
    for (const auto& s : rec.samples) builder.Add(s);
    ExpectSameSummary(std::move(builder).Finish(rec.exit_code, rec.warnings), Summarize(rec));
  }
}

// `summary` streams the file; the statistics are those of the recording read whole.
TEST(SummarizeFile, MatchesSummarizeOfTheWholeRecording) {
  for (const char* run : {"runs/data_cpu/recording.jsonl", "runs/gpu_throttled/recording.jsonl"}) {
    const std::string path = host::testing::DataPath(run).string();
    auto streamed = SummarizeFile(path);
    ASSERT_TRUE(streamed.ok()) << streamed.error().message;
    auto rec = sample::ReadRecording(path);
    ASSERT_TRUE(rec.ok()) << rec.error().message;
    EXPECT_GT(streamed->samples, 0) << run;
    ExpectSameSummary(*streamed, Summarize(*rec));
  }
  auto missing = SummarizeFile("/nonexistent/run.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message,
            "/nonexistent/run.jsonl: cannot open recording: no such file or directory");
}

TEST(LowUtilWatch, WarnsOnlyAfterAFullLowWindow) {
  LowUtilWatch w;
  for (int i = 0; i < 9; ++i) w.Add(5);
  EXPECT_FALSE(w.Low());  // 9 samples: not yet "the last 10"
  w.Add(5);
  EXPECT_TRUE(w.Low());
  for (int i = 0; i < 5; ++i) w.Add(100);  // mean of last 10 = 52.5
  EXPECT_FALSE(w.Low());
  LowUtilWatch edge;
  for (int i = 0; i < 10; ++i) edge.Add(30);
  EXPECT_FALSE(edge.Low());  // "under 30%": 30 is not under
}

}  // namespace
}  // namespace stallscope::analysis
