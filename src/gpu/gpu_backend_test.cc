#include "gpu/gpu_backend.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fakes/fake_gpu_backend.h"

namespace stallscope::gpu {
namespace {

using Names = std::vector<std::string>;

TEST(ClockEventReasonNamesTest, Table) {
  struct Case {
    uint64_t mask;
    Names names;
  };
  const Case cases[] = {
      {0, {}},
      {kClockEventGpuIdle, {"gpu_idle"}},
      {kClockEventSwPowerCap | kClockEventHwThermal, {"sw_power_cap", "hw_thermal"}},
      {kClockEventHwThermal | kClockEventSwPowerCap, {"sw_power_cap", "hw_thermal"}},  // bit order
      {0x1FF,
       {"gpu_idle", "app_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost", "sw_thermal",
        "hw_thermal", "hw_power_brake", "display_clock_setting"}},
      {0x200, {"0x200"}},  // a bit from a newer driver
      {kClockEventSyncBoost | 0x8000000000000000ULL, {"sync_boost", "0x8000000000000000"}},
      {0x600, {"0x600"}},  // unknown bits stay together
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ClockEventReasonNames(c.mask), c.names) << "mask " << c.mask;
  }
}

TEST(ClockEventReasonNamesTest, TableMatchesEnum) {
  uint64_t seen = 0;
  for (const ClockEventReasonInfo& reason : kClockEventReasons) {
    EXPECT_EQ(reason.bit & (reason.bit - 1), 0U) << reason.name << " is one bit";
    EXPECT_EQ(seen & reason.bit, 0U) << reason.name << " is listed once";
    seen |= reason.bit;
  }
  EXPECT_EQ(seen, 0x1FFU);
}

TEST(GpuSampleTest, ClearEmptiesEverythingAndKeepsCapacity) {
  GpuSample s;
  s.lost = true;
  s.util_gpu_pct = 5;
  s.power_mw = 1;
  s.energy_mj = 2;
  s.clock_event_reasons = 4;
  s.ecc_volatile_uncorrected = 0;
  s.util_sample_count = 3;
  s.processes.resize(10);
  const size_t capacity = s.processes.capacity();
  s.Clear();
  EXPECT_FALSE(s.lost);
  EXPECT_FALSE(s.util_gpu_pct);
  EXPECT_FALSE(s.power_mw);
  EXPECT_FALSE(s.energy_mj);
  EXPECT_FALSE(s.clock_event_reasons);
  EXPECT_FALSE(s.ecc_volatile_uncorrected);
  EXPECT_EQ(s.util_sample_count, 0U);
  EXPECT_TRUE(s.processes.empty());
  EXPECT_EQ(s.processes.capacity(), capacity);
}

TEST(NoGpuBackendTest, HasNoGpus) {
  std::unique_ptr<GpuBackend> backend = MakeNoGpuBackend();
  EXPECT_EQ(backend->DeviceCount(), 0U);
  EXPECT_EQ(backend->Name(), "none");
  EXPECT_EQ(backend->DriverVersion(), "");
}

TEST(FakeGpuBackendTest, CallbackSeesGpuAndCallIndex) {
  FakeGpuBackend fake({FakeGpuBackend::MakeStatic(0), FakeGpuBackend::MakeStatic(1)},
                      [](size_t gpu, size_t call, GpuSample& out) {
                        out.util_gpu_pct = static_cast<uint32_t>(gpu * 100 + call);
                      });
  GpuSample s;
  fake.Sample(1, s);
  fake.Sample(1, s);
  EXPECT_EQ(s.util_gpu_pct, 101U);
  fake.Sample(0, s);
  EXPECT_EQ(s.util_gpu_pct, 0U);
  EXPECT_EQ(fake.SampleCalls(1), 2U);
  EXPECT_EQ(fake.Static(1).index, 1U);
  EXPECT_EQ(fake.Static(1).pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(fake.Name(), "fake");
}

TEST(FakeGpuBackendTest, ScriptRepeatsLastStep) {
  GpuSample busy;
  busy.util_gpu_pct = 90;
  GpuSample lost;
  lost.lost = true;
  FakeGpuBackend fake = FakeGpuBackend::Scripted(
      {FakeGpuBackend::MakeStatic(0), FakeGpuBackend::MakeStatic(1)}, {{busy, lost}});
  GpuSample s;
  fake.Sample(0, s);
  EXPECT_EQ(s.util_gpu_pct, 90U);
  fake.Sample(0, s);
  EXPECT_TRUE(s.lost);
  fake.Sample(0, s);
  EXPECT_TRUE(s.lost);
  fake.Sample(1, s);  // no script for GPU 1: empty
  EXPECT_FALSE(s.lost);
  EXPECT_FALSE(s.util_gpu_pct);
}

}  // namespace
}  // namespace stallscope::gpu

namespace stallscope::gpu {
namespace {

TEST(CarrySlowFields, LiveViewsKeepTheSlowTiersLastValues) {
  GpuSample before;
  before.energy_mj = 1234;
  before.pcie_gen = 5;
  before.ecc_volatile_corrected = 2;
  before.gpm.emplace().sm_active_pct = 96;
  before.processes.push_back({.pid = 7, .sm_util_pct = 40, .mem_util_pct = 20});
  before.util_samples[0] = {1, 50};
  before.util_sample_count = 1;
  GpuSample now;
  now.util_gpu_pct = 99;
  now.processes.push_back({.pid = 7});
  now.processes.push_back({.pid = 8});
  CarrySlowFields(before, now);
  EXPECT_EQ(now.energy_mj, 1234U);
  EXPECT_EQ(now.pcie_gen, 5U);
  EXPECT_EQ(now.ecc_volatile_corrected, 2U);
  ASSERT_TRUE(now.gpm);
  EXPECT_EQ(now.gpm->sm_active_pct, 96);
  EXPECT_EQ(now.processes[0].sm_util_pct, 40U);
  EXPECT_FALSE(now.processes[1].sm_util_pct);  // a new process has no value yet
  EXPECT_EQ(now.util_sample_count, 0U);        // buffer entries are events, never carried
  // A fresh value wins; a lost GPU carries nothing.
  GpuSample fresh;
  fresh.energy_mj = 9999;
  CarrySlowFields(before, fresh);
  EXPECT_EQ(fresh.energy_mj, 9999U);
  GpuSample lost;
  lost.lost = true;
  CarrySlowFields(before, lost);
  EXPECT_FALSE(lost.energy_mj);
}

}  // namespace
}  // namespace stallscope::gpu
