#include "analysis/ledger.h"

#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace stallscope::analysis {
namespace {

/// A phase's share of a rank's steps, and its GPU share when CUDA events timed every instance.
struct PhaseSpec {
  double host = 0;
  std::optional<double> gpu = std::nullopt;
};
using RankSpec = std::map<std::string, PhaseSpec>;

/// Ranks of `steps` steps of `step_s` seconds each, with the phases' shares as given.
PhaseAnalysis Analysis(const std::vector<RankSpec>& ranks, int64_t steps = 50,
                       double step_s = 0.1) {
  PhaseAnalysis a;
  for (size_t k = 0; k < ranks.size(); ++k) {
    RankSteps r;
    r.rank = static_cast<int32_t>(k);
    r.count = steps;
    r.mean_step_s = step_s;
    r.duration_s = step_s * static_cast<double>(steps);
    r.per_second = 1.0 / step_s;
    a.ranks.push_back(r);
    for (const auto& [name, spec] : ranks[k]) {
      PhaseStats p;
      p.name = name;
      p.rank = r.rank;
      p.count = steps;
      p.share = spec.host;
      p.total_s = spec.host * r.duration_s;
      if (spec.gpu) p.gpu = GpuPhaseTime{steps, *spec.gpu * r.duration_s, 0, 0, *spec.gpu};
      a.phases.push_back(p);
    }
  }
  return a;
}

double Sum(const StepLedger& l) { return std::accumulate(l.parts.begin(), l.parts.end(), 0.0); }

TEST(LedgerPartOfPhase, EveryRecordedPhaseHasItsPart) {
  EXPECT_EQ(LedgerPartOfPhase("forward_pass"), LedgerPart::kCompute);
  EXPECT_EQ(LedgerPartOfPhase("backward_pass"), LedgerPart::kCompute);
  EXPECT_EQ(LedgerPartOfPhase("optimizer_step"), LedgerPart::kCompute);
  EXPECT_EQ(LedgerPartOfPhase("gpu_compute"), LedgerPart::kCompute);
  EXPECT_EQ(LedgerPartOfPhase("data_loading"), LedgerPart::kData);
  EXPECT_EQ(LedgerPartOfPhase("comm_wait"), LedgerPart::kComm);
  EXPECT_EQ(LedgerPartOfPhase("communication"), LedgerPart::kComm);
  EXPECT_EQ(LedgerPartOfPhase("checkpointing"), LedgerPart::kSideWork);
  EXPECT_EQ(LedgerPartOfPhase("eval_forward"), LedgerPart::kSideWork);
  EXPECT_EQ(LedgerPartOfPhase("other"), LedgerPart::kHostWork);
  EXPECT_EQ(LedgerPartOfPhase("my_own_phase"), LedgerPart::kHostWork);
  for (size_t i = 0; i < kLedgerParts; ++i) {
    const auto p = static_cast<LedgerPart>(i);
    EXPECT_EQ(kLedgerPartNames[i].first, p);
    EXPECT_NE(LedgerPartLabel(p, false), "unknown");
  }
  EXPECT_EQ(LedgerPartName(LedgerPart::kRankWait), "rank_wait");
}

TEST(BuildLedger, NoStepsNoLedger) {
  EXPECT_TRUE(BuildLedger(PhaseAnalysis{}).empty());
  EXPECT_TRUE(BuildLedger(Analysis({{{"other", {1.0}}}}, 0)).empty());
}

TEST(BuildLedger, CpuOnlySharesAreTheHostsAndAddUpToOne) {
  Ledger l = BuildLedger(Analysis({{{"data_loading", {0.30}},
                                    {"forward_pass", {0.25}},
                                    {"backward_pass", {0.30}},
                                    {"optimizer_step", {0.05}},
                                    {"checkpointing", {0.04}},
                                    {"my_phase", {0.02}},
                                    {"other", {0.04}}}}));
  ASSERT_FALSE(l.empty());
  ASSERT_EQ(l.ranks.size(), 1u);
  const StepLedger& j = l.job;
  EXPECT_EQ(j.rank, -1);
  EXPECT_EQ(j.steps, 50);
  EXPECT_DOUBLE_EQ(j.step_s, 0.1);
  EXPECT_FALSE(j.compute_on_gpu);
  EXPECT_FALSE(j.gpu_busy);
  EXPECT_NEAR(j.Share(LedgerPart::kCompute), 0.60, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kData), 0.30, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kSideWork), 0.04, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kHostWork), 0.06, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kUnaccounted), 0.0, 1e-12);
  EXPECT_NEAR(Sum(j), 1.0, 1e-12);
  EXPECT_NEAR(j.members.at("my_phase"), 0.02, 1e-12);
  EXPECT_NEAR(j.phase_share.at("data_loading"), 0.30, 1e-12);
}

