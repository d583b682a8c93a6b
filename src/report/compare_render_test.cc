// `stallscope compare` output on hand-built digests: golden text and JSON, and every job string
// escaped for the terminal.

#include "report/compare_render.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "golden.h"
#include "terminal_safe.h"

namespace stallscope::report {
namespace {

/// `n` steps around `step_s`, a fixed pattern of ±5% (no randomness: golden output).
std::vector<double> Steps(size_t n, double step_s) {
  constexpr double kPattern[] = {0.03, -0.05, 0.01, 0.04, -0.02, -0.01, 0.05, -0.04, 0.0, -0.01};
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) out.push_back(step_s * (1 + kPattern[i % 10]));
  return out;
}

experiment::RunDigest CompareDigest(const std::string& dir, double step_s, int64_t workers) {
  experiment::RunDigest d;
  d.dir = dir;
  d.meta.name = "train";
  d.meta.command = {"/usr/bin/python3", "examples/train.py", "--situation", "data_cpu"};
  if (workers > 0) {
    d.meta.command.insert(d.meta.command.end(), {"--num-workers", std::to_string(workers)});
  }
  d.meta.hostname = "box";
  d.meta.tool_version = "0.9.0";
  d.meta.exit_code = 0;
  d.meta.status = rundir::RunStatus::kExited;
  d.meta.env = {{"OMP_NUM_THREADS", "1"}};
  d.wall_s = 12.5;
  d.step_s = Steps(29, step_s);
  d.rate = analysis::EstimateRate(d.step_s);
  d.batch_size = 32;
  d.samples_per_s = d.rate->per_s * 32;
  rundir::LoaderInfo l;
  l.num_workers = workers;
  l.batch_size = 32;
  l.pin_memory = false;
  l.persistent_workers = workers > 0;
  l.prefetch_factor = workers > 0 ? std::optional<int64_t>(2) : std::nullopt;
  d.loader = l;
  double data_ms = workers > 0 ? 10 : step_s * 1e3 - 60;
  d.phases = {{"data_loading", data_ms, data_ms / (data_ms + 60)},
              {"forward", 25, 25 / (data_ms + 60)},
              {"backward", 35, 35 / (data_ms + 60)}};
  d.data_share = d.phases[0].share;
  d.job_cpus = workers > 0 ? 1.9 : 1.0;
  d.peak_rss_bytes = workers > 0 ? 900'000'000 : 450'000'000;
  d.allowed_cpus = 2;
  diagnose::Finding f;
  f.cls = workers > 0 ? diagnose::FindingClass::kGpuBound : diagnose::FindingClass::kDataBoundCpu;
  f.confidence = 0.9;
  f.cost_fraction = workers > 0 ? 0.1 : 0.7;
  d.principal = f;
  return d;
}

TEST(CompareRender, WorkersGolden) {
  auto r = experiment::Compare(CompareDigest("runs/w0", 0.2, 0), CompareDigest("runs/w2", 0.07, 2));
  ASSERT_EQ(r.outcome, experiment::CompareOutcome::kFaster);
  testing::ExpectGolden("compare_workers.txt", RenderCompareText(r));
  testing::ExpectGolden("compare_workers.json", RenderCompareJson(r));
  auto j = nlohmann::json::parse(RenderCompareJson(r));
  EXPECT_EQ(j["change"]["outcome"], "faster");
  EXPECT_TRUE(j["change"]["significant"].get<bool>());
}

TEST(CompareRender, SameGolden) {
  auto a = CompareDigest("runs/a", 0.2, 0);
  auto r = experiment::Compare(a, a);
  ASSERT_EQ(r.outcome, experiment::CompareOutcome::kNoChange);
  testing::ExpectGolden("compare_same.txt", RenderCompareText(r));
}

TEST(CompareRender, JobStringsAreEscaped) {
  auto a = CompareDigest(testing::kHostileName, 0.2, 0);
  auto b = CompareDigest("runs/b", 0.2, 0);
  a.meta.name = testing::kHostileName;
  a.meta.command.push_back(testing::kHostileName);
  a.meta.env["NCCL_DEBUG"] = testing::kHostileName;
  b.meta.env[testing::kHostileName] = "1";
  a.phases.push_back({testing::kHostileName, 1, 0.01});
  a.warnings.push_back(testing::kHostileName);
  auto r = experiment::Compare(a, b);
  std::string text = RenderCompareText(r);
  EXPECT_EQ(testing::RawControlBytes(text), "");
  EXPECT_NE(text.find(testing::kHostileEscaped), std::string::npos) << text;
  auto j = nlohmann::json::parse(RenderCompareJson(r), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["a"]["dir"], testing::kHostileName);
  EXPECT_EQ(j["differences"][0]["name"], "command");
}

TEST(CompareRender, BusyHostIsSaidUnderTheResult) {
  auto a = CompareDigest("runs/a", 0.2, 0);
  auto b = a;
  b.caveats.push_back(std::string(diagnose::kBusyHostCaveat) + " other processes used 1.0");
  b.busy_host = true;
  auto r = experiment::Compare(a, b);
  EXPECT_NE(RenderCompareText(r).find("\n         B ran beside other work (busy host)"),
            std::string::npos)
      << RenderCompareText(r);
  auto j = nlohmann::json::parse(RenderCompareJson(r));
  EXPECT_FALSE(j["change"]["a_busy_host"].get<bool>());
  EXPECT_TRUE(j["change"]["b_busy_host"].get<bool>());
}

TEST(CompareRender, NoStepsSaysSoAndWritesNulls) {
  auto a = CompareDigest("runs/a", 0.2, 0);
  a.step_s.clear();
  a.rate.reset();
  auto r = experiment::Compare(a, CompareDigest("runs/b", 0.2, 0));
  EXPECT_NE(RenderCompareText(r).find("RESULT   nothing to compare: no steps measured in A\n"),
            std::string::npos);
  auto j = nlohmann::json::parse(RenderCompareJson(r));
  EXPECT_EQ(j["change"]["outcome"], "no_steps");
  EXPECT_TRUE(j["change"]["ratio"].is_null());
  EXPECT_TRUE(j["a"]["steps_per_s"].is_null());
}

}  // namespace
}  // namespace stallscope::report
