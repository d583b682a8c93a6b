#include "experiment/scaling.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope::experiment {
namespace {

/// A digest whose ranks step `step_s` each, with slow steps every 10th where `slow` says.
RunDigest ScalingDigest(int ranks, double step_s, bool saw, int n = 60) {
  RunDigest d;
  for (int i = 0; i < n; ++i) d.step_s.push_back(step_s * ((saw && i % 10 == 9) ? 12 : 1));
  d.rate = analysis::EstimateRate(d.step_s);
  for (int r = 0; r < ranks; ++r) {
    RankDigest rd;
    rd.rank = r;
    rd.steps = n;
    rd.median_step_s = step_s;
    rd.variation_ratio = saw ? 1.8 : 0.1;
    rd.phases.emplace_back("forward_pass", n, n * step_s / 2);
    d.ranks.push_back(rd);
  }
  return d;
}

analysis::PeriodicPhase Periodic(int rank, const std::string& phase) {
  analysis::PeriodicPhase p;
  p.rank = rank;
  p.phase = phase;
  p.every_steps = 10;
  p.occurrences = 6;
  p.extra_s_each = 0.5;
  p.share_of_wall = 0.4;
  p.steps = {10, 20, 30, 40, 50, 60};
  return p;
}

std::vector<ScalingRun> Runs(RunDigest one, RunDigest two) {
  return {{1, {"torchrun", "--nproc_per_node", "1", "t.py"}, std::move(one), ""},
          {2, {"torchrun", "--nproc_per_node", "2", "t.py"}, std::move(two), ""}};
}

TEST(ConcludeScaling, RankZeroWorkingWhileTheOthersWaitIsMainRankSideWork) {
  RunDigest two = ScalingDigest(2, 0.05, true);
  two.periodic = {Periodic(0, "evaluation"), Periodic(1, "comm_wait")};
  two.ranks[0].phases.emplace_back("evaluation", 6, 3.0);
  two.ranks[0].median_phase_s = {{"forward_pass", 0.025}, {"comm_wait", 0.001}};
  two.ranks[1].median_phase_s = {{"forward_pass", 0.025}, {"comm_wait", 0.002}};
  auto c = ConcludeScaling(Runs(ScalingDigest(1, 0.05, true), two));
  EXPECT_EQ(c.cls, ScalingClass::kMainRankSideWork) << c.text;
  EXPECT_NE(c.text.find("rank 0 alone does evaluation every 10 steps"), std::string::npos)
      << c.text;
  EXPECT_NE(c.text.find("rank 1 waits"), std::string::npos) << c.text;
  ASSERT_TRUE(c.cost_fraction);
  EXPECT_NEAR(*c.cost_fraction, 0.4, 1e-9);
  bool only = false;
  for (const auto& e : c.evidence) only |= e.find("only rank 0 records evaluation") == 0;
  EXPECT_TRUE(only);
  ASSERT_FALSE(c.fixes.empty());
}

TEST(ConcludeScaling, EveryRankDoingTheSameWorkIsNotMainRankSideWork) {
  RunDigest two = ScalingDigest(2, 0.05, true);
  two.periodic = {Periodic(0, "checkpointing"), Periodic(1, "checkpointing")};
  auto c = ConcludeScaling(Runs(ScalingDigest(1, 0.05, true), two));
  EXPECT_EQ(c.cls, ScalingClass::kSawtoothInEveryProcess) << c.text;
  // Slow at other steps on the other rank: no waiting on rank 0's work.
  RunDigest other = ScalingDigest(2, 0.05, true);
  other.periodic = {Periodic(0, "evaluation"), Periodic(1, "comm_wait")};
  other.periodic[1].steps = {5, 15, 25, 35, 45, 55};
  EXPECT_NE(ConcludeScaling(Runs(ScalingDigest(1, 0.05, false), other)).cls,
            ScalingClass::kMainRankSideWork);
  // A rank slow in its loading twice, the other waiting then: noise, not side work (1% of the
  // run, irregular).
  RunDigest rare = ScalingDigest(2, 0.05, false);
  rare.periodic = {Periodic(1, "data_loading"), Periodic(0, "comm_wait")};
  rare.periodic[0].every_steps = 0;
  rare.periodic[0].occurrences = 2;
  rare.periodic[0].share_of_wall = 0.01;
  rare.periodic[0].steps = {10, 20};
  EXPECT_EQ(ConcludeScaling(Runs(ScalingDigest(1, 0.05, false), rare)).cls, ScalingClass::kScales);
}

// From a CI run of the 2-rank straggler example beside a CPU hog: rank 1 loads slowly at every
// step, and its noise made 4 of its steps slow "every 2 steps", rank 0 waiting at the same ones.
TEST(ConcludeScaling, AStragglersNoiseIsNotMainRankSideWork) {
  RunDigest two = ScalingDigest(2, 0.097, false, 48);
  two.periodic = {Periodic(1, "data_loading"), Periodic(0, "comm_wait")};
  for (auto& p : two.periodic) {
    p.every_steps = 2;
    p.occurrences = 4;
    p.extra_s_each = 0.06;
    p.share_of_wall = 0.05;
    p.steps = {20, 22, 24, 26};
  }
  two.ranks[0].median_phase_s = {{"comm_wait", 0.048}, {"data_loading", 0.003}};
  two.ranks[1].median_phase_s = {{"comm_wait", 0.001}, {"data_loading", 0.065}};
  ScalingConclusion c = ConcludeScaling(Runs(ScalingDigest(1, 0.046, false, 48), two));
  EXPECT_EQ(c.cls, ScalingClass::kMultiProcessOverhead) << c.text;
  bool uneven = false;
  for (const auto& e : c.evidence) uneven |= e.find("rank 0 waits in comm_wait 48") == 0;
  EXPECT_TRUE(uneven) << ::testing::PrintToString(c.evidence);
  // A straggler verdict says so in its own evidence: the line is not repeated.
  two.principal = diagnose::Finding{};
  two.principal->cls = diagnose::FindingClass::kStraggler;
  c = ConcludeScaling(Runs(ScalingDigest(1, 0.046, false, 48), two));
  EXPECT_EQ(c.cls, ScalingClass::kMultiProcessOverhead) << c.text;
  for (const auto& e : c.evidence)
    EXPECT_EQ(e.find("rank 0 waits in comm_wait"), std::string::npos);
  two.principal.reset();
  // Without the waiting rank's comm_wait phase, rank 1's longer loading at every step says it.
  two.ranks[0].median_phase_s.erase("comm_wait");
  c = ConcludeScaling(Runs(ScalingDigest(1, 0.046, false, 48), two));
  EXPECT_EQ(c.cls, ScalingClass::kMultiProcessOverhead) << c.text;
  uneven = false;
  for (const auto& e : c.evidence) uneven |= e.find("rank 1 spends 65") == 0;
  EXPECT_TRUE(uneven) << ::testing::PrintToString(c.evidence);
  // The same slow steps with even ranks at the others are side work.
  two.ranks[1].median_phase_s["data_loading"] = 0.004;
  EXPECT_EQ(ConcludeScaling(Runs(ScalingDigest(1, 0.046, false, 48), two)).cls,
            ScalingClass::kMainRankSideWork);
}

TEST(ConcludeScaling, SmoothAloneSawTogetherIsCrossRankSync) {
  auto c = ConcludeScaling(Runs(ScalingDigest(1, 0.05, false), ScalingDigest(2, 0.05, true)));
  EXPECT_EQ(c.cls, ScalingClass::kCrossRankSync) << c.text;
  EXPECT_NE(c.text.find("variation 0.10 → 1.80"), std::string::npos) << c.text;
}

TEST(ConcludeScaling, SmoothButSlowerIsOverheadAndSameSpeedScales) {
  auto slow = ConcludeScaling(Runs(ScalingDigest(1, 0.05, false), ScalingDigest(2, 0.08, false)));
  EXPECT_EQ(slow.cls, ScalingClass::kMultiProcessOverhead) << slow.text;
  EXPECT_NE(slow.text.find("1.60× as long"), std::string::npos) << slow.text;
  ASSERT_TRUE(slow.change);
  EXPECT_TRUE(slow.change->significant);
  auto same = ConcludeScaling(Runs(ScalingDigest(1, 0.05, false), ScalingDigest(2, 0.051, false)));
  EXPECT_EQ(same.cls, ScalingClass::kScales) << same.text;
}

TEST(ConcludeScaling, ARunWithoutStepsGivesNoConclusion) {
  auto runs = Runs(ScalingDigest(1, 0.05, false), ScalingDigest(2, 0.05, false));
  runs[1].run.reset();
  runs[1].failure = "failed: exit 1";
  auto c = ConcludeScaling(runs);
  EXPECT_EQ(c.cls, ScalingClass::kNone);
  EXPECT_NE(c.text.find("2-process run gave no steps/s (failed: exit 1)"), std::string::npos)
      << c.text;
}

TEST(GpuUse, MeanAndSpreadOfTheJobsGpus) {
  RunDigest d;
  EXPECT_FALSE(JobGpuUtil(d));
  d.job_gpus = {{0, 90}, {1, 50}};
  EXPECT_NEAR(*JobGpuUtil(d), 70, 1e-9);
  EXPECT_NEAR(*GpuUtilSpread(d), 40, 1e-9);
  d.job_gpus.pop_back();
  EXPECT_FALSE(GpuUtilSpread(d));
}

}  // namespace
}  // namespace stallscope::experiment