TEST(BuildLedger, PhasesThatCoverLessThanTheStepLeaveItUnaccounted) {
  Ledger l = BuildLedger(Analysis({{{"data_loading", {0.5}}, {"forward_pass", {0.3}}}}));
  EXPECT_NEAR(l.job.Share(LedgerPart::kUnaccounted), 0.2, 1e-12);
  EXPECT_NEAR(Sum(l.job), 1.0, 1e-12);
}

TEST(BuildLedger, NestedPhasesAreScaledToTheStep) {
  // A phase the job named inside data_loading counts its time twice in the phases' shares.
  Ledger l = BuildLedger(
      Analysis({{{"data_loading", {0.6}}, {"decode", {0.4}}, {"forward_pass", {0.4}}}}));
  EXPECT_NEAR(Sum(l.job), 1.0, 1e-12);
  EXPECT_NEAR(l.job.Share(LedgerPart::kData), 0.6 / 1.4, 1e-12);
  EXPECT_NEAR(l.job.Share(LedgerPart::kUnaccounted), 0.0, 1e-12);
}

// Issue 39's ResNet-50 on an H100: CUDA events keep the GPU busy 88% of each step, and the host
// waits for it 27% of the step outside the compute phases (an .item() in `other`).
TEST(BuildLedger, CudaEventsMakeComputeTheGpusBusyTime) {
  Ledger l = BuildLedger(Analysis({{{"data_loading", {0.10}},
                                    {"forward_pass", {0.20, 0.30}},
                                    {"backward_pass", {0.35, 0.50}},
                                    {"optimizer_step", {0.06, 0.08}},
                                    {"other", {0.29}}}}));
  const StepLedger& j = l.job;
  EXPECT_TRUE(j.compute_on_gpu);
  ASSERT_TRUE(j.gpu_busy);
  EXPECT_NEAR(*j.gpu_busy, 0.88, 1e-12);
  EXPECT_NEAR(j.host_compute, 0.61, 1e-12);
  EXPECT_NEAR(j.host_wait, 0.27, 1e-12) << "the GPU's extra 27% came out of other";
  EXPECT_NEAR(j.Share(LedgerPart::kCompute), 0.88, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kData), 0.10, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kHostWork), 0.02, 1e-12);
  EXPECT_NEAR(Sum(j), 1.0, 1e-12);
  // The rules' view: compute phases at their GPU time, other less what the GPU took.
  EXPECT_NEAR(j.phase_share.at("backward_pass"), 0.50, 1e-12);
  EXPECT_NEAR(j.phase_share.at("other"), 0.02, 1e-12);
}

TEST(BuildLedger, HostTimeInAComputePhaseBeyondTheGpusIsLaunchOverhead) {
  // The H100 run-compute fixture's shape: the optimizer's host time (15%) far beyond its GPU time
  // (2%), backward's GPU time beyond what other and data_loading hold: the rest of backward's
  // GPU time ran under the optimizer's host time.
  Ledger l = BuildLedger(Analysis({{{"data_loading", {0.06}},
                                    {"forward_pass", {0.26, 0.29}},
                                    {"backward_pass", {0.36, 0.62}},
                                    {"optimizer_step", {0.15, 0.02}},
                                    {"other", {0.17}}}}));
  const StepLedger& j = l.job;
  EXPECT_NEAR(*j.gpu_busy, 0.93, 1e-12);
  EXPECT_NEAR(j.host_wait, 0.23, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kCompute), 0.93, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kHostWork), 0.07, 1e-12);
  EXPECT_NEAR(j.members.at("launch:optimizer_step"), 0.07, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kData), 0.0, 1e-12);
  EXPECT_NEAR(Sum(j), 1.0, 1e-12);
}

