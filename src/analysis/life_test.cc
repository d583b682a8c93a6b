#include "analysis/life.h"

#include <vector>

#include <gtest/gtest.h>

namespace stallscope::analysis {
namespace {

/// `n` steps of `s` seconds.
std::vector<double> Flat(size_t n, double s) { return std::vector<double>(n, s); }

/// `base` with `prefix` in front.
std::vector<double> After(std::vector<double> prefix, const std::vector<double>& base) {
  prefix.insert(prefix.end(), base.begin(), base.end());
  return prefix;
}

/// A steady loop with a little noise: 10 ms ± 0.5 ms, deterministic.
std::vector<double> Noisy(size_t n) {
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) out.push_back(0.010 + 0.0005 * static_cast<double>(i % 5) - 0.001);
  return out;
}

TEST(WarmupSteps, NoneOrOneStepHasNoWarmup) {
  EXPECT_EQ(WarmupSteps({}), 0u);
  EXPECT_EQ(WarmupSteps(std::vector<double>{16.0}), 0u);
}

TEST(WarmupSteps, ASixteenSecondFirstStepIsWarmup) {
  // The H100 ResNet-50: a 16 s first forward/backward (cuDNN autotuning), then ~0.25 s steps.
  EXPECT_EQ(WarmupSteps(After({16.0}, Flat(80, 0.25))), 1u);
  EXPECT_EQ(WarmupSteps(After({16.0}, Noisy(80))), 1u);
}

TEST(WarmupSteps, ACompileSpikeOverStepsOneToThree) {
  EXPECT_EQ(WarmupSteps(After({5.0, 3.0, 2.0}, Noisy(60))), 3u);
  // A fast step inside the spike does not end it: two slow steps follow within the window.
  EXPECT_EQ(WarmupSteps(After({5.0, 0.010, 3.0, 2.0}, Noisy(60))), 4u);
}

TEST(WarmupSteps, ASlowRampEndsWhereTheStepsSettle) {
  std::vector<double> ramp = {0.08, 0.06, 0.04, 0.03, 0.02};
  EXPECT_EQ(WarmupSteps(After(ramp, Noisy(60))), 5u);
}

TEST(WarmupSteps, LaterSlowStepsStayInTheSteadyState) {
  // An epoch boundary at step 40 and a checkpoint every 20 steps are not warm-up.
  std::vector<double> steps = Noisy(100);
  steps[40] = 0.5;
  for (size_t i = 19; i < steps.size(); i += 20) steps[i] = 0.3;
  EXPECT_EQ(WarmupSteps(steps), 0u);
  // One noisy step early on is no warm-up either.
  steps[2] = 0.05;
  EXPECT_EQ(WarmupSteps(steps), 0u);
  // ... nor side work every third step from the start (a settled window may have as many slow
  // steps as the steady state has).
  std::vector<double> dense = Noisy(90);
  for (size_t i = 0; i < dense.size(); i += 3) dense[i] = 0.2;
  dense[0] = 0.010;
  EXPECT_EQ(WarmupSteps(dense), 0u);
}

TEST(WarmupSteps, AnOscillatingLoaderIsNotWarmup) {
  // Every 4th step waits for data (seed 001 T7); the first batches came prefetched.
  std::vector<double> steps;
  for (size_t i = 0; i < 120; ++i) steps.push_back(i % 4 == 3 ? 0.12 : 0.01);
  EXPECT_EQ(WarmupSteps(steps), 0u);
  EXPECT_EQ(WarmupSteps(After({3.0}, steps)), 1u);
}

TEST(WarmupSteps, ThreeStepsKeepTwo) {
  EXPECT_EQ(WarmupSteps(std::vector<double>{16.0, 0.2, 0.2}), 1u);
  EXPECT_EQ(WarmupSteps(std::vector<double>{0.2, 0.2, 0.2}), 0u);
  EXPECT_EQ(WarmupSteps(std::vector<double>{10.0, 0.1}), 1u);
  EXPECT_EQ(WarmupSteps(std::vector<double>{0.1, 10.0}), 0u);
}

TEST(WarmupSteps, AtMostHalfTheSteps) {
  // Still slow past its middle (25 slow steps of 40): the second half is the steady state.
  EXPECT_EQ(WarmupSteps(After(Flat(25, 1.0), Flat(15, 0.1))), 20u);
  // A slow decay settles where a step is no longer far above the second half's level.
  std::vector<double> decay;
  for (size_t i = 0; i < 40; ++i) decay.push_back(10.0 / static_cast<double>(i + 1));
  EXPECT_EQ(WarmupSteps(decay), 16u);
}

TEST(WarmupSteps, SmallJitterIsNoWarmup) {
  // Identical steps but the first 20% longer: below warmup_min_excess.
  EXPECT_EQ(WarmupSteps(After({0.012}, Flat(50, 0.010))), 0u);
  EXPECT_EQ(WarmupSteps(After({0.016}, Flat(50, 0.010))), 1u);
}

TEST(StageTracker, StartupWarmupThenSteadyForGood) {
  StageTracker t;
  EXPECT_EQ(t.stage(), RunStage::kStartup);
  int64_t now = 1'000'000'000;
  t.Begin(now);
  EXPECT_EQ(t.stage(), RunStage::kStartup);
  now += 16'000'000'000;  // a 16 s first step
  t.Step(now);
  EXPECT_EQ(t.stage(), RunStage::kWarmup);
  for (int i = 0; i < 4; ++i) t.Step(now += 250'000'000);
  EXPECT_EQ(t.stage(), RunStage::kWarmup) << "four settled steps are not enough";
  t.Step(now += 250'000'000);
  EXPECT_EQ(t.stage(), RunStage::kSteady);
  EXPECT_EQ(t.warmup_steps(), 1u);
  EXPECT_EQ(t.steps(), 6);
  t.Step(now += 20'000'000'000);  // a checkpoint later stays steady
  EXPECT_EQ(t.stage(), RunStage::kSteady);
}

TEST(StageTracker, ABoundaryWithoutABeginOnlyStartsTheNext) {
  StageTracker t;
  t.Step(5);
  EXPECT_EQ(t.steps(), 0);
  EXPECT_EQ(t.stage(), RunStage::kStartup);
  t.Step(10);
  EXPECT_EQ(t.steps(), 1);
  EXPECT_EQ(t.stage(), RunStage::kWarmup);
}

TEST(RunStageName, EveryStage) {
  EXPECT_EQ(RunStageName(RunStage::kStartup), "start-up");
  EXPECT_EQ(RunStageName(RunStage::kWarmup), "warm-up");
  EXPECT_EQ(RunStageName(RunStage::kSteady), "steady");
  EXPECT_EQ(RunStageName(RunStage::kTail), "tail");
}

}  // namespace
}  // namespace stallscope::analysis
