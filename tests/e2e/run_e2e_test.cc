// End-to-end tests of `stallscope run` / `diagnose` on real PyTorch training (Debian's torch
// 1.13 under /usr/bin/python3) with the zero-code-change hooks, DataLoader workers included.
// Skipped (not failed) where /usr/bin/python3 cannot import torch. RunJob and RunSharedJob: the
// live jobs (label `job`), one per hook and signal path; RunJob's measure shares and speeds, so
// they run alone, RunSharedJob's beside the parallel tiers. The verdicts of the other situations
// are held on recorded runs (recorded_run_test.cc). RunE2e: no training job (label `e2e`). The
// DataLoader workers' hook is live in PredictedSpeedupAndTheFixItNames (its second run has
// workers).

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "report_json.h"
#include "rundir/run_dir.h"
#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace stallscope::testing::report_json;  // NOLINT(build/namespaces)

constexpr const char* kPython = "/usr/bin/python3";

using stallscope::testing::Slurp;

using stallscope::testing::HaveTorch;

using Result = stallscope::testing::ProcessOutput;

class RunE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveTorch())
      GTEST_SKIP() << "/usr/bin/python3 has no torch (apt-get install python3-torch)";
    if (!STALLSCOPE_E2E_HOOKS && NeedsHooks()) GTEST_SKIP() << "this build has no Python package";
    dir_ = fs::temp_directory_path() /
           ("stallscope_run_e2e_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) fs::remove_all(dir_);
  }

  std::string RunDir() const { return (dir_ / "run").string(); }
  std::vector<std::string> extra_env_;

  /// Tests that read phases from inside the job need the Python package built next to the binary.
  static bool NeedsHooks() {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    return name != "NoAutoMeasuresNothingInsideTheJob" && name != "AJobWithoutTorchRunsUnchanged" &&
           name != "AJobWithoutATrainingLoopIsSampledAndAShellIsNamed";
  }

  /// Starts `stallscope ARGS` in the background; Wait() collects it.
  pid_t Start(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {STALLSCOPE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    out_ = (dir_ / "stdout").string();
    err_ = (dir_ / "stderr").string();
    auto env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_"});
    env.insert(env.end(), extra_env_.begin(), extra_env_.end());
    return stallscope::testing::Spawn(argv, env, out_, err_);
  }

  Result Wait(pid_t pid, double timeout_s = 240) {
    return stallscope::testing::CollectOutput(pid, out_, err_, timeout_s);
  }

  Result Run(const std::vector<std::string>& args) { return Wait(Start(args)); }

  /// Waits (up to 120 s) until the job has printed `line` (train.py's "step N ..." lines, flushed)
  /// to the stdout it shares with stallscope: the job is that far into its training.
  bool WaitForOutput(const std::string& line) {
    for (int i = 0; i < 1200; ++i) {
      if (Slurp(out_).find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  /// `stallscope run --out DIR -i 200ms -- python train.py ARGS`.
  Result Train(const std::vector<std::string>& train_args,
               const std::vector<std::string>& run_flags = {}) {
    std::vector<std::string> args = {"run", "--out", RunDir(), "-i", "200ms"};
    args.insert(args.end(), run_flags.begin(), run_flags.end());
    args.insert(args.end(),
                {"--", kPython, std::string(STALLSCOPE_SOURCE_DIR) + "/examples/train.py",
                 "--data-dir", (dir_ / "data").string(), "--out-dir", (dir_ / "out").string()});
    args.insert(args.end(), train_args.begin(), train_args.end());
    return Run(args);
  }

  json Report() {
    auto text = Slurp(fs::path(RunDir()) / "report.json");
    auto j = json::parse(text, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "report.json is not JSON:\n" << text;
    return j;
  }

  /// Mean step time of the steady steps (report.json's step_s: start-up and warm-up apart), as
  /// the prediction's. Not the median: with k workers batches arrive in bursts of k, so step
  /// times are multi-modal.
  static double SteadyStep(const json& r) {
    std::vector<double> s = r["steps"]["ranks"][0]["step_s"].get<std::vector<double>>();
    double sum = 0;
    for (double x : s) sum += x;
    return s.empty() ? 0 : sum / static_cast<double>(s.size());
  }

  fs::path dir_;
  std::string out_, err_;
};

/// Real PyTorch training: label `job`, RUN_SERIAL (CMakeLists.txt stallscope_test JOBS).
class RunJob : public RunE2e {};
/// Jobs whose checks a neighbouring test cannot distort (root CMakeLists.txt, SharedJob).
class RunSharedJob : public RunE2e {};

TEST_F(RunJob, DataBoundWithoutWorkersShowsDataLoading) {
  auto r = Train({"--situation", "data_cpu", "--steps", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("done"), std::string::npos) << "the job's stdout passes through";
  auto j = Report();
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["job"]["exit_code"], 0);
  EXPECT_GE(j["steps"]["count"].get<int>() + j["life"]["warmup_steps"].get<int>(), 29);
  EXPECT_GT(Share(j, "data_loading"), 0.6) << j["phases"].dump(1);
  ASSERT_EQ(j["dataloaders"].size(), 1u);
  EXPECT_EQ(j["dataloaders"][0]["num_workers"], 0);
  EXPECT_NE(Slurp(fs::path(RunDir()) / "report.txt").find("data_loading"), std::string::npos);
  EXPECT_EQ(Principal(j), "data_bound_cpu") << j["verdict"].dump(1);
  EXPECT_NE(j["verdict"]["principal"]["recommendations"][0]["text"].get<std::string>().find(
                "num_workers=0 → num_workers="),
            std::string::npos);
  // The live stack sampler (src/stacks): during data_loading the main thread ran the transform
  // (examples/train.py augment(), lines 117-135), and the verdict's evidence names the line.
  const json& stacks = j["stacks"];
  ASSERT_TRUE(stacks.is_object()) << "no stacks.jsonl: "
                                  << Slurp(fs::path(RunDir()) / "stacks.jsonl");
  EXPECT_GT(stacks["samples"].get<int>(), 20) << stacks.dump(1);
  const json* loading = nullptr;
  for (const json& g : stacks["phases"]) {
    if (g["name"] == "data_loading") loading = &g;
  }
  ASSERT_NE(loading, nullptr) << stacks.dump(1);
  const json& top = (*loading)["lines"][0];
  EXPECT_TRUE(top["where"].get<std::string>().starts_with("train.py:")) << top.dump();
  EXPECT_EQ(top["function"], "augment") << top.dump();
  bool named = false;
  for (const json& e : j["verdict"]["principal"]["evidence"]) {
    named |=
        e["metric"] == "stacks.data_loading" &&
        e["text"].get<std::string>().find(top["where"].get<std::string>()) != std::string::npos;
  }
  EXPECT_TRUE(named) << j["verdict"]["principal"].dump(1);
  // Nothing in the run directory but what `run --force` may replace.
  for (const auto& entry : fs::directory_iterator(RunDir())) {
    const std::string name = entry.path().filename().string();
    EXPECT_NE(std::find(std::begin(stallscope::rundir::kRunDirEntries),
                        std::end(stallscope::rundir::kRunDirEntries), name),
              std::end(stallscope::rundir::kRunDirEntries))
        << name << " is not in rundir::kRunDirEntries";
  }
}

// The cost estimate is checkable: the verdict predicts a rate after its first fix, and the fix it
// names runs. How close the prediction comes is measured by examples/demo_fix.sh (README
// "Measured"), not here: on a loaded 2-CPU machine the measured rate swings with other work
// (issue 12: 24.0 predicted, 9.53 measured in a clean clone beside another build).
TEST_F(RunJob, PredictedSpeedupAndTheFixItNames) {
  // A fixed transform cost (no calibration), so both runs do the same work per sample.
  auto r = Train({"--situation", "data_cpu", "--steps", "60", "--transform-reps", "16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto before = Report();
  ASSERT_EQ(Principal(before), "data_bound_cpu");
  const auto& p = before["verdict"]["principal"];
  ASSERT_TRUE(p["predicted_steps_per_s"].is_number());
  double predicted = p["predicted_steps_per_s"].get<double>();
  double now = 1.0 / SteadyStep(before);
  EXPECT_GT(predicted, now) << "the fix must be predicted to help";
  std::string fix = p["recommendations"][0]["text"];
  auto at = fix.find("→ num_workers=");
  ASSERT_NE(at, std::string::npos) << fix;
  std::string workers = fix.substr(at + std::string("→ num_workers=").size(), 1);
  auto after_run = Train({"--situation", "data_cpu", "--steps", "60", "--transform-reps", "16",
                          "--num-workers", workers, "--persistent-workers"},
                         {"--force"});
  ASSERT_EQ(after_run.exit_code, 0) << after_run.err;
  auto after = Report();
  ASSERT_EQ(after["dataloaders"].size(), 1u);
  EXPECT_EQ(after["dataloaders"][0]["num_workers"].get<int>(), std::stoi(workers));
  std::cout << "before " << now << " steps/s, predicted " << predicted << ", measured "
            << 1.0 / SteadyStep(after) << " (accuracy: examples/demo_fix.sh)\n";
}

// CUDA's asynchrony through the whole pipeline (hooks → ring → events.bin → report → verdict)
// on a machine without a GPU: the job replaces torch.cuda's events with ones that report 2 ms
// per phase, then reinstalls the hooks, as a CUDA job's would install at import.
TEST_F(RunSharedJob, GpuSpansOfAFakeCudaReachTheReportAndTheVerdict) {
  const fs::path job = dir_ / "fake_cuda_job.py";
  std::ofstream(job) << "import sys\nsys.path.insert(0, '" STALLSCOPE_SOURCE_DIR "/python/tests')\n"
                     << R"(import time
import torch
import fake_cuda
from stallscope import auto

fake_cuda.install(torch, gpu_ms=2.0)
auto.uninstall()
assert auto.install()
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(30):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.01)
    loss.item()  # the sync site
)";
  auto r = Run({"run", "--out", RunDir(), "-i", "200ms", "--", kPython, job.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = Report();
  for (const char* phase : {"forward_pass", "backward_pass", "optimizer_step"}) {
    SCOPED_TRACE(phase);
    const json* found = nullptr;
    for (const auto& p : j["phases"]) {
      if (p["name"] == phase) found = &p;
    }
    ASSERT_NE(found, nullptr) << j["phases"].dump(1);
    ASSERT_TRUE(found->contains("gpu")) << found->dump();
    EXPECT_EQ((*found)["gpu"]["count"], (*found)["count"]) << "every instance resolved";
    EXPECT_NEAR((*found)["gpu"]["mean_s"].get<double>(), 0.002, 1e-9);
  }
  EXPECT_EQ(j["verdict"]["compute_time"], "gpu") << j["verdict"].dump(1);
  ASSERT_FALSE(j["sync_sites"].empty()) << j.dump(1);
  const auto& site = j["sync_sites"][0];
  EXPECT_EQ(site["kind"], "item");
  EXPECT_EQ(site["file"], job.string());
  EXPECT_EQ(site["line"], 19);
  EXPECT_EQ(site["count"], 30);
  auto text = Slurp(fs::path(RunDir()) / "report.txt");
  EXPECT_NE(text.find("gpu mean"), std::string::npos) << text;
  EXPECT_NE(text.find("Syncs at  " + job.string() + ":19 (item, 30×)"), std::string::npos) << text;
  EXPECT_NE(text.find("CUDA events: the compute phases keep the GPU busy"), std::string::npos)
      << text;
}

TEST_F(RunSharedJob, ExitCodeAndCrashStillGetAReport) {
  auto r = Train({"--steps", "5", "--exit-code", "3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(Report()["job"]["exit_code"], 3);
  fs::remove_all(RunDir());
  auto c = Train({"--steps", "20", "--crash-at-step", "4"});
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("RuntimeError"), std::string::npos) << "the job's traceback passes through";
  auto j = Report();
  EXPECT_EQ(j["job"]["exit_code"], 1);
  EXPECT_GE(j["steps"]["count"].get<int>() + j["life"]["warmup_steps"].get<int>(), 3);
}

TEST_F(RunSharedJob, SigkilledJobAndSigkilledMonitorLeaveReadableRunDirs) {
  // The job killed with SIGKILL: stallscope still writes the report.
  pid_t pid = Start({"run", "--out", RunDir(), "-i", "200ms", "--", kPython,
                     std::string(STALLSCOPE_SOURCE_DIR) + "/examples/train.py", "--situation",
                     "data_cpu", "--steps", "0"});
  // Killed once it has trained 30 steps (not after a fixed 8 s: start-up time varies).
  if (!WaitForOutput("step 30 ")) {
    kill(pid, SIGINT);  // forwarded to the job, which trains forever (--steps 0)
    FAIL() << "no step 30 in 120 s: " << Wait(pid).err;
  }
  auto meta = json::parse(Slurp(fs::path(RunDir()) / "run.json"));
  kill(meta["pid"].get<int>(), SIGKILL);
  auto r = Wait(pid);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  auto j = Report();
  EXPECT_EQ(j["job"]["status"], "killed");
  EXPECT_GT(j["steps"]["count"].get<int>(), 0);

  // The monitor itself killed: the job goes on (stallscope never ends a training run because it
  // died), and `diagnose` reads every step, the ones the monitor had not saved from the rings.
  std::string second = (dir_ / "run2").string();
  pid_t mon = Start({"run", "--out", second, "-i", "200ms", "--", kPython,
                     std::string(STALLSCOPE_SOURCE_DIR) + "/examples/train.py", "--situation",
                     "data_cpu", "--steps", "40", "--print-every", "0"});
  json meta2;
  for (int i = 0; i < 600 && !meta2.contains("pid"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    meta2 = json::parse(Slurp(fs::path(second) / "run.json"), nullptr, false);
    if (meta2.is_discarded() || !meta2.is_object() || !meta2["pid"].is_number()) meta2 = json();
  }
  ASSERT_TRUE(meta2.contains("pid"));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  kill(mon, SIGKILL);
  Wait(mon);
  const pid_t job = meta2["pid"].get<int>();
  for (int i = 0; i < 2400 && kill(job, 0) == 0; ++i)  // the orphaned job runs to its end
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(kill(job, 0), 0) << "the job did not finish";
  auto d = Run({"diagnose", "--json", second});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  auto dj = json::parse(d.out);
  EXPECT_EQ(dj["job"]["status"], "running");  // run.json was never finished
  // Every step read back: the steady ones and the warm-up before them (a loaded machine makes
  // its first steps slow, so how many are warm-up varies).
  EXPECT_GE(dj["steps"]["count"].get<int>() + dj["life"]["warmup_steps"].get<int>(), 39)
      << d.err << dj["life"].dump();
  EXPECT_NE(dj["warnings"].dump().find("records the monitor had not saved"), std::string::npos)
      << dj["warnings"].dump();
  EXPECT_GT(Share(dj, "data_loading"), 0.0);  // a loaded machine: no share threshold
}

TEST_F(RunSharedJob, CtrlCIsForwardedAndTheReportWritten) {
  pid_t pid = Start({"run", "--out", RunDir(), "-i", "200ms", "--", kPython,
                     std::string(STALLSCOPE_SOURCE_DIR) + "/examples/train.py", "--situation",
                     "compute", "--steps", "0"});
  if (!WaitForOutput("step 10 ")) {  // in the training loop
    kill(pid, SIGINT);
    FAIL() << "no step 10 in 120 s: " << Wait(pid).err;
  }
  kill(pid, SIGINT);
  auto r = Wait(pid);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("KeyboardInterrupt"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(fs::path(RunDir()) / "report.txt"));
}

TEST_F(RunSharedJob, NoAutoMeasuresNothingInsideTheJob) {
  auto r = Train({"--situation", "data_cpu", "--steps", "5"}, {"--no-auto"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = Report();
  EXPECT_EQ(j["phases"].size(), 0u) << j["phases"].dump(1);
  EXPECT_EQ(j["job"]["auto_hooks"], false);
  EXPECT_FALSE(j["processes"].empty()) << "the process tree is still sampled";
}

TEST_F(RunE2e, AJobWithoutTorchRunsUnchanged) {
  auto r = Run(
      {"run", "--out", RunDir(), "--quiet", "--", "sh", "-c", "echo out; echo err >&2; exit 4"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "no NVIDIA GPU: libnvidia-ml.so.1 not found — GPU metrics unavailable\nerr\n");
  EXPECT_EQ(Report()["job"]["exit_code"], 4);
}

// Issue 40 "also found": a Python job with no DataLoader, module call or optimizer step (no ring:
// the hooks record nothing) had no stack samples and no word why. Every process of the job is
// sampled or named: the Python one is sampled (the report shows where it was over the whole
// run), the shell that started it is named as no Python. The job ends once its own function is
// in stacks.jsonl (flushed once a second): an event, not a time.
TEST_F(RunE2e, AJobWithoutATrainingLoopIsSampledAndAShellIsNamed) {
  std::ofstream(dir_ / "plain.py") << R"(import os, time
path = os.path.join(os.environ["STALLSCOPE_RUN_DIR"], "stacks.jsonl")
def crunch():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        sum(i for i in range(20000))
        with open(path) as f:
            if '"function":"crunch"' in f.read():
                return
crunch()
)";
  auto r = Run({"run", "--out", RunDir(), "--quiet", "-i", "200ms", "--", "sh", "-c",
                std::string(kPython) + " " + (dir_ / "plain.py").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json stacks = Report()["stacks"];
  ASSERT_TRUE(stacks.is_object()) << Slurp(fs::path(RunDir()) / "stacks.jsonl");
  ASSERT_TRUE(stacks.contains("whole_run")) << stacks.dump(1);
  bool crunch = false;
  for (const json& l : stacks["whole_run"]["lines"])  // crunch, or its generator expression
    crunch |= l["function"].get<std::string>().starts_with("crunch") &&
              l["where"].get<std::string>().starts_with("plain.py:");  // relative to its folder
  EXPECT_TRUE(crunch) << stacks.dump(1);
  bool shell = false;
  for (const json& u : stacks["unreadable"])
    shell |= u.get<std::string>().find("): not a Python process") != std::string::npos;
  EXPECT_TRUE(shell) << stacks.dump(1);
}

}  // namespace
