// The verdict on GPU situations a CPU-only machine cannot show: `stallscope run` on a job that
// marks its phases with the stallscope API (tests/e2e/fake_job.py, no torch), while the fake
// libnvidia-ml.so.1 plays the GPUs (tests/fakes/nvml scenarios written here).

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "report_json.h"
#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace stallscope::testing::report_json;  // NOLINT(build/namespaces)

using stallscope::testing::Slurp;

class VerdictE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!STALLSCOPE_E2E_HOOKS) GTEST_SKIP() << "this build has no Python package";
    dir_ = fs::temp_directory_path() /
           ("stallscope_verdict_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) fs::remove_all(dir_);
  }

  /// Writes a scenario of `gpus` (each merged with `per_gpu[i]` if given, else `common`).
  std::string Scenario(const std::vector<json>& gpus) {
    json s = {{"driver_version", "550.54.15"}, {"gpus", json::array()}};
    for (const auto& g : gpus) {
      json base = {{"name", "NVIDIA H100 80GB HBM3"}, {"memory_total_mib", 81559},
                   {"memory_used_mib", 40000},        {"power_limit_w", 700},
                   {"power_w_at_full", 650},          {"sm_clock_max_mhz", 1980}};
      base.update(g);
      s["gpus"].push_back(base);
    }
    std::string path = (dir_ / "scenario.json").string();
    std::ofstream(path) << s.dump(1);
    return path;
  }

  /// Runs fake_job.py under `stallscope run` with the scenario; returns report.json.
  json Run(const std::string& scenario, const std::vector<std::string>& job_args) {
    auto env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_"});
    env.push_back(std::string("STALLSCOPE_NVML_LIB=") + FAKE_NVML_LIB);
    env.push_back("STALLSCOPE_FAKE_NVML_SCENARIO=" + scenario);
    std::vector<std::string> args = {STALLSCOPE_BIN,
                                     "run",
                                     "--quiet",
                                     "--out",
                                     (dir_ / "run").string(),
                                     "-i",
                                     "100ms",
                                     "--",
                                     "/usr/bin/python3",
                                     std::string(STALLSCOPE_SOURCE_DIR) + "/tests/e2e/fake_job.py"};
    args.insert(args.end(), job_args.begin(), job_args.end());
    std::string log = (dir_ / "log").string();
    int code = stallscope::testing::WaitExit(stallscope::testing::Spawn(args, env, log, ""), 120);
    EXPECT_EQ(code, 0) << Slurp(log);
    auto j = json::parse(Slurp(dir_ / "run" / "report.json"), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << Slurp(log);
    return j;
  }

  static bool Has(const json& r, const std::string& cls) { return Finding(r, cls) != nullptr; }

  fs::path dir_;
};

TEST_F(VerdictE2e, SawtoothAlignedWithDataLoadingIsDataBound) {
  // 150 ms of CPU-busy loading, then 50 ms of "GPU work": the GPU saws 100% → 0% every 200 ms.
  auto r = Run(Scenario({{{"pattern",
                           {{"kind", "sawtooth"},
                            {"util_high", 100},
                            {"util_low", 0},
                            {"period_s", 0.2},
                            {"duty", 0.25}}}}}),
               {"--steps", "25", "--data-ms", "150", "--compute-ms", "50", "--data-busy"});
  EXPECT_EQ(Principal(r), "data_bound_cpu") << r["verdict"].dump(1);
  // Issue 31: where the main thread was while the (fake) GPU idled, from the driver's
  // sub-second samples: fake_job.py's loop, in the principal finding's evidence.
  const json& idle = r["stacks"]["gpu_idle"];
  ASSERT_TRUE(idle.is_object()) << r["stacks"].dump(1);
  EXPECT_EQ(idle["lines"][0]["function"], "loop") << idle.dump(1);
  bool named = false;
  for (const json& e : r["verdict"]["principal"]["evidence"]) {
    named |= e["metric"] == "stacks.gpu_idle" &&
             e["text"].get<std::string>().find("fake_job.py:") != std::string::npos;
  }
  EXPECT_TRUE(named) << r["verdict"]["principal"]["evidence"].dump(1);
}

TEST_F(VerdictE2e, ThermalThrottling) {
  auto r = Run(Scenario({{{"pattern", {{"kind", "steady"}, {"util_high", 97}}},
                          {"throttle",
                           {{{"start_s", 0},
                             {"end_s", 1000},
                             {"reasons", {"hw_thermal"}},
                             {"sm_clock_mhz", 1100}}}}}}),
               {"--steps", "40", "--data-ms", "1", "--compute-ms", "60"});
  EXPECT_TRUE(Has(r, "gpu_throttled")) << r["verdict"].dump(1);
}

