#include "doctor/python_probe.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/units.h"
#include "temp_dir.h"

namespace stallscope::doctor {
namespace {

constexpr int64_t kSecond = kNsPerSec;

/// An executable shell script standing in for a Python interpreter.
std::string FakePython(const stallscope::testing::TempDir& dir, const std::string& body) {
  const std::string path = dir.Sub("python");
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
  return path;
}

TEST(ParsePythonProbe, Table) {
  const PythonFacts ok = ParsePythonProbe(
      "hello from sitecustomize\n"
      "STALLSCOPE_DOCTOR_PROBE {\"python\": \"3.11.2\", \"implementation\": \"CPython\", "
      "\"executable\": \"/usr/bin/python3\", \"venv\": false, \"torch\": \"2.3.1+cu121\", "
      "\"torch_cuda\": \"12.1\", \"torch_hip\": null, \"torch_threads\": 16, "
      "\"cuda_available\": true, \"device_count\": 8, \"cudnn\": 8902, \"warnings\": [\"w1\", "
      "3]}\n");
  ASSERT_TRUE(ok.ran) << ok.error;
  EXPECT_EQ(ok.version, "3.11.2");
  EXPECT_EQ(ok.executable, "/usr/bin/python3");
  EXPECT_EQ(ok.torch_version, "2.3.1+cu121");
  EXPECT_EQ(ok.torch_cuda, "12.1");
  EXPECT_FALSE(ok.torch_hip);
  EXPECT_EQ(ok.cuda_available, true);
  EXPECT_EQ(ok.device_count, 8);
  EXPECT_EQ(ok.cudnn_version, 8902);
  EXPECT_EQ(ok.torch_threads, 16);
  EXPECT_EQ(ok.warnings, std::vector<std::string>{"w1"});

  const PythonFacts no_torch = ParsePythonProbe(
      "STALLSCOPE_DOCTOR_PROBE {\"python\": \"3.8.18\", \"torch_error\": \"ModuleNotFoundError: "
      "No module named 'torch'\"}");
  ASSERT_TRUE(no_torch.ran);
  EXPECT_FALSE(no_torch.torch_version);
  EXPECT_EQ(no_torch.torch_error, "ModuleNotFoundError: No module named 'torch'");

  struct Bad {
    const char* text;
    const char* error;
  };
  const Bad bad[] = {
      {"", "it printed no probe line"},
      {"nothing useful\n", "it printed no probe line"},
      {"x STALLSCOPE_DOCTOR_PROBE {}\n", "it printed no probe line"},  // not at a line start
      {"STALLSCOPE_DOCTOR_PROBE {\"python\": \n", "its probe line is not a JSON object"},
      {"STALLSCOPE_DOCTOR_PROBE [1, 2]\n", "its probe line is not a JSON object"},
  };
  for (const Bad& b : bad) {
    const PythonFacts p = ParsePythonProbe(b.text);
    EXPECT_FALSE(p.ran) << b.text;
    EXPECT_EQ(p.error, b.error) << b.text;
  }
  // Wrong types read as empty, never throw.
  const PythonFacts odd = ParsePythonProbe(
      "STALLSCOPE_DOCTOR_PROBE {\"python\": 3, \"torch\": [], \"device_count\": \"8\", "
      "\"warnings\": \"x\"}");
  EXPECT_TRUE(odd.ran);
  EXPECT_EQ(odd.version, "");
  EXPECT_FALSE(odd.torch_version);
  EXPECT_FALSE(odd.device_count);
}

TEST(RunCommand, CapturesBothStreamsAndTheExitCode) {
  Result<CommandOutput> r =
      RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, kSecond * 10);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
}

TEST(RunCommand, KillsTheGroupAtTheDeadline) {
  const auto start = std::chrono::steady_clock::now();
  // The child's own child keeps the pipe open: the group kill must reach it too.
  Result<CommandOutput> r = RunCommand({"/bin/sh", "-c", "sleep 30 & sleep 30"}, kSecond / 5);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->exit_code, 128 + 9);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(RunCommand, MissingCommand) {
  Result<CommandOutput> r = RunCommand({"stallscope-no-such-python"}, kSecond);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(r.error().message, "cannot run 'stallscope-no-such-python': No such file or directory");
}

TEST(ProbePython, FakeInterpreters) {
  stallscope::testing::TempDir dir;
  PythonFacts p = ProbePython(
      FakePython(dir,
                 "echo 'STALLSCOPE_DOCTOR_PROBE {\"python\": \"3.12.1\", \"torch_error\": "
                 "\"ImportError: libcudart.so.12\"}'"),
      10 * kSecond);
  EXPECT_TRUE(p.ran) << p.error;
  EXPECT_EQ(p.version, "3.12.1");
  EXPECT_EQ(p.interpreter, dir.Sub("python"));

  p = ProbePython(FakePython(dir,
                             "echo '  File \"<string>\", line 2' >&2\n"
                             "echo 'SyntaxError: invalid syntax' >&2; exit 1"),
                  10 * kSecond);
  EXPECT_FALSE(p.ran);
  EXPECT_EQ(p.error, "exit 1: SyntaxError: invalid syntax");

  p = ProbePython(FakePython(dir, "sleep 30"), kSecond / 5);
  EXPECT_FALSE(p.ran);
  EXPECT_EQ(p.error, "no answer within 0.2 s (importing torch hung?)");

  p = ProbePython("stallscope-no-such-python", kSecond);
  EXPECT_EQ(p.error, "not found on PATH");
  p = ProbePython(dir.Sub("nope/python3"), kSecond);
  EXPECT_EQ(p.error, "not found");
}

/// The real script under every local CPython it must support (Debian's, pyenv's 3.8+).
TEST(ProbePython, RealInterpreters) {
  std::vector<std::string> pythons;
  if (std::filesystem::exists("/usr/bin/python3")) pythons.push_back("/usr/bin/python3");
  const char* home = std::getenv("HOME");
  std::error_code ec;
  const std::filesystem::path versions =
      std::filesystem::path(home != nullptr ? home : "/root") / ".pyenv/versions";
  for (const auto& entry : std::filesystem::directory_iterator(versions, ec)) {
    const auto python = entry.path() / "bin/python3";
    if (std::filesystem::exists(python, ec)) pythons.push_back(python.string());
  }
  if (pythons.empty()) GTEST_SKIP() << "no local Python";
  for (const std::string& python : pythons) {
    SCOPED_TRACE(python);
    const PythonFacts p = ProbePython(python, 60 * kSecond);
    ASSERT_TRUE(p.ran) << p.error;
    EXPECT_FALSE(p.version.empty());
    EXPECT_EQ(p.implementation, "CPython");
    EXPECT_TRUE(p.torch_version || !p.torch_error.empty());
    if (p.torch_version) {
      EXPECT_TRUE(p.cuda_available.has_value());
      EXPECT_TRUE(p.torch_threads.has_value());
    }
  }
}

}  // namespace
}  // namespace stallscope::doctor
