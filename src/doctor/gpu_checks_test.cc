#include "doctor/gpu_checks.h"

#include <gtest/gtest.h>

#include <functional>
#include <span>

#include "doctor_facts_test_util.h"

namespace stallscope::doctor {
namespace {

using testing::Contains;
using testing::HealthyFacts;
using testing::One;
using testing::WithId;
using S = CheckStatus;

TEST(DriverCheck, EachDriverState) {
  struct Case {
    DriverState state;
    std::string error;
    std::optional<uint32_t> pci_gpus;
    S status;
    std::string detail_has;
    std::string fix_has;
  };
  const std::string not_found = "libnvidia-ml.so.1 not found";
  const std::string not_loaded = "nvmlInit failed: Driver Not Loaded (9)";
  const Case cases[] = {
      {DriverState::kNoDriver, not_found, std::nullopt, S::kSkip,
       "no NVIDIA GPU: libnvidia-ml.so.1 not found and no NVIDIA kernel module", ""},
      {DriverState::kNoDriver, not_found, 0, S::kSkip,
       "no NVIDIA GPU on the PCI bus (libnvidia-ml.so.1 not found)", ""},
      {DriverState::kNoDriver, not_found, 2, S::kFail,
       "2 NVIDIA GPUs are on the PCI bus, but no NVIDIA driver is loaded", "install the NVIDIA"},
      {DriverState::kLibraryMissing, not_found, 8, S::kFail, "kernel module is loaded (535.161.08)",
       "--gpus all"},
      {DriverState::kInitFailed, "nvmlInit failed: Driver/library version mismatch (18)", 8,
       S::kFail, "version mismatch", "reboot"},
      {DriverState::kInitFailed, not_loaded, 1, S::kFail, "Not Loaded", "modprobe nvidia"},
      // NVIDIA's libraries installed on a machine without an NVIDIA GPU.
      {DriverState::kInitFailed, not_loaded, 0, S::kSkip, "no NVIDIA GPU on the PCI bus", ""},
      {DriverState::kInitFailed, "nvmlInit failed: Insufficient Permissions (4)", std::nullopt,
       S::kFail, "Permissions", "/dev/nvidia*"},
      {DriverState::kInitFailed, "nvmlInit failed: Unknown Error (999)", 8, S::kFail, "Unknown",
       "nvidia-smi"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.error);
    Facts f = HealthyFacts();
    f.gpu.driver = c.state;
    f.gpu.nvml_error = c.error;
    f.gpu.nvidia_pci_gpus = c.pci_gpus;
    f.gpu.kernel_module_version = "535.161.08";
    f.gpu.gpus.clear();
    const std::vector<Check> checks = GpuChecks(f);
    ASSERT_EQ(checks.size(), 1U) << "no GPU checks without a driver";
    EXPECT_EQ(checks[0].status, c.status);
    EXPECT_TRUE(Contains(checks[0].detail, c.detail_has)) << checks[0].detail;
    EXPECT_TRUE(Contains(checks[0].fix, c.fix_has)) << checks[0].fix;
  }
}

TEST(DriverCheck, OkNamesVersionCudaAndGpus) {
  const Check c = One(GpuChecks(HealthyFacts(2)), "gpu.driver");
  EXPECT_EQ(c.status, S::kOk);
  EXPECT_EQ(c.detail, "driver 550.54.15 (CUDA 12.4 or older), 2 GPUs: NVIDIA H100 80GB HBM3");
  Facts none = HealthyFacts(0);
  EXPECT_EQ(One(GpuChecks(none), "gpu.driver").status, S::kFail);
}

TEST(VisibleCheck, FromCudaVisibleDevices) {
  struct Case {
    std::optional<std::string> value;
    S status;
    std::string detail_has;
    size_t per_gpu_checks;  // gpu.persistence rows: only the visible GPUs
  };
  const Case cases[] = {
      {std::nullopt, S::kOk, "all 4 GPUs (CUDA_VISIBLE_DEVICES is not set)", 4},
      {"2,3", S::kOk, "GPU 2, 3 of 4 (CUDA_VISIBLE_DEVICES=2,3)", 2},
      {"", S::kFail, "hides every GPU", 0},
      {"0,7", S::kFail, "there is no GPU 7 (4 GPUs), and CUDA ignores that entry", 1},
      {"MIG-abc", S::kOk, "1 MIG instance (CUDA_VISIBLE_DEVICES=MIG-abc)", 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value.value_or("<unset>"));
    Facts f = HealthyFacts(4);
    if (c.value) f.env["CUDA_VISIBLE_DEVICES"] = *c.value;
    const std::vector<Check> checks = GpuChecks(f);
    const Check v = One(checks, "gpu.visible");
    EXPECT_EQ(v.status, c.status);
    EXPECT_TRUE(Contains(v.detail, c.detail_has)) << v.detail;
    EXPECT_EQ(WithId(checks, "gpu.persistence").size(), c.per_gpu_checks);
  }
}

TEST(DeviceOrderCheck, OnlyForMixedGpusWithoutPciBusOrder) {
  Facts f = HealthyFacts(2);
  EXPECT_TRUE(WithId(GpuChecks(f), "gpu.device_order").empty());
  f.gpu.gpus[1].info.name = "Tesla T4";
  EXPECT_EQ(One(GpuChecks(f), "gpu.device_order").status, S::kWarn);
  f.env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  EXPECT_TRUE(WithId(GpuChecks(f), "gpu.device_order").empty());
}

/// One per-GPU check of GPU 0 after `change`.
Check Gpu0(std::string_view id, const std::function<void(GpuFact&)>& change) {
  Facts f = HealthyFacts(1);
  change(f.gpu.gpus[0]);
  const Check c = One(GpuChecks(f), id);
  EXPECT_EQ(c.gpu, 0U);
  return c;
}

struct PerGpuCase {
  std::string name;
  std::string id;
  std::function<void(GpuFact&)> change;
  S status;
  std::string detail_has;
};

void ExpectPerGpu(std::span<const PerGpuCase> cases) {
  for (const PerGpuCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Check check = Gpu0(c.id, c.change);
    EXPECT_EQ(check.status, c.status) << check.detail;
    EXPECT_TRUE(Contains(check.detail, c.detail_has)) << check.detail;
    EXPECT_EQ(check.fix.empty(), c.status <= S::kSkip) << check.fix;
  }
}

TEST(PerGpuChecks, PersistenceLinkEcc) {
  const auto busy = [](GpuFact& g) {
    g.now.util_gpu_pct = 100;
    g.now.clock_event_reasons = 0;
  };
  const PerGpuCase cases[] = {
      {"persistence on", "gpu.persistence", [](GpuFact&) {}, S::kOk, "on"},
      {"persistence off", "gpu.persistence", [](GpuFact& g) { g.info.persistence_mode = false; },
       S::kWarn, "deinitialises"},
      {"persistence unknown", "gpu.persistence",
       [](GpuFact& g) { g.info.persistence_mode.reset(); }, S::kSkip, "not reported"},
      {"link at max", "gpu.pcie_link", [](GpuFact&) {}, S::kOk,
       "gen5 x16 (63.0 GB/s each way) (its maximum)"},
      {"gen down while idle", "gpu.pcie_link", [](GpuFact& g) { g.now.pcie_gen = 1; }, S::kOk,
       "idle links slow down"},
      {"gen down while busy", "gpu.pcie_link",
       [&](GpuFact& g) {
         busy(g);
         g.now.pcie_gen = 3;
       },
       S::kWarn, "gen3 x16 (15.8 GB/s each way) of gen5 x16 (63.0 GB/s each way) while busy"},
      {"width down", "gpu.pcie_link", [](GpuFact& g) { g.now.pcie_width = 8; }, S::kWarn,
       "fewer lanes"},
      {"slot limits gen", "gpu.pcie_link",
       [](GpuFact& g) {
         g.info.pcie_gen_max = 4;
         g.now.pcie_gen = 4;
       },
       S::kWarn, "the GPU supports gen5 but the slot or platform allows gen4"},
      {"link unknown", "gpu.pcie_link", [](GpuFact& g) { g.now.pcie_gen.reset(); }, S::kSkip, ""},
      {"ecc clean", "gpu.ecc", [](GpuFact&) {}, S::kOk, "0 uncorrectable, 0 corrected"},
      {"ecc volatile uncorrected", "gpu.ecc",
       [](GpuFact& g) { g.now.ecc_volatile_uncorrected = 3; }, S::kFail, "3 uncorrectable"},
      {"remap pending", "gpu.ecc", [](GpuFact& g) { g.health.remap_pending = true; }, S::kFail,
       "a repair is pending"},
      {"remap failed", "gpu.ecc", [](GpuFact& g) { g.health.remap_failed = true; }, S::kFail,
       "FAILED"},
      {"pages retired, few", "gpu.ecc", [](GpuFact& g) { g.health.retired_pages_sbe = 3; }, S::kOk,
       "3 pages retired"},
      {"pages retired, soft limit", "gpu.ecc", [](GpuFact& g) { g.health.retired_pages_dbe = 15; },
       S::kWarn, "DCGM warns at 15"},
      {"pages retired, hard limit", "gpu.ecc",
       [](GpuFact& g) {
         g.health.retired_pages_sbe = 60;
         g.health.retired_pages_dbe = 3;
       },
       S::kFail, "DCGM fails a GPU at 63"},
      {"retirement pending", "gpu.ecc", [](GpuFact& g) { g.health.retired_pages_pending = true; },
       S::kFail, "pending"},
      {"lifetime errors only", "gpu.ecc",
       [](GpuFact& g) { g.health.ecc_aggregate_uncorrected = 5; }, S::kOk,
       "5 uncorrectable in the GPU's lifetime"},
      {"no ecc", "gpu.ecc",
       [](GpuFact& g) {
         g.now.ecc_volatile_uncorrected.reset();
         g.health = {};
       },
       S::kSkip, "no ECC"},
  };
  ExpectPerGpu(cases);
}

TEST(PerGpuChecks, ThrottlePowerMigInUse) {
  const PerGpuCase cases[] = {
      {"idle, not throttled", "gpu.throttle", [](GpuFact&) {}, S::kOk, "none (idle)"},
      {"hw thermal", "gpu.throttle",
       [](GpuFact& g) {
         g.now.clock_event_reasons = gpu::kClockEventHwThermal | gpu::kClockEventSwThermal;
         g.now.sm_clock_mhz = 900;
       },
       S::kFail, "slowed now by sw_thermal, hw_thermal: SM clock 900 of 1980 MHz, 31 C"},
      {"sw thermal", "gpu.throttle",
       [](GpuFact& g) { g.now.clock_event_reasons = gpu::kClockEventSwThermal; }, S::kWarn,
       "sw_thermal"},
      {"at power cap", "gpu.throttle",
       [](GpuFact& g) { g.now.clock_event_reasons = gpu::kClockEventSwPowerCap; }, S::kOk,
       "at its power limit"},
      {"power default", "gpu.power_limit", [](GpuFact&) {}, S::kOk, "700 W (default 700 W)"},
      {"power capped", "gpu.power_limit", [](GpuFact& g) { g.info.power_limit_mw = 300'000; },
       S::kWarn, "300 W of its default 700 W"},
      {"power cap within 5%", "gpu.power_limit",
       [](GpuFact& g) { g.info.power_limit_mw = 680'000; }, S::kOk, "680 W"},
      {"mig off", "gpu.mig", [](GpuFact&) {}, S::kOk, "off"},
      {"mig on", "gpu.mig", [](GpuFact& g) { g.info.mig_mode = gpu::MigMode::kEnabled; }, S::kWarn,
       "one MIG instance"},
      {"mig unsupported", "gpu.mig",
       [](GpuFact& g) { g.info.mig_mode = gpu::MigMode::kUnsupported; }, S::kOk, "not a MIG"},
      {"idle gpu", "gpu.in_use", [](GpuFact&) {}, S::kOk, "none (536.9 MB used)"},
      {"another process", "gpu.in_use",
       [](GpuFact& g) {
         g.now.processes.push_back({31337, false, 30ULL << 30, std::nullopt, std::nullopt});
       },
       S::kWarn, "in use by pid 31337 (32.2 GB); 536.9 MB of its memory used"},
      {"hidden process", "gpu.in_use", [](GpuFact& g) { g.now.mem_used_bytes = 20ULL << 30; },
       S::kWarn, "processes not visible here"},
      {"lost gpu", "gpu.in_use", [](GpuFact& g) { g.now.lost = true; }, S::kFail, "lost"},
  };
  ExpectPerGpu(cases);
}

TEST(NumaCheck, GpuNodeAgainstAllowedCpus) {
  Facts f = HealthyFacts(1);
  f.host.online_cpus = 32;
  f.host.numa_nodes = {{0, {0, 1, 2, 3, 4, 5, 6, 7}}, {1, {8, 9, 10, 11, 12, 13, 14, 15}}};
  f.host.allowed_cpus = {0, 1, 2, 3};
  f.gpu.gpus[0].numa_node = 1;
  Check c = One(GpuChecks(f), "gpu.numa");
  EXPECT_EQ(c.status, S::kWarn);
  EXPECT_EQ(c.detail,
            "on NUMA node 1 (CPUs 8-15), but this process may only run on CPUs 0-3: host-to-GPU "
            "copies and the input pipeline cross the socket link");
  EXPECT_TRUE(Contains(c.fix, "numactl --cpunodebind=1 --membind=1")) << c.fix;

  f.host.allowed_cpus = {0, 1, 8, 9};
  c = One(GpuChecks(f), "gpu.numa");
  EXPECT_EQ(c.status, S::kOk);
  EXPECT_EQ(c.detail, "on NUMA node 1 (CPUs 8-15); 2 of them allowed here");

  // No node from sysfs: NVML's affinity mask stands in.
  f.gpu.gpus[0].numa_node.reset();
  f.gpu.gpus[0].health.ideal_cpus = {8, 9, 10};
  f.host.allowed_cpus = {0, 1};
  c = One(GpuChecks(f), "gpu.numa");
  EXPECT_EQ(c.status, S::kWarn);
  EXPECT_TRUE(Contains(c.fix, "widen the CPU affinity to CPUs 8-10")) << c.fix;

  f.host.numa_nodes.clear();
  f.gpu.gpus[0].health.ideal_cpus.clear();
  EXPECT_EQ(One(GpuChecks(f), "gpu.numa").detail, "one NUMA node: every CPU is equally close");
}

TEST(PcieGBps, Table) {
  EXPECT_DOUBLE_EQ(*PcieGBps(1, 1), 0.25);
  EXPECT_NEAR(*PcieGBps(4, 16), 31.5, 0.1);
  EXPECT_NEAR(*PcieGBps(5, 16), 63.0, 0.1);
  EXPECT_FALSE(PcieGBps(0, 16));
  EXPECT_FALSE(PcieGBps(9, 16));
}

TEST(FormatIdList, Table) {
  EXPECT_EQ(FormatIdList({}), "");
  EXPECT_EQ(FormatIdList({3}), "3");
  EXPECT_EQ(FormatIdList({0, 1}), "0, 1");
  EXPECT_EQ(FormatIdList({0, 1, 2, 3, 8, 10, 11, 12}), "0-3, 8, 10-12");
}

}  // namespace
}  // namespace stallscope::doctor
