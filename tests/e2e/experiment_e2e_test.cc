// End-to-end tests of `stallscope passes` and `stallscope sweep` on the example job (Debian's
// torch 1.13 under /usr/bin/python3), issue 13's acceptance: the data-bound job is recovered by
// synthetic data (pass C), the periodic one by side work off (pass B), the compute-bound one by
// neither; a worker sweep finds the setting the verdict predicted. Skipped where /usr/bin/python3
// has no torch or the build has no Python package (sanitizer builds).

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using stallscope::testing::ProcessOutput;

using stallscope::testing::HaveTorch;

class ExperimentE2e : public ::testing::Test {
 protected:
  // Every test runs real PyTorch jobs through the hooks. The skip is in SetUp, where it stops
  // the test body (GTEST_SKIP in a helper only returns from the helper).
  void SetUp() override {
    if (NeedsTorch() && !HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
    if (NeedsTorch() && !STALLSCOPE_E2E_HOOKS) GTEST_SKIP() << "this build has no Python package";
    dir_ = stallscope::testing::FreshTestDir("stallscope_experiment_e2e");
  }
  virtual bool NeedsTorch() const { return true; }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }

  ProcessOutput Stallscope(std::vector<std::string> args) {
    args.insert(args.begin(), STALLSCOPE_BIN);
    std::vector<std::string> env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_"});
    env.insert(env.end(), job_env_.begin(), job_env_.end());
    return stallscope::testing::RunProcess(args, env, dir_, 600);
  }

  /// `stallscope CMD --json --out DIR/out ... -- python3 examples/train.py JOB...`.
  json Experiment(const std::string& cmd, std::vector<std::string> flags,
                  const std::vector<std::string>& job) {
    std::vector<std::string> args = {cmd, "--json", "--out", (dir_ / "out").string()};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "/usr/bin/python3", STALLSCOPE_SOURCE_DIR "/examples/train.py",
                             "--print-every", "1000"});
    args.insert(args.end(), job.begin(), job.end());
    ProcessOutput r = Stallscope(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
    // The text report is written beside the runs too.
    EXPECT_TRUE(fs::exists(dir_ / "out" / (cmd + ".txt")));
    return j;
  }

  /// `stallscope passes --ranks 1,2 --json ... -- python3 examples/launch.py --nproc-per-node 2
  /// examples/train.py JOB...`: the 2-rank gloo example with 1 and with 2 processes.
  json RankPasses(const std::vector<std::string>& job) {
    std::vector<std::string> args = {"passes",
                                     "--ranks",
                                     "1,2",
                                     "--json",
                                     "--out",
                                     (dir_ / "out").string(),
                                     "--",
                                     "/usr/bin/python3",
                                     STALLSCOPE_SOURCE_DIR "/examples/launch.py",
                                     "--nproc-per-node",
                                     "2",
                                     STALLSCOPE_SOURCE_DIR "/examples/train.py",
                                     "--print-every",
                                     "1000"};
    args.insert(args.end(), job.begin(), job.end());
    ProcessOutput r = Stallscope(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
    EXPECT_TRUE(fs::exists(dir_ / "out" / "passes.txt"));
    if (j.is_discarded() || j["runs"].size() != 2) {
      ADD_FAILURE() << r.out << r.err;
      return json::object();
    }
    // The same job with 1 and with 2 processes, each in its own run directory.
    EXPECT_EQ(j["kind"], "ranks");
    EXPECT_EQ(j["launcher"], "examples/launch.py");
    EXPECT_EQ(j["runs"][0]["processes"], 1);
    EXPECT_EQ(j["runs"][0]["command"][3], "1") << j["runs"][0]["command"].dump();
    EXPECT_EQ(j["runs"][1]["command"][3], "2");
    EXPECT_EQ(j["runs"][0]["ranks"].size(), 1u);
    EXPECT_EQ(j["runs"][1]["ranks"].size(), 2u);
    EXPECT_TRUE(fs::exists(dir_ / "out" / "2-processes" / "run.json"));
    return j;
  }

  static const json& Pass(const json& r, const std::string& id) {
    for (const auto& p : r["passes"]) {
      if (p["id"] == id) return p;
    }
    static const json none;
    return none;
  }

  fs::path dir_;
  std::vector<std::string> job_env_;  // added to the environment stallscope and the job get
};

