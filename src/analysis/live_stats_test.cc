#include "analysis/live_stats.h"

#include <gtest/gtest.h>

#include "base/units.h"
#include "temp_dir.h"

#include "fakes/fake_clock.h"
#include "phase/phase_reader.h"
#include "phase/phase_writer.h"

namespace stallscope::analysis {
namespace {

using stallscope::testing::TempDir;

/// One process's ring with `steps` steps of 300 ms data_loading + 500 ms forward_pass + 200 ms
/// outside any phase (1 s per step), drained into `stats`.
class LiveStatsTest : public ::testing::Test {
 protected:
  void WriteSteps(int steps) {
    for (int i = 0; i < steps; ++i) {
      writer_.Begin(data_);
      clock_.Advance(300 * kNsPerMs);
      writer_.End(data_);
      writer_.Begin(forward_);
      clock_.Advance(500 * kNsPerMs);
      writer_.End(forward_);
      clock_.Advance(200 * kNsPerMs);
      writer_.Step();
    }
  }
  void Drain() {
    if (!reader_) {
      auto r = phase::PhaseReader::Open(writer_.ring_path());
      ASSERT_TRUE(r.ok()) << r.error().message;
      reader_.emplace(std::move(r).value());
    }
    reader_->Drain([&](const phase::PhaseRecord& r) { stats_.Add(*reader_, r); });
  }

