#include "scenario.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace stallscope::fake_nvml {
namespace {

TEST(ScenarioTest, Defaults) {
  Result<Scenario> s = ParseScenario(R"({"gpus": [{}, {"name": "B"}]})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->driver_version, "550.54.15");
  EXPECT_EQ(s->time_scale, 1.0);
  EXPECT_FALSE(s->frozen_at_s);
  ASSERT_EQ(s->gpus.size(), 2U);
  EXPECT_EQ(s->gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(s->gpus[1].name, "B");
  EXPECT_EQ(s->gpus[1].pci_bus_id, "00000000:18:00.0");
  EXPECT_NE(s->gpus[0].uuid, s->gpus[1].uuid);
  EXPECT_EQ(s->gpus[0].pattern.kind, PatternKind::kSteady);
  EXPECT_EQ(s->gpus[0].mig, Mig::kDisabled);
}

TEST(ScenarioTest, DeviceCountOverridesTheNumberOfGpus) {
  Result<Scenario> s = ParseScenario(R"({"device_count": 4294967295, "gpus": [{}]})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->device_count, 4294967295U);
  EXPECT_FALSE(ParseScenario(R"({"gpus": []})")->device_count);
  EXPECT_FALSE(ParseScenario(R"({"device_count": 4294967296})").ok());
  EXPECT_FALSE(ParseScenario(R"({"device_count": -1})").ok());
}

TEST(ScenarioTest, FullGpu) {
  Result<Scenario> s = ParseScenario(R"({
    "frozen_at_s": 3, "time_scale": 2, "missing_symbols": ["nvmlInit_v2"],
    "gpus": [{"mig": "enabled", "not_supported": ["power", "ecc"], "lost_at_s": 12.5,
              "pattern": {"kind": "dips", "dip_every_s": 5, "dip_length_s": 1},
              "throttle": [{"start_s": 1, "end_s": 2, "reasons": ["hw_thermal", "sw_power_cap"],
                            "sm_clock_mhz": 900}],
              "processes": [{"pid": 7, "used_memory_mib": 10, "graphics": true, "sm_util": 3}]}]})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->frozen_at_s, 3.0);
  EXPECT_EQ(s->missing_symbols.count("nvmlInit_v2"), 1U);
  const Gpu& g = s->gpus[0];
  EXPECT_EQ(g.mig, Mig::kEnabled);
  EXPECT_EQ(g.not_supported, kFeaturePower | kFeatureEcc);
  EXPECT_EQ(g.lost_at_s, 12.5);
  EXPECT_EQ(g.pattern.kind, PatternKind::kDips);
  ASSERT_EQ(g.throttle.size(), 1U);
  EXPECT_EQ(g.throttle[0].reasons, 0x44U);
  EXPECT_EQ(g.throttle[0].sm_clock_mhz, 900U);
  ASSERT_EQ(g.processes.size(), 1U);
  EXPECT_EQ(g.processes[0].used_memory_mib, 10U);
  EXPECT_TRUE(g.processes[0].graphics);
  EXPECT_FALSE(g.processes[0].mem_util);
}

TEST(ScenarioTest, HealthKeys) {
  Result<Scenario> s = ParseScenario(R"({
    "cuda_driver_version": 12020, "init_error": "lib_rm_version_mismatch",
    "gpus": [{"power_default_limit_w": 400, "pcie": {"gen_gpu_max": 5},
              "ecc": {"aggregate_uncorrected": 5},
              "retired_pages": {"single_bit": 2, "double_bit": 1, "pending": true},
              "remapped_rows": {"correctable": 1, "uncorrectable": 2, "pending": true,
                                "failure": true},
              "cpu_affinity": [0, 1, 63, 64],
              "not_supported": ["retired_pages", "remapped_rows"]}, {}]})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->cuda_driver_version, 12020);
  EXPECT_EQ(s->init_error, 18);
  const Gpu& g = s->gpus[0];
  EXPECT_EQ(g.power_default_limit_w, 400.0);
  EXPECT_EQ(g.pcie.gen_gpu_max, 5U);
  EXPECT_EQ(g.ecc_aggregate_uncorrected, 5U);
  EXPECT_FALSE(g.ecc_aggregate_corrected);
  EXPECT_EQ(g.retired_pages.double_bit, 1U);
  EXPECT_TRUE(g.retired_pages.pending);
  EXPECT_EQ(g.remapped_rows.uncorrectable, 2U);
  EXPECT_TRUE(g.remapped_rows.failure);
  EXPECT_EQ(g.cpu_affinity, (std::vector<uint32_t>{0, 1, 63, 64}));
  EXPECT_EQ(g.not_supported, kFeatureRetiredPages | kFeatureRemappedRows);
  EXPECT_FALSE(s->gpus[1].cpu_affinity);
  EXPECT_EQ(s->gpus[1].remapped_rows.correctable, 0U);
}