/// Real PyTorch jobs: label `job`, RUN_SERIAL (CMakeLists.txt stallscope_test JOBS). `make test`
/// keeps one `passes` (the data-bound job), `passes --ranks` through a launcher (main-rank side
/// work), one `sweep` and the sweep's failing setting.
class ExperimentJob : public ExperimentE2e {};
/// A sweep that measures no speed (root CMakeLists.txt, SharedJob): one job at a time, beside the
/// other tiers.
class ExperimentSharedJob : public ExperimentE2e {};

/// The other situations' `passes` (label `job-extra`: `ctest -L job` runs them, `make test` does
/// not). They cannot be recorded runs: `passes` concludes from runs it starts itself.
class ExperimentExtraJob : public ExperimentE2e {};

TEST_F(ExperimentJob, PassesNameTheInputPipelineOfADataBoundJob) {
  json r = Experiment("passes", {"--steps", "24"},
                      {"--situation", "data_cpu", "--transform-reps", "16", "--steps", "500"});
  const json& a = Pass(r, "A");
  const json& c = Pass(r, "C");
  ASSERT_TRUE(c.is_object()) << r.dump(1);
  EXPECT_EQ(a["verdict"]["class"], "data_bound_cpu") << r.dump(1);
  EXPECT_GE(c["vs_a"]["ratio"].get<double>(), 2.0) << r.dump(1);
  EXPECT_EQ(r["conclusion"]["recovering"], "C") << r.dump(1);
  EXPECT_EQ(r["conclusion"]["agrees"], true);
  // Each pass stopped at its bound (the job asked for 500 steps), and the scratch folder is gone.
  EXPECT_LE(a["steps"].get<int>(), 24);
  EXPECT_FALSE(fs::exists(dir_ / "out" / "scratch"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "C" / "report.txt"));
}

TEST_F(ExperimentExtraJob, PassesNameThePeriodicSideWork) {
  json r = Experiment(
      "passes", {"--steps", "36"},
      {"--situation", "periodic", "--checkpoint-every", "6", "--checkpoint-extra-mb", "16",
       "--sample-every", "6", "--out-dir", (dir_ / "job-out").string(), "--steps", "500"});
  const json& b = Pass(r, "B");
  EXPECT_EQ(r["conclusion"]["recovering"], "B") << r.dump(1);
  EXPECT_GT(b["vs_a"]["ratio"].get<double>(), 1.1) << r.dump(1);
  // Pass A wrote its checkpoints to the scratch folder, never to the job's own path.
  EXPECT_FALSE(fs::exists(dir_ / "job-out" / "checkpoint.pt"));
}

// --lr 0: this CPU CNN's step gets ~2.5x slower as its weights train (measured: 9.9 steps/s
// at lr 0, 3.9 at the default; denormal floats are the likely cause), and pass C's repeated
// batches train it along another path: C then runs faster for a reason that is not the input
// pipeline (README "passes"). Fixed weights keep the model's work the same in every pass.
//
// glibc's malloc settings: on the test VMs one and the same CNN step (same batch, same weights)
// took 60-500 ms, because glibc hands the step's large buffers back to the kernel and the next
// step faults them in again (slow in these VMs). With freed memory kept, the same step took
// 63-86 ms (measured with 30 steps, three processes each). The passes then compare the model's
// work, not the VM's page faults.
TEST_F(ExperimentExtraJob, PassesRecoverNothingFromAComputeBoundJob) {
  job_env_ = {"MALLOC_MMAP_THRESHOLD_=4000000000", "MALLOC_TRIM_THRESHOLD_=4000000000",
              "MALLOC_TOP_PAD_=536870912"};
  json r = Experiment("passes", {"--steps", "20"},
                      {"--situation", "compute", "--threads", "1", "--lr", "0", "--steps", "500"});
  EXPECT_EQ(r["conclusion"]["recovering"], "") << r.dump(1);
  // Neither clears the bar: 10%, raised by the drift between A and A2 on a busy machine.
  const double bar = r["conclusion"]["required_ratio"].get<double>();
  EXPECT_GE(bar, 1.1);
  for (const char* id : {"B", "C"}) {
    const json& p = Pass(r, id);
    ASSERT_TRUE(p["vs_a"].is_object()) << id << r.dump(1);
    EXPECT_FALSE(p["vs_a"]["significant"].get<bool>() && p["vs_a"]["ratio"].get<double>() >= bar)
        << id << r.dump(1);
  }
}

