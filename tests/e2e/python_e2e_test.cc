// End-to-end tests of `stallscope run` where users really train (issue 9): phases recorded from
// every local CPython >= 3.8 (Debian's and pyenv's, found at run time), runs without phases
// explained, jobs started through a shell script or `python -m`, and a real 2-rank
// torch.distributed (gloo) job through examples/launch.py: the straggler named (a balanced job
// not: recorded_run_test.cc). Tests that need torch use Debian's /usr/bin/python3 and skip where
// it has none; they are the *Job suites (label `job`, serial), the rest label `e2e`.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
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

constexpr const char* kSystemPython = "/usr/bin/python3";

std::string Source(const std::string& rel) {
  return std::string(STALLSCOPE_SOURCE_DIR) + "/" + rel;
}

bool Runs(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

bool SystemTorch() {
  static const bool have = Runs(std::string(kSystemPython) + " -c 'import torch'");
  return have;
}

/// Every local CPython >= 3.8: Debian's, then pyenv's ($PYENV_ROOT, else ~/.pyenv).
std::vector<std::string> LocalPythons() {
  std::vector<std::string> found;
  if (fs::exists(kSystemPython)) found.push_back(kSystemPython);
  const char* root = std::getenv("PYENV_ROOT");
  const char* home = std::getenv("HOME");
  fs::path versions = root != nullptr
                          ? fs::path(root) / "versions"
                          : fs::path(home != nullptr ? home : "/root") / ".pyenv" / "versions";
  std::error_code ec;
  std::vector<std::string> pyenv;
  for (const auto& entry : fs::directory_iterator(versions, ec)) {
    fs::path python = entry.path() / "bin" / "python3";
    if (fs::exists(python, ec)) pyenv.push_back(python.string());
  }
  std::sort(pyenv.begin(), pyenv.end());
  for (const auto& p : pyenv) {
    if (Runs(p + " -c 'import sys; sys.exit(sys.version_info < (3, 8))'")) found.push_back(p);
  }
  return found;
}

using Result = stallscope::testing::ProcessOutput;

class PythonE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!STALLSCOPE_E2E_HOOKS) GTEST_SKIP() << "this build has no Python package";
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() /
           ("stallscope_python_e2e_" + std::to_string(getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) fs::remove_all(dir_);
  }

  /// Runs argv (argv[0] a path) with this environment minus STALLSCOPE_*, plus `extra_env`.
  Result Exec(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {},
              double timeout_s = 240) {
    auto env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_", "PYTHONPATH="});
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return stallscope::testing::RunProcess(argv, env, dir_, timeout_s);
  }

  /// `stallscope run --quiet --out DIR -i 100ms -- CMD...`.
  Result RunUnder(const std::vector<std::string>& command,
                  const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = {STALLSCOPE_BIN, "run", "--quiet", "--out",
                                     RunDir(),       "-i",  "100ms",   "--"};
    argv.insert(argv.end(), command.begin(), command.end());
    return Exec(argv, extra_env);
  }

  std::string RunDir() const { return (dir_ / "run").string(); }

  json Report() {
    std::string text = Slurp(fs::path(RunDir()) / "report.json");
    json j = json::parse(text, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "report.json:\n" << text;
    return j;
  }

  static std::string NoPhases(const json& report) {
    const auto& lines = report["job"]["no_phases"];
    return lines.empty() ? std::string() : lines[0].get<std::string>();
  }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// Every local interpreter records explicit markers
// ---------------------------------------------------------------------------------------------

class AnyPython : public PythonE2e, public ::testing::WithParamInterface<std::string> {};

TEST_P(AnyPython, RecordsExplicitMarkersAndLeavesTheOutputAlone) {
  const std::string python = GetParam();
  const std::vector<std::string> job = {
      python, Source("tests/e2e/fake_job.py"), "--steps", "20", "--data-ms", "6", "--compute-ms",
      "12"};
  // The job alone, with the package importable, as a user who installed it would run it.
  Result bare = Exec(job, {"PYTHONPATH=" + std::string(STALLSCOPE_BINARY_DIR) + "/python"});
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  Result run = RunUnder(job);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, bare.out) << "the job's stdout passes through unchanged";
  EXPECT_EQ(run.out, "fake_job done steps=20 rank=0\n");

  json r = Report();
  // Every step recorded: the steady ones (each with its phases) and the warm-up before them.
  const int steady = r["steps"]["count"];
  EXPECT_EQ(steady + r["life"]["warmup_steps"].get<int>(), 20) << r["life"].dump(1);
  EXPECT_GE(steady, 10) << "warm-up is at most half the steps: " << r["life"].dump(1);
  for (const char* name : {"data_loading", "forward_pass", "backward_pass"}) {
    const json* p = Phase(r, name);
    ASSERT_NE(p, nullptr) << name << " missing:\n" << r["phases"].dump();
    EXPECT_EQ((*p)["count"], steady) << name;
  }
  // 6 ms of 18 ms: a third of each step (sleeps overshoot a little on a busy machine).
  EXPECT_NEAR((*Phase(r, "data_loading"))["share"].get<double>(), 1.0 / 3, 0.12);
  ASSERT_EQ(r["python"].size(), 1u) << r["python"].dump();
  const json& py = r["python"][0];
  EXPECT_EQ(py["executable"], python);
  EXPECT_TRUE(py["recording"].get<bool>());
  EXPECT_TRUE(py["shim"].get<bool>());
  EXPECT_TRUE(py["backend"] == "native" || py["backend"] == "core") << py.dump();
  EXPECT_TRUE(r["job"]["no_phases"].empty());
  // This interpreter's Python stacks, read from outside (src/pystack, issue 31): the phase with
  // the most samples was spent in fake_job.py's loop().
  const json& stacks = r["stacks"];
  ASSERT_TRUE(stacks.is_object()) << "no stacks.jsonl";
  EXPECT_EQ(stacks["unreadable"].size(), 0u) << stacks.dump(1);
  ASSERT_FALSE(stacks["phases"].empty()) << stacks.dump(1);
  const json& top = stacks["phases"][0]["lines"][0];
  EXPECT_EQ(top["function"], "loop") << stacks.dump(1);
  EXPECT_TRUE(top["where"].get<std::string>().starts_with("fake_job.py:")) << top.dump();
}