TEST(ScenarioTest, GpmAndDriverSamplePeriod) {
  Result<Scenario> s = ParseScenario(R"({
    "driver_sample_period_s": 0.2,
    "gpus": [{"gpm": {}}, {},
             {"gpm": {"sm_active_ratio": 0.5, "sm_occupancy_pct": 40, "tensor_active_ratio": 0.1,
                      "dram_active_ratio": 0.7, "fp32_active_ratio": 0.2,
                      "fp16_active_ratio": 0.3, "fp64_active_ratio": 0.4, "pcie_tx_mibps": 100,
                      "pcie_rx_mibps": 200, "nvlink_tx_mibps": 300, "nvlink_rx_mibps": 400},
              "not_supported": ["gpm"]}]})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->driver_sample_period_s, 0.2);
  EXPECT_DOUBLE_EQ(ParseScenario("{}")->driver_sample_period_s, 1.0 / 6.0);
  // Defaults: a real H100 during a bf16 matmul (shared/gpu/h100-2026-11-26, section 2).
  ASSERT_TRUE(s->gpus[0].gpm);
  const Gpm& d = *s->gpus[0].gpm;
  EXPECT_EQ(d.sm_active_ratio, 0.96);
  EXPECT_EQ(d.sm_occupancy_pct, 14.2);
  EXPECT_EQ(d.tensor_active_ratio, 0.93);
  EXPECT_EQ(d.dram_active_ratio, 0.25);
  EXPECT_EQ(d.fp32_active_ratio + d.fp16_active_ratio + d.fp64_active_ratio, 0);
  EXPECT_EQ(d.pcie_tx_mibps, 6);
  EXPECT_EQ(d.pcie_rx_mibps, 16);
  EXPECT_EQ(d.nvlink_tx_mibps + d.nvlink_rx_mibps, 0);
  EXPECT_EQ(s->gpus[0].not_supported, 0U);
  EXPECT_FALSE(s->gpus[1].gpm) << "absent: a GPU without GPM";
  const Gpm& g = *s->gpus[2].gpm;
  EXPECT_EQ(g.sm_active_ratio, 0.5);
  EXPECT_EQ(g.sm_occupancy_pct, 40);
  EXPECT_EQ(g.tensor_active_ratio, 0.1);
  EXPECT_EQ(g.dram_active_ratio, 0.7);
  EXPECT_EQ(g.fp32_active_ratio, 0.2);
  EXPECT_EQ(g.fp16_active_ratio, 0.3);
  EXPECT_EQ(g.fp64_active_ratio, 0.4);
  EXPECT_EQ(g.pcie_tx_mibps, 100);
  EXPECT_EQ(g.pcie_rx_mibps, 200);
  EXPECT_EQ(g.nvlink_tx_mibps, 300);
  EXPECT_EQ(g.nvlink_rx_mibps, 400);
  EXPECT_EQ(s->gpus[2].not_supported, kFeatureGpm);
}

