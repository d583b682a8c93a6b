// Golden tests of `passes` and `sweep` output on hand-built digests (the e2e tests run the real
// commands on the example job).

#include "report/experiment_render.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "golden.h"
#include "terminal_safe.h"

namespace stallscope::report {
namespace {

diagnose::RunDigest Digest(const std::string& dir, double step_s, double data_share,
                           diagnose::FindingClass cls) {
  diagnose::RunDigest d;
  d.dir = dir;
  d.meta.status = "exited";
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

diagnose::PassesReport Passes() {
  diagnose::PassesReport r;
  r.dir = "runs/train-passes";
  r.command = {"python3", "train.py", "--situation", "data cpu"};
  r.bound = "40 steps per run";
  auto specs = diagnose::StandardPasses("runs/train-passes/scratch");
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
  r.conclusion = diagnose::ConcludePasses(r.passes);
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

diagnose::SweepReport Sweep() {
  diagnose::SweepReport r;
  r.dir = "runs/train-sweep";
  r.command = {"python3", "train.py"};
  r.bound = "40 steps per run";
  double steps[] = {0.2, 0.1, 0.08};
  for (int w = 0; w < 3; ++w) {
    diagnose::SweepRow row;
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
  diagnose::SweepRow failed;
  failed.point.setting = {{"num_workers", "64"}};
  failed.point.label = "num_workers=64";
  failed.failure = "failed: killed by signal 9 (out of memory?)";
  r.rows.push_back(failed);
  r.summary = diagnose::SummarizeSweep(r.rows);
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
