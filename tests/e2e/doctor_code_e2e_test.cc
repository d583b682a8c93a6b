// End-to-end: the real `stallscope doctor --code` on the fixture scripts of tests/data/code (one
// per pattern, a clean training script, a SyntaxError, a null byte, skipped venvs), with
// Debian's python3 and every local CPython >= 3.8 (pyenv's, found at run time).

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Output = stallscope::testing::ProcessOutput;

const fs::path kSource = STALLSCOPE_SOURCE_DIR;
const fs::path kData = kSource / "tests/data/code";
constexpr const char* kSystemPython = "/usr/bin/python3";

bool Runs(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

/// Debian's python3, then every pyenv CPython >= 3.8 ($PYENV_ROOT, else ~/.pyenv).
std::vector<std::string> LocalPythons() {
  std::vector<std::string> found;
  if (fs::exists(kSystemPython)) found.push_back(kSystemPython);
  const char* root = std::getenv("PYENV_ROOT");
  const char* home = std::getenv("HOME");
  const fs::path versions = root != nullptr
                                ? fs::path(root) / "versions"
                                : fs::path(home != nullptr ? home : "/root") / ".pyenv/versions";
  std::error_code ec;
  std::vector<std::string> pyenv;
  for (const auto& entry : fs::directory_iterator(versions, ec)) {
    const fs::path python = entry.path() / "bin" / "python3";
    if (fs::exists(python, ec)) pyenv.push_back(python.string());
  }
  std::sort(pyenv.begin(), pyenv.end());
  for (const auto& p : pyenv) {
    if (Runs(p + " -c 'import sys; sys.exit(sys.version_info < (3, 8))'")) found.push_back(p);
  }
  return found;
}

class DoctorCodeE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kSystemPython)) GTEST_SKIP() << kSystemPython << " is not installed";
    dir_ = stallscope::testing::FreshTestDir("stallscope_doctor_code_e2e");
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  Output Code(const std::vector<std::string>& args, const std::string& python = kSystemPython) {
    std::vector<std::string> argv = {STALLSCOPE_BIN, "doctor", "--python", python, "--code"};
    argv.insert(argv.end(), args.begin(), args.end());
    return stallscope::testing::RunProcess(
        argv, stallscope::testing::EnvironmentWithout({"PYTHON"}), dir_, 120);
  }

  /// The finding ids (with their lines) of `--json` on one fixture file.
  std::vector<std::string> FindingIds(const std::string& fixture,
                                      const std::string& python = kSystemPython) {
    const Output o = Code({(kData / fixture).string(), "--json"}, python);
    const json j = json::parse(o.out, nullptr, false);
    std::vector<std::string> ids;
    if (!j.is_object()) return {"not JSON: " + o.out + o.err};
    for (const json& f : j["findings"]) {
      ids.push_back(f["id"].get<std::string>() + ":" + std::to_string(f["line"].get<int>()));
    }
    return ids;
  }

  fs::path dir_;
};

using IdList = std::vector<std::string>;

TEST_F(DoctorCodeE2e, EachFixtureGivesItsPattern) {
  const std::map<std::string, IdList> want = {
      {"clean_train.py", {}},
      {"dataloader_no_workers.py", {"dataloader-num-workers:4", "dataloader-num-workers:5"}},
      {"dataloader_no_pin_memory.py", {"dataloader-pin-memory:5"}},
      {"dataloader_persistent_workers.py", {"dataloader-persistent-workers:3"}},
      {"loop_item.py", {"loop-item:6"}},
      {"loop_cpu_numpy.py", {"loop-cpu:9", "loop-numpy:10", "loop-tolist:11", "loop-cpu:12"}},
      {"loop_print.py", {"loop-print-tensor:8", "loop-print-tensor:9", "loop-item:11"}},
      {"loop_sync_empty_cache.py",
       {"empty-cache:3", "loop-cuda-synchronize:9", "loop-empty-cache:10"}},
      {"loop_save.py", {"loop-save-every-step:7"}},
      {"zero_grad.py", {"zero-grad-set-to-none:2"}},
      {"to_device_blocking.py", {"to-device-blocking:8", "to-device-blocking:9"}},
      {"cudnn_benchmark.py", {"cudnn-benchmark:4"}},
      {"tf_numpy_function.py", {"tf-py-function:9", "tf-py-function:10"}},
  };
  for (const auto& [fixture, ids] : want) EXPECT_EQ(FindingIds(fixture), ids) << fixture;
}

TEST_F(DoctorCodeE2e, CleanScriptExitsZeroWithNoFindings) {
  const Output o = Code({(kData / "clean_train.py").string()});
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.out.rfind("OK: 0 GPU-stalling patterns, 0 notes in 1 file (", 0), 0u) << o.out;
}

TEST_F(DoctorCodeE2e, DirectoryTextSkipsVenvsAndWarnsOnBrokenFiles) {
  const Output o = Code({kData.string()});
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_EQ(o.out.rfind("WARN: 16 GPU-stalling patterns, 6 notes in 13 files (", 0), 0u) << o.out;
  EXPECT_NE(o.out.find("WARN  " + (kData / "loop_item.py").string() + ":6"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("      why: .item() in the training loop"), std::string::npos);
  EXPECT_NE(o.out.find("warning: " + (kData / "syntax_error.py").string() + ":3: SyntaxError"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("null_byte.py"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("venv"), std::string::npos) << o.out;  // venv/ and .venv/ not read
  EXPECT_NE(o.out.find("Next: "), std::string::npos);
}

TEST_F(DoctorCodeE2e, JsonOnlyInfoExitsZero) {
  const Output o = Code({(kData / "zero_grad.py").string(), "--json"});
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  const json j = json::parse(o.out);
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["ran"], true);
  EXPECT_EQ(j["files_checked"], 1);
  EXPECT_EQ(j["summary"]["warn"], 0);
  EXPECT_EQ(j["summary"]["info"], 1);
  EXPECT_EQ(j["findings"][0]["severity"], "info");
  EXPECT_NE(j["findings"][0]["why"].get<std::string>().find("torch < 2.0"), std::string::npos);
}

TEST_F(DoctorCodeE2e, MissingPathIsAOneLineUsageError) {
  const Output o = Code({(kData / "no_such_dir").string()});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "stallscope doctor: --code " + (kData / "no_such_dir").string() +
                       ": no such file or directory\n");
}

TEST_F(DoctorCodeE2e, MissingPythonExitsTwo) {
  const Output o = Code({(kData / "loop_item.py").string()}, "/nonexistent/python3");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "stallscope doctor --code: could not check " +
                       (kData / "loop_item.py").string() + ": /nonexistent/python3 not found\n");
}

TEST_F(DoctorCodeE2e, EveryLocalPythonFromThreeEightAgrees) {
  const IdList want = FindingIds("loop_cpu_numpy.py");
  for (const std::string& python : LocalPythons()) {
    EXPECT_EQ(FindingIds("loop_cpu_numpy.py", python), want) << python;
    EXPECT_EQ(FindingIds("clean_train.py", python), IdList{}) << python;
    const Output o = Code({kData.string(), "--json"}, python);
    const json j = json::parse(o.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << python << ": " << o.out << o.err;
    EXPECT_EQ(j["files_checked"], 13) << python;
    EXPECT_EQ(j["warnings"].size(), 2u) << python;  // syntax_error.py, null_byte.py
  }
}

}  // namespace