TEST_F(VerdictE2e, HighUtilizationWithLowClockAndPowerIsMisleading) {
  auto r = Run(Scenario({{{"pattern", {{"kind", "steady"}, {"util_high", 98}}},
                          {"power_w_at_full", 200},
                          {"throttle",
                           {{{"start_s", 0},
                             {"end_s", 1000},
                             {"reasons", json::array()},
                             {"sm_clock_mhz", 900}}}}}}),
               {"--steps", "40", "--data-ms", "1", "--compute-ms", "60"});
  EXPECT_TRUE(Has(r, "util_misleading")) << r["verdict"].dump(1);
}

TEST_F(VerdictE2e, ImbalanceAcrossFourGpus) {
  json busy = {{"pattern", {{"kind", "steady"}, {"util_high", 97}}}};
  json idle = {{"pattern", {{"kind", "steady"}, {"util_high", 55}}}, {"memory_used_mib", 20000}};
  auto r = Run(Scenario({busy, idle, idle, idle}),
               {"--steps", "40", "--data-ms", "1", "--compute-ms", "60"});
  EXPECT_TRUE(Has(r, "load_imbalance")) << r["verdict"].dump(1);
}

TEST_F(VerdictE2e, StragglerRank) {
  auto r = Run(Scenario({{{"pattern", {{"kind", "steady"}, {"util_high", 95}}}},
                         {{"pattern", {{"kind", "steady"}, {"util_high", 95}}}}}),
               {"--steps", "30", "--ranks", "2", "--slow-rank", "1", "--slow-factor", "1.6",
                "--data-ms", "1", "--compute-ms", "60"});
  EXPECT_TRUE(Has(r, "straggler")) << r["verdict"].dump(1);
  EXPECT_EQ(r["steps"]["ranks"].size(), 2u);
}

TEST_F(VerdictE2e, MemoryPressure) {
  auto r = Run(Scenario({{{"pattern", {{"kind", "steady"}, {"util_high", 96}}},
                          {"memory_used_mib", 78500}}}),
               {"--steps", "30", "--data-ms", "1", "--compute-ms", "60"});
  EXPECT_TRUE(Has(r, "gpu_memory_pressure")) << r["verdict"].dump(1);
}

TEST_F(VerdictE2e, BusyGpuWithNothingElseIsGpuBound) {
  auto r = Run(Scenario({{{"pattern", {{"kind", "steady"}, {"util_high", 99}}}}}),
               {"--steps", "30", "--data-ms", "1", "--compute-ms", "60"});
  EXPECT_EQ(Principal(r), "gpu_bound") << r["verdict"].dump(1);
}

// Issue 12: a prediction made on a host busy with other work ignored it. Two CPU hogs outside the
// job: the verdict says the host was busy, caps the host-CPU finding and adds "stop the other
// work" to its fixes.
TEST_F(VerdictE2e, BusyHostIsSaidAndDiscounted) {
  std::vector<pid_t> hogs;
  for (int i = 0; i < 2; ++i) {
    hogs.push_back(stallscope::testing::Spawn(
        {"/usr/bin/python3", "-c",
         "import time\nend = time.time() + 120\nwhile time.time() < end: pass"},
        {}, (dir_ / ("hog" + std::to_string(i))).string(), ""));
  }
  auto r = Run(Scenario({{{"pattern", {{"kind", "steady"}, {"util_high", 20}}}}}),
               {"--steps", "20", "--data-ms", "100", "--compute-ms", "20", "--data-busy"});
  for (pid_t hog : hogs) {
    kill(hog, SIGKILL);
    waitpid(hog, nullptr, 0);
  }
  const auto& v = r["verdict"];
  ASSERT_FALSE(v["caveats"].empty()) << v.dump(1);
  EXPECT_EQ(v["caveats"][0].get<std::string>().rfind("busy host: other processes used ", 0), 0u)
      << v.dump(1);
  ASSERT_EQ(Principal(r), "data_bound_cpu") << v.dump(1);
  EXPECT_LE(v["principal"]["confidence"].get<double>(), 0.6);
  EXPECT_NE(
      v["principal"]["recommendations"].dump().find("stop or move the other work on this host"),
      std::string::npos)
      << v.dump(1);
}