TEST_F(ExperimentJob, ASweepOfWorkersFindsTheSettingTheVerdictPredicted) {
  json r = Experiment("sweep", {"--set", "num_workers=0,1,2", "--steps", "24"},
                      {"--situation", "data_cpu", "--transform-reps", "16", "--steps", "500",
                       "--persistent-workers"});
  ASSERT_EQ(r["rows"].size(), 3u) << r.dump(1);
  ASSERT_EQ(r["predictions"].size(), 1u) << r.dump(1);
  const json& p = r["predictions"][0];
  EXPECT_EQ(p["by"], "num_workers=0");
  // The setting the verdict predicted is the fastest, or as fast (within the 3% the sweep calls
  // equal). Its predicted rate against the measured one is shown, not judged here: on this 2-CPU
  // VM the workers scale worse than the model assumes (measured 10.7 steps/s against 20.5
  // predicted, -48%; the closing note of issue 13 has the numbers).
  // Judged on a quiet host only, as the rows measured it: beside CI's stress-ng (one of the 2
  // CPUs taken) 2 workers ran 9.87 steps/s against 10.26 with none.
  double best = 0, predicted_setting = 0, other = 0;
  for (const auto& row : r["rows"]) {
    if (!row["steps_per_s"].is_number()) continue;
    best = std::max(best, row["steps_per_s"].get<double>());
    if (row["label"] == p["setting"]) predicted_setting = row["steps_per_s"].get<double>();
    if (row["other_cpus"].is_number()) other = std::max(other, row["other_cpus"].get<double>());
  }
  if (other < 0.25) {
    EXPECT_GE(predicted_setting, best * 0.97) << r.dump(1);
  } else {
    std::cerr << "host not quiet (other work up to " << other
              << " CPUs): not judging the fastest\n";
  }
  EXPECT_NEAR(
      p["error"].get<double>(),
      p["measured_steps_per_s"].get<double>() / p["predicted_steps_per_s"].get<double>() - 1, 1e-3);
}

TEST_F(ExperimentSharedJob, AFailingSettingIsRecordedAndTheSweepGoesOn) {
  json r = Experiment("sweep",
                      {"--set", "crash=2,-1", "--arg", "--crash-at-step={crash}", "--steps", "6"},
                      {"--situation", "compute", "--steps", "500"});
  ASSERT_EQ(r["rows"].size(), 2u) << r.dump(1);
  EXPECT_EQ(r["rows"][0]["label"], "crash=-1");
  // The exit status, and the error the job printed last (from its job.log).
  const std::string failure = r["rows"][1]["failure"];
  EXPECT_EQ(failure.rfind("failed: exit 1 (", 0), 0u) << failure;
  EXPECT_NE(failure.find("/job.log: RuntimeError: crash requested at step 2 (--crash-at-step)"),
            std::string::npos)
      << failure;
  EXPECT_EQ(r["best"], "crash=-1");
}

// Seed 000 §1 on the 2-rank gloo example: rank 0 alone samples every 10 steps while rank 1
// waits for it in its next all-reduce. The ranks' loading sleeps (1 ms per sample, an object
// store) with a light transform, as in the balanced DDP run: with the preset's CPU transform,
// beside stress-ng the two ranks took turns at the CPUs, rank 1 waited 25-28% of its ordinary
// steps (median), and "uneven at every step" (a straggler's sign) ruled out the main-rank
// conclusion (sawtooth_in_every_process in 2 of 5 runs). Only rank 0's side work needs CPU now.
TEST_F(ExperimentJob, RankPassesNameMainRankSideWork) {
  json r = RankPasses({"--situation", "ddp_main_rank", "--steps", "500", "--transform-reps", "1",
                       "--io-latency-ms", "1"});
  if (!r.contains("conclusion")) return;
  EXPECT_EQ(r["conclusion"]["class"], "main_rank_side_work") << r.dump(1);
  EXPECT_NE(r["conclusion"]["text"].get<std::string>().find("rank 0 alone does"),
            std::string::npos);
  const json& ranks = r["runs"][1]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  // Rank 1's slow steps are waits at the all-reduce, at rank 0's slow steps. (Not necessarily
  // "every 10 steps": one more slow wait on a busy host, e.g. at start-up, makes the group
  // irregular; the conclusion's evidence counts the shared steps.)
  bool waits = false;
  for (const auto& s : ranks[1]["slow"])
    waits |= s["phase"] == "comm_wait" && s["occurrences"].get<int>() >= 3;
  EXPECT_TRUE(waits) << ranks.dump(1);
  bool shared = false;
  for (const auto& e : r["conclusion"]["evidence"])
    shared |= e.get<std::string>().starts_with("rank 1: slow at ");
  EXPECT_TRUE(shared) << r["conclusion"].dump(1);
}