TEST(BuildLedger, ARankWithoutGpuTimesMakesEveryRankUseHostTime) {
  Ledger l = BuildLedger(Analysis({{{"forward_pass", {0.2, 0.6}}, {"other", {0.8}}},
                                   {{"forward_pass", {0.2}}, {"other", {0.8}}}}));
  EXPECT_FALSE(l.job.compute_on_gpu);
  EXPECT_NEAR(l.ranks[0].Share(LedgerPart::kCompute), 0.2, 1e-12);
  EXPECT_FALSE(l.lockstep);
}

TEST(BuildLedger, IndependentRanksArePooledByTheirTime) {
  PhaseAnalysis a = Analysis({{{"data_loading", {0.8}}, {"forward_pass", {0.2}}},
                              {{"data_loading", {0.2}}, {"forward_pass", {0.8}}}});
  a.ranks[1].duration_s *= 3;  // rank 1 ran three times as long
  Ledger l = BuildLedger(a);
  EXPECT_FALSE(l.lockstep);
  EXPECT_NEAR(l.job.Share(LedgerPart::kData), 0.25 * 0.8 + 0.75 * 0.2, 1e-12);
  EXPECT_NEAR(Sum(l.job), 1.0, 1e-12);
}

// DDP: every rank waits in all-reduce. What every rank waits alike is communication; one rank's
// extra loading makes the other wait: rank_wait, the straggler's (ddp_straggler's shape).
TEST(BuildLedger, LockstepSplitsCommunicationFromWaitingForASlowerRank) {
  Ledger l = BuildLedger(Analysis({
      {{"comm_wait", {0.61}}, {"data_loading", {0.26}}, {"forward_pass", {0.13}}},
      {{"comm_wait", {0.02}}, {"data_loading", {0.88}}, {"forward_pass", {0.10}}},
  }));
  ASSERT_TRUE(l.lockstep);
  EXPECT_NEAR(l.ranks[0].Share(LedgerPart::kComm), 0.02, 1e-12);
  EXPECT_NEAR(l.ranks[0].Share(LedgerPart::kRankWait), 0.59, 1e-12);
  EXPECT_NEAR(l.ranks[1].Share(LedgerPart::kRankWait), 0.0, 1e-12);
  for (const auto& r : l.ranks) EXPECT_NEAR(Sum(r), 1.0, 1e-12) << r.rank;
  const StepLedger& j = l.job;
  EXPECT_NEAR(j.Share(LedgerPart::kComm), 0.02, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kData), 0.26, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kCompute), 0.10, 1e-12);
  EXPECT_NEAR(j.Share(LedgerPart::kRankWait), 0.62, 1e-12);
  EXPECT_NEAR(Sum(j), 1.0, 1e-12);
  EXPECT_NEAR(j.phase_share.at("comm_wait"), 0.02, 1e-12) << "the rules' view: least of ranks";
}

TEST(BuildLedger, BalancedLockstepRanksWaitInCommunication) {
  Ledger l = BuildLedger(Analysis({
      {{"comm_wait", {0.34}}, {"data_loading", {0.06}}, {"forward_pass", {0.6}}},
      {{"comm_wait", {0.31}}, {"data_loading", {0.06}}, {"forward_pass", {0.63}}},
  }));
  EXPECT_NEAR(l.job.Share(LedgerPart::kComm), 0.31, 1e-12);
  EXPECT_NEAR(l.job.Share(LedgerPart::kRankWait), 0.03, 1e-12);
  EXPECT_NEAR(l.job.Share(LedgerPart::kCompute), 0.60, 1e-12);
}

}  // namespace
}  // namespace stallscope::analysis