// Issue 12 finding 1: `diagnose` aborted (SIGABRT, uncaught nlohmann type_error) on a run.json
// field of the wrong type or null. Now: one line naming the file and the field, exit 1.
TEST(DiagnoseE2e, NullPidInRunJsonIsAOneLineErrorNotAnAbort) {
  const fs::path dir = fs::temp_directory_path() / ("stallscope_diag_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(fs::path(STALLSCOPE_SOURCE_DIR) / "tests/data/runs/data_cpu", dir / "r",
           fs::copy_options::recursive);
  json meta = json::parse(Slurp(dir / "r" / "run.json"));
  meta["pid"] = nullptr;
  std::ofstream(dir / "r" / "run.json") << meta.dump();
  auto o = stallscope::testing::RunProcess({STALLSCOPE_BIN, "diagnose", (dir / "r").string()},
                                           stallscope::testing::EnvironmentWithout({"STALLSCOPE_"}),
                                           dir, 30);
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "stallscope diagnose: " + (dir / "r" / "run.json").string() +
                       ": field \"pid\" is null (expected an integer)\n");
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// Issue 12 finding 6: a phase name from the job's events.names.jsonl, and a run directory name,
// with terminal escapes (OSC window title, SGR colour, carriage return) reached the terminal raw.
// Now `diagnose` shows them escaped: stdout holds no control byte but line ends.
TEST(DiagnoseE2e, ControlCharactersInPhaseNamesAreEscaped) {
  const fs::path dir = fs::temp_directory_path() / ("stallscope_esc_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path run = dir / "r\x1b[31m\r";
  fs::copy(fs::path(STALLSCOPE_SOURCE_DIR) / "tests/data/runs/data_cpu", run,
           fs::copy_options::recursive);
  std::string names = Slurp(run / "events.names.jsonl");
  const std::string phase = "\"forward_pass\"";
  const size_t at = names.find(phase);
  ASSERT_NE(at, std::string::npos);
  names.replace(at, phase.size(), "\"\\u001b]0;pwned\\u0007\\u001b[31mfwd\\r\"");
  std::ofstream(run / "events.names.jsonl") << names;
  auto o = stallscope::testing::RunProcess({STALLSCOPE_BIN, "diagnose", run.string()},
                                           stallscope::testing::EnvironmentWithout({"STALLSCOPE_"}),
                                           dir, 30);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (const std::string* text : {&o.out, &o.err}) {
    for (char c : *text) {
      const auto u = static_cast<unsigned char>(c);
      ASSERT_TRUE((u >= 0x20 && u != 0x7f) || c == '\n') << "raw byte " << int{u} << " in\n"
                                                         << *text;
    }
  }
  EXPECT_NE(o.out.find("  \\x1b]0;pwned\\x07\\x1b[31mfwd\\r "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("r\\x1b[31m\\r"), std::string::npos) << o.out;
  // --json keeps the name itself, escaped by JSON's rules.
  auto j = stallscope::testing::RunProcess({STALLSCOPE_BIN, "diagnose", "--json", run.string()},
                                           stallscope::testing::EnvironmentWithout({"STALLSCOPE_"}),
                                           dir, 30);
  EXPECT_NE(j.out.find("\\u001b]0;pwned\\u0007\\u001b[31mfwd\\u000d"), std::string::npos) << j.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// Issue 12 finding 4: `top --once` aborted with bad_alloc when NVML reported 0xFFFFFFFF devices.
// Now the GPUs are skipped with a one-line note and the host snapshot still prints.
TEST(TopE2e, AbsurdDeviceCountIsAOneLineNoteNotAnAbort) {
  const fs::path dir = fs::temp_directory_path() / ("stallscope_top_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "scenario.json") << R"({"device_count": 4294967295, "gpus": [{}]})";
  auto env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_"});
  env.push_back("STALLSCOPE_FAKE_NVML_SCENARIO=" + (dir / "scenario.json").string());
  auto o = stallscope::testing::RunProcess(
      {STALLSCOPE_BIN, "top", "--once", "--nvml-lib", FAKE_NVML_LIB}, env, dir, 30);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.err,
            "no NVIDIA GPU: nvmlDeviceGetCount reported 4294967295 devices, more than the 256 any "
            "NVIDIA driver supports: a broken libnvidia-ml? — GPU metrics unavailable\n");
  EXPECT_FALSE(o.out.empty());
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace
