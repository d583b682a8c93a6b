#include "analysis/summary.h"

#include <gtest/gtest.h>

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
      s.gpus[i].mem_used_bytes = static_cast<uint64_t>(mem * sample::kBytesPerMiB);
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
