#include "phase/phase_aggregator.h"

#include <gtest/gtest.h>

namespace stallscope::phase {
namespace {

PhaseRecord Rec(RecordKind kind, uint16_t id, int64_t ts_ns, uint32_t tid = 1, int64_t arg = 0) {
  PhaseRecord record;
  record.kind = kind;
  record.phase_id = id;
  record.ts_ns = ts_ns;
  record.tid = tid;
  record.arg = arg;
  return record;
}

constexpr auto kB = RecordKind::kBegin;
constexpr auto kE = RecordKind::kEnd;

TEST(PhaseAggregatorTest, NestedPhasesAndSteps) {
  PhaseAggregator agg;
  // step: [data 0-40] [fwd 40-70 [inner 50-60]] step, twice.
  for (int64_t base : {0, 100}) {
    agg.Add(Rec(kB, 1, base + 0));
    agg.Add(Rec(kE, 1, base + 40));
    agg.Add(Rec(kB, 2, base + 40));
    agg.Add(Rec(kB, 3, base + 50));
    agg.Add(Rec(kE, 3, base + 60));
    agg.Add(Rec(kE, 2, base + 70));
    agg.Add(Rec(RecordKind::kStep, 0, base + 70, 1, base / 100 + 1));
  }
  agg.Add(Rec(RecordKind::kCounter, 4, 80, 1, 3));
  agg.Add(Rec(RecordKind::kCounter, 4, 90, 1, 2));
  PhaseWindow w = agg.Take();
  ASSERT_EQ(w.phases.size(), 3u);
  EXPECT_EQ(w.phases[0].phase_id, 1);
  EXPECT_EQ(w.phases[0].count, 2u);
  EXPECT_EQ(w.phases[0].total_ns, 80);
  EXPECT_EQ(w.phases[1].phase_id, 2);
  EXPECT_EQ(w.phases[1].total_ns, 60);
  EXPECT_EQ(w.phases[1].max_ns, 30);
  EXPECT_EQ(w.phases[2].phase_id, 3);
  EXPECT_EQ(w.phases[2].total_ns, 20);
  ASSERT_EQ(w.counters.size(), 1u);
  EXPECT_EQ(w.counters[0].count, 2u);
  EXPECT_EQ(w.counters[0].total_ns, 5);
  EXPECT_EQ(w.steps, 2u);
  EXPECT_EQ(w.first_step, 1);
  EXPECT_EQ(w.last_step, 2);
  EXPECT_EQ(w.unmatched, 0u);

  PhaseWindow empty = agg.Take();
  EXPECT_TRUE(empty.phases.empty());
  EXPECT_EQ(empty.steps, 0u);
}

TEST(PhaseAggregatorTest, ThreadsPairSeparatelyAndOpenPhasesCarryOver) {
  PhaseAggregator agg;
  agg.Add(Rec(kB, 1, 0, /*tid=*/10));
  agg.Add(Rec(kB, 1, 5, /*tid=*/11));
  agg.Add(Rec(kE, 1, 20, /*tid=*/11));
  PhaseWindow first = agg.Take();
  ASSERT_EQ(first.phases.size(), 1u);
  EXPECT_EQ(first.phases[0].total_ns, 15);
  agg.Add(Rec(kE, 1, 50, /*tid=*/10));
  PhaseWindow second = agg.Take();
  ASSERT_EQ(second.phases.size(), 1u);
  EXPECT_EQ(second.phases[0].total_ns, 50) << "counted in the window where it ends";
}

TEST(PhaseAggregatorTest, LostRecordsCountAsUnmatched) {
  PhaseAggregator agg;
  agg.Add(Rec(kE, 1, 10));  // begin lost
  agg.Add(Rec(kB, 1, 20));
  agg.Add(Rec(kB, 2, 30));  // its end is lost
  agg.Add(Rec(kE, 1, 40));
  agg.Add(Rec(kE, 5, 45, /*tid=*/99));  // unknown thread
  PhaseWindow w = agg.Take();
  EXPECT_EQ(w.unmatched, 3u);
  ASSERT_EQ(w.phases.size(), 1u);
  EXPECT_EQ(w.phases[0].phase_id, 1);
  EXPECT_EQ(w.phases[0].total_ns, 20);
}

TEST(PhaseAggregatorTest, RunawayNestingIsBounded) {
  PhaseAggregator agg;
  for (int i = 0; i < 1000; ++i) agg.Add(Rec(kB, 1, i));
  for (int i = 0; i < 1000; ++i) agg.Add(Rec(kE, 1, 1000 + i));
  PhaseWindow w = agg.Take();
  ASSERT_EQ(w.phases.size(), 1u);
  EXPECT_EQ(w.phases[0].count, 64u);
  EXPECT_EQ(w.unmatched, (1000u - 64u) * 2u);
}

// Threads come and go in a long job: past 256 threads a Take drops the stacks with nothing open,
// then any others (their open phases counted unmatched); phases of kept threads still pair.
TEST(PhaseAggregatorTest, ThreadStacksAreBoundedAcrossTakes) {
  PhaseAggregator agg;
  for (uint32_t tid = 1; tid <= 1000; ++tid) {
    agg.Add(Rec(kB, 1, 0, tid));
    agg.Add(Rec(kE, 1, 10, tid));
  }
  for (uint32_t tid = 2000; tid < 2300; ++tid) agg.Add(Rec(kB, 2, 0, tid));  // never closed
  PhaseWindow w = agg.Take();
  ASSERT_EQ(w.phases.size(), 1u);
  EXPECT_EQ(w.phases[0].count, 1000u);
  EXPECT_EQ(w.unmatched, 300u - 256u) << "past the bound, open phases are given up";
  agg.Add(Rec(kB, 3, 20, 7));
  agg.Add(Rec(kE, 3, 25, 7));
  w = agg.Take();
  ASSERT_EQ(w.phases.size(), 1u);
  EXPECT_EQ(w.phases[0].total_ns, 5);
}

}  // namespace
}  // namespace stallscope::phase
