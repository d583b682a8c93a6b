// End-to-end test of `stallscope diagnose DIR1 DIR2 ...` (issue 15, docs/commands/diagnose.md): two
// nodes of one real torch.distributed job (gloo DDP, 2 ranks each, world size 4) simulated on this
// machine: two `stallscope run --out nodeK -- examples/launch.py --nnodes 2 --node-rank K ...`
// started together; rank 3 (on node 1) is the straggler. The merged diagnosis must name node 1
// and rank 3. Skips when /usr/bin/python3 has no torch or the build has no Python package.

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http_get.h"  // FreeLoopbackPort
#include "report_json.h"
#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace stallscope::testing::report_json;  // NOLINT(build/namespaces)
namespace st = stallscope::testing;

constexpr const char* kSystemPython = "/usr/bin/python3";

std::string Source(const std::string& rel) {
  return std::string(STALLSCOPE_SOURCE_DIR) + "/" + rel;
}

class MultinodeE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!STALLSCOPE_E2E_HOOKS) GTEST_SKIP() << "this build has no Python package";
    if (!st::HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
    if (std::system("/usr/bin/python3 -c 'import torch.distributed as d, sys; "
                    "sys.exit(not d.is_gloo_available())' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "torch has no gloo backend";
    }
    if (job_dir_.empty()) RunTwoNodes();
  }

  void TearDown() override { failed_ = failed_ || HasFailure(); }

  /// The runs stay for a look when a test failed.
  static void TearDownTestSuite() {
    if (!job_dir_.empty() && !failed_) fs::remove_all(job_dir_);
  }

  /// Both nodes of one 2×2 job, started together, each under its own `stallscope run`.
  static void RunTwoNodes() {
    job_dir_ = fs::temp_directory_path() / ("stallscope_multinode_e2e_" + std::to_string(getpid()));
    fs::remove_all(job_dir_);
    fs::create_directories(job_dir_);
    const std::string port = std::to_string(st::FreeLoopbackPort());
    auto env = st::EnvironmentWithout({"STALLSCOPE_", "PYTHONPATH="});
    std::vector<pid_t> pids;
    for (int k = 0; k < 2; ++k) {
      const std::string node = "node" + std::to_string(k);
      std::vector<std::string> argv = {STALLSCOPE_BIN,
                                       "run",
                                       "--quiet",
                                       "--out",
                                       (job_dir_ / node).string(),
                                       "-i",
                                       "100ms",
                                       "--",
                                       kSystemPython,
                                       Source("examples/launch.py"),
                                       "--nnodes",
                                       "2",
                                       "--node-rank",
                                       std::to_string(k),
                                       "--nproc-per-node",
                                       "2",
                                       "--master-port",
                                       port,
                                       Source("examples/train.py"),
                                       "--situation",
                                       "ddp_straggler",
                                       "--slow-rank",
                                       "3",
                                       "--transform-reps",
                                       "4",
                                       "--steps",
                                       "20",
                                       "--print-every",
                                       "0",
                                       "--data-dir",
                                       (job_dir_ / "data").string(),
                                       "--out-dir",
                                       (job_dir_ / "out").string()};
      pids.push_back(st::Spawn(argv, env, (job_dir_ / (node + ".out")).string(), ""));
    }
    for (size_t k = 0; k < pids.size(); ++k) {
      EXPECT_EQ(st::WaitExit(pids[k], 300), 0)
          << st::Slurp(job_dir_ / ("node" + std::to_string(k) + ".out"));
    }
  }

  st::ProcessOutput Diagnose(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {STALLSCOPE_BIN, "diagnose"};
    argv.insert(argv.end(), args.begin(), args.end());
    return st::RunProcess(argv, st::EnvironmentWithout({"STALLSCOPE_"}), job_dir_, 60);
  }

  static std::string Node(int k) { return (job_dir_ / ("node" + std::to_string(k))).string(); }

  static fs::path job_dir_;
  static bool failed_;
};

fs::path MultinodeE2e::job_dir_;
bool MultinodeE2e::failed_ = false;

