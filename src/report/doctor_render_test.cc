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

/// What the analyzer's answer in src/doctor/code_check_test.cc parses to: a warn and an info
/// finding in two files, a file it could not read, two malformed entries.
doctor::CodeReport CodeAnswer() {
  doctor::CodeReport r;
  r.ran = true;
  r.path = "src";
  r.python = "python3";
  r.python_version = "3.11.7";
  r.files_checked = 2;
  r.findings.push_back({"train.py", 12, "loop-item", doctor::CodeSeverity::kWarn, "a sync",
                        "do not", "total += loss.item()"});
  r.findings.push_back({"train.py", 3, "zero-grad-set-to-none", doctor::CodeSeverity::kInfo,
                        "memset", "set_to_none=True", ""});
  r.files_not_checked = 1;
  r.warnings.push_back({"bad.py", 4, "SyntaxError: invalid syntax"});
  r.malformed = 2;
  return r;
}

TEST(RenderCodeText, VerdictFindingsWarningsAndNextStep) {
  doctor::CodeReport r = CodeAnswer();
  r.files_not_checked = 0;
  r.warnings.clear();
  const std::string text = RenderCodeText(r);
  EXPECT_EQ(text.rfind("WARN: 1 GPU-stalling pattern, 1 note in 2 files (src, Python 3.11.7)\n", 0),
            0u)
      << text;
  EXPECT_NE(text.find("WARN  train.py:12  loop-item\n      | total += loss.item()\n"
                      "      why: a sync\n      fix: do not\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("INFO  train.py:3   zero-grad-set-to-none\n      why: memset\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("not checked"), std::string::npos) << text;
  EXPECT_NE(text.find("warning: 2 malformed entries"), std::string::npos);
  EXPECT_NE(text.find("Next: fix the WARN lines"), std::string::npos);
}

// B12: a file the analyzer could not read or parse is never passed as OK: the verdict says
// how many, each is named with the reason, and the findings of the others still show.
TEST(RenderCodeText, FilesNotCheckedComeFirstAndAreNamed) {
  const std::string text = RenderCodeText(CodeAnswer());
  EXPECT_EQ(text.rfind("INCOMPLETE: 1 file could not be checked; 1 GPU-stalling pattern, 1 note "
                       "in 2 files (src, Python 3.11.7)\n",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("\nnot checked: bad.py:4: SyntaxError: invalid syntax\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("WARN  train.py:12  loop-item\n"), std::string::npos) << text;
  EXPECT_NE(text.find("the check fails (exit 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("Next: fix the WARN lines"), std::string::npos) << text;

  doctor::CodeReport only;  // the probe's case: one file given, and it does not parse
  only.ran = true;
  only.path = "train.py";
  only.python_version = "3.11.7";
  only.files_not_checked = 1;
  only.warnings.push_back({"train.py", 1, "SyntaxError: invalid syntax"});
  EXPECT_EQ(RenderCodeText(only),
            "INCOMPLETE: 1 file could not be checked; 0 GPU-stalling patterns, 0 notes in 0 files "
            "(train.py, Python 3.11.7)\n"
            "\n"
            "not checked: train.py:1: SyntaxError: invalid syntax\n"
            "\n"
            "Next: fix the files that were not checked, or leave them out of what --code is "
            "given: until every file is read, the check fails (exit 3)\n");
  // More than the analyzer lists (it names 100).
  only.files_not_checked = 250;
  EXPECT_NE(RenderCodeText(only).find("not checked: 249 more, not listed\n"), std::string::npos);
}

TEST(RenderCodeText, EscapesControlCharactersFromTheCode) {
  doctor::CodeReport r;
  r.ran = true;
  r.findings.push_back(
      {"a\x1b[2J.py", 1, "loop-item", doctor::CodeSeverity::kWarn, "", "", "x\rforged"});
  const std::string text = RenderCodeText(r);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_NE(text.find("a\\x1b[2J.py:1"), std::string::npos) << text;
}

TEST(RenderCodeText, CleanAndFailed) {
  doctor::CodeReport clean;
  clean.ran = true;
  clean.python_version = "3.8.18";
  clean.files_checked = 1;
  clean.path = "train.py";
  EXPECT_EQ(RenderCodeText(clean),
            "OK: 0 GPU-stalling patterns, 0 notes in 1 file (train.py, Python 3.8.18)\n");
  doctor::CodeReport empty;
  empty.ran = true;
  empty.path = "docs";
  EXPECT_NE(RenderCodeText(empty).find("warning: no .py file in docs"), std::string::npos);
  doctor::CodeReport failed;
  failed.path = "x.py";
  failed.error = "python9 not found on PATH";
  EXPECT_EQ(RenderCodeText(failed),
            "stallscope doctor --code: could not check x.py: python9 not found on PATH\n");
}

TEST(RenderCodeJson, SchemaAndKeyOrder) {
  const std::string out = RenderCodeJson(CodeAnswer(), "1.2.3");
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["tool"], "stallscope doctor --code");
  EXPECT_EQ(j["ran"], true);
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["summary"]["warn"], 1);
  EXPECT_EQ(j["summary"]["info"], 1);
  EXPECT_EQ(j["files_not_checked"], 1);
  EXPECT_EQ(j["summary"]["exit_code"], 3);  // a file not checked outranks a warn finding
  ASSERT_EQ(j["findings"].size(), 2u);
  EXPECT_EQ(j["findings"][0]["id"], "loop-item");
  EXPECT_EQ(j["findings"][0]["severity"], "warn");
  EXPECT_EQ(j["warnings"][0]["file"], "bad.py");
  EXPECT_LT(out.find("\"schema_version\""), out.find("\"summary\""));
  EXPECT_LT(out.find("\"summary\""), out.find("\"findings\""));
}

}  // namespace
}  // namespace stallscope::report
