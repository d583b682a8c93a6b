// End-to-end: the real `stallscope doctor` against fixture /proc, /sys and cgroup trees
// (tests/data/doctor), the fake libnvidia-ml.so.1 playing tests/data/nvml scenarios, and a fake
// Python (a shell script printing the probe's line).

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "subprocess.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Output = stallscope::testing::ProcessOutput;

const fs::path kSource = STALLSCOPE_SOURCE_DIR;

class DoctorE2e : public ::testing::Test {
 protected:
  /// A Python that answers the probe with `probe` (a JSON object).
  std::string FakePython(const json& probe) {
    const std::string path = dir_.Sub("python3");
    std::ofstream(path) << "#!/bin/sh\necho 'STALLSCOPE_DOCTOR_PROBE " << probe.dump() << "'\n";
    chmod(path.c_str(), 0755);
    return path;
  }

  /// Runs `stallscope doctor` with `args` on the two_socket fixture; `scenario` empty = no NVML
  /// reachable (an explicit library path that does not exist).
  Output Doctor(std::vector<std::string> args, const std::string& scenario,
                const std::vector<std::string>& extra_env = {}) {
    // A clean, known environment: none of the variables doctor judges leaks in from the runner.
    auto env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_", "LD_LIBRARY_PATH=", "CUDA_",
                                                        "NCCL_", "OMP_", "TORCH_", "PYTORCH_",
                                                        "PYTHON", "NVIDIA_"});
    const fs::path root = kSource / "tests/data/doctor/two_socket";
    std::vector<std::string> argv = {STALLSCOPE_BIN,     "doctor",
                                     "--proc-root",      (root / "proc").string(),
                                     "--sys-root",       (root / "sys").string(),
                                     "--cgroup-root",    (root / "cgroup").string(),
                                     "--shm-path",       dir_.path().string(),
                                     "--checkpoint-dir", dir_.path().string()};
    if (scenario.empty()) {
      argv.insert(argv.end(), {"--nvml-lib", dir_.Sub("libnvidia-ml.so.1")});
    } else {
      env.push_back(std::string("STALLSCOPE_NVML_LIB=") + FAKE_NVML_LIB);
      env.push_back("STALLSCOPE_FAKE_NVML_SCENARIO=" +
                    (kSource / "tests/data/nvml" / scenario).string());
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return stallscope::testing::RunProcess(argv, env, out_.path(), 60);
  }

  /// The checks with `id` from doctor's JSON, by GPU (or the one without).
  static std::vector<json> Checks(const json& doc, const std::string& id) {
    std::vector<json> out;
    for (const json& c : doc["checks"]) {
      if (c["id"] == id) out.push_back(c);
    }
    return out;
  }

  stallscope::testing::TempDir dir_{"stallscope_doctor_e2e"};
  stallscope::testing::TempDir out_{"stallscope_doctor_out"};
};

const json kTorchProbe = {{"python", "3.11.9"},
                          {"implementation", "CPython"},
                          {"executable", "/venv/bin/python3"},
                          {"venv", true},
                          {"torch", "2.3.1+cu121"},
                          {"torch_cuda", "12.1"},
                          {"torch_hip", nullptr},
                          {"torch_threads", 8},
                          {"cuda_available", true},
                          {"device_count", 5},
                          {"cudnn", 8902},
                          {"warnings", json::array()}};

TEST_F(DoctorE2e, HelpAndUsageErrors) {
  Output help = Doctor({"--help"}, "");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag :
       {"Usage", "--workers", "--data", "--checkpoint-dir", "--python", "--json", "Exit status"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag << "\n" << help.out;
  }
  EXPECT_EQ(help.out.find("--sys-root"), std::string::npos) << "test-only flags stay hidden";
  EXPECT_EQ(Doctor({"--workers", "-1"}, "").exit_code, 2);
  EXPECT_EQ(Doctor({"--no-such-flag"}, "").exit_code, 2);
  Output bad_time = Doctor({"--data-time", "soon"}, "");
  EXPECT_EQ(bad_time.exit_code, 2);
  EXPECT_NE(bad_time.err.find("--data-time"), std::string::npos) << bad_time.err;
}

