#include "experiment/sweep.h"

#include <gtest/gtest.h>

namespace stallscope::experiment {
namespace {

using Strings = std::vector<std::string>;

TEST(ParseSweepSets, KeysValuesAndTheirChecks) {
  auto axes = ParseSweepSets({"num_workers=0,1,2", "lr=0.1,0.01"});
  ASSERT_TRUE(axes.ok());
  ASSERT_EQ(axes->size(), 2u);
  EXPECT_EQ((*axes)[0].values, (Strings{"0", "1", "2"}));
  EXPECT_EQ((*axes)[1].key, "lr");
  for (const char* bad : {"num_workers=-1", "batch_size=0", "pin_memory=yes", "num_workers=1,,2",
                          "=1", "a b=1", "nokey", "prefetch_factor=2x"}) {
    auto r = ParseSweepSets({bad});
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("--set"), std::string::npos) << bad;
    }
  }
  EXPECT_FALSE(ParseSweepSets({"w=1", "w=2"}).ok());
}

TEST(PlanSweep, LoaderKeysGoThroughTheHooksTemplatesAreSubstituted) {
  auto axes = ParseSweepSets({"num_workers=0,2", "pin_memory=true", "w=a,b"});
  ASSERT_TRUE(axes.ok());
  auto points = PlanSweep(*axes, {"python3", "train.py", "--tag={w}"}, {"--x", "{w}{w}"});
  ASSERT_TRUE(points.ok()) << points.error().message;
  ASSERT_EQ(points->size(), 4u);
  const SweepPoint& p = (*points)[1];  // the first axis varies slowest
  EXPECT_EQ(p.label, "num_workers=0 pin_memory=true w=b");
  EXPECT_EQ(p.command, (Strings{"python3", "train.py", "--tag=b", "--x", "bb"}));
  EXPECT_EQ(p.env, (Strings{R"(STALLSCOPE_LOADER_SET={"num_workers":0,"pin_memory":true})"}));
  EXPECT_EQ((*points)[3].label, "num_workers=2 pin_memory=true w=b");
}

TEST(PlanSweep, ALoaderKeyInATemplateIsTheJobsFlagNotAHook) {
  auto axes = ParseSweepSets({"num_workers=1,2"});
  auto points = PlanSweep(*axes, {"job"}, {"--num-workers={num_workers}"});
  ASSERT_TRUE(points.ok());
  EXPECT_TRUE((*points)[0].env.empty());
  EXPECT_EQ((*points)[1].command, (Strings{"job", "--num-workers=2"}));
}

TEST(PlanSweep, UnknownKeysAndTooManyCombinationsAreRefused) {
  auto axes = ParseSweepSets({"lr=1,2"});
  auto r = PlanSweep(*axes, {"job"}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no {lr} in the command"), std::string::npos);
  auto big = ParseSweepSets({"num_workers=0,1,2,3,4,5,6,7,8", "batch_size=1,2,3,4,5,6,7,8"});
  EXPECT_FALSE(PlanSweep(*big, {"job"}, {}).ok());
  EXPECT_FALSE(PlanSweep({}, {"job"}, {}).ok());
}

SweepRow Row(const std::string& workers, double step_s, double cpus,
             std::optional<double> predicted = std::nullopt, std::string predicted_for = "") {
  SweepRow r;
  r.point.setting = {{"num_workers", workers}};
  r.point.label = "num_workers=" + workers;
  RunDigest d;
  d.step_s.assign(20, step_s);
  d.rate = analysis::EstimateRate(d.step_s);
  d.job_cpus = cpus;
  if (predicted) {
    diagnose::Finding f;
    f.cls = diagnose::FindingClass::kDataBoundCpu;
    f.predicted_steps_per_s = predicted;
    f.predicted_for = predicted_for;
    d.principal = f;
  }
  r.run = d;
  return r;
}

TEST(SummarizeSweep, FastestFirstCheapestWithinThreePercentAndThePrediction) {
  std::vector<SweepRow> rows = {Row("0", 0.5, 1.0, 4.5, "num_workers=2"), Row("1", 0.25, 1.5),
                                Row("2", 0.2, 2.0), Row("4", 0.202, 1.8)};
  SweepRow failed;
  failed.point.label = "num_workers=8";
  failed.failure = "failed: exit 1";
  rows.push_back(failed);
  auto s = SummarizeSweep(rows);
  EXPECT_EQ(s.order, (std::vector<size_t>{2, 3, 1, 0, 4}));
  EXPECT_EQ(s.best, 2u);
  EXPECT_EQ(s.recommended, 3u);  // 1% slower than the best, less CPU
  ASSERT_EQ(s.predictions.size(), 1u);
  EXPECT_EQ(s.predictions[0].from, 0u);
  EXPECT_EQ(s.predictions[0].to, 2u);
  EXPECT_NEAR(s.predictions[0].error, 5.0 / 4.5 - 1, 1e-9);
}

TEST(SummarizeSweep, NothingRanNothingBest) {
  SweepRow failed;
  failed.failure = "failed: exit 1";
  auto s = SummarizeSweep({failed});
  EXPECT_FALSE(s.best);
  EXPECT_FALSE(s.recommended);
  EXPECT_EQ(s.order, (std::vector<size_t>{0}));
}

}  // namespace
}  // namespace stallscope::experiment
