// Golden tests of `doctor`'s text and JSON, from facts built in code (the gathering is tested in
// src/doctor/gather_test.cc and end to end in tests/e2e/doctor_e2e_test.cc).

#include "report/doctor_render.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "doctor_facts_test_util.h"
#include "golden.h"

namespace stallscope::report {
namespace {

constexpr int64_t kWallNs = 1'700'000'000'123'456'789;

doctor::Report MakeReport(doctor::Facts facts) {
  doctor::Report r;
  r.tool_version = "stallscope 0.1.0";
  r.hostname = "node-a";
  r.wall_ns = kWallNs;
  r.checks = doctor::RunChecks(facts);
  r.facts = std::move(facts);
  return r;
}

/// Four GPUs, two of them in trouble, a container-sized /dev/shm, a debugging variable and a
/// data directory on NFS.
doctor::Facts ProblemFacts() {
  doctor::Facts f = doctor::testing::HealthyFacts(4);
  doctor::GpuFact& link = f.gpu.gpus[1];
  link.now.util_gpu_pct = 100;
  link.now.clock_event_reasons = 0;
  link.now.pcie_gen = 4;
  link.now.pcie_width = 8;
  f.gpu.gpus[2].now.ecc_volatile_uncorrected = 2;
  f.gpu.gpus[2].health.remap_pending = true;
  f.host.shm->total_bytes = f.host.shm->free_bytes = 64ULL << 20;
  f.env["CUDA_LAUNCH_BLOCKING"] = "1";
  f.env["SECRET_TOKEN"] = "never printed";
  doctor::DataFacts d;
  d.path = "/mnt/data";
  d.fs_type = "nfs";
  d.network_fs = true;
  d.files = 120000;
  d.total_bytes = 12'000'000'000;
  d.scan_truncated = true;
  d.direct_io = true;
  d.threads = 4;
  d.read_seconds = 1.8;
  d.files_read = 900;
  d.bytes_read = 90'000'000;
  d.random_seconds = 1.2;
  d.random_reads = 2400;
  d.random_latency_p50_us = 1900;
  d.random_latency_p99_us = 8100;
  f.data = d;
  return f;
}

TEST(DoctorRenderGolden, Problems) {
  const doctor::Report r = MakeReport(ProblemFacts());
  testing::ExpectGolden("doctor_problems.txt", RenderDoctorText(r));
  testing::ExpectGolden("doctor_problems.json", RenderDoctorJson(r));
}

TEST(DoctorRenderGolden, HealthyMachine) {
  testing::ExpectGolden("doctor_healthy.txt",
                        RenderDoctorText(MakeReport(doctor::testing::HealthyFacts(2))));
}

TEST(DoctorRenderGolden, NoGpuMachine) {
  doctor::Facts f = doctor::testing::HealthyFacts(0);
  f.gpu = doctor::GpuFacts{};
  f.gpu.nvml_error = "libnvidia-ml.so.1 not found";
  f.python.torch_cuda.reset();
  f.python.cuda_available = false;
  f.python.device_count = 0;
  testing::ExpectGolden("doctor_nogpu.txt", RenderDoctorText(MakeReport(f)));
}

TEST(DoctorRender, IdenticalPerGpuRowsMergeWorstFirst) {
  const std::string text = RenderDoctorText(MakeReport(ProblemFacts()));
  const std::string pad(27 - std::string("PCIe link").size(), ' ');
  EXPECT_NE(text.find("OK      persistence mode" + pad.substr(7) + "  GPU 0-3: on\n"),
            std::string::npos)
      << text;
  const size_t warn = text.find("WARN    PCIe link" + pad + "  GPU 1: ");
  const size_t ok = text.find("OK      PCIe link" + pad + "  GPU 0, 2, 3: ");
  ASSERT_NE(warn, std::string::npos) << text;
  ASSERT_NE(ok, std::string::npos) << text;
  EXPECT_LT(warn, ok);
}

TEST(DoctorRender, ControlCharactersAreEscaped) {
  doctor::Facts f = doctor::testing::HealthyFacts(1);
  f.env["OMP_NUM_THREADS"] = "4\x1b[2J\nFAIL    forged";
  f.python.ran = false;
  f.python.error = "exit 1: \x1b[31mboom";
  const doctor::Report r = MakeReport(f);
  const std::string text = RenderDoctorText(r);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find("\nFAIL    forged"), std::string::npos);
  EXPECT_NE(text.find("\\x1b[2J\\nFAIL    forged"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(RenderDoctorJson(r));  // valid JSON, escaped there too
  EXPECT_EQ(j["facts"]["env"]["OMP_NUM_THREADS"], "4\x1b[2J\nFAIL    forged");
}

TEST(DoctorRender, JsonSummaryAndNoSecrets) {
  const doctor::Report r = MakeReport(ProblemFacts());
  const auto j = nlohmann::json::parse(RenderDoctorJson(r));
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["summary"]["exit_code"], 1);
  EXPECT_EQ(j["summary"]["fail"].get<int>() + j["summary"]["warn"].get<int>() +
                j["summary"]["ok"].get<int>() + j["summary"]["skip"].get<int>(),
            static_cast<int>(j["checks"].size()));
  EXPECT_FALSE(j["facts"]["env"].contains("SECRET_TOKEN"));
  EXPECT_FALSE(j["facts"]["env"].contains("PATH"));
  EXPECT_EQ(j["facts"]["env"]["CUDA_LAUNCH_BLOCKING"], "1");
  EXPECT_EQ(j["facts"]["gpus"].size(), 4U);
  EXPECT_EQ(j["facts"]["gpus"][1]["pcie"]["width"], 8);
  EXPECT_NEAR(j["facts"]["data"]["mb_per_s"].get<double>(), 50.0, 0.1);
}

}  // namespace
}  // namespace stallscope::report
