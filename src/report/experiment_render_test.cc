// Golden tests of `passes` and `sweep` output on hand-built digests (the e2e tests run the real
// commands on the example job).

#include "report/experiment_render.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "golden.h"
#include "terminal_safe.h"

namespace stallscope::report {
namespace {

experiment::RunDigest Digest(const std::string& dir, double step_s, double data_share,
                             diagnose::FindingClass cls) {
  experiment::RunDigest d;
  d.dir = dir;
  d.meta.status = rundir::RunStatus::kExited;
  d.meta.exit_code = 0;
  for (int i = 0; i < 40; ++i) d.step_s.push_back(step_s * (i % 3 == 0 ? 0.8 : 1.1));
  d.rate = analysis::EstimateRate(d.step_s);
  d.data_share = data_share;
  d.batch_size = 32;
  d.samples_per_s = d.rate->per_s * 32;
  d.peak_rss_bytes = 900ull << 20;
  d.job_cpus = 1.0;
  diagnose::Finding f;
  f.cls = cls;
  f.confidence = 0.9;
  f.cost_fraction = data_share;
  f.recommendations.push_back({"num_workers=0 → num_workers=2 (2 CPUs allowed)", 0});
  d.principal = f;
  d.experiment.present = true;
  return d;
}

experiment::PassesReport Passes() {
  experiment::PassesReport r;
  r.dir = "runs/train-passes";
  r.command = {"python3", "train.py", "--situation", "data cpu"};
  r.bound = "40 steps per run";
  auto specs = experiment::StandardPasses("runs/train-passes/scratch");
  r.passes = {{specs[0],
               Digest("runs/train-passes/A", 0.2, 0.9, diagnose::FindingClass::kDataBoundCpu),
               "",
               {}},
              {specs[1],
               Digest("runs/train-passes/B", 0.2, 0.9, diagnose::FindingClass::kDataBoundCpu),
               "",
               {}},
              {specs[2],
               Digest("runs/train-passes/C", 0.05, 0.05, diagnose::FindingClass::kGpuBound),
               "",
               {}}};
  r.passes[1].run->experiment.saves_skipped = 2;
  r.passes[2].run->experiment.synthetic_batches_cached = 4;
  r.passes[2].run->experiment.synthetic_batches_served = 36;
  r.conclusion = experiment::ConcludePasses(r.passes);
  return r;
}

TEST(PassesRender, TextAndJsonGolden) {
  auto r = Passes();
  testing::ExpectGolden("passes_data_cpu.txt", RenderPassesText(r));
  std::string json = RenderPassesJson(r);
  testing::ExpectGolden("passes_data_cpu.json", json);
  auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["conclusion"]["recovering"], "C");
  EXPECT_EQ(j["conclusion"]["agrees"], true);
  EXPECT_EQ(j["passes"][2]["vs_a"]["significant"], true);
}

TEST(PassesRender, HostileNamesAreEscaped) {
  auto r = Passes();
  r.command.push_back(testing::kHostileName);
  r.passes[0].failure = testing::kHostileName;
  r.passes[0].run->rate.reset();
  EXPECT_EQ(testing::RawControlBytes(RenderPassesText(r)), "");
}

/// 1 vs 2 processes of a job whose rank 0 evaluates every 10 steps while rank 1 waits.
experiment::ScalingReport Scaling() {
  experiment::ScalingReport r;
  r.dir = "runs/train-passes";
  r.command = {"torchrun", "--nproc_per_node", "2", "train.py"};
  r.launcher = "torchrun";
  r.bound = "50 steps per run; rates leave out the first 2 steps (start-up)";
  for (int n : {1, 2}) {
    experiment::RunDigest d =
        Digest("runs/train-passes/" + std::to_string(n) + "-process" + (n == 1 ? "" : "es"), 0.05,
               0.1, diagnose::FindingClass::kPeriodicSideWork);
    for (int32_t rank = 0; rank < n; ++rank) {
      experiment::RankDigest rd;
      rd.rank = rank;
      rd.steps = 40;
      rd.median_step_s = 0.055;
      rd.variation_ratio = 1.9;
      rd.phases.emplace_back(rank == 0 ? "evaluation" : "comm_wait", 4, 2.0);
      d.ranks.push_back(rd);
      analysis::PeriodicPhase p;
      p.rank = rank;
      p.phase = rank == 0 ? "evaluation" : "comm_wait";
      p.every_steps = 10;
      p.occurrences = 4;
      p.extra_s_each = 0.5;
      p.share_of_wall = 0.45;
      p.steps = {10, 20, 30, 40};
      d.periodic.push_back(p);
    }
    d.job_gpus = n == 1 ? std::vector<experiment::GpuUse>{{0, 61}}
                        : std::vector<experiment::GpuUse>{{0, 58}, {1, 40}};
    r.runs.push_back({n, {"torchrun", "--nproc_per_node", std::to_string(n), "train.py"}, d, ""});
  }
  r.conclusion = experiment::ConcludeScaling(r.runs);
  return r;
}

TEST(ScalingRender, TextAndJsonGolden) {
  auto r = Scaling();
  testing::ExpectGolden("passes_ranks.txt", RenderScalingText(r));
  std::string json = RenderScalingJson(r);
  testing::ExpectGolden("passes_ranks.json", json);
  auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["conclusion"]["class"], "main_rank_side_work");
  EXPECT_EQ(j["runs"][1]["job_gpu_util_spread_pct"], 18);
  EXPECT_EQ(j["runs"][1]["ranks"][1]["slow"][0]["phase"], "comm_wait");
  EXPECT_EQ(ScalingRunDirName(r.runs[0]), "1-process");
  EXPECT_EQ(ScalingRunDirName(r.runs[1]), "2-processes");
}