TEST_F(MultinodeE2e, MergedDiagnosisNamesTheStragglerNodeAndRank) {
  // Given node 1 first: the node rank comes from the ranks, not the argument order.
  auto out = Diagnose({Node(1), Node(0), "--json"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  json r = json::parse(out.out, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out.out;
  const auto& n = r["nodes"];
  EXPECT_EQ(n["count"], 2);
  EXPECT_EQ(n["world_size"], 4);
  ASSERT_EQ(n["nodes"].size(), 2u);
  EXPECT_EQ(n["nodes"][0]["dir"], Node(0));
  EXPECT_EQ(n["nodes"][0]["ranks"], json::array({0, 1}));
  EXPECT_EQ(n["nodes"][1]["ranks"], json::array({2, 3}));
  EXPECT_FALSE(n["nodes"][1]["hostname"].get<std::string>().empty());
  ASSERT_EQ(n["ranks"].size(), 4u);
  ASSERT_EQ(r["steps"]["ranks"].size(), 4u);  // every rank's steps in the merged report
  // Each rank's steady steps: its 20 less the warm-up (step 1 at least, its batch came with the
  // start-up; at most half the steps).
  for (const auto& k : n["ranks"]) {
    EXPECT_GE(k["steps"].get<int>(), 10) << k.dump();
    EXPECT_LE(k["steps"].get<int>(), 19) << k.dump();
  }
  for (const auto& k : r["steps"]["ranks"])
    EXPECT_EQ(k["count"].get<int>() + k["warmup_steps"].get<int>(), 20) << k.dump();
  // Rank 3 loads 4x longer: it works most per step, the others wait for it in all-reduce.
  ASSERT_TRUE(n["straggler"].is_object()) << out.out;
  EXPECT_EQ(n["straggler"]["node_rank"], 1);
  EXPECT_EQ(n["straggler"]["rank"], 3);
  // 4x the loading, but four ranks share 2 CPUs: the others' work is slowed too (1.46 measured).
  EXPECT_GT(n["straggler"]["work_ratio"].get<double>(), 1.2);
  const json* f = Finding(r, "straggler");
  ASSERT_NE(f, nullptr) << r["verdict"].dump();
  EXPECT_NE((*f)["reason"].get<std::string>().find("rank 3 runs on node 1"), std::string::npos)
      << (*f)["reason"];
  EXPECT_FALSE(n["work_balance"]["class"].is_null());

  auto text = Diagnose({Node(0), Node(1)});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("(2 nodes, world size 4)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Straggler: node 1 ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("rank 3:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\nNodes  "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\nRanks  "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("<- straggler"), std::string::npos) << text.out;
}

TEST_F(MultinodeE2e, OneDirectoryIsTheRunsOwnReport) {
  auto out = Diagnose({Node(1), "--json"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  json r = json::parse(out.out, nullptr, false);
  ASSERT_FALSE(r.is_discarded());
  EXPECT_FALSE(r.contains("nodes"));
  EXPECT_EQ(r["steps"]["ranks"].size(), 2u);
  auto text = Diagnose({Node(1)});
  EXPECT_EQ(text.out.find("stallscope run report: "), 0u) << text.out;
}

TEST_F(MultinodeE2e, NotOneJobIsAOneLineErrorNamingTheDirectory) {
  auto twice = Diagnose({Node(0), Node(0)});
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_TRUE(twice.out.empty()) << twice.out;
  EXPECT_NE(twice.err.find(Node(0) + ": rank 0 is also in"), std::string::npos) << twice.err;
  EXPECT_EQ(twice.err.find('\n'), twice.err.size() - 1) << twice.err;
  // --force merges it anyway, with the warning.
  auto forced = Diagnose({Node(0), Node(0), "--force"});
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_NE(forced.out.find("merged: --force"), std::string::npos) << forced.out;

  const std::string missing = (job_dir_ / "no-such-run").string();
  auto bad = Diagnose({Node(0), missing});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find(missing), std::string::npos) << bad.err;
  EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << bad.err;
}

}  // namespace
