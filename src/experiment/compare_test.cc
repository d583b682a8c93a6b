#include "experiment/compare.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace stallscope::experiment {
namespace {

/// `n` steps of `step_s` seconds ± up to `jitter` (uniform, a fixed seed): a noisy loop.
std::vector<double> Steps(size_t n, double step_s, double jitter, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> noise(-jitter, jitter);
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) out.push_back(step_s + noise(rng));
  return out;
}

RunDigest CompareDigest(std::vector<double> step_s) {
  RunDigest d;
  d.dir = "runs/x";
  d.meta.command = {"/usr/bin/python3", "train.py", "--situation", "data_cpu"};
  d.meta.hostname = "box";
  d.meta.tool_version = "0.9.0";
  d.meta.exit_code = 0;
  d.meta.status = rundir::RunStatus::kExited;
  d.meta.env = {{"OMP_NUM_THREADS", "1"}};
  d.step_s = std::move(step_s);
  d.rate = analysis::EstimateRate(d.step_s);
  d.allowed_cpus = 2;
  rundir::LoaderInfo l;
  l.num_workers = 0;
  l.batch_size = 32;
  l.pin_memory = false;
  l.persistent_workers = false;
  d.loader = l;
  d.phases = {{"data_loading", 200, 0.8}, {"forward", 50, 0.2}};
  return d;
}

TEST(Compare, SameRunsAreNoSignificantChange) {
  RunDigest a = CompareDigest(Steps(30, 0.25, 0.02));
  CompareReport r = Compare(a, a);
  EXPECT_EQ(r.outcome, CompareOutcome::kNoChange);
  ASSERT_TRUE(r.change);
  EXPECT_DOUBLE_EQ(r.change->ratio, 1.0);  // the bootstrap has a fixed seed
  EXPECT_LE(r.change->lo, 1.0);
  EXPECT_GE(r.change->hi, 1.0);
  EXPECT_EQ(r.conclusion.rfind("no significant change (B/A 1.00×, 95% interval ", 0), 0)
      << r.conclusion;
  EXPECT_TRUE(r.differences.empty());
}

TEST(Compare, TwiceAsFastIsSignificant) {
  CompareReport r =
      Compare(CompareDigest(Steps(30, 0.25, 0.02)), CompareDigest(Steps(30, 0.125, 0.01)));
  EXPECT_EQ(r.outcome, CompareOutcome::kFaster);
  ASSERT_TRUE(r.change);
  EXPECT_NEAR(r.change->ratio, 2.0, 1e-9);
  EXPECT_GT(r.change->lo, 1.0);
  EXPECT_EQ(r.conclusion.rfind("B is 2.00× faster (95% interval ", 0), 0) << r.conclusion;
  EXPECT_NE(r.conclusion.find("): significant"), std::string::npos) << r.conclusion;
}

TEST(Compare, SlowerSaysHowMuchSlower) {
  CompareReport r =
      Compare(CompareDigest(Steps(30, 0.125, 0.01)), CompareDigest(Steps(30, 0.25, 0.02)));
  EXPECT_EQ(r.outcome, CompareOutcome::kSlower);
  EXPECT_EQ(r.conclusion.rfind("B is 2.00× slower (B/A 0.50×, 95% interval ", 0), 0)
      << r.conclusion;
}

TEST(Compare, NoisyRunsWithASmallChangeAreNotSignificant) {
  // 5% faster on average, but each step varies by ±40%: the interval spans 1.
  CompareReport r =
      Compare(CompareDigest(Steps(10, 0.25, 0.1, 1)), CompareDigest(Steps(10, 0.238, 0.1, 2)));
  EXPECT_EQ(r.outcome, CompareOutcome::kNoChange) << r.conclusion;
}

TEST(Compare, TooFewStepsGiveARatioWithoutVerdict) {
  CompareReport r =
      Compare(CompareDigest(Steps(2, 0.25, 0)), CompareDigest(Steps(30, 0.125, 0.01)));
  EXPECT_EQ(r.outcome, CompareOutcome::kTooFewSteps);
  EXPECT_EQ(r.conclusion.rfind("too few steps to say (A 2 steady steps, B 30;", 0), 0)
      << r.conclusion;
}

TEST(Compare, NoStepsNamesTheSide) {
  CompareReport r = Compare(CompareDigest({}), CompareDigest(Steps(30, 0.125, 0.01)));
  EXPECT_EQ(r.outcome, CompareOutcome::kNoSteps);
  EXPECT_FALSE(r.change);
  EXPECT_EQ(r.conclusion, "nothing to compare: no steps measured in A");
}

