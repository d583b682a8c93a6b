#include "diagnose/life.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope::diagnose {
namespace {

constexpr int64_t kS = 1'000'000'000;
constexpr int64_t kT0 = 1000 * kS;  // the job's start (run.json start_mono_ns)

analysis::StepRecord Step(int64_t index, int64_t begin_ns, int64_t end_ns,
                          std::map<std::string, double> phase_s) {
  analysis::StepRecord s;
  s.index = index;
  s.begin_ns = begin_ns;
  s.end_ns = end_ns;
  s.phase_s = std::move(phase_s);
  return s;
}

/// Rank `rank` (pid 100 + rank): start-up until kT0 + 18 s (a 5.6 s first batch from 12.4 s), a
/// 2 s warm-up step (forward +1.8 s), then 100 steps of 0.1 s, and the tail to 31 s.
analysis::RankSteps Rank(int32_t rank, int64_t shift_ns = 0) {
  analysis::RankSteps r;
  r.rank = rank;
  r.pid = 100 + rank;
  int64_t t = kT0 + 18 * kS + shift_ns;
  r.warmup.push_back(
      Step(1, t, t + 2 * kS, {{"forward_pass", 1.85}, {"backward_pass", 0.1}, {"other", 0.05}}));
  t += 2 * kS;
  for (int64_t i = 2; i <= 101; ++i) {
    r.steps.push_back(Step(i, t, t + kS / 10,
                           {{"forward_pass", 0.05}, {"backward_pass", 0.045}, {"other", 0.005}}));
    t += kS / 10;
  }
  r.count = 100;
  r.life.first_event_ns = kT0 + 12'400'000'000 + shift_ns;
  r.life.steps_begin_ns = kT0 + 18 * kS + shift_ns;
  r.life.steady_begin_ns = kT0 + 20 * kS + shift_ns;
  r.life.steady_end_ns = t;
  r.life.last_event_ns = t + kS / 2;
  r.life.startup_phase_s = {{"data_loading", 5.6}};
  r.life.tail_phase_s = {{"checkpointing", 0.5}};
  return r;
}

rundir::RunMeta Meta() {
  rundir::RunMeta m;
  m.start_mono_ns = kT0;
  return m;
}

std::vector<rundir::PythonProcess> Python() {
  rundir::PythonProcess p;
  p.pid = 100;
  p.start_ns = kT0 + kS / 10;
  p.hooks_ns = kT0 + 4 * kS;
  return {p};
}

TEST(BuildRunLife, StagesPartsAndTheSteadyWindow) {
  analysis::PhaseAnalysis phases;
  phases.ranks.push_back(Rank(0));
  rundir::JobInfo info;
  info.cuda_init.push_back({100, 0, kT0 + 10 * kS, kT0 + 10 * kS + kS / 2, ""});
  info.backends.push_back({100, 0, true, false, std::nullopt, true});
  const RunLife l = BuildRunLife(Meta(), 31.0, phases, Python(), info, 4);
  ASSERT_TRUE(l.has_steps);
  EXPECT_EQ(l.rank, 0);
  EXPECT_DOUBLE_EQ(l.startup_s, 18.0);
  EXPECT_DOUBLE_EQ(l.warmup_s, 2.0);
  EXPECT_EQ(l.warmup_steps, 1);
  EXPECT_DOUBLE_EQ(l.steady_s, 10.0);
  EXPECT_EQ(l.steady_steps, 100);
  EXPECT_DOUBLE_EQ(l.tail_s, 1.0);
  EXPECT_EQ(l.steady_begin_ns, kT0 + 20 * kS);
  EXPECT_EQ(l.steady_end_ns, kT0 + 30 * kS);
  EXPECT_TRUE(l.sure);
  EXPECT_TRUE(l.mostly_startup) << "20 of 31 s";
  EXPECT_NEAR(l.StartupShare(), 20.0 / 31.0, 1e-12);
  // Start-up, in the order it happened: what no note explains is the job's own set-up.
  ASSERT_EQ(l.startup.size(), 5u);
  EXPECT_EQ(l.startup[0].kind, LifePartKind::kInterpreter);
  EXPECT_DOUBLE_EQ(l.startup[0].seconds, 0.1);
  EXPECT_EQ(l.startup[1].kind, LifePartKind::kImportTorch);
  EXPECT_DOUBLE_EQ(l.startup[1].seconds, 3.9);
  EXPECT_EQ(l.startup[2].kind, LifePartKind::kSetup);
  EXPECT_NEAR(l.startup[2].seconds, 18.0 - 0.1 - 3.9 - 0.5 - 5.6, 1e-9);
  EXPECT_EQ(l.startup[3].kind, LifePartKind::kCudaInit);
  EXPECT_DOUBLE_EQ(l.startup[3].seconds, 0.5);
  EXPECT_EQ(l.startup[4].kind, LifePartKind::kFirstBatch);
  EXPECT_DOUBLE_EQ(l.startup[4].seconds, 5.6);
  EXPECT_EQ(l.startup[4].count, 4);
  // Warm-up: cudnn.benchmark was on, and the forward is what took longer than a steady step.
  ASSERT_GE(l.warmup.size(), 2u);
  EXPECT_EQ(l.warmup[0].kind, LifePartKind::kCudnnBenchmark);
  EXPECT_EQ(l.warmup[1].kind, LifePartKind::kPhase);
  EXPECT_EQ(l.warmup[1].phase, "forward_pass");
  EXPECT_NEAR(l.warmup[1].seconds, 1.8, 1e-9);
  // The tail: the final save, then the exit.
  ASSERT_EQ(l.tail.size(), 2u);
  EXPECT_EQ(l.tail[0].phase, "checkpointing");
  EXPECT_EQ(l.tail[1].kind, LifePartKind::kExit);
  EXPECT_DOUBLE_EQ(l.tail[1].seconds, 0.5);
}

TEST(BuildRunLife, CompilesInTheWarmupAreNamed) {
  analysis::PhaseAnalysis phases;
  phases.ranks.push_back(Rank(0));
  rundir::JobInfo info;
  info.compiles.push_back({100, 0, kT0 + 18 * kS + kS / 10, kT0 + 19 * kS, "m.py:3 fwd"});
  info.compiles.push_back({100, 0, kT0 + 19 * kS, kT0 + 19 * kS + kS / 2, "m.py:9 loss"});
  info.compiles.push_back({100, 0, kT0 + 25 * kS, kT0 + 25 * kS + kS / 10, "later"});  // steady
  info.compiles.push_back({999, 0, kT0 + 18 * kS, kT0 + 19 * kS, "another process"});
  const RunLife l = BuildRunLife(Meta(), 31.0, phases, Python(), info, 0);
  ASSERT_FALSE(l.warmup.empty());
  EXPECT_EQ(l.warmup[0].kind, LifePartKind::kCompile);
  EXPECT_EQ(l.warmup[0].count, 2);
  EXPECT_NEAR(l.warmup[0].seconds, 1.4, 1e-9);
}

TEST(BuildRunLife, TheJobsSteadyWindowIsWhileEveryRankWasSteady) {
  analysis::PhaseAnalysis phases;
  phases.ranks.push_back(Rank(1, kS / 2));  // rank 1 half a second later
  phases.ranks.push_back(Rank(0));
  const RunLife l = BuildRunLife(Meta(), 31.0, phases, {}, {}, 0);
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.steady_begin_ns, kT0 + 20 * kS + kS / 2);
  EXPECT_EQ(l.steady_end_ns, kT0 + 30 * kS);
  // Without Python notes nothing splits the start-up but the first batch.
  ASSERT_EQ(l.startup.size(), 2u);
  EXPECT_EQ(l.startup[0].kind, LifePartKind::kSetup);
  EXPECT_NEAR(l.startup[0].seconds, 12.4, 1e-9);
}