/// "$PYENV_ROOT/versions/3.12.1/bin/python3" → "pyenv_3_12_1"; Debian's → "system".
std::string InterpreterName(const ::testing::TestParamInfo<std::string>& param) {
  if (param.param == kSystemPython) return "system";
  std::string v = fs::path(param.param).parent_path().parent_path().filename();
  std::replace(v.begin(), v.end(), '.', '_');
  std::replace(v.begin(), v.end(), '-', '_');
  return "pyenv_" + v;
}

INSTANTIATE_TEST_SUITE_P(LocalInterpreters, AnyPython, ::testing::ValuesIn(LocalPythons()),
                         InterpreterName);

// ---------------------------------------------------------------------------------------------
// A run without phases says why
// ---------------------------------------------------------------------------------------------

TEST_F(PythonE2e, IsolatedPythonIsNamedAsIgnoringThePath) {
  Result run = RunUnder({kSystemPython, "-I", "-c", "import time; time.sleep(1.0)"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json r = Report();
  EXPECT_NE(NoPhases(r).find("ran with -I (PYTHONPATH ignored)"), std::string::npos)
      << r["job"].dump();
  EXPECT_NE(
      Slurp(fs::path(RunDir()) / "report.txt").find("Steps   none: the job's Python ran with -I"),
      std::string::npos);
}

TEST_F(PythonE2e, PythonWithoutTorchOrMarkersIsNamed) {
  Result run = RunUnder({kSystemPython, "-c", "import time; time.sleep(0.3)"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json r = Report();
  EXPECT_NE(NoPhases(r).find("no process imported torch, and none called stallscope.phase()"),
            std::string::npos)
      << r["job"].dump();
}

TEST_F(PythonE2e, NoPythonAtAllIsNamed) {
  Result run = RunUnder({"/bin/sleep", "0.5"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json r = Report();
  EXPECT_NE(NoPhases(r).find("no Python process was seen in the job"), std::string::npos)
      << r["job"].dump();
  EXPECT_TRUE(r["python"].empty());
}

TEST_F(PythonE2e, BrokenRecorderIsNamedWithItsReason) {
  Result run = RunUnder({kSystemPython, "-c", "import time; time.sleep(0.3)"},
                        {"STALLSCOPE_BACKEND=native", "STALLSCOPE_REC_LIB=/nonexistent/librec.so"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json r = Report();
  EXPECT_NE(NoPhases(r).find("recorder could not load"), std::string::npos) << r["job"].dump();
  EXPECT_NE(NoPhases(r).find("/nonexistent/librec.so"), std::string::npos) << r["job"].dump();
}

// ---------------------------------------------------------------------------------------------
// Launched through a shell script and with python -m (zero-code hooks, real torch)
// ---------------------------------------------------------------------------------------------

/// Real PyTorch jobs: label `job`, RUN_SERIAL (CMakeLists.txt stallscope_test JOBS).
class PythonSharedJob : public PythonE2e {};

TEST_F(PythonSharedJob, ShellScriptJobIsHookedAndTheShellIsTheLauncher) {
  if (!SystemTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  const fs::path script = dir_ / "train.sh";
  std::ofstream(script) << "#!/bin/bash\nset -e\necho starting\n"
                        << kSystemPython << " " << Source("examples/train.py")
                        << " --situation compute --steps 12 --print-every 0 --data-dir "
                        << (dir_ / "data").string() << " --out-dir " << (dir_ / "out").string()
                        << "\necho finished\n";
  Result run = RunUnder({"/bin/bash", script.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.rfind("starting\n", 0), 0u) << run.out;
  json r = Report();
  const int steady = r["steps"]["count"];
  EXPECT_EQ(steady + r["life"]["warmup_steps"].get<int>(), 12) << r["life"].dump(1);
  ASSERT_NE(Phase(r, "forward_pass"), nullptr) << r["phases"].dump();
  EXPECT_EQ((*Phase(r, "forward_pass"))["count"], steady);
  EXPECT_EQ(Role(r, "train.sh"), "launcher");
  EXPECT_EQ(Role(r, "examples/train.py"), "main");
}

TEST_F(PythonSharedJob, PythonDashMJobIsHooked) {
  if (!SystemTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  // `python -m train` with examples/ on the job's own PYTHONPATH: stallscope adds its package in
  // front and keeps the job's entries.
  Result run = RunUnder(
      {kSystemPython, "-m", "train", "--situation", "compute", "--steps", "12", "--print-every",
       "0", "--data-dir", (dir_ / "data").string(), "--out-dir", (dir_ / "out").string()},
      {"PYTHONPATH=" + Source("examples")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json r = Report();
  EXPECT_EQ(r["steps"]["count"].get<int>() + r["life"]["warmup_steps"].get<int>(), 12)
      << r["life"].dump(1);
  for (const char* name : {"forward_pass", "backward_pass", "optimizer_step", "data_loading"}) {
    EXPECT_NE(Phase(r, name), nullptr) << name << ": " << r["phases"].dump();
  }
}

// ---------------------------------------------------------------------------------------------
// A real 2-rank torch.distributed job (DDP, gloo on CPU) through examples/launch.py
// ---------------------------------------------------------------------------------------------

/// Real PyTorch jobs (label `job`).
class DdpJob : public PythonE2e {
 protected:
  void SetUp() override {
    PythonE2e::SetUp();
    if (IsSkipped()) return;
    if (!SystemTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
    if (!Runs(std::string(kSystemPython) +
              " -c 'import torch.distributed as d, sys; sys.exit(not d.is_gloo_available())'")) {
      GTEST_SKIP() << "torch has no gloo backend";
    }
  }

  /// 2 ranks of examples/train.py through examples/launch.py, 30 steps.
  json TrainDdp(const std::string& situation, const std::vector<std::string>& loading) {
    std::vector<std::string> command = {kSystemPython,
                                        Source("examples/launch.py"),
                                        "--nproc-per-node",
                                        "2",
                                        Source("examples/train.py"),
                                        "--situation",
                                        situation,
                                        "--steps",
                                        "30",
                                        "--print-every",
                                        "0",
                                        "--data-dir",
                                        (dir_ / "data").string(),
                                        "--out-dir",
                                        (dir_ / "out").string()};
    command.insert(command.end(), loading.begin(), loading.end());
    Result run = RunUnder(command);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_NE(run.out.find("rank=0/2"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("rank=1/2"), std::string::npos) << run.out;
    return Report();
  }
};

TEST_F(DdpJob, StragglerRankIsNamedWithTheWaitItCosts) {
  // A CPU transform of fixed cost (4 rounds per sample, ~1 ms); rank 1 does 4x as many.
  json r = TrainDdp("ddp_straggler", {"--transform-reps", "4"});
  ExpectTwoRanks(r, 30);
  // Rank 1 loads 4x longer; rank 0 waits for it in all-reduce (comm_wait), rank 1 hardly waits.
  EXPECT_GT(Share(r, "data_loading", 1), Share(r, "data_loading", 0) + 0.2);
  EXPECT_GT(Share(r, "comm_wait", 0), Share(r, "comm_wait", 1) + 0.2);
  ASSERT_FALSE(r["verdict"]["principal"].is_null());
  // The straggler is the principal finding on a quiet host. Beside other work (CI's stress-ng:
  // "busy host", 0.8 of the 2 CPUs) the ranks' CPU-bound loading is slower for everyone and
  // data_bound_cpu may outrank it: then it must still be a finding, with the same evidence.
  bool busy = false;
  for (const auto& c : r["verdict"]["caveats"])
    busy |= c.get<std::string>().starts_with("busy host:");
  const json* found = Finding(r, "straggler");
  ASSERT_NE(found, nullptr) << r["verdict"].dump(2);
  const json& f = *found;
  if (!busy) {
    EXPECT_EQ(r["verdict"]["principal"]["class"], "straggler") << r["verdict"].dump(2);
  }
  const std::string reason = f["reason"];
  EXPECT_NE(reason.find("in all-reduce for rank 1; its data_loading takes +"), std::string::npos)
      << reason;
  // Its cost is rank 0's wait beyond rank 1's own, as a share of the step.
  const double expected = Share(r, "comm_wait", 0) - Share(r, "comm_wait", 1);
  EXPECT_NEAR(f["cost_fraction"].get<double>(), expected, 0.05) << reason;
  EXPECT_NE(f["recommendations"][0]["text"].get<std::string>().find("rank 1's input pipeline"),
            std::string::npos)
      << f.dump(2);
}

// Issue 39: a 2-rank gloo job with 19 MB of gradients per step and a batch of 4 waits in
// all-reduce a third of each step on both ranks alike: communication, not a straggler.
TEST_F(DdpJob, CommunicationHeavyRanksAreCommunicationBound) {
  json r = TrainDdp("ddp_comm", {});
  ExpectTwoRanks(r, 30);
  const json& ledger = r["ledger"];
  ASSERT_TRUE(ledger.is_object()) << r.dump(1).substr(0, 2000);
  EXPECT_TRUE(ledger["lockstep"].get<bool>());
  const double comm = ledger["job"]["parts"]["communication"].get<double>();
  const double uneven = ledger["job"]["parts"]["rank_wait"].get<double>();
  EXPECT_GT(comm, 0.10) << ledger.dump(1);  // comm_wait_share
  EXPECT_LT(uneven, comm) << "the ranks wait alike" << ledger.dump(1);
  const json* f = Finding(r, "communication_bound");
  ASSERT_NE(f, nullptr) << r["verdict"].dump(2);
  EXPECT_NEAR((*f)["cost_fraction"].get<double>(), comm, 1e-3);
  // Beside other work (CI's stress-ng) the CPU-bound compute slows and may outrank it.
  bool busy = false;
  for (const auto& c : r["verdict"]["caveats"])
    busy |= c.get<std::string>().starts_with("busy host:");
  if (!busy) {
    EXPECT_EQ(r["verdict"]["principal"]["class"], "communication_bound") << r["verdict"].dump(2);
  }
  EXPECT_NE((*f)["recommendations"][0]["text"].get<std::string>().find("gradient_as_bucket_view"),
            std::string::npos)
      << f->dump(2);
}

// DdpE2e.BalancedRanksAreNoStraggler is held on a recorded run of the same job:
// RecordedRun.BalancedRanksAreNoStraggler (recorded_run_test.cc).

}  // namespace
