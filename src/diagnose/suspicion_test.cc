#include "diagnose/suspicion.h"

#include <gtest/gtest.h>

namespace stallscope::diagnose {
namespace {

analysis::LiveWindow Window(double data, double compute, double covered) {
  analysis::LiveWindow w;
  w.data_share = data;
  w.compute_share = compute;
  w.covered_share = covered;
  return w;
}

TEST(Suspect, TableOfShares) {
  struct Case {
    double data, compute, covered;
    Suspicion want;
  };
  const Case cases[] = {
      {0.31, 0.50, 0.95, Suspicion::kInputPipeline},  // seed 000 §4: data > 30%
      {0.30, 0.50, 0.95, Suspicion::kNone},           // the bar itself is not above it
      {0.50, 0.10, 0.60, Suspicion::kInputPipeline},  // data wins over outside-phases
      {0.10, 0.20, 0.60, Suspicion::kOutsidePhases},  // 40% outside every phase
      {0.10, 0.60, 0.75, Suspicion::kNone},           // 25% outside: below the bar
      {0.05, 0.75, 0.90, Suspicion::kComputeBound},   // compute > 70%
      {0.05, 0.70, 0.90, Suspicion::kNone},
      {0.00, 0.00, 0.00, Suspicion::kOutsidePhases},  // steps but no phases at all
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Suspect(Window(c.data, c.compute, c.covered)), c.want)
        << c.data << " " << c.compute << " " << c.covered;
  }
}

// Issue 26: a window of start-up or warm-up (a slow first batch, a compile) hints at nothing.
TEST(Suspect, NothingBeforeTheSteadyState) {
  for (auto stage : {analysis::RunStage::kStartup, analysis::RunStage::kWarmup}) {
    analysis::LiveWindow w = Window(0.9, 0.05, 0.95);
    w.stage = stage;
    EXPECT_EQ(Suspect(w), Suspicion::kWarmingUp);
    EXPECT_EQ(VerdictOfSuspicion(w).cls, "none");
  }
}

TEST(Suspect, ReadsItsNumbersFromTheThresholdTable) {
  ThresholdSet strict;
  strict.data_bound_share.value = 0.10;
  EXPECT_EQ(Suspect(Window(0.2, 0.7, 0.95), strict), Suspicion::kInputPipeline);
  strict.live_outside_phases_share.value = 0.01;
  EXPECT_EQ(Suspect(Window(0.05, 0.7, 0.95), strict), Suspicion::kOutsidePhases);
  strict.cpu_compute_share.value = 0.5;
  strict.live_outside_phases_share.value = 0.3;
  EXPECT_EQ(Suspect(Window(0.05, 0.6, 0.95), strict), Suspicion::kComputeBound);
}

TEST(SuspicionText, EveryValueHasItsText) {
  EXPECT_EQ(SuspicionText(Suspicion::kNone), "");
  EXPECT_EQ(SuspicionText(Suspicion::kInputPipeline), "suspect: input pipeline");
  EXPECT_EQ(SuspicionText(Suspicion::kOutsidePhases),
            "suspect: work outside the training phases (logging, syncs, side work)");
  EXPECT_EQ(SuspicionText(Suspicion::kComputeBound), "compute-bound so far");
  EXPECT_EQ(SuspicionText(Suspicion::kWarmingUp),
            "warming up: no hint before the step time settles");
}

// The exported live verdict uses the report's class names and each class's own cost.
TEST(VerdictOfSuspicion, ClassNamesAndCosts) {
  SuspectedVerdict data = VerdictOfSuspicion(Window(0.6, 0.3, 0.95));
  EXPECT_EQ(data.cls, "data_bound_cpu");
  EXPECT_DOUBLE_EQ(data.cost, 0.6);
  SuspectedVerdict outside = VerdictOfSuspicion(Window(0.1, 0.2, 0.6));
  EXPECT_EQ(outside.cls, "host_sync_or_logging");
  EXPECT_DOUBLE_EQ(outside.cost, 0.4);
  SuspectedVerdict compute = VerdictOfSuspicion(Window(0.05, 0.8, 0.95));
  EXPECT_EQ(compute.cls, "gpu_bound");
  EXPECT_DOUBLE_EQ(compute.cost, 0.0);
  SuspectedVerdict none = VerdictOfSuspicion(Window(0.1, 0.6, 0.9));
  EXPECT_EQ(none.cls, "none");
  EXPECT_DOUBLE_EQ(none.cost, 0.0);
}

}  // namespace
}  // namespace stallscope::diagnose
