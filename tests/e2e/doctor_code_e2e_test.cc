// End-to-end: the real `stallscope doctor --code` on the fixture scripts of tests/data/code (one
// per pattern, a clean training script, a SyntaxError, a null byte, skipped venvs), with
// Debian's python3 and every local CPython >= 3.8 (pyenv's, found at run time).

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
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
  // Two fixtures cannot be parsed: the check is incomplete (exit 3, issue 27 B12), and the
  // findings of the files that were read still show.
  EXPECT_EQ(o.exit_code, 3) << o.out << o.err;
  EXPECT_EQ(o.out.rfind("INCOMPLETE: 2 files could not be checked; 16 GPU-stalling patterns, 6 "
                        "notes in 13 files (",
                        0),
            0u)
      << o.out;
  EXPECT_NE(o.out.find("WARN  " + (kData / "loop_item.py").string() + ":6"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("      why: .item() in the training loop"), std::string::npos);
  EXPECT_NE(o.out.find("not checked: " + (kData / "syntax_error.py").string() + ":3: SyntaxError"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("null_byte.py"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("venv"), std::string::npos) << o.out;  // venv/ and .venv/ not read
  EXPECT_NE(o.out.find("Next: "), std::string::npos);
}

// Issue 27 B12: a file that could not be checked is never passed: not "OK", not exit 0.
TEST_F(DoctorCodeE2e, AFileThatDoesNotParseFailsTheCheck) {
  const Output o = Code({(kData / "syntax_error.py").string()});
  EXPECT_EQ(o.exit_code, 3) << o.out << o.err;
  EXPECT_EQ(o.out.rfind("INCOMPLETE: 1 file could not be checked; 0 GPU-stalling patterns", 0), 0u)
      << o.out;
  EXPECT_EQ(o.out.find("OK"), std::string::npos) << o.out;
  const Output j = Code({(kData / "syntax_error.py").string(), "--json"});
  EXPECT_EQ(j.exit_code, 3);
  const json r = json::parse(j.out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << j.out;
  EXPECT_EQ(r["files_checked"], 0);
  EXPECT_EQ(r["files_not_checked"], 1);
  EXPECT_EQ(r["summary"]["exit_code"], 3);
}

// Issue 27 B03: a .py that leads to a device or a FIFO is named and skipped, never read (a link
// to /dev/zero once grew the analyzer to 19 GB; one to a FIFO blocked it for good); the regular
// files beside it are checked.
TEST_F(DoctorCodeE2e, NodesThatAreNotRegularFilesAreSkippedNotRead) {
  const fs::path code = dir_ / "code";
  fs::create_directories(code);
  fs::create_symlink("/dev/zero", code / "zero.py");
  ASSERT_EQ(mkfifo((code / "pipe").c_str(), 0600), 0);
  fs::create_symlink("pipe", code / "pipe.py");
  std::ofstream(code / "train.py") << "x = 1\n";
  const Output o = Code({code.string(), "--json"});
  EXPECT_EQ(o.exit_code, 3) << o.out << o.err;
  const json r = json::parse(o.out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << o.out << o.err;
  EXPECT_EQ(r["files_checked"], 1);
  EXPECT_EQ(r["files_not_checked"], 2);
  std::map<std::string, std::string> why;
  for (const json& w : r["warnings"]) why[w["file"]] = w["message"];
  EXPECT_EQ(why[(code / "zero.py").string()], "a character device, not a regular file") << o.out;
  EXPECT_EQ(why[(code / "pipe.py").string()], "a FIFO, not a regular file") << o.out;
  // Given directly, such a node is a usage error before any interpreter starts.
  const Output direct = Code({"/dev/zero"});
  EXPECT_EQ(direct.exit_code, 2);
  EXPECT_EQ(direct.err,
            "stallscope doctor: --code /dev/zero: a character device, not a regular file or "
            "directory\n");
}

// Issue 27 B04: doctor's Python helper never outlives doctor. Here the "interpreter" blocks (as
// the analyzer once did on a FIFO); `timeout` sends doctor SIGTERM; the helper dies with it.
TEST_F(DoctorCodeE2e, TheHelperDiesWithDoctor) {
  const fs::path pid_file = dir_ / "helper.pid", python = dir_ / "python3";
  std::ofstream(python) << "#!/bin/sh\necho $$ > " << pid_file.string() << "\nexec sleep 600\n";
  fs::permissions(python, fs::perms::owner_all);
  const fs::path out = dir_ / "o", err = dir_ / "e";
  const pid_t doctor = stallscope::testing::Spawn(
      {STALLSCOPE_BIN, "doctor", "--python", python.string(), "--code",
       (kData / "clean_train.py").string()},
      stallscope::testing::EnvironmentWithout({"PYTHON"}), out.string(), err.string());
  ASSERT_GT(doctor, 0);
  std::string helper;
  for (int i = 0; i < 3000 && helper.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    helper = stallscope::testing::Slurp(pid_file);
  }
  ASSERT_FALSE(helper.empty()) << stallscope::testing::Slurp(err);
  const pid_t helper_pid = std::stoi(helper);
  kill(doctor, SIGTERM);
  EXPECT_EQ(stallscope::testing::WaitExit(doctor, 60), 128 + SIGTERM);
  // Gone, or a zombie waiting for init to reap it: either way no longer running.
  auto running = [&] {
    const std::string stat = stallscope::testing::Slurp("/proc/" + helper + "/stat");
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
  };
  for (int i = 0; i < 1500 && running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (running()) {
    kill(helper_pid, SIGKILL);
    ADD_FAILURE() << "the helper " << helper_pid << " outlived doctor";
  }
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
