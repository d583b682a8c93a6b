// Gathering from fixture trees (tests/data/doctor) and the fake libnvidia-ml.so.1 playing
// tests/data/nvml scenarios, then judging what was gathered.

#include "doctor/gather.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "doctor/check.h"
#include "doctor_facts_test_util.h"
#include "fakes/fake_gpu_backend.h"
#include "temp_dir.h"

namespace stallscope::doctor {
namespace {

using testing::One;
using testing::WithId;
using S = CheckStatus;

constexpr const char* kScenarioEnv = "STALLSCOPE_FAKE_NVML_SCENARIO";

host::ProcFs FixtureFs(const std::string& name) {
  const std::filesystem::path root =
      std::filesystem::path(STALLSCOPE_SOURCE_DIR) / "tests/data/doctor" / name;
  host::ProcFs fs;
  fs.proc_root = (root / "proc").string();
  fs.cgroup_root = (root / "cgroup").string();
  fs.sys_root = (root / "sys").string();
  fs.shm_path = (root / "no_shm").string();
  return fs;
}

class GatherTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kScenarioEnv); }

  GpuFacts Gpus(const std::string& scenario, const std::string& fixture = "two_socket") {
    setenv(kScenarioEnv, (std::string(STALLSCOPE_NVML_SCENARIOS) + "/" + scenario).c_str(), 1);
    gpu::NvmlOptions options;
    options.library_path = STALLSCOPE_FAKE_NVML;
    options.query_pcie_throughput = false;
    return GatherGpus(options, FixtureFs(fixture));
  }
};

