#include "rundir/job_merge.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope::rundir {
namespace {

/// A node's run: `ranks` (one process each, pid = first_pid + i), one event per rank at
/// `ts_ns` on its clock; its clocks noted at start as `wall_ns` / `mono_ns`.
RunData Node(const std::string& dir, const std::string& host, std::vector<int32_t> ranks,
             int32_t world, int32_t first_pid, int64_t wall_ns = 1'000'000'000,
             int64_t mono_ns = 500) {
  RunData d;
  d.paths.dir = dir;
  d.meta.hostname = host;
  d.meta.command = {"torchrun", "--nnodes", "2", "--node-rank", "0", "train.py"};
  d.meta.start_wall_ns = wall_ns;
  d.meta.start_mono_ns = mono_ns;
  d.meta.end_mono_ns = mono_ns + 1000;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int32_t pid = first_pid + static_cast<int32_t>(i);
    d.events.processes.push_back({.pid = pid, .rank = ranks[i], .world_size = world});
    d.events.events.push_back({.ts_ns = mono_ns + 10, .pid = pid, .rank = ranks[i]});
    d.events.names[{pid, 1}] = "forward_pass";
  }
  return d;
}

std::vector<RunData> Two(RunData a, RunData b) {
  std::vector<RunData> v;
  v.push_back(std::move(a));
  v.push_back(std::move(b));
  return v;
}

TEST(JobCommandTest, DropsTheNodesOwnArguments) {
  using V = std::vector<std::string>;
  EXPECT_EQ(JobCommand({"torchrun", "--node-rank", "1", "x.py"}), (V{"torchrun", "x.py"}));
  EXPECT_EQ(JobCommand({"torchrun", "--node_rank=3", "x.py"}), (V{"torchrun", "x.py"}));
  EXPECT_EQ(JobCommand({"python", "x.py", "--lr", "1"}), (V{"python", "x.py", "--lr", "1"}));
  EXPECT_EQ(JobCommand({"torchrun", "--node-rank"}), (V{"torchrun"}));  // truncated: no crash
}

TEST(MergeRunsTest, OrdersNodesByTheirRanksAndMergesEveryRank) {
  // Given in the wrong order: the node with ranks 2-3 first.
  auto b = Node("n1", "hostB", {2, 3}, 4, 100);
  b.meta.command[4] = "1";
  auto job = MergeRuns(Two(std::move(b), Node("n0", "hostA", {0, 1}, 4, 200)), false);
  ASSERT_TRUE(job.ok()) << job.error().message;
  ASSERT_EQ(job->nodes.nodes.size(), 2u);
  EXPECT_EQ(job->nodes.nodes[0].dir, "n0");
  EXPECT_EQ(job->nodes.nodes[0].hostname, "hostA");
  EXPECT_EQ(job->nodes.nodes[0].node_rank, 0);
  EXPECT_EQ(job->nodes.nodes[1].dir, "n1");
  EXPECT_EQ(job->nodes.nodes[1].node_rank, 1);
  EXPECT_EQ(job->nodes.nodes[1].ranks, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(job->nodes.world_size, 4);
  EXPECT_EQ(job->data.paths.dir, "n0");  // the lead node's meta and recording
  EXPECT_EQ(job->data.events.processes.size(), 4u);
  EXPECT_EQ(job->data.events.events.size(), 4u);
  EXPECT_EQ(job->data.events.names.size(), 4u);
}

TEST(MergeRunsTest, MovesANodesTimesOntoTheLeadNodesClock) {
  // Node 1 started 2 s of wall time later, its monotonic clock at 7000 then: its event 10 ns
  // after its start lands 2 s + 10 ns after node 0's start on node 0's clock.
  auto job = MergeRuns(Two(Node("n0", "a", {0}, 2, 10, 1'000'000'000, 500),
                           Node("n1", "b", {1}, 2, 20, 3'000'000'000, 7000)),
                       false);
  ASSERT_TRUE(job.ok()) << job.error().message;
  const auto& e = job->data.events.events;
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].ts_ns, 510);
  EXPECT_EQ(e[1].ts_ns, 500 + 2'000'000'000 + 10);
  EXPECT_EQ(job->data.meta.end_mono_ns, 500 + 2'000'000'000 + 1000);
}

TEST(MergeRunsTest, ClashingPidsOfAnotherHostMoveAside) {
  auto job =
      MergeRuns(Two(Node("n0", "a", {0, 1}, 4, 100), Node("n1", "b", {2, 3}, 4, 101)), false);
  ASSERT_TRUE(job.ok()) << job.error().message;
  std::set<int32_t> pids;
  for (const auto& p : job->data.events.processes) pids.insert(p.pid);
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_TRUE(pids.contains(101 + (1 << 22)));
  EXPECT_EQ(job->data.events.events[3].pid, 102 + (1 << 22));
  EXPECT_TRUE(job->data.events.names.contains({102 + (1 << 22), 1}));
}

TEST(MergeRunsTest, NotTheSameJobIsOneLineNamingTheDirectory) {
  struct Case {
    const char* what;
    RunData second;
    const char* message_has;
  };
  auto other_command = Node("n1", "b", {2, 3}, 4, 300);
  other_command.meta.command.back() = "eval.py";
  std::vector<Case> cases;
  cases.push_back({"world size", Node("n1", "b", {2, 3}, 8, 300), "n1: world size 8"});
  cases.push_back({"command", std::move(other_command), "n1: another command"});
  cases.push_back({"same ranks", Node("n1", "b", {0, 1}, 4, 300), "rank 0 is also in"});
  cases.push_back({"no ranks", Node("n1", "b", {}, 4, 300), "n1: no ranks recorded"});
  for (auto& c : cases) {
    auto job = MergeRuns(Two(Node("n0", "a", {0, 1}, 4, 100), std::move(c.second)), false);
    ASSERT_FALSE(job.ok()) << c.what;
    EXPECT_NE(job.error().message.find(c.message_has), std::string::npos)
        << c.what << ": " << job.error().message;
    EXPECT_EQ(job.error().message.find('\n'), std::string::npos) << c.what;
  }
  // --force merges it, with a warning naming the directory.
  auto forced =
      MergeRuns(Two(Node("n0", "a", {0, 1}, 4, 100), Node("n1", "b", {2, 3}, 8, 300)), true);
  ASSERT_TRUE(forced.ok());
  ASSERT_FALSE(forced->data.warnings.empty());
  EXPECT_NE(forced->data.warnings[0].find("n1: world size 8"), std::string::npos);
}

}  // namespace
}  // namespace stallscope::rundir