  TempDir dir_;
  FakeClock clock_;
  phase::PhaseWriter writer_{phase::WriterOptions{dir_.Sub("phases")}, &clock_};
  uint16_t data_ = writer_.NameId("data_loading");
  uint16_t forward_ = writer_.NameId("forward_pass");
  std::optional<phase::PhaseReader> reader_;
  LiveStats stats_;
};

TEST_F(LiveStatsTest, WindowSharesStepsPerSecondAndCoverage) {
  WriteSteps(10);
  Drain();
  auto w = stats_.TakeWindow(10'000 * kNsPerMs);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->steps, 10u);
  EXPECT_DOUBLE_EQ(w->steps_per_s, 1.0);
  ASSERT_EQ(w->phases.size(), 2u);
  EXPECT_EQ(w->phases[0].name, "forward_pass");  // largest first
  EXPECT_NEAR(w->phases[0].share, 0.5, 1e-9);
  EXPECT_EQ(w->phases[1].name, "data_loading");
  EXPECT_NEAR(w->data_share, 0.3, 1e-9);
  EXPECT_NEAR(w->compute_share, 0.5, 1e-9);
  EXPECT_NEAR(w->covered_share, 0.8, 1e-9);
  // The window restarts.
  EXPECT_FALSE(stats_.TakeWindow(10'000 * kNsPerMs).has_value());
}

// Issue 26: the windows say where the process is in its life (StageTracker, analysis/life.h).
TEST_F(LiveStatsTest, WindowsCarryTheStage) {
  // A 10 s first step (a compile), then steady 1 s steps.
  writer_.Begin(forward_);
  clock_.Advance(10'000 * kNsPerMs);
  writer_.End(forward_);
  writer_.Step();
  WriteSteps(2);
  Drain();
  auto w = stats_.TakeWindow(12'000 * kNsPerMs);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->stage, RunStage::kWarmup);
  WriteSteps(5);
  Drain();
  w = stats_.TakeWindow(5'000 * kNsPerMs);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->stage, RunStage::kSteady);
  EXPECT_EQ(w->warmup_steps, 1);
}

TEST_F(LiveStatsTest, NoStepsOrNoTimeGivesNoWindow) {
  EXPECT_FALSE(stats_.TakeWindow(kNsPerSec).has_value());
  WriteSteps(2);
  Drain();
  EXPECT_FALSE(stats_.TakeWindow(0).has_value());
}

TEST_F(LiveStatsTest, InterimAccumulatesWindowsUntilEnoughSteps) {
  WriteSteps(3);
  Drain();
  ASSERT_TRUE(stats_.TakeWindow(3'000 * kNsPerMs).has_value());
  EXPECT_FALSE(stats_.TakeInterim(5, 3'000 * kNsPerMs).has_value());  // 3 < 5: keeps counting
  EXPECT_FALSE(stats_.TakeInterim(0, 3'000 * kNsPerMs).has_value());  // off
  WriteSteps(2);
  Drain();
  ASSERT_TRUE(stats_.TakeWindow(2'000 * kNsPerMs).has_value());
  auto interim = stats_.TakeInterim(5, 5'000 * kNsPerMs);
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->steps, 5u);
  ASSERT_EQ(interim->phases.size(), 2u);
  EXPECT_EQ(interim->phases[0].name, "data_loading");  // by phase id
  EXPECT_EQ(interim->phases[0].total_ns, 1'500 * kNsPerMs);
  EXPECT_NEAR(interim->data_share, 0.3, 1e-9);
  EXPECT_FALSE(stats_.TakeInterim(5, 5'000 * kNsPerMs).has_value());  // restarted
  // Totals are not restarted by either.
  auto totals = stats_.Totals(5'000 * kNsPerMs);
  ASSERT_TRUE(totals.has_value());
  EXPECT_EQ(totals->steps, 5u);
  EXPECT_NEAR(totals->covered_share, 0.8, 1e-9);
}

}  // namespace
}  // namespace stallscope::analysis

namespace stallscope::analysis {
namespace {

TEST_F(LiveStatsTest, AllTotalsAreKeptOnlyWhenTracked) {
  WriteSteps(4);
  Drain();
  EXPECT_TRUE(stats_.AllTotals().empty());
  auto w = stats_.TakeWindow(4'000 * kNsPerMs);  // the windows do not depend on it
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->steps, 4u);
}

TEST_F(LiveStatsTest, AllTotalsCountEveryStepWithoutTakingWindows) {
  stats_.TrackTotals();
  WriteSteps(4);
  Drain();
  auto totals = stats_.AllTotals();
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_EQ(totals[0].steps, 4u);
  EXPECT_EQ(totals[0].rank, 0);
  ASSERT_EQ(totals[0].phases.size(), 2u);  // by id: data_loading first
  EXPECT_EQ(totals[0].phases[0].name, "data_loading");
  EXPECT_EQ(totals[0].phases[0].total_ns, 4 * 300 * kNsPerMs);
  EXPECT_EQ(totals[0].phases[1].total_ns, 4 * 500 * kNsPerMs);
  // Three intervals between four 1 s steps, all in the (0.5 s, 1 s] bucket.
  const StepHistogram& h = totals[0].step_durations;
  EXPECT_EQ(h.count, 3u);
  EXPECT_DOUBLE_EQ(h.sum_s, 3.0);
  EXPECT_EQ(h.counts[6], 3u);  // kStepBucketsS[6] = 1
  // The windows still see every step: AllTotals took nothing from them.
  auto w = stats_.TakeWindow(4'000 * kNsPerMs);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->steps, 4u);
  // Totals keep growing after a window was taken.
  WriteSteps(2);
  Drain();
  EXPECT_EQ(stats_.AllTotals()[0].steps, 6u);
}

TEST_F(LiveStatsTest, WindowBetweenTwoTotals) {
  stats_.TrackTotals();
  WriteSteps(2);
  Drain();
  ProcessTotals before = stats_.AllTotals()[0];
  WriteSteps(5);
  Drain();
  ProcessTotals after = stats_.AllTotals()[0];
  auto w = WindowBetween(before, after, 5'000 * kNsPerMs);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->steps, 5u);
  EXPECT_DOUBLE_EQ(w->steps_per_s, 1.0);
  EXPECT_NEAR(w->data_share, 0.3, 1e-9);
  EXPECT_NEAR(w->covered_share, 0.8, 1e-9);
  EXPECT_EQ(w->phases[0].name, "forward_pass");                             // largest first
  EXPECT_FALSE(WindowBetween(after, after, 5'000 * kNsPerMs).has_value());  // no step in between
  EXPECT_FALSE(WindowBetween(before, after, 0).has_value());
}

TEST(StepHistogramTest, BucketsByUpperBoundInclusive) {
  StepHistogram h;
  for (double s : {0.001, 0.01, 0.011, 60.0, 61.0}) h.Add(s);
  EXPECT_EQ(h.counts[0], 2u);                         // <= 10 ms
  EXPECT_EQ(h.counts[1], 1u);                         // (10 ms, 25 ms]
  EXPECT_EQ(h.counts[kStepBucketsS.size() - 1], 1u);  // (30 s, 60 s]
  EXPECT_EQ(h.counts[kStepBucketsS.size()], 1u);      // > 60 s
  EXPECT_EQ(h.count, 5u);
}

}  // namespace
}  // namespace stallscope::analysis
