#include "diagnose/job_summary.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope::diagnose {
namespace {

/// A lockstep DDP job's phases: every rank steps at `step_s`, waiting `wait_s[rank]` per step.
analysis::PhaseAnalysis Lockstep(double step_s, const std::vector<double>& wait_s) {
  analysis::PhaseAnalysis a;
  for (size_t i = 0; i < wait_s.size(); ++i) {
    analysis::RankSteps steps;
    steps.rank = static_cast<int32_t>(i);
    steps.count = 10;
    steps.per_second = 1 / step_s;
    steps.mean_step_s = step_s;
    a.ranks.push_back(steps);
    analysis::PhaseStats wait;
    wait.name = "comm_wait";
    wait.rank = steps.rank;
    wait.count = 10;
    wait.total_s = wait_s[i] * 10;
    a.phases.push_back(wait);
  }
  return a;
}

rundir::JobNode Placed(const std::string& dir, const std::string& host, int node_rank,
                       std::vector<int32_t> ranks) {
  rundir::JobNode n;
  n.dir = dir;
  n.hostname = host;
  n.node_rank = node_rank;
  n.ranks = std::move(ranks);
  return n;
}

rundir::JobNodes TwoByTwo() {
  rundir::JobNodes job;
  job.world_size = 4;
  job.nodes.push_back(Placed("n0", "a", 0, {0, 1}));
  job.nodes.push_back(Placed("n1", "b", 1, {2, 3}));
  return job;
}

TEST(SummarizeJobTest, NamesTheStragglersNodeInTheVerdict) {
  // Rank 3 works 0.4 s of a 0.5 s step; the others 0.1 s and wait 0.4 s for it.
  rundir::JobNodes job = TwoByTwo();
  Verdict v;
  v.principal.emplace();
  v.principal->cls = FindingClass::kStraggler;
  v.principal->reason = "the others wait for rank 3";
  SummarizeJob(job, Lockstep(0.5, {0.4, 0.4, 0.4, 0.1}), v);
  ASSERT_EQ(job.ranks.size(), 4u);
  EXPECT_EQ(job.ranks[3].node_rank, 1);
  EXPECT_NEAR(job.ranks[3].work_s, 0.4, 1e-9);
  EXPECT_EQ(job.straggler_rank, 3);
  EXPECT_EQ(job.straggler_node, 1);
  EXPECT_NEAR(job.straggler_work_ratio, 4.0, 1e-9);
  EXPECT_NEAR(job.nodes[0].work_s, 0.1, 1e-9);
  EXPECT_NEAR(job.nodes[1].work_s, 0.25, 1e-9);
  EXPECT_EQ(job.nodes[1].steps, 20);
  EXPECT_NEAR(job.nodes[1].steps_per_s, 2.0, 1e-9);
  // CV of the nodes' work (0.1, 0.25) is far over seed 002's 20%: Poor.
  ASSERT_TRUE(job.work_balance.quality.has_value());
  EXPECT_EQ(*job.work_balance.quality, BalanceClass::kPoor);
  EXPECT_FALSE(job.util_balance.cv_pct.has_value());  // no GPUs
  EXPECT_NE(v.principal->reason.find("rank 3 runs on node 1 (b)"), std::string::npos)
      << v.principal->reason;
}

TEST(SummarizeJobTest, NoStragglerFindingNamesNoNode) {
  rundir::JobNodes job = TwoByTwo();
  Verdict v;
  SummarizeJob(job, Lockstep(0.5, {0.1, 0.1, 0.1, 0.1}), v);
  EXPECT_FALSE(job.straggler_node.has_value());
  EXPECT_FALSE(job.straggler_rank.has_value());
  ASSERT_TRUE(job.work_balance.quality.has_value());
  EXPECT_EQ(*job.work_balance.quality, BalanceClass::kExcellent);
}

}  // namespace
}  // namespace stallscope::diagnose
