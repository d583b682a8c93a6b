// The job report of `diagnose DIR1 DIR2 ...` (docs/commands/diagnose.md) from hand-built data.

#include "report/job_render.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "report/run_render.h"

namespace stallscope::report {
namespace {

rundir::JobNodes TwoNodes() {
  rundir::JobNodes job;
  job.world_size = 4;
  job.nodes.push_back({.dir = "n0",
                       .hostname = "alpha",
                       .node_rank = 0,
                       .ranks = {0, 1},
                       .world_size = 4,
                       .gpu_util_pct = std::nullopt,
                       .steps = 40,
                       .steps_per_s = 2.5,
                       .step_s = 0.4,
                       .comm_wait_s = 0.3,
                       .work_s = 0.1});
  job.nodes.push_back({.dir = "n1",
                       .hostname = "b\x1b[31m",
                       .node_rank = 1,
                       .ranks = {2, 3},
                       .world_size = 4,
                       .gpu_util_pct = std::nullopt,
                       .steps = 40,
                       .steps_per_s = 2.5,
                       .step_s = 0.4,
                       .comm_wait_s = 0.15,
                       .work_s = 0.25});
  for (int32_t r = 0; r < 4; ++r) {
    job.ranks.push_back({.rank = r,
                         .node_rank = r / 2,
                         .steps = 20,
                         .steps_per_s = 2.5,
                         .step_s = 0.4,
                         .comm_wait_s = r == 3 ? 0 : 0.3,
                         .work_s = r == 3 ? 0.4 : 0.1});
  }
  job.work_balance = {.cv_pct = 60.6, .quality = BalanceClass::kPoor};
  job.straggler_rank = 3;
  job.straggler_node = 1;
  job.straggler_work_ratio = 4;
  return job;
}

TEST(JobRenderTest, TextNamesTheStragglerThenNodesThenRanksAligned) {
  diagnose::RunReport r;
  r.meta.name = "train";
  std::string t = RenderJobReportText(r, TwoNodes());
  EXPECT_EQ(t.find("stallscope job report: train  (2 nodes, world size 4)\n"), 0u) << t;
  const size_t straggler = t.find("Straggler: node 1 (b"), nodes = t.find("\nNodes  "),
               ranks = t.find("\nRanks  ");
  ASSERT_NE(straggler, std::string::npos) << t;
  ASSERT_NE(nodes, std::string::npos) << t;
  ASSERT_NE(ranks, std::string::npos) << t;
  EXPECT_LT(straggler, nodes);
  EXPECT_LT(nodes, ranks);
  EXPECT_NE(t.find("rank 3: 4.0× the work per step"), std::string::npos) << t;
  EXPECT_NE(t.find("work per step CV 60.6% (Poor)"), std::string::npos) << t;
  EXPECT_EQ(t.find('\x1b'), std::string::npos) << "a hostname's escape reached the terminal";
  // Every node row is as wide as the header up to the dir column.
  const size_t header_end = t.find('\n', nodes + 1);
  const std::string header = t.substr(nodes + 1, header_end - nodes - 1);
  const size_t row0 = header_end + 1, row0_end = t.find('\n', row0);
  EXPECT_EQ(t.substr(row0, row0_end - row0).find("  n0"), header.find("  dir")) << t;
  EXPECT_NE(t.find("<- straggler"), std::string::npos);
  EXPECT_NE(t.find("stallscope diagnose n1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("stallscope diagnose n0 n1\n"), std::string::npos) << t;
}

TEST(JobRenderTest, JsonIsTheRunReportPlusNodesLast) {
  diagnose::RunReport r;
  auto j = nlohmann::ordered_json::parse(RenderJobReportJson(r, TwoNodes()));
  auto single = nlohmann::ordered_json::parse(RenderRunReportJson(r));
  ASSERT_EQ(j.size(), single.size() + 1);
  EXPECT_EQ(std::prev(j.end()).key(), "nodes");
  j.erase("nodes");
  EXPECT_EQ(j.dump(), single.dump());  // every run report field, unchanged and in order
  auto n = nlohmann::json::parse(RenderJobReportJson(r, TwoNodes()))["nodes"];
  EXPECT_EQ(n["count"], 2);
  EXPECT_EQ(n["nodes"][1]["ranks"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(n["nodes"][1]["work_s"], 0.25);
  EXPECT_TRUE(n["nodes"][0]["gpu_util_pct"].is_null());
  EXPECT_EQ(n["ranks"][3]["node_rank"], 1);
  EXPECT_EQ(n["work_balance"]["class"], "Poor");
  EXPECT_TRUE(n["util_balance"]["cv_pct"].is_null());
  EXPECT_EQ(n["straggler"]["node_rank"], 1);
  EXPECT_EQ(n["straggler"]["rank"], 3);
}

}  // namespace
}  // namespace stallscope::report
