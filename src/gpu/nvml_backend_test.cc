// The real NVML backend, loaded through dlopen against the fake libnvidia-ml.so.1
// (tests/fakes/nvml) playing the scenarios in tests/data/nvml.

#include "gpu/nvml_backend.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/units.h"
#include "gpu/nvml_loader.h"

namespace stallscope::gpu {
namespace {

constexpr const char* kScenarioEnv = "STALLSCOPE_FAKE_NVML_SCENARIO";
constexpr const char* kCallLogEnv = "STALLSCOPE_FAKE_NVML_CALL_LOG";

std::string ScenarioPath(std::string_view name) {
  return std::string(STALLSCOPE_NVML_SCENARIOS) + "/" + std::string(name);
}

class NvmlBackendTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv(kScenarioEnv);
    unsetenv(kCallLogEnv);
  }

  /// Opens `library` (default: the full fake) playing `scenario`.
  std::unique_ptr<NvmlBackend> Open(std::string_view scenario,
                                    const char* library = STALLSCOPE_FAKE_NVML,
                                    NvmlOptions options = {}) {
    setenv(kScenarioEnv, ScenarioPath(scenario).c_str(), 1);
    options.library_path = library;
    Result<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(options.library_path);
    if (!lib.ok()) {
      ADD_FAILURE() << lib.error().message;
      return nullptr;
    }
    Result<std::unique_ptr<NvmlBackend>> backend =
        NvmlBackend::Open(std::move(lib).value(), options);
    if (!backend.ok()) {
      ADD_FAILURE() << backend.error().message;
      return nullptr;
    }
    return std::move(backend).value();
  }

  /// Makes the fake write its per-entry-point call counts at the last nvmlShutdown.
  std::string EnableCallLog() {
    const std::string path = ::testing::TempDir() + "/nvml_calls_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                             ".json";
    setenv(kCallLogEnv, path.c_str(), 1);
    return path;
  }

  static nlohmann::json ReadCallLog(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  }
};

TEST_F(NvmlBackendTest, NoGpus) {
  auto backend = Open("no_gpus.json");
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->DeviceCount(), 0U);
  EXPECT_EQ(backend->DriverVersion(), "550.54.15");
  EXPECT_EQ(backend->Name(), "nvml");
  EXPECT_EQ(backend->LibraryPath(), STALLSCOPE_FAKE_NVML);
}