// The straggler variant: rank 1 loads 4x slower; both runs are smooth, the 2-process steps
// take several times as long, and the 2-process verdict names the straggler, or on a busy host
// (CI beside stress-ng: 3 busy processes on 2 CPUs) the input pipeline that makes it one.
TEST_F(ExperimentExtraJob, RankPassesOfAStragglerSeeTheProcessesCostEachOther) {
  json r = RankPasses({"--situation", "ddp_straggler", "--steps", "500"});
  if (!r.contains("conclusion")) return;
  EXPECT_EQ(r["conclusion"]["class"], "multi_process_overhead") << r.dump(1);
  EXPECT_LT(r["change"]["ratio"].get<double>(), 0.7) << r.dump(1);
  EXPECT_TRUE(r["change"]["significant"].get<bool>());
  const std::string verdict = r["runs"][1]["verdict"]["class"];
  EXPECT_TRUE(verdict == "straggler" || verdict == "data_bound_cpu") << r.dump(1);
}

// Usage errors: no job runs, so no torch or Python package is needed (label `e2e`).
class ExperimentUsage : public ExperimentE2e {
 protected:
  bool NeedsTorch() const override { return false; }
};

TEST_F(ExperimentUsage, BadFlagsAreOneLineUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"sweep", "--set", "num_workers=-1", "--", "true"}, "num_workers=-1: a whole number"},
      {{"sweep", "--set", "lr=1,2", "--", "true"}, "no {lr} in the command"},
      {{"passes", "--duration", "0s", "--", "true"}, "--duration 0s"},
      {{"passes", "--steps", "0", "--", "true"}, "--steps"},
      {{"passes", "--ranks", "1,2", "--", "python3", "train.py"},
       "stallscope passes: cannot change the process count of this command: it is not a "
       "launcher stallscope knows; run it by hand"},
      {{"passes", "--ranks", "1,2", "--", "torchrun", "--nnodes", "2", "train.py"},
       "multi-node job (--nnodes 2)"},
      {{"passes", "--ranks", "2", "--", "torchrun", "train.py"}, "--ranks 2: give two or more"},
  };
  for (const auto& c : cases) {
    ProcessOutput r = Stallscope(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[1] << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
  // A non-empty --out is refused without --force.
  fs::create_directories(dir_ / "taken");
  std::ofstream(dir_ / "taken" / "mine.txt") << "x";
  ProcessOutput r = Stallscope({"passes", "--out", (dir_ / "taken").string(), "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not empty; give --force"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "taken" / "mine.txt"));
}

// Issue 27 B06: the user's interrupts stop the whole experiment. A job that ignores SIGINT and
// SIGTERM gets the first two forwarded and is SIGKILLed at the third; that kill is stallscope's
// own, never "out of memory?", and no pass runs after it.
TEST_F(ExperimentUsage, ThirdInterruptStopsTheExperimentAndIsNotBlamedOnMemory) {
  const fs::path started = dir_ / "started";
  std::ofstream(dir_ / "stubborn.py") << "import signal, time\n"
                                         "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                         "open('"
                                      << started.string()
                                      << "', 'w').close()\n"
                                         "while True: time.sleep(1)\n";
  std::vector<std::string> env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_"});
  const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
  const pid_t pid = stallscope::testing::Spawn(
      {STALLSCOPE_BIN, "passes", "--steps", "5", "--out", (dir_ / "p").string(), "--",
       "/usr/bin/python3", (dir_ / "stubborn.py").string()},
      env, out.string(), err.string());
  ASSERT_GT(pid, 0);
  // Interrupt only once the job runs, then again until stallscope is gone: a signal that
  // arrives while the last is still pending merges with it, so the count of sends is not the
  // count of interrupts; each one the monitor takes is forwarded, and the third kills.
  for (int i = 0; i < 3000 && !fs::exists(started); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(started)) << stallscope::testing::Slurp(err);
  int status = 0;
  pid_t reaped = 0;
  for (int i = 0; i < 600 && (reaped = waitpid(pid, &status, WNOHANG)) == 0; ++i) {
    kill(pid, SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (reaped == 0) {  // still there after 2 minutes of interrupts
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ADD_FAILURE() << "passes did not stop at the user's interrupts";
  }
  stallscope::testing::ProcessOutput r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = stallscope::testing::Slurp(err);
  EXPECT_NE(r.err.find("pass A (baseline) running"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[stallscope] pass B ("), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("out of memory"), std::string::npos) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
}

}  // namespace
