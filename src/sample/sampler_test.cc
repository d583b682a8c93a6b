#include "sample/sampler.h"

#include "fakes/fake_clock.h"
#include "fakes/fake_gpu_backend.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

namespace stallscope::sample {
namespace {

/// Two GPUs whose utilization follows the sample count; GPU 1 is lost from the 3rd sample on.
class ScriptedGpus final : public gpu::GpuBackend {
 public:
  ScriptedGpus() {
    for (uint32_t i = 0; i < 2; ++i) {
      gpu::GpuStatic s;
      s.index = i;
      s.name = "Scripted";
      statics_.push_back(s);
    }
  }
  size_t DeviceCount() const override { return statics_.size(); }
  const gpu::GpuStatic& Static(size_t i) const override { return statics_[i]; }
  using gpu::GpuBackend::Sample;
  void Sample(size_t i, gpu::PollTiers /*due*/, gpu::GpuSample& out) override {
    out.Clear();
    if (i == 1 && calls_ >= 4) {
      out.lost = true;
      return;
    }
    ++calls_;
    out.util_gpu_pct = static_cast<uint32_t>(calls_ % 100);
    out.mem_used_bytes = 1ull << 30;
    out.mem_total_bytes = 4ull << 30;
    out.processes.resize(3);
  }
  std::string DriverVersion() const override { return "test"; }
  std::string_view Name() const override { return "scripted"; }

 private:
  std::vector<gpu::GpuStatic> statics_;
  int calls_ = 0;
};

TEST(Sampler, RunsOnScheduleAndStops) {
  ScriptedGpus gpus;
  host::HostSampler host_sampler{host::ProcFs{}};
  FakeClock clock;
  Sampler sampler(gpus, host_sampler, nullptr, clock);
  StopFlag stop;
  std::vector<int64_t> times;
  std::vector<bool> lost;
  sampler.Run(
      100'000'000, stop,
      [&](const Sample& s) {
        times.push_back(s.mono_ns);
        lost.push_back(s.gpus[1].lost);
        return true;
      },
      5);
  ASSERT_EQ(times.size(), 5u);
  for (size_t i = 1; i < times.size(); ++i) EXPECT_EQ(times[i] - times[i - 1], 100'000'000);
  EXPECT_FALSE(lost[0]);
  EXPECT_TRUE(lost[4]);  // a lost GPU is reported lost; sampling goes on
}

TEST(Sampler, IntervalIsClampedTo50ms) {
  ScriptedGpus gpus;
  host::HostSampler host_sampler{host::ProcFs{}};
  FakeClock clock;
  Sampler sampler(gpus, host_sampler, nullptr, clock);
  StopFlag stop;
  std::vector<int64_t> times;
  sampler.Run(
      1'000'000, stop,
      [&](const Sample& s) {
        times.push_back(s.mono_ns);
        return true;
      },
      2);
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(times[1] - times[0], kMinIntervalNs);
}

TEST(Aggregate, SkipsLostGpusAndAbsentMetrics) {
  std::vector<gpu::GpuSample> gpus(3);
  gpus[0].util_gpu_pct = 80;
  gpus[0].mem_used_bytes = 1024ull << 20;
  gpus[0].mem_total_bytes = 4096ull << 20;
  gpus[0].power_mw = 100'000;
  gpus[0].temperature_c = 60;
  gpus[1].util_gpu_pct = 40;  // no power, no memory
  gpus[1].temperature_c = 75;
  gpus[2].lost = true;
  auto a = Aggregate(gpus);
  EXPECT_EQ(a.gpu_count, 2u);
  EXPECT_DOUBLE_EQ(*a.average_utilization_pct, 60.0);
  EXPECT_DOUBLE_EQ(*a.total_power_w, 100.0);
  EXPECT_EQ(*a.max_temperature_c, 75u);
  EXPECT_DOUBLE_EQ(*a.total_memory_percent, 25.0);
  EXPECT_FALSE(Aggregate({}).average_utilization_pct.has_value());
}

}  // namespace
}  // namespace stallscope::sample

namespace stallscope::sample {
namespace {

// Issue 28: the expensive GPU fields come at their tier's period, and the last sample after a
// stop reads what is buffered or counted, so the utilization buffer's newest entries are kept.
TEST(Sampler, SlowTiersComeAtTheirPeriodAndTheLastSampleFlushesThem) {
  gpu::FakeGpuBackend gpus({gpu::FakeGpuBackend::MakeStatic(0)});
  host::HostSampler host_sampler{host::ProcFs{}};
  FakeClock clock;
  Sampler sampler(gpus, host_sampler, nullptr, clock);
  constexpr int64_t kTick = 100'000'000;
  sampler.SetPlan(gpu::PlanPolling({.tick_ns = kTick, .gpus = 1}, kThresholds));
  StopFlag stop;
  std::vector<gpu::PollTiers> asked;
  sampler.Run(kTick, stop, [&](const Sample&) {
    asked.push_back(gpus.LastDue(0));
    if (asked.size() == 25) stop.Request();
    return true;
  });
  ASSERT_EQ(asked.size(), 26U);  // 25 on the grid and the last one
  EXPECT_EQ(asked.front(), gpu::AllTiers());
  std::vector<size_t> buffer;
  for (size_t k = 1; k < 25; ++k) {
    EXPECT_TRUE(asked[k].test(gpu::TierIndex(gpu::PollTier::kTick)));
    EXPECT_FALSE(asked[k].test(gpu::TierIndex(gpu::PollTier::kSlow)));
    if (asked[k].test(gpu::TierIndex(gpu::PollTier::kUtilBuffer))) buffer.push_back(k);
  }
  EXPECT_EQ(buffer, (std::vector<size_t>{10, 20}));
  const gpu::PollTiers last = asked.back();
  EXPECT_TRUE(last.test(gpu::TierIndex(gpu::PollTier::kUtilBuffer)));
  EXPECT_TRUE(last.test(gpu::TierIndex(gpu::PollTier::kEnergy)));
  EXPECT_TRUE(last.test(gpu::TierIndex(gpu::PollTier::kGpm)));
  EXPECT_FALSE(last.test(gpu::TierIndex(gpu::PollTier::kSlow)));
}

TEST(Sampler, WithoutAPlanEverySampleReadsEveryTier) {
  gpu::FakeGpuBackend gpus({gpu::FakeGpuBackend::MakeStatic(0)});
  host::HostSampler host_sampler{host::ProcFs{}};
  FakeClock clock;
  Sampler sampler(gpus, host_sampler, nullptr, clock);
  StopFlag stop;
  int n = 0;
  sampler.Run(100'000'000, stop, [&](const Sample&) {
    EXPECT_EQ(gpus.LastDue(0), gpu::AllTiers());
    if (++n == 3) stop.Request();
    return true;
  });
  EXPECT_EQ(n, 3);  // no extra last sample without a plan
}

}  // namespace
}  // namespace stallscope::sample