TEST(ScalingRender, AFailedRunAndHostileNamesAreEscaped) {
  auto r = Scaling();
  r.command.push_back(testing::kHostileName);
  r.runs[1].failure = testing::kHostileName;
  r.runs[1].run->periodic[0].phase = testing::kHostileName;
  r.conclusion = experiment::ConcludeScaling(r.runs);
  const std::string text = RenderScalingText(r);
  EXPECT_EQ(testing::RawControlBytes(text), "");
  EXPECT_NE(text.find("CONCLUSION  none: no conclusion: the 2-process run gave no steps/s"),
            std::string::npos)
      << text;
}

experiment::SweepReport Sweep() {
  experiment::SweepReport r;
  r.dir = "runs/train-sweep";
  r.command = {"python3", "train.py"};
  r.bound = "40 steps per run";
  double steps[] = {0.2, 0.1, 0.08};
  for (int w = 0; w < 3; ++w) {
    experiment::SweepRow row;
    row.point.setting = {{"num_workers", std::to_string(w)}};
    row.point.label = "num_workers=" + std::to_string(w);
    row.point.command = r.command;
    row.run =
        Digest("runs/train-sweep/0" + std::to_string(w + 1), steps[w], 0.9 - 0.4 * w,
               w == 0 ? diagnose::FindingClass::kDataBoundCpu : diagnose::FindingClass::kGpuBound);
    row.run->job_cpus = 1.0 + w * 0.5;
    if (w == 0) {
      row.run->principal->predicted_steps_per_s = 11.0;
      row.run->principal->predicted_for = "num_workers=2";
    }
    r.rows.push_back(row);
  }
  experiment::SweepRow failed;
  failed.point.setting = {{"num_workers", "64"}};
  failed.point.label = "num_workers=64";
  failed.failure = "failed: killed by signal 9 (out of memory?)";
  r.rows.push_back(failed);
  r.summary = experiment::SummarizeSweep(r.rows);
  return r;
}

TEST(SweepRender, TextAndJsonGolden) {
  auto r = Sweep();
  testing::ExpectGolden("sweep_workers.txt", RenderSweepText(r));
  std::string json = RenderSweepJson(r);
  testing::ExpectGolden("sweep_workers.json", json);
  auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["best"], "num_workers=2");
  EXPECT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["rows"][3]["failure"], "failed: killed by signal 9 (out of memory?)");
  EXPECT_EQ(j["predictions"][0]["setting"], "num_workers=2");
}

TEST(SweepRender, HostileLabelsAreEscaped) {
  auto r = Sweep();
  r.rows[1].point.label = testing::kHostileName;
  r.rows[3].failure = testing::kHostileName;
  EXPECT_EQ(testing::RawControlBytes(RenderSweepText(r)), "");
}

}  // namespace
}  // namespace stallscope::report
