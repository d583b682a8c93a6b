#include "experiment/passes.h"

#include <vector>

#include <gtest/gtest.h>

namespace stallscope::experiment {
namespace {

/// A pass whose run has `n` steps of `step_s` (±10% alternating) and the given verdict.
PassResult Pass(PassId id, double step_s, std::optional<diagnose::FindingClass> verdict,
                bool applied = true, int n = 40) {
  PassResult p;
  p.spec.id = id;
  p.spec.name = id == PassId::kA   ? "baseline"
                : id == PassId::kB ? "side work off"
                                   : "synthetic data";
  RunDigest d;
  for (int i = 0; i < n; ++i) d.step_s.push_back(step_s * (i % 2 == 0 ? 0.9 : 1.1));
  d.rate = analysis::EstimateRate(d.step_s);
  d.experiment.present = applied;
  if (id == PassId::kB) d.experiment.saves_skipped = 2;
  if (id == PassId::kC) d.experiment.synthetic_batches_served = n;
  if (verdict) {
    diagnose::Finding f;
    f.cls = *verdict;
    d.principal = f;
  }
  p.run = d;
  return p;
}

TEST(StandardPasses, EveryPassSendsSavesToScratchAndOnlyOneControlMore) {
  auto passes = StandardPasses("/tmp/x/scratch", 3);
  ASSERT_EQ(passes.size(), 4u);
  EXPECT_EQ(passes[3].env, passes[0].env);  // A2: the baseline again
  EXPECT_EQ(passes[0].env, std::vector<std::string>{"STALLSCOPE_SCRATCH_DIR=/tmp/x/scratch"});
  EXPECT_EQ(passes[1].env.back(), "STALLSCOPE_SIDE_WORK_OFF=1");
  EXPECT_EQ(passes[2].env.back(), "STALLSCOPE_SYNTHETIC_DATA=3");
}

TEST(StandardPasses, IdsRunInEnumOrderWithTheirNames) {
  auto passes = StandardPasses("/tmp/x/scratch");
  ASSERT_EQ(passes.size(), std::size(kPassIdNames));
  for (size_t i = 0; i < passes.size(); ++i) {
    EXPECT_EQ(passes[i].id, kPassIdNames[i].first);
    EXPECT_EQ(PassIdName(passes[i].id), kPassIdNames[i].second);
  }
  EXPECT_EQ(PassIdName(PassId::kA2), "A2");  // the run directory's and passes.json's name
}

TEST(ConcludePasses, SyntheticDataRecoveringNamesTheInputPipelineAndAgrees) {
  std::vector<PassResult> p = {Pass(PassId::kA, 0.2, diagnose::FindingClass::kDataBoundCpu),
                               Pass(PassId::kB, 0.2, diagnose::FindingClass::kDataBoundCpu),
                               Pass(PassId::kC, 0.08, diagnose::FindingClass::kGpuBound)};
  auto c = ConcludePasses(p);
  EXPECT_EQ(c.recovering, PassId::kC);
  ASSERT_TRUE(c.agrees);
  EXPECT_TRUE(*c.agrees);
  EXPECT_NE(c.text.find("input pipeline"), std::string::npos) << c.text;
  EXPECT_NE(c.text.find("matches the verdict's data_bound_cpu"), std::string::npos) << c.text;
  ASSERT_TRUE(p[2].vs_baseline);
  EXPECT_NEAR(p[2].vs_baseline->ratio, 2.5, 0.01);
  EXPECT_TRUE(p[2].vs_baseline->significant);
  EXPECT_FALSE(p[1].vs_baseline->significant);
}

TEST(ConcludePasses, SideWorkOffRecoveringNamesPeriodicSideWork) {
  std::vector<PassResult> p = {Pass(PassId::kA, 0.2, diagnose::FindingClass::kPeriodicSideWork),
                               Pass(PassId::kB, 0.1, diagnose::FindingClass::kGpuBound),
                               Pass(PassId::kC, 0.2, diagnose::FindingClass::kPeriodicSideWork)};
  auto c = ConcludePasses(p);
  EXPECT_EQ(c.recovering, PassId::kB);
  EXPECT_TRUE(c.agrees.value_or(false));
}

TEST(ConcludePasses, NoRecoveryMatchesAComputeBoundVerdict) {
  std::vector<PassResult> p = {Pass(PassId::kA, 0.2, diagnose::FindingClass::kGpuBound),
                               Pass(PassId::kB, 0.195, diagnose::FindingClass::kGpuBound),
                               Pass(PassId::kC, 0.19, diagnose::FindingClass::kGpuBound)};
  auto c = ConcludePasses(p);
  EXPECT_EQ(c.recovering, std::nullopt);
  EXPECT_TRUE(c.agrees.value_or(false));
  EXPECT_NE(c.text.find("no pass recovers 10%"), std::string::npos) << c.text;
}

TEST(ConcludePasses, ADisagreementIsSaidLoudly) {
  std::vector<PassResult> p = {Pass(PassId::kA, 0.2, diagnose::FindingClass::kPeriodicSideWork),
                               Pass(PassId::kB, 0.2, diagnose::FindingClass::kPeriodicSideWork),
                               Pass(PassId::kC, 0.05, diagnose::FindingClass::kGpuBound)};
  auto c = ConcludePasses(p);
  EXPECT_EQ(c.recovering, PassId::kC);
  EXPECT_FALSE(c.agrees.value_or(true));
  EXPECT_NE(c.text.find("DISAGREES with the verdict's periodic_side_work"), std::string::npos);
}

TEST(ConcludePasses, ASmallSignificantGainIsNotARecovery) {
  // 8% faster, significant with this little noise, but below pass_recovery_min (10%).
  std::vector<PassResult> p = {Pass(PassId::kA, 0.2, std::nullopt, true, 200),
                               Pass(PassId::kC, 0.185, std::nullopt, true, 200)};
  auto c = ConcludePasses(p);
  EXPECT_TRUE(p[1].vs_baseline->significant);
  EXPECT_EQ(c.recovering, std::nullopt);
  EXPECT_FALSE(c.agrees);
  EXPECT_NE(c.text.find("no verdict"), std::string::npos);
}

// From a CI run of the compute-bound example: loading was 1.5% of A's step, in the training
// process, yet the synthetic batches ran 1.14× faster (the same batches stay in the caches).
TEST(ConcludePasses, SyntheticDataFasterThanItsLoadingExplainsIsNotCounted) {
  std::vector<PassResult> p = {
      Pass(PassId::kA, 0.2, diagnose::FindingClass::kGpuBound, true, 200),
      Pass(PassId::kC, 0.175, diagnose::FindingClass::kGpuBound, true, 200)};
  p[0].run->data_share = 0.015;
  p[0].run->loader = rundir::LoaderInfo{};
  p[0].run->loader->num_workers = 0;
  auto c = ConcludePasses(p);
  EXPECT_EQ(c.recovering, std::nullopt) << c.text;
  EXPECT_TRUE(c.agrees.value_or(false)) << c.text;
  ASSERT_EQ(c.caveats.size(), 1u);
  EXPECT_NE(c.caveats[0].find("C ran at 1.14× A's rate, but A spent 1.5% of its step loading "
                              "data in the training process (num_workers=0): removing all of it "
                              "explains at most 1.02×"),
            std::string::npos)
      << c.caveats[0];
  // Loading a third of the step explains up to 1.5×: a 1.14× recovery counts.
  p[0].run->data_share = 0.33;
  c = ConcludePasses(p);
  EXPECT_EQ(c.recovering, PassId::kC) << c.text;
  EXPECT_TRUE(c.caveats.empty());
  // The data-bound example from CI: loading 95.1% of a 110.8 ms step, C 22.7× faster. C saves
  // 95.6% of A's step: within the loading and 5% (a bound on the ratio, 1 / (1 - 0.951) = 20.4×,
  // would have refused it).
  std::vector<PassResult> data = {
      Pass(PassId::kA, 0.1108, diagnose::FindingClass::kDataBoundCpu, true, 200),
      Pass(PassId::kC, 0.00488, diagnose::FindingClass::kGpuBound, true, 200)};
  data[0].run->data_share = 0.951;
  data[0].run->loader = rundir::LoaderInfo{};
  data[0].run->loader->num_workers = 0;
  c = ConcludePasses(data);
  EXPECT_EQ(c.recovering, PassId::kC) << c.text;
  EXPECT_TRUE(c.caveats.empty()) << c.caveats[0];
  // With worker processes the bound does not hold (they compete for the CPUs from outside
  // data_loading): the recovery counts.
  p[0].run->data_share = 0.015;
  p[0].run->loader->num_workers = 2;
  EXPECT_EQ(ConcludePasses(p).recovering, PassId::kC);
  p[0].run->loader->num_workers.reset();
  EXPECT_EQ(ConcludePasses(p).recovering, PassId::kC);
}

TEST(ConcludePasses, APassTheHooksDidNotApplyIsNotEvidence) {
  std::vector<PassResult> p = {
      Pass(PassId::kA, 0.2, diagnose::FindingClass::kDataBoundCpu),
      Pass(PassId::kC, 0.05, diagnose::FindingClass::kGpuBound, /*applied=*/false)};
  auto c = ConcludePasses(p);
  EXPECT_EQ(c.recovering, std::nullopt);
  EXPECT_FALSE(p[1].vs_baseline);
  EXPECT_NE(p[1].failure.find("not applied"), std::string::npos);
}

TEST(ConcludePasses, APassThatRemovedNothingIsNoEvidenceButACaveat) {
  // B ran 2× faster without skipping anything: the machine got faster between the passes.
  std::vector<PassResult> p = {Pass(PassId::kA, 0.2, diagnose::FindingClass::kGpuBound),
                               Pass(PassId::kB, 0.1, diagnose::FindingClass::kGpuBound)};
  p[1].run->experiment.saves_skipped = 0;
  auto c = ConcludePasses(p);
  EXPECT_TRUE(p[1].removed_nothing);
  EXPECT_EQ(c.recovering, std::nullopt);
  ASSERT_EQ(c.caveats.size(), 1u);
  EXPECT_NE(c.caveats[0].find("the machine's speed changed between passes"), std::string::npos);
  EXPECT_TRUE(c.agrees.value_or(false));
}

TEST(ConcludePasses, DriftBetweenAAndA2RaisesTheBar) {
  // A2 ran 1.5× faster than A: the machine sped up. C's 1.3× against the pooled baseline is no
  // longer a recovery (the bar is 1.1 × 1.5 = 1.65×), and a CAVEAT says why.
  std::vector<PassResult> p = {Pass(PassId::kA, 0.3, diagnose::FindingClass::kGpuBound),
                               Pass(PassId::kC, 0.15, diagnose::FindingClass::kGpuBound),
                               Pass(PassId::kA2, 0.2, diagnose::FindingClass::kGpuBound)};
  auto c = ConcludePasses(p);
  EXPECT_NEAR(c.required_ratio, 1.65, 0.01);
  EXPECT_NEAR(p[2].vs_baseline->ratio, 1.5, 0.01);
  EXPECT_NEAR(p[1].vs_baseline->ratio, 1.67, 0.01);  // against A+A2 pooled (mean step 0.25 s)
  EXPECT_EQ(c.recovering, PassId::kC);               // 1.67 ≥ 1.65: still clears it
  ASSERT_EQ(c.caveats.size(), 1u);
  EXPECT_NE(c.caveats[0].find("A ran at 1.50× its first rate"), std::string::npos) << c.caveats[0];
  p[1] = Pass(PassId::kC, 0.17, diagnose::FindingClass::kGpuBound);
  EXPECT_EQ(ConcludePasses(p).recovering, std::nullopt);
}

TEST(ConcludePasses, NoBaselineNoConclusion) {
  std::vector<PassResult> p = {Pass(PassId::kC, 0.05, std::nullopt)};
  PassResult a;
  a.spec.id = PassId::kA;
  a.failure = "failed: exit 1";
  p.insert(p.begin(), a);
  auto c = ConcludePasses(p);
  EXPECT_EQ(c.recovering, std::nullopt);
  EXPECT_NE(c.text.find("pass A gave no steps/s (failed: exit 1)"), std::string::npos) << c.text;
}

TEST(PassForClass, InputPipelineSideWorkOrNone) {
  EXPECT_EQ(PassForClass(diagnose::FindingClass::kDataBoundIo), PassId::kC);
  EXPECT_EQ(PassForClass(diagnose::FindingClass::kPeriodicSideWork), PassId::kB);
  EXPECT_EQ(PassForClass(diagnose::FindingClass::kHostSyncOrLogging), std::nullopt);
}

}  // namespace
}  // namespace stallscope::experiment