TEST_F(DoctorE2e, UnhealthyMachineJson) {
  fs::create_directories(dir_.path() / "data");
  for (int i = 0; i < 8; ++i) {
    std::ofstream(dir_.path() / "data" / ("s" + std::to_string(i))) << std::string(20000, 'x');
  }
  Output o = Doctor({"--json", "--workers", "6", "--python", FakePython(kTorchProbe), "--data",
                     (dir_.path() / "data").string(), "--data-time", "500ms"},
                    "unhealthy.json", {"CUDA_LAUNCH_BLOCKING=1", "SECRET_TOKEN=hunter2"});
  ASSERT_EQ(o.exit_code, 1) << o.err << o.out;  // FAILs: ECC, throttling, CUDA_LAUNCH_BLOCKING
  EXPECT_EQ(o.err, "");
  const json doc = json::parse(o.out);
  EXPECT_EQ(doc["schema_version"], 1);
  EXPECT_EQ(doc["summary"]["exit_code"], 1);
  EXPECT_EQ(doc["facts"]["driver"]["state"], "ok");
  EXPECT_EQ(doc["facts"]["driver"]["version"], "535.161.08");
  EXPECT_EQ(doc["facts"]["driver"]["cuda_version"], "12.2");
  EXPECT_EQ(doc["facts"]["driver"]["kernel_module"], "535.161.08");
  ASSERT_EQ(doc["facts"]["gpus"].size(), 5U);
  EXPECT_EQ(doc["facts"]["gpus"][0]["pcie"]["width"], 8);
  EXPECT_EQ(doc["facts"]["gpus"][3]["numa_node"], 1);
  EXPECT_EQ(doc["facts"]["host"]["online_cpus"], 32);
  EXPECT_EQ(doc["facts"]["host"]["usable_cpus"], 4);
  EXPECT_EQ(doc["facts"]["python"]["version"], "3.11.9");
  EXPECT_EQ(doc["facts"]["data"]["files"], 8);
  EXPECT_EQ(doc["facts"]["env"]["CUDA_LAUNCH_BLOCKING"], "1");
  EXPECT_FALSE(doc["facts"]["env"].contains("SECRET_TOKEN"));
  EXPECT_EQ(o.out.find("hunter2"), std::string::npos);

  auto status_of = [&](const std::string& id, int gpu) {
    for (const json& c : Checks(doc, id)) {
      if (c["gpu"] == gpu) return c["status"].get<std::string>();
    }
    return std::string("missing");
  };
  EXPECT_EQ(status_of("gpu.pcie_link", 0), "warn");
  EXPECT_EQ(status_of("gpu.power_limit", 0), "warn");
  EXPECT_EQ(status_of("gpu.ecc", 1), "fail");
  EXPECT_EQ(status_of("gpu.persistence", 2), "warn");
  EXPECT_EQ(status_of("gpu.mig", 2), "warn");
  EXPECT_EQ(status_of("gpu.throttle", 3), "fail");
  EXPECT_EQ(status_of("gpu.in_use", 3), "warn");
  EXPECT_EQ(status_of("gpu.ecc", 4), "fail");
  EXPECT_EQ(status_of("gpu.numa", 4), "warn");
  EXPECT_EQ(Checks(doc, "host.cpus")[0]["status"], "warn");  // quota 4 of 8 allowed CPUs
  EXPECT_EQ(Checks(doc, "env.cuda_launch_blocking")[0]["status"], "fail");
  EXPECT_EQ(Checks(doc, "python.cuda")[0]["status"], "ok");  // CUDA 12.1 on a 12.2 driver
  EXPECT_EQ(Checks(doc, "storage.data")[0]["status"], "ok");
  for (const json& c : doc["checks"]) {
    if (c["status"] == "warn" || c["status"] == "fail") {
      EXPECT_TRUE(c["fix"].is_string()) << c;
    }
  }
}

TEST_F(DoctorE2e, HealthyIdleGpusTextExitsZero) {
  json probe = kTorchProbe;
  probe["device_count"] = 2;
  Output o = Doctor({"--workers", "3", "--python", FakePython(probe)}, "healthy_idle.json",
                    {"OMP_NUM_THREADS=1"});
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.out.rfind("stallscope doctor  ", 0), 0U) << o.out;
  EXPECT_NE(o.out.find("\nVERDICT  ready"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("GPU 0, 1: on\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("GPU 0: gen1 x16"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\nNext: "), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("FAIL "), std::string::npos) << o.out;
}

TEST_F(DoctorE2e, DriverLoadedButNoLibraryFails) {
  // The fixture's /proc has the NVIDIA kernel module; the named library does not exist.
  Output o = Doctor({"--json", "--no-python"}, "");
  ASSERT_EQ(o.exit_code, 1) << o.out << o.err;
  const json doc = json::parse(o.out);
  EXPECT_EQ(doc["facts"]["driver"]["state"], "library_missing");
  const json driver = Checks(doc, "gpu.driver")[0];
  EXPECT_EQ(driver["status"], "fail");
  EXPECT_NE(driver["fix"].get<std::string>().find("--gpus all"), std::string::npos);
  EXPECT_EQ(Checks(doc, "python.interpreter")[0]["status"], "skip");
  EXPECT_TRUE(Checks(doc, "gpu.pcie_link").empty());
}

TEST_F(DoctorE2e, VersionMismatchFails) {
  const std::string scenario = dir_.Sub("mismatch.json");
  std::ofstream(scenario) << R"({"init_error": "lib_rm_version_mismatch"})";
  Output o = Doctor({"--no-python"}, scenario);  // an absolute path: used as given
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_NE(o.out.find("FAIL    NVIDIA driver"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("Driver/library version mismatch (18)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("fix: the NVIDIA kernel module and its libraries are different versions"),
            std::string::npos)
      << o.out;
}

TEST_F(DoctorE2e, NoGpuMachineStillChecksTheRest) {
  // This machine's own /proc: without an NVIDIA driver, the GPU checks are skipped, exit 0.
  auto env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_", "LD_LIBRARY_PATH=", "CUDA_"});
  Output o = stallscope::testing::RunProcess(
      {STALLSCOPE_BIN, "doctor", "--no-python", "--checkpoint-dir", dir_.path().string()}, env,
      out_.path(), 60);
  if (o.out.find("SKIP    NVIDIA driver") == std::string::npos) {
    GTEST_SKIP() << "this machine has an NVIDIA driver";
  }
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("no NVIDIA GPU"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("libnvidia-ml.so.1 not found"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("/dev/shm"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("checkpoint space"), std::string::npos) << o.out;
}

}  // namespace