TEST_F(NvmlBackendTest, SteadyGpuThroughPublicApi) {
  setenv(kScenarioEnv, ScenarioPath("steady_1gpu.json").c_str(), 1);
  Result<std::unique_ptr<GpuBackend>> opened = OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  GpuBackend& backend = **opened;
  ASSERT_EQ(backend.DeviceCount(), 1U);
  const GpuStatic& info = backend.Static(0);
  EXPECT_EQ(info.index, 0U);
  EXPECT_EQ(info.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(info.uuid, "GPU-12345678-1234-1234-1234-123456789abc");
  EXPECT_EQ(info.pci_bus_id, "00000000:17:00.0");
  EXPECT_EQ(info.mem_total_bytes, 81559 * kMiB);
  EXPECT_EQ(info.power_limit_mw, 700'000U);
  EXPECT_EQ(info.sm_clock_max_mhz, 1980U);
  EXPECT_EQ(info.mem_clock_max_mhz, 2619U);
  EXPECT_EQ(info.pcie_gen_max, 5U);
  EXPECT_EQ(info.pcie_width_max, 16U);
  EXPECT_EQ(info.persistence_mode, true);
  EXPECT_EQ(info.mig_mode, MigMode::kDisabled);

  GpuSample s;
  backend.Sample(0, s);
  EXPECT_FALSE(s.lost);
  EXPECT_EQ(s.util_gpu_pct, 100U);
  EXPECT_EQ(s.util_mem_pct, 50U);
  EXPECT_EQ(s.mem_used_bytes, 30720 * kMiB);
  EXPECT_EQ(s.mem_total_bytes, 81559 * kMiB);
  EXPECT_EQ(s.power_mw, 650'000U);
  EXPECT_EQ(s.power_limit_mw, 700'000U);
  EXPECT_EQ(s.energy_mj, 3'250'000U);  // t=5 s: 70 W idle x 5 s + 580 W x 5 s
  EXPECT_EQ(s.temperature_c, 75U);
  EXPECT_EQ(s.sm_clock_mhz, 1980U);
  EXPECT_EQ(s.mem_clock_mhz, 2619U);
  EXPECT_EQ(s.clock_event_reasons, 0U);
  // PCIe throughput blocks 20 ms per direction: only with query_pcie_throughput, on its thread.
  EXPECT_FALSE(s.pcie_tx_kbps);
  EXPECT_FALSE(s.pcie_rx_kbps);
  EXPECT_EQ(s.pcie_gen, 5U);
  EXPECT_EQ(s.pcie_width, 16U);
  EXPECT_EQ(s.ecc_volatile_corrected, 2U);
  EXPECT_EQ(s.ecc_volatile_uncorrected, 0U);
  EXPECT_EQ(s.util_sample_count, 0U);  // time is frozen: the probe at open saw them all
  ASSERT_EQ(s.processes.size(), 2U);
  EXPECT_EQ(s.processes[0].pid, 4242U);
  EXPECT_FALSE(s.processes[0].graphics);
  EXPECT_EQ(s.processes[0].mem_used_bytes, 30000 * kMiB);
  // Frozen time: no process sample is newer than the probe's, so every process was idle since
  // then. 0, not absent: the call works (nvtop's early return leaves these N/A).
  EXPECT_EQ(s.processes[0].sm_util_pct, 0U);
  EXPECT_EQ(s.processes[0].mem_util_pct, 0U);
  EXPECT_EQ(s.processes[1].pid, 1717U);
  EXPECT_TRUE(s.processes[1].graphics);
  EXPECT_EQ(s.processes[1].mem_used_bytes, 20 * kMiB);
  EXPECT_EQ(s.processes[1].sm_util_pct, 0U);
}

TEST_F(NvmlBackendTest, ProcessUtilizationMergedByPid) {
  auto backend = Open("processes.json");  // time x10: a new driver sample every ~17 ms
  ASSERT_TRUE(backend);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  GpuSample s;
  backend->Sample(0, s);
  ASSERT_EQ(s.processes.size(), 3U);
  EXPECT_EQ(s.processes[0].pid, 4242U);
  EXPECT_EQ(s.processes[0].sm_util_pct, 97U);
  EXPECT_EQ(s.processes[0].mem_util_pct, 41U);
  EXPECT_EQ(s.processes[1].pid, 4243U);
  EXPECT_EQ(s.processes[1].sm_util_pct, 80U);  // follows the GPU's pattern
  EXPECT_EQ(s.processes[1].mem_util_pct, 40U);
  EXPECT_EQ(s.processes[2].pid, 1717U);
  EXPECT_TRUE(s.processes[2].graphics);
  EXPECT_EQ(s.processes[2].sm_util_pct, 3U);
}

TEST_F(NvmlBackendTest, EveryMetricSupportedOnAFullGpu) {
  auto backend = Open("steady_1gpu.json");
  ASSERT_TRUE(backend);
  for (size_t m = 0; m < static_cast<size_t>(NvmlMetric::kCount); ++m) {
    const auto metric = static_cast<NvmlMetric>(m);
    // PCIe throughput is never read by Sample() (its own thread does, when asked); this GPU has
    // no GPM (the scenario has no "gpm": a pre-Hopper GPU).
    if (metric == NvmlMetric::kPcieThroughput || metric == NvmlMetric::kGpm) continue;
    EXPECT_TRUE(backend->Supports(0, metric)) << NvmlMetricName(metric);
  }
  EXPECT_FALSE(backend->Supports(0, NvmlMetric::kGpm));
  EXPECT_FALSE(backend->Static(0).gpm);
  EXPECT_NE(backend->Static(0).gpm_note.find("Hopper"), std::string::npos);
  EXPECT_FALSE(backend->Supports(1, NvmlMetric::kMemory));  // no such GPU
}

TEST_F(NvmlBackendTest, TiersNotDueAreNeitherAskedNorFilled) {
  const std::string log = EnableCallLog();
  {
    auto backend = Open("steady_1gpu.json");
    ASSERT_TRUE(backend);
    PollTiers tick;
    tick.set(TierIndex(PollTier::kTick));
    GpuSample s;
    for (int k = 0; k < 5; ++k) {
      backend->Sample(0, tick, s);
      EXPECT_EQ(s.util_gpu_pct, 100U);
      EXPECT_EQ(s.power_mw, 650'000U);
      EXPECT_FALSE(s.energy_mj);
      EXPECT_FALSE(s.pcie_gen);
      EXPECT_FALSE(s.ecc_volatile_corrected);
      ASSERT_EQ(s.processes.size(), 2U);
      EXPECT_FALSE(s.processes[0].sm_util_pct);
    }
    PollTiers energy = tick;
    energy.set(TierIndex(PollTier::kEnergy));
    backend->Sample(0, energy, s);
    EXPECT_EQ(s.energy_mj, 3'250'000U);
  }
  const nlohmann::json calls = ReadCallLog(log);
  // The probe at open asked each once; the five tick-only samples asked none of them.
  EXPECT_EQ(calls.value("nvmlDeviceGetTotalEnergyConsumption", 0), 2);
  EXPECT_EQ(calls.value("nvmlDeviceGetProcessUtilization", 0), 1);
  EXPECT_EQ(calls.value("nvmlDeviceGetCurrPcieLinkWidth", 0), 1);
  EXPECT_EQ(calls.value("nvmlDeviceGetPcieThroughput", 0), 0);
  EXPECT_EQ(calls.value("nvmlDeviceGetUtilizationRates", 0), 7);  // probe + 6 samples
}

TEST_F(NvmlBackendTest, ProbedCostsAreMeasuredPerTier) {
  auto backend = Open("steady_1gpu.json");
  ASSERT_TRUE(backend);
  const TierCosts costs = backend->ProbedCosts();
  for (PollTier tier : {PollTier::kTick, PollTier::kUtilBuffer, PollTier::kEnergy,
                        PollTier::kProcessUtil, PollTier::kSlow}) {
    ASSERT_TRUE(costs[TierIndex(tier)]) << PollTierName(tier);
    EXPECT_GE(*costs[TierIndex(tier)], 0) << PollTierName(tier);
  }
  EXPECT_FALSE(costs[TierIndex(PollTier::kGpm)]);  // no GPM on this GPU
}

TEST_F(NvmlBackendTest, PcieThroughputComesFromItsOwnThreadWhenAsked) {
  auto backend = Open("steady_1gpu.json", STALLSCOPE_FAKE_NVML,
                      {.query_pcie_throughput = true, .pcie_period_ns = 10'000'000});
  ASSERT_TRUE(backend);
  GpuSample s;
  bool seen = false;
  for (int k = 0; k < 500 && !seen; ++k) {
    backend->Sample(0, s);
    seen = s.pcie_tx_kbps.has_value();
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(seen);
  EXPECT_EQ(s.pcie_tx_kbps, 1500U);
  EXPECT_EQ(s.pcie_rx_kbps, 2500U);
}

TEST_F(NvmlBackendTest, GpmMetricsAreExactWindowAveragesOnHopper) {
  auto backend = Open("h100_gpm.json");
  ASSERT_TRUE(backend);
  ASSERT_TRUE(backend->Static(0).gpm) << backend->Static(0).gpm_note;
  EXPECT_TRUE(backend->Static(0).gpm_note.empty());
  ASSERT_TRUE(backend->ProbedCosts()[TierIndex(PollTier::kGpm)]);
  PollTiers gpm;
  gpm.set(TierIndex(PollTier::kTick)).set(TierIndex(PollTier::kGpm));
  GpuSample s;
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  const auto before = std::chrono::steady_clock::now();
  backend->Sample(0, gpm, s);
  ASSERT_TRUE(s.gpm);
  EXPECT_GE(s.gpm->window_ns, 100'000'000);
  // A window under DCGM's 100 ms floor gives no value and stays open. Asserted only when both
  // reads fell within 100 ms (a loaded machine may preempt between them).
  GpuSample again;
  backend->Sample(0, gpm, again);
  if (std::chrono::steady_clock::now() - before < std::chrono::milliseconds(100)) {
    EXPECT_FALSE(again.gpm);
  }
  // Steady 100% utilization; the fake's defaults are the H100 bf16 burn's (issue 28).
  EXPECT_NEAR(s.gpm->graphics_active_pct.value_or(-1), 100.0, 1e-6);
  EXPECT_NEAR(s.gpm->sm_active_pct.value_or(-1), 96.0, 1e-6);
  EXPECT_NEAR(s.gpm->tensor_active_pct.value_or(-1), 93.0, 1e-6);
  EXPECT_NEAR(s.gpm->dram_active_pct.value_or(-1), 25.0, 1e-6);
  EXPECT_TRUE(s.gpm->pcie_tx_mibps);
  // Not due: no GPM.
  PollTiers tick;
  tick.set(TierIndex(PollTier::kTick));
  backend->Sample(0, tick, s);
  EXPECT_FALSE(s.gpm);
}

TEST_F(NvmlBackendTest, GpmAbsentWithAReasonWhereUnsupported) {
  {
    auto mig = Open("mig.json");
    ASSERT_TRUE(mig);
    EXPECT_FALSE(mig->Static(0).gpm);
    EXPECT_NE(mig->Static(0).gpm_note.find("MIG is enabled"), std::string::npos)
        << mig->Static(0).gpm_note;
  }
  {
    auto old = Open("old_driver.json", STALLSCOPE_FAKE_NVML_LEGACY);
    ASSERT_TRUE(old);
    EXPECT_NE(old->Static(0).gpm_note.find("no GPM"), std::string::npos) << old->Static(0).gpm_note;
  }
  {
    auto off = Open("h100_gpm.json", STALLSCOPE_FAKE_NVML, {.gpm = false});
    ASSERT_TRUE(off);
    EXPECT_FALSE(off->Static(0).gpm);
    GpuSample s;
    off->Sample(0, s);
    EXPECT_FALSE(s.gpm);
  }
}

TEST_F(NvmlBackendTest, EightGpus) {
  auto backend = Open("eight_gpus.json");
  ASSERT_TRUE(backend);
  ASSERT_EQ(backend->DeviceCount(), 8U);
  GpuSample s;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(backend->Static(i).index, i);
    EXPECT_EQ(backend->Static(i).name, "NVIDIA H100 80GB HBM3");
    backend->Sample(i, s);
    EXPECT_FALSE(s.lost);
    EXPECT_EQ(s.mem_used_bytes, (60000 + 100 * i) * kMiB);
    ASSERT_EQ(s.processes.size(), 1U);
    EXPECT_EQ(s.processes[0].pid, 1000 + i);
  }
  EXPECT_EQ(backend->Static(7).pci_bus_id, "00000000:DB:00.0");
}

TEST_F(NvmlBackendTest, UnsupportedFieldsAreAbsentAndNeverAskedAgain) {
  const std::string log = EnableCallLog();
  {
    auto backend = Open("unsupported.json");
    ASSERT_TRUE(backend);
    const GpuStatic& info = backend->Static(0);
    EXPECT_EQ(info.name, "Tesla T4");
    EXPECT_FALSE(info.power_limit_mw);
    EXPECT_FALSE(info.sm_clock_max_mhz);
    EXPECT_FALSE(info.pcie_gen_max);
    EXPECT_FALSE(info.persistence_mode);
    EXPECT_EQ(info.mig_mode, MigMode::kUnsupported);
    GpuSample s;
    for (int k = 0; k < 5; ++k) backend->Sample(0, s);
    EXPECT_FALSE(s.lost);
    EXPECT_TRUE(s.util_gpu_pct);  // still supported
    EXPECT_TRUE(s.mem_used_bytes);
    EXPECT_TRUE(s.sm_clock_mhz);
    EXPECT_FALSE(s.power_mw);  // absent, never 0
    EXPECT_FALSE(s.power_limit_mw);
    EXPECT_FALSE(s.energy_mj);
    EXPECT_FALSE(s.temperature_c);
    EXPECT_FALSE(s.clock_event_reasons);
    EXPECT_FALSE(s.ecc_volatile_corrected);
    EXPECT_FALSE(s.ecc_volatile_uncorrected);
    EXPECT_FALSE(s.pcie_tx_kbps);
    EXPECT_FALSE(s.pcie_gen);
    EXPECT_EQ(s.util_sample_count, 0U);
    ASSERT_EQ(s.processes.size(), 1U);
    EXPECT_FALSE(s.processes[0].mem_used_bytes);  // NVML_VALUE_NOT_AVAILABLE
    EXPECT_FALSE(s.processes[0].sm_util_pct);     // process utilization unsupported
    EXPECT_FALSE(backend->Supports(0, NvmlMetric::kPower));
    EXPECT_FALSE(backend->Supports(0, NvmlMetric::kUtilSamples));
    EXPECT_TRUE(backend->Supports(0, NvmlMetric::kUtilization));
  }
  const nlohmann::json calls = ReadCallLog(log);
  ASSERT_TRUE(calls.is_object()) << "no call log at " << log;
  // Probed once at open, then never again; supported calls run on every sample.
  EXPECT_EQ(calls.value("nvmlDeviceGetPowerUsage", 0), 1);
  EXPECT_EQ(calls.value("nvmlDeviceGetTotalEccErrors", 0), 1);  // the first answer disables both
  EXPECT_EQ(calls.value("nvmlDeviceGetProcessUtilization", 0), 1);
  EXPECT_EQ(calls.value("nvmlDeviceGetUtilizationRates", 0), 6);  // probe + 5 samples
  EXPECT_EQ(calls.value("nvmlShutdown", 0), 1);
}

TEST_F(NvmlBackendTest, GpuLostMidRunOthersContinue) {
  // Time x4: GPU 1 is lost at t=2 s, 0.5 s after open (slack for a loaded machine).
  auto backend = Open("lost_mid_run.json");
  ASSERT_TRUE(backend);
  ASSERT_EQ(backend->DeviceCount(), 3U);
  GpuSample s;
  for (size_t i = 0; i < 3; ++i) {
    backend->Sample(i, s);
    EXPECT_FALSE(s.lost) << i;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  for (int round = 0; round < 2; ++round) {
    backend->Sample(1, s);
    EXPECT_TRUE(s.lost);
    EXPECT_FALSE(s.util_gpu_pct);  // a lost GPU reports nothing else
    EXPECT_FALSE(s.mem_used_bytes);
    EXPECT_TRUE(s.processes.empty());
    for (size_t i : {0, 2}) {
      backend->Sample(i, s);
      EXPECT_FALSE(s.lost) << i;
      EXPECT_EQ(s.util_gpu_pct, 100U) << i;
    }
  }
  EXPECT_TRUE(backend->Lost(1));
  EXPECT_EQ(backend->Static(1).name, "GPU B");  // static info survives
}

TEST_F(NvmlBackendTest, ThreeConsecutiveCoreErrorsMeanLost) {
  auto backend = Open("failing.json");  // time x4; GPU 0 fails every call from t=2 s (0.5 s)
  ASSERT_TRUE(backend);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  GpuSample s;
  backend->Sample(0, s);
  EXPECT_FALSE(s.lost);
  EXPECT_FALSE(s.mem_used_bytes);  // the failed call leaves the field empty
  backend->Sample(0, s);
  EXPECT_FALSE(s.lost);
  backend->Sample(0, s);
  EXPECT_TRUE(s.lost);
  backend->Sample(1, s);
  EXPECT_FALSE(s.lost);
  EXPECT_TRUE(s.mem_used_bytes);
}

TEST_F(NvmlBackendTest, MigEnabled) {
  auto backend = Open("mig.json");
  ASSERT_TRUE(backend);
  ASSERT_EQ(backend->DeviceCount(), 2U);
  EXPECT_EQ(backend->Static(0).mig_mode, MigMode::kEnabled);
  EXPECT_EQ(backend->Static(1).mig_mode, MigMode::kDisabled);
  GpuSample s;
  backend->Sample(0, s);
  EXPECT_FALSE(s.lost);
  EXPECT_FALSE(s.util_gpu_pct);  // NVML: no utilization rates under MIG
  EXPECT_EQ(s.mem_used_bytes, 12000 * kMiB);
  ASSERT_EQ(s.processes.size(), 1U);
  EXPECT_EQ(s.processes[0].mem_used_bytes, 11000 * kMiB);
  EXPECT_FALSE(s.processes[0].sm_util_pct);
  EXPECT_FALSE(backend->Supports(0, NvmlMetric::kUtilization));
  EXPECT_FALSE(backend->Supports(0, NvmlMetric::kUtilSamples));
  backend->Sample(1, s);
  EXPECT_EQ(s.util_gpu_pct, 100U);
}

TEST_F(NvmlBackendTest, HealthOfUnhealthyGpus) {
  auto backend = Open("unhealthy.json");
  ASSERT_TRUE(backend);
  ASSERT_EQ(backend->DeviceCount(), 5U);
  EXPECT_EQ(backend->CudaDriverVersion(), 12020);

  const GpuHealth pcie = backend->Health(0);
  EXPECT_EQ(pcie.power_limit_default_mw, 400'000U);
  EXPECT_EQ(backend->Static(0).power_limit_mw, 300'000U);
  EXPECT_EQ(pcie.pcie_gen_gpu_max, 4U);  // absent in the scenario: the link's maximum
  EXPECT_EQ(pcie.ideal_cpus, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(pcie.retired_pages_sbe);  // Ampere: rows are remapped instead
  EXPECT_EQ(pcie.remapped_rows_correctable, 0U);
  EXPECT_EQ(pcie.remap_pending, false);

  const GpuHealth ecc = backend->Health(1);
  EXPECT_EQ(ecc.ecc_aggregate_corrected, 120U);
  EXPECT_EQ(ecc.ecc_aggregate_uncorrected, 5U);
  EXPECT_EQ(ecc.remapped_rows_correctable, 1U);
  EXPECT_EQ(ecc.remapped_rows_uncorrectable, 2U);
  EXPECT_EQ(ecc.remap_pending, true);
  EXPECT_EQ(ecc.remap_failed, false);
  GpuSample s;
  backend->Sample(1, s);
  EXPECT_EQ(s.ecc_volatile_uncorrected, 3U);

  EXPECT_EQ(backend->Health(2).ideal_cpus.front(), 8U);
  EXPECT_EQ(backend->Static(2).persistence_mode, false);

  const GpuHealth volta = backend->Health(4);
  EXPECT_EQ(volta.retired_pages_sbe, 2U);
  EXPECT_EQ(volta.retired_pages_dbe, 1U);
  EXPECT_EQ(volta.retired_pages_pending, true);
  EXPECT_FALSE(volta.remapped_rows_correctable);
  EXPECT_TRUE(volta.ideal_cpus.empty());  // no cpu_affinity in the scenario: NOT_SUPPORTED
}

/// Writes `json` to a scratch scenario file and returns its path.
std::string WriteScenario(std::string_view name, std::string_view json) {
  const std::string path = ::testing::TempDir() + "/" + std::string(name);
  std::ofstream(path) << json;
  return path;
}

TEST_F(NvmlBackendTest, HealthOfALostGpuIsEmpty) {
  setenv(kScenarioEnv,
         WriteScenario("nvml_lost_at_open.json",
                       R"({"gpus": [{"lost_at_s": 0}, {"power_default_limit_w": 650}]})")
             .c_str(),
         1);
  Result<std::unique_ptr<GpuBackend>> opened = OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  GpuBackend& backend = **opened;
  ASSERT_EQ(backend.DeviceCount(), 2U);
  EXPECT_FALSE(backend.Health(0).power_limit_default_mw);
  EXPECT_EQ(backend.Health(1).power_limit_default_mw, 650'000U);
  EXPECT_FALSE(backend.Health(2).power_limit_default_mw);  // out of range
}

// Issue 12 finding 4: a library reporting 0xFFFFFFFF devices made Open throw bad_alloc (and
// 1,000,000 took 2.7 GB and 15 s). More than kMaxDevices is now a one-line error.
TEST_F(NvmlBackendTest, AbsurdDeviceCountIsAnErrorNotBadAlloc) {
  for (const char* count : {"4294967295", "1000000", "257"}) {
    SCOPED_TRACE(count);
    setenv(kScenarioEnv,
           WriteScenario("nvml_absurd_count.json",
                         std::string(R"({"device_count": )") + count + R"(, "gpus": [{}]})")
               .c_str(),
           1);
    Result<std::unique_ptr<GpuBackend>> opened = OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.error().message,
              std::string("nvmlDeviceGetCount reported ") + count +
                  " devices, more than the 256 any NVIDIA driver supports: a broken libnvidia-ml?");
  }
}

TEST_F(NvmlBackendTest, DeviceCountBeyondTheHandlesKeepsLostSlots) {
  setenv(kScenarioEnv,
         WriteScenario("nvml_count_4.json", R"({"device_count": 4, "gpus": [{}, {}]})").c_str(), 1);
  Result<std::unique_ptr<GpuBackend>> opened = OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  ASSERT_EQ((*opened)->DeviceCount(), 4U);
  GpuSample s;
  (*opened)->Sample(3, s);
  EXPECT_TRUE(s.lost);
}

TEST_F(NvmlBackendTest, InitFailureVersionMismatch) {
  setenv(kScenarioEnv,
         WriteScenario("nvml_version_mismatch.json", R"({"init_error": "lib_rm_version_mismatch"})")
             .c_str(),
         1);
  Result<std::unique_ptr<GpuBackend>> backend = OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(backend.error().message, "nvmlInit failed: Driver/library version mismatch (18)");
}

/// The old-driver expectations shared by the two fallback paths.
void ExpectOldDriverSample(GpuBackend& backend, uint64_t reason) {
  ASSERT_EQ(backend.DeviceCount(), 1U);
  const GpuStatic& info = backend.Static(0);
  EXPECT_EQ(info.pci_bus_id, "0000:3b:00.0");  // legacy busId from the unversioned call
  EXPECT_EQ(info.power_limit_mw, 300'000U);    // nvmlDeviceGetPowerManagementLimit
  GpuSample s;
  backend.Sample(0, s);
  EXPECT_FALSE(s.lost);
  EXPECT_FALSE(s.energy_mj);
  EXPECT_EQ(s.clock_event_reasons, reason);  // nvmlDeviceGetCurrentClocksThrottleReasons
  ASSERT_EQ(s.processes.size(), 1U);         // the v1 process struct
  EXPECT_EQ(s.processes[0].pid, 777U);
  EXPECT_EQ(s.processes[0].mem_used_bytes, 3900 * kMiB);
}

TEST_F(NvmlBackendTest, OldDriverWithoutVersionedSymbols) {
  auto backend = Open("old_driver.json", STALLSCOPE_FAKE_NVML_LEGACY);
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->DriverVersion(), "418.87.01");
  EXPECT_EQ(backend->CudaDriverVersion(), 10010);  // the unversioned entry point
  const GpuHealth health = backend->Health(0);
  EXPECT_EQ(health.retired_pages_sbe, 1U);
  EXPECT_EQ(health.retired_pages_dbe, 0U);
  EXPECT_EQ(health.retired_pages_pending, false);
  EXPECT_FALSE(health.remapped_rows_correctable);  // no nvmlDeviceGetRemappedRows before 450
  EXPECT_FALSE(health.pcie_gen_gpu_max);           // nor nvmlDeviceGetGpuMaxPcieLinkGeneration
  EXPECT_EQ(health.power_limit_default_mw, 300'000U);
  EXPECT_EQ(backend->Static(0).mig_mode, MigMode::kUnsupported);  // no nvmlDeviceGetMigMode
  EXPECT_EQ(backend->Static(0).name, "Tesla V100-SXM2-16GB");
  ExpectOldDriverSample(*backend, kClockEventSwPowerCap);
}

TEST_F(NvmlBackendTest, VersionedEntryPointsAnsweringFunctionNotFound) {
  const std::string log = EnableCallLog();
  {
    auto backend = Open("missing_symbols.json");
    ASSERT_TRUE(backend);
    ExpectOldDriverSample(*backend, kClockEventHwSlowdown);
    GpuSample s;
    backend->Sample(0, s);
  }
  const nlohmann::json calls = ReadCallLog(log);
  ASSERT_TRUE(calls.is_object());
  EXPECT_EQ(calls.value("nvmlInit", 0), 1);
  // Tried once, then the backend stays on the older entry point.
  EXPECT_EQ(calls.value("nvmlDeviceGetComputeRunningProcesses_v3", 0), 1);
  EXPECT_EQ(calls.value("nvmlDeviceGetComputeRunningProcesses_v2", 0), 1);
  EXPECT_EQ(calls.value("nvmlDeviceGetComputeRunningProcesses", 0), 3);  // probe + 2 samples
  EXPECT_EQ(calls.value("nvmlDeviceGetCurrentClocksEventReasons", 0), 1);
}

TEST_F(NvmlBackendTest, SawtoothVisibleInSubSecondSamples) {
  // Period 0.5 s, time x20: one real second of polling is 20 scenario seconds.
  auto backend = Open("sawtooth.json");
  ASSERT_TRUE(backend);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // 2 scenario seconds
  GpuSample s;
  backend->Sample(0, s);
  ASSERT_GE(s.util_sample_count, 6U);  // ~1/6 s driver period
  bool high = false;
  bool low = false;
  for (size_t k = 0; k < s.util_sample_count; ++k) {
    high |= s.util_samples[k].util_pct == 100;
    low |= s.util_samples[k].util_pct == 0;
    if (k > 0) {
      EXPECT_GT(s.util_samples[k].ts_us, s.util_samples[k - 1].ts_us);
    }
  }
  EXPECT_TRUE(high);
  EXPECT_TRUE(low);
  // The utilization rate averages the last second and hides the sawtooth.
  ASSERT_TRUE(s.util_gpu_pct);
  EXPECT_GT(*s.util_gpu_pct, 0U);
  EXPECT_LT(*s.util_gpu_pct, 100U);

  const int64_t newest = s.util_samples[s.util_sample_count - 1].ts_us;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  backend->Sample(0, s);  // only entries newer than the previous sample
  for (size_t k = 0; k < s.util_sample_count; ++k) EXPECT_GT(s.util_samples[k].ts_us, newest);
}

TEST_F(NvmlBackendTest, ClockEventsAndThrottledClocks) {
  auto backend = Open("throttle.json");
  ASSERT_TRUE(backend);
  GpuSample s;
  backend->Sample(0, s);
  ASSERT_TRUE(s.clock_event_reasons);
  EXPECT_EQ(ClockEventReasonNames(*s.clock_event_reasons),
            (std::vector<std::string>{"sw_power_cap", "hw_thermal"}));
  EXPECT_EQ(s.sm_clock_mhz, 1200U);
  backend->Sample(1, s);  // in a dip: idle
  EXPECT_EQ(s.util_gpu_pct, 0U);
  EXPECT_EQ(s.clock_event_reasons, kClockEventGpuIdle);
  EXPECT_EQ(s.sm_clock_mhz, 345U);
}

TEST_F(NvmlBackendTest, PcieThroughputCanBeTurnedOff) {
  const std::string log = EnableCallLog();
  {
    NvmlOptions options;
    options.query_pcie_throughput = false;
    auto backend = Open("steady_1gpu.json", STALLSCOPE_FAKE_NVML, options);
    ASSERT_TRUE(backend);
    GpuSample s;
    backend->Sample(0, s);
    EXPECT_FALSE(s.pcie_tx_kbps);
    EXPECT_FALSE(s.pcie_rx_kbps);
    EXPECT_EQ(s.pcie_gen, 5U);
  }
  const nlohmann::json calls = ReadCallLog(log);
  ASSERT_TRUE(calls.is_object());
  EXPECT_FALSE(calls.contains("nvmlDeviceGetPcieThroughput"));
}

TEST_F(NvmlBackendTest, ReopenWithAnotherScenario) {
  {
    auto backend = Open("steady_1gpu.json");
    ASSERT_TRUE(backend);
    EXPECT_EQ(backend->DeviceCount(), 1U);
  }
  auto backend = Open("eight_gpus.json");
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->DeviceCount(), 8U);
}

TEST_F(NvmlBackendTest, MissingDefaultLibrary) {
  const std::array<const char*, 1> names{"libstallscope-no-such-nvml.so.1"};
  Result<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open("", names);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(lib.error().message, "libnvidia-ml.so.1 not found");

  // The real search: on a machine without the NVIDIA driver it fails the same way.
  Result<std::unique_ptr<GpuBackend>> real = OpenNvml({});
  if (!real.ok() && real.error().code == ErrorCode::kNotFound) {
    EXPECT_EQ(real.error().message, "libnvidia-ml.so.1 not found");
  }
}

TEST_F(NvmlBackendTest, MissingExplicitLibrary) {
  Result<std::unique_ptr<GpuBackend>> backend =
      OpenNvml({.library_path = "/nonexistent/libnvidia-ml.so.1"});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(
      backend.error().message.rfind("cannot load NVML from /nonexistent/libnvidia-ml.so.1: ", 0),
      0U)
      << backend.error().message;
}

TEST_F(NvmlBackendTest, LibraryThatIsNotNvml) {
  Result<std::unique_ptr<GpuBackend>> backend = OpenNvml({.library_path = "libm.so.6"});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(backend.error().message, "libm.so.6 is not a usable NVML: nvmlInit not found");
}

TEST_F(NvmlBackendTest, InitFailureCarriesNvmlErrorString) {
  setenv(kScenarioEnv, ScenarioPath("no_such_scenario.json").c_str(), 1);
  Result<std::unique_ptr<GpuBackend>> backend = OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(backend.error().message, "nvmlInit failed: Driver Not Loaded (9)");
}

}  // namespace
}  // namespace stallscope::gpu