TEST_F(GatherTest, UnhealthyGpusOnATwoSocketHost) {
  const GpuFacts g = Gpus("unhealthy.json");
  ASSERT_EQ(g.driver, DriverState::kOk) << g.nvml_error;
  EXPECT_EQ(g.driver_version, "535.161.08");
  EXPECT_EQ(g.kernel_module_version, "535.161.08");
  EXPECT_EQ(g.cuda_driver_version, 12020);
  EXPECT_EQ(g.nvidia_pci_gpus, 5U);  // the fixture's five 3D controllers of vendor 0x10de
  ASSERT_EQ(g.gpus.size(), 5U);
  EXPECT_EQ(g.gpus[0].numa_node, 0U);
  EXPECT_EQ(g.gpus[2].numa_node, 1U);
  EXPECT_EQ(g.gpus[0].now.pcie_gen, 3U);
  EXPECT_EQ(g.gpus[0].health.power_limit_default_mw, 400'000U);
  EXPECT_EQ(g.gpus[3].now.processes.size(), 1U);

  Facts f;
  f.gpu = g;
  stallscope::testing::TempDir ckpt;
  f.host = GatherHost(FixtureFs("two_socket"), ckpt.path().string());
  const std::vector<Check> checks = RunChecks(f);
  auto status = [&](std::string_view id, uint32_t gpu) {
    for (const Check& c : WithId(checks, id)) {
      if (c.gpu == gpu) return c.status;
    }
    ADD_FAILURE() << id << " for GPU " << gpu;
    return S::kOk;
  };
  EXPECT_EQ(status("gpu.pcie_link", 0), S::kWarn);  // gen3 x8 of gen4 x16 while busy
  EXPECT_EQ(status("gpu.power_limit", 0), S::kWarn);
  EXPECT_EQ(status("gpu.ecc", 0), S::kOk);
  EXPECT_EQ(status("gpu.ecc", 1), S::kFail);  // uncorrectable errors, a remap pending
  EXPECT_EQ(status("gpu.pcie_link", 1), S::kOk);
  EXPECT_EQ(status("gpu.persistence", 2), S::kWarn);
  EXPECT_EQ(status("gpu.mig", 2), S::kWarn);
  EXPECT_EQ(status("gpu.throttle", 3), S::kFail);  // hw_thermal
  EXPECT_EQ(status("gpu.in_use", 3), S::kWarn);
  EXPECT_EQ(status("gpu.ecc", 4), S::kFail);   // V100: a page retirement pending
  EXPECT_EQ(status("gpu.numa", 0), S::kOk);    // node 0 = CPUs 0-15, CPUs 0-7 allowed
  EXPECT_EQ(status("gpu.numa", 3), S::kWarn);  // node 1, none of its CPUs allowed
  EXPECT_EQ(One(checks, "gpu.driver").status, S::kOk);
  EXPECT_EQ(ExitCode(checks), 1);
}

TEST_F(GatherTest, HealthyIdleGpus) {
  const GpuFacts g = Gpus("healthy_idle.json");
  ASSERT_EQ(g.driver, DriverState::kOk) << g.nvml_error;
  Facts f = testing::HealthyFacts();
  f.gpu = g;
  const std::vector<Check> checks = RunChecks(f);
  const std::vector<Check> links = WithId(checks, "gpu.pcie_link");
  ASSERT_EQ(links.size(), 2U);
  EXPECT_EQ(links[0].status, S::kOk) << links[0].detail;    // gen1 while idle
  EXPECT_EQ(links[1].status, S::kWarn) << links[1].detail;  // a gen5 GPU in a gen4 slot
  for (const Check& c : WithId(checks, "gpu.ecc")) EXPECT_EQ(c.status, S::kOk) << c.detail;
  for (const Check& c : WithId(checks, "gpu.throttle"))
    EXPECT_EQ(c.detail, "none (idle): SM clock 345 of 1980 MHz, 35 C");
}

TEST_F(GatherTest, InitFailureAndMissingLibrary) {
  stallscope::testing::TempDir dir;
  const std::string scenario = dir.Sub("mismatch.json");
  std::ofstream(scenario) << R"({"init_error": "lib_rm_version_mismatch"})";
  setenv(kScenarioEnv, scenario.c_str(), 1);
  gpu::NvmlOptions options;
  options.library_path = STALLSCOPE_FAKE_NVML;
  GpuFacts g = GatherGpus(options, FixtureFs("two_socket"));
  EXPECT_EQ(g.driver, DriverState::kInitFailed);
  EXPECT_EQ(g.nvml_error, "nvmlInit failed: Driver/library version mismatch (18)");

  options.library_path = dir.Sub("libnvidia-ml.so.1");  // not there
  g = GatherGpus(options, FixtureFs("two_socket"));
  EXPECT_EQ(g.driver, DriverState::kLibraryMissing);
  EXPECT_TRUE(g.gpus.empty());
  EXPECT_EQ(g.nvidia_pci_gpus, 5U);

  host::ProcFs no_sys = FixtureFs("two_socket");
  no_sys.sys_root = dir.Sub("no_sys");
  EXPECT_FALSE(GatherGpus(options, no_sys).nvidia_pci_gpus);
}

TEST_F(GatherTest, NoDriverWhereNoNvmlIsInstalled) {
  // The default library search; on a machine with an NVIDIA driver this finds the real one.
  host::ProcFs fs = FixtureFs("two_socket");
  fs.proc_root = "/nonexistent";
  const GpuFacts g = GatherGpus({}, fs);
  if (g.driver == DriverState::kOk || g.driver == DriverState::kInitFailed) {
    GTEST_SKIP() << "this machine has NVML";
  }
  EXPECT_EQ(g.driver, DriverState::kNoDriver);
  EXPECT_EQ(g.nvml_error, "libnvidia-ml.so.1 not found");
}

TEST_F(GatherTest, HostFromFixtures) {
  stallscope::testing::TempDir ckpt;
  const HostFacts h = GatherHost(FixtureFs("two_socket"), ckpt.path().string());
  EXPECT_EQ(h.online_cpus, 32U);
  EXPECT_EQ(h.allowed_cpus, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(h.cgroup_quota_cpus, 4.0);
  EXPECT_EQ(h.cgroup_mem_limit_bytes, 64ULL << 30);
  EXPECT_EQ(h.mem_total_bytes, 263921664ULL * 1024);
  ASSERT_EQ(h.numa_nodes.size(), 2U);
  EXPECT_EQ(h.numa_nodes[1].id, 1U);
  EXPECT_EQ(h.numa_nodes[1].cpus.front(), 16U);
  ASSERT_TRUE(h.shm);
  EXPECT_EQ(h.shm->error, "No such file or directory");
  EXPECT_EQ(h.checkpoint.error, "");
  EXPECT_GT(h.checkpoint.total_bytes, 0U);
  EXPECT_TRUE(h.nofile_soft || !h.nofile_hard);
}

TEST(GpuFactsFrom, FakeBackend) {
  gpu::FakeGpuBackend backend({gpu::FakeGpuBackend::MakeStatic(0)},
                              [](size_t, size_t, gpu::GpuSample& s) { s.util_gpu_pct = 42; });
  gpu::GpuHealth health;
  health.retired_pages_sbe = 2;
  backend.SetHealth(0, health);
  backend.SetCudaDriverVersion(12020);
  const GpuFacts g = GpuFactsFrom(backend, FixtureFs("two_socket"));
  EXPECT_EQ(g.driver, DriverState::kOk);
  EXPECT_EQ(g.cuda_driver_version, 12020);
  ASSERT_EQ(g.gpus.size(), 1U);
  EXPECT_EQ(g.gpus[0].now.util_gpu_pct, 42U);
  EXPECT_EQ(g.gpus[0].health.retired_pages_sbe, 2U);
  EXPECT_FALSE(g.gpus[0].numa_node);  // bus 17 has no numa_node file in the fixture
}

TEST(SysfsPciAddress, Table) {
  EXPECT_EQ(SysfsPciAddress("00000000:17:00.0"), "0000:17:00.0");
  EXPECT_EQ(SysfsPciAddress("00000000:4E:00.0"), "0000:4e:00.0");
  EXPECT_EQ(SysfsPciAddress("0000:3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(SysfsPciAddress("00000001:C1:1F.7"), "0001:c1:1f.7");
  EXPECT_EQ(SysfsPciAddress(""), "");
  EXPECT_EQ(SysfsPciAddress("garbage"), "");
  EXPECT_EQ(SysfsPciAddress("0000:17:00.0/../../x"), "");
  EXPECT_EQ(SysfsPciAddress("100000:17:00.0"), "");
}

TEST(EnvironmentMap, SplitsAtTheFirstEquals) {
  const char* env[] = {"A=1", "B=x=y", "EMPTY=", "NOEQUALS", "=odd", nullptr};
  const auto m = EnvironmentMap(env);
  EXPECT_EQ(m.size(), 3U);
  EXPECT_EQ(m.at("A"), "1");
  EXPECT_EQ(m.at("B"), "x=y");
  EXPECT_EQ(m.at("EMPTY"), "");
  EXPECT_TRUE(EnvironmentMap(nullptr).empty());
}

}  // namespace
}  // namespace stallscope::doctor