TEST(ScenarioTest, MalformedAndHostileInput) {
  struct Case {
    const char* json;
    const char* error;
  };
  const Case cases[] = {
      {"", "not valid JSON"},
      {"{\"gpus\": [", "not valid JSON"},
      {"[]", "top level: expected an object"},
      {R"({"gpus": {}})", "gpus: expected an array"},
      {R"({"gpu": []})", "top level: unknown key 'gpu'"},
      {R"({"gpus": [7]})", "gpus[0]: expected an object"},
      {R"({"gpus": [{"nmae": "x"}]})", "gpus[0]: unknown key 'nmae'"},
      {R"({"gpus": [{"name": 5}]})", "gpus[0].name: expected a string"},
      {R"({"gpus": [{"memory_total_mib": -1}]})",
       "gpus[0].memory_total_mib: expected a number >= 0"},
      {R"({"gpus": [{"memory_total_mib": 1.5}]})", "gpus[0].memory_total_mib: expected an integer"},
      {R"({"gpus": [{"sm_clock_max_mhz": 1e12}]})", "gpus[0].sm_clock_max_mhz: too large"},
      {R"({"gpus": [{"mig": "maybe"}]})",
       "gpus[0].mig: unknown 'maybe' (enabled, disabled, unsupported)"},
      {R"({"gpus": [{"not_supported": ["warp_drive"]}]})",
       "gpus[0].not_supported: unknown feature \"warp_drive\""},
      {R"({"gpus": [{"pattern": {"kind": "saw"}}]})",
       "gpus[0].pattern.kind: unknown 'saw' (steady, sawtooth, dips)"},
      {R"({"gpus": [{"pattern": {"period_s": 0}}]})",
       "gpus[0].pattern: need period_s > 0 and duty in [0, 1]"},
      {R"({"gpus": [{"pattern": {"util_high": 101}}]})", "gpus[0].pattern: utilization above 100"},
      {R"({"gpus": [{"throttle": [{"reasons": ["too_hot"]}]}]})",
       "gpus[0].throttle[0].reasons: unknown reason \"too_hot\""},
      {R"({"init_error": "flaky"})",
       "init_error: unknown 'flaky' (driver_not_loaded, no_permission, lib_rm_version_mismatch)"},
      {R"({"gpus": [{"cpu_affinity": [-1]}]})",
       "gpus[0].cpu_affinity: expected CPU numbers below 1024"},
      {R"({"gpus": [{"cpu_affinity": [4096]}]})",
       "gpus[0].cpu_affinity: expected CPU numbers below 1024"},
      {R"({"gpus": [{"retired_pages": {"pending": 1}}]})",
       "gpus[0].retired_pages.pending: expected true or false"},
      {R"({"gpus": [{"remapped_rows": {"rows": 1}}]})",
       "gpus[0].remapped_rows: unknown key 'rows'"},
      {R"({"gpus": [{"processes": [{"pid": "1"}]}]})",
       "gpus[0].processes[0].pid: expected a number"},
      {R"({"time_scale": 0, "gpus": []})", "time_scale: expected a number > 0"},
      {R"({"missing_symbols": [1]})", "missing_symbols: expected strings"},
      {R"({"gpus": [{"gpm": {"sm_actve_ratio": 0.9}}]})",
       "gpus[0].gpm: unknown key 'sm_actve_ratio'"},
      {R"({"gpus": [{"gpm": []}]})", "gpus[0].gpm: expected an object"},
      {R"({"gpus": [{"gpm": {"tensor_active_ratio": 1.5}}]})",
       "gpus[0].gpm.tensor_active_ratio: above 1"},
      {R"({"gpus": [{"gpm": {"sm_occupancy_pct": 101}}]})",
       "gpus[0].gpm.sm_occupancy_pct: above 100"},
      {R"({"gpus": [{"gpm": {"pcie_tx_mibps": -6}}]})",
       "gpus[0].gpm.pcie_tx_mibps: expected a number >= 0"},
      {R"({"driver_sample_period_s": 0})", "driver_sample_period_s: expected a number > 0"},
      {R"({"driver_sample_period_s": "0.2"})", "driver_sample_period_s: expected a number"},
  };
  for (const Case& c : cases) {
    Result<Scenario> s = ParseScenario(c.json);
    ASSERT_FALSE(s.ok()) << c.json;
    EXPECT_EQ(s.error().code, ErrorCode::kParse);
    EXPECT_EQ(s.error().message, c.error) << c.json;
  }
}

TEST(ScenarioTest, LoadNamesTheFile) {
  Result<Scenario> s = LoadScenario("/nonexistent/scenario.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "/nonexistent/scenario.json: cannot open");
}

TEST(ScenarioTest, EveryCheckedInScenarioParses) {
  const std::filesystem::path dir =
      std::filesystem::path(STALLSCOPE_SOURCE_DIR) / "tests/data/nvml";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    Result<Scenario> s = LoadScenario(entry.path().string());
    EXPECT_TRUE(s.ok()) << s.error().message;
    ++count;
  }
  EXPECT_GE(count, 10);
}

TEST(PatternTest, UtilAtAndIntegral) {
  Pattern steady;
  steady.util_high = 80;
  EXPECT_EQ(UtilAt(steady, 123.0), 80);
  EXPECT_DOUBLE_EQ(UtilIntegral(steady, 10.0), 800.0);

  Pattern saw;
  saw.kind = PatternKind::kSawtooth;
  saw.util_high = 100;
  saw.util_low = 10;
  saw.period_s = 2.0;
  saw.duty = 0.25;  // 0.5 s high, 1.5 s low
  EXPECT_EQ(UtilAt(saw, 0.0), 100);
  EXPECT_EQ(UtilAt(saw, 0.49), 100);
  EXPECT_EQ(UtilAt(saw, 0.5), 10);
  EXPECT_EQ(UtilAt(saw, 2.1), 100);
  EXPECT_DOUBLE_EQ(UtilIntegral(saw, 2.0), 100 * 0.5 + 10 * 1.5);
  EXPECT_DOUBLE_EQ(UtilIntegral(saw, 4.25), 2 * 65 + 100 * 0.25);

  Pattern dips;
  dips.kind = PatternKind::kDips;
  dips.util_high = 90;
  dips.util_low = 0;
  dips.dip_every_s = 10;
  dips.dip_length_s = 2;  // high for 8 s, then 2 s low
  EXPECT_EQ(UtilAt(dips, 7.9), 90);
  EXPECT_EQ(UtilAt(dips, 8.0), 0);
  EXPECT_EQ(UtilAt(dips, 10.0), 90);
  EXPECT_DOUBLE_EQ(UtilIntegral(dips, 10.0), 720.0);
  EXPECT_EQ(UtilIntegral(dips, -1.0), 0.0);
}

}  // namespace
}  // namespace stallscope::fake_nvml