TEST(BuildRunLife, AShortSteadyStateIsNoSureVerdict) {
  analysis::PhaseAnalysis phases;
  analysis::RankSteps r = Rank(0);
  r.steps.resize(15);  // 1.5 s
  r.count = 15;
  r.life.steady_end_ns = r.steps.back().end_ns;
  phases.ranks.push_back(r);
  const RunLife l = BuildRunLife(Meta(), 22.0, phases, {}, {}, 0);
  EXPECT_FALSE(l.sure);
  EXPECT_EQ(l.steady_steps, 15);
}

TEST(BuildRunLife, NoStepsNoLife) {
  const RunLife l = BuildRunLife(Meta(), 5.0, {}, {}, {}, 0);
  EXPECT_FALSE(l.has_steps);
  EXPECT_FALSE(l.sure);
  EXPECT_FALSE(l.mostly_startup);
  EXPECT_TRUE(l.startup.empty());
}

TEST(LifePartName, EveryKind) {
  EXPECT_EQ(LifePartName(LifePartKind::kInterpreter), "interpreter");
  EXPECT_EQ(LifePartName(LifePartKind::kImportTorch), "import_torch");
  EXPECT_EQ(LifePartName(LifePartKind::kSetup), "setup");
  EXPECT_EQ(LifePartName(LifePartKind::kCudaInit), "cuda_init");
  EXPECT_EQ(LifePartName(LifePartKind::kFirstBatch), "first_batch");
  EXPECT_EQ(LifePartName(LifePartKind::kPhase), "phase");
  EXPECT_EQ(LifePartName(LifePartKind::kCompile), "compile");
  EXPECT_EQ(LifePartName(LifePartKind::kCudnnBenchmark), "cudnn_benchmark");
  EXPECT_EQ(LifePartName(LifePartKind::kExit), "exit");
}

}  // namespace
}  // namespace stallscope::diagnose