TEST(Compare, DifferencesInAFixedOrder) {
  RunDigest a = CompareDigest(Steps(30, 0.25, 0.02));
  RunDigest b = a;
  b.meta.command.push_back("--num-workers");
  b.meta.command.push_back("2");
  b.loader->num_workers = 2;
  b.loader->persistent_workers = true;
  b.meta.env.erase("OMP_NUM_THREADS");
  b.meta.env["CUDA_VISIBLE_DEVICES"] = "0";
  b.allowed_cpus = 4;
  b.gpus = "NVIDIA H100 80GB HBM3";
  b.meta.exit_code = 137;
  b.meta.status = rundir::RunStatus::kKilled;
  CompareReport r = Compare(a, b);
  std::vector<std::string> names;
  for (const auto& d : r.differences) names.push_back(d.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "command", "exit", "dataloader.num_workers", "dataloader.persistent_workers",
                       "env.CUDA_VISIBLE_DEVICES", "env.OMP_NUM_THREADS", "allowed_cpus", "gpus"}));
  EXPECT_EQ(r.differences[0].b, "/usr/bin/python3 train.py --situation data_cpu --num-workers 2");
  EXPECT_EQ(r.differences[1].a, "exit 0");
  EXPECT_EQ(r.differences[1].b, "killed by signal 9");
  EXPECT_EQ(r.differences[3].a, "False");
  EXPECT_EQ(r.differences[3].b, "True");
  EXPECT_FALSE(r.differences[4].a);  // set in B only
  EXPECT_EQ(r.differences[4].b, "0");
  EXPECT_EQ(r.differences[5].a, "1");
  EXPECT_FALSE(r.differences[5].b);
  EXPECT_FALSE(r.differences[7].a);
}

TEST(Compare, PhasesAreTheUnionLargestFirst) {
  RunDigest a = CompareDigest(Steps(30, 0.25, 0.02));
  RunDigest b = CompareDigest(Steps(30, 0.125, 0.01));
  b.phases = {{"forward", 50, 0.4}, {"backward", 60, 0.48}, {"data_loading", 15, 0.12}};
  CompareReport r = Compare(a, b);
  ASSERT_EQ(r.phases.size(), 3u);
  EXPECT_EQ(r.phases[0].name, "data_loading");
  EXPECT_DOUBLE_EQ(r.phases[0].delta_ms_per_step, -185);
  EXPECT_EQ(r.phases[1].name, "backward");
  EXPECT_FALSE(r.phases[1].a_ms_per_step);
  EXPECT_DOUBLE_EQ(r.phases[1].delta_ms_per_step, 60);
  EXPECT_EQ(r.phases[2].name, "forward");
  EXPECT_DOUBLE_EQ(r.phases[2].a_share, 0.2);
  EXPECT_DOUBLE_EQ(r.phases[2].b_share, 0.4);
}

TEST(Compare, BusyHostIsNotedPerSide) {
  RunDigest a = CompareDigest(Steps(30, 0.25, 0.02));
  RunDigest b = a;
  b.busy_host = true;
  CompareReport r = Compare(a, b);
  EXPECT_FALSE(r.a_busy_host);
  EXPECT_TRUE(r.b_busy_host);
  // The field decides, not the caveat's text (issue 29).
  a.caveats.push_back(std::string(diagnose::kBusyHostCaveat) + " said, not set");
  EXPECT_FALSE(Compare(a, b).a_busy_host);
}

TEST(Compare, OtherWorkOnTheHostIsADifferenceOnlyWhenItMovedByHalfACpu) {
  RunDigest a = CompareDigest(Steps(30, 0.25, 0.02));
  RunDigest b = a;
  a.other_cpus = 0.1;
  b.other_cpus = 0.5;  // moved 0.4: noise
  EXPECT_TRUE(Compare(a, b).differences.empty());
  b.other_cpus = 1.04;
  auto d = Compare(a, b).differences;
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].name, "host.other_cpus");
  EXPECT_EQ(d[0].a, "0.1");
  EXPECT_EQ(d[0].b, "1.0");
  b.other_cpus.reset();  // not measured on one side: nothing to say
  EXPECT_TRUE(Compare(a, b).differences.empty());
}

TEST(Compare, AChangeBelowTheNoiseOfTwoRunsIsNoSignificantChangeAndSaysWhy) {
  // 1% faster with little noise: the interval excludes 1 but not rate_change_min (5%).
  for (uint32_t seed = 1; seed < 400; ++seed) {
    CompareReport r = Compare(CompareDigest(Steps(40, 0.25, 0.01, seed)),
                              CompareDigest(Steps(40, 0.2475, 0.01, seed + 1000)));
    if (!r.change || r.change->lo <= 1.0) continue;
    EXPECT_EQ(r.outcome, CompareOutcome::kNoChange);
    EXPECT_FALSE(r.change->significant);
    EXPECT_NE(r.conclusion.find("within the 5% two runs of the same job differ by"),
              std::string::npos)
        << r.conclusion;
    EXPECT_NE(r.conclusion.find(fmt::format("interval {:.3f}–", r.change->lo)), std::string::npos)
        << r.conclusion;
    return;
  }
  FAIL() << "no seed gave an interval just above 1";
}

}  // namespace
}  // namespace stallscope::experiment
