#include "trace/cross_rank.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "trace/kernels.h"
#include "trace/timeline.h"
#include "trace/trace_reader.h"

#include "hta_traces.h"

namespace stallscope::trace {
namespace {

CrossRankInput RankInput(int32_t rank, std::vector<std::pair<int64_t, int64_t>> steps,
                         std::vector<std::pair<std::string_view, int64_t>> collectives) {
  CrossRankInput in;
  in.rank = rank;
  int64_t n = 1;
  for (auto [b, e] : steps) in.steps.push_back(Step{n++, b, e, 0, 0});
  for (auto [name, begin] : collectives) {
    in.collectives.push_back(CollectiveKernel{name, begin, begin + 10, 0});
  }
  return in;
}

std::vector<CrossRankInput> ThreeRanks() {
  return {
      RankInput(0, {{1000, 2000}, {2000, 3100}},
                {{"all_reduce", 1100}, {"all_gather", 1500}, {"all_reduce", 2100}}),
      RankInput(1, {{5000, 6200}, {6200, 7150}},
                {{"all_reduce", 5150}, {"all_gather", 5400}, {"all_reduce", 6050}}),
      RankInput(
          2, {{0, 1000}, {1000, 2000}, {2000, 2500}},
          {{"all_reduce", 120}, {"all_gather", 450}, {"all_reduce", 1300}, {"all_reduce", 1800}}),
  };
}

TEST(AnalyzeCrossRank, StepSpreadAndStraggler) {
  auto ranks = ThreeRanks();
  auto r = AnalyzeCrossRank(ranks);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->steps.size(), 2u);  // step 3 only on rank 2
  const StepSpread& s1 = r->steps[0];
  EXPECT_EQ(s1.step, 1);
  EXPECT_EQ(s1.ranks, 3);
  EXPECT_EQ(s1.min_ns, 1000);
  EXPECT_EQ(s1.max_ns, 1200);
  EXPECT_DOUBLE_EQ(s1.median_ns, 1000.0);
  EXPECT_DOUBLE_EQ(s1.spread, 0.2);
  EXPECT_NEAR(s1.cv_pct, 8.8388, 1e-3);  // std 94.28 / mean 1066.67
  EXPECT_EQ(s1.slowest_rank, 1);
  const StepSpread& s2 = r->steps[1];
  EXPECT_EQ(s2.min_ns, 950);
  EXPECT_EQ(s2.max_ns, 1100);
  EXPECT_DOUBLE_EQ(s2.spread, 0.15);
  EXPECT_NEAR(s2.cv_pct, 6.1339, 1e-3);  // std 62.36 / mean 1016.67
  EXPECT_EQ(s2.slowest_rank, 0);

  ASSERT_EQ(r->ranks.size(), 3u);
  EXPECT_EQ(r->ranks[0].times_slowest, 1);
  EXPECT_EQ(r->ranks[1].times_slowest, 1);
  EXPECT_EQ(r->ranks[2].times_slowest, 0);
  EXPECT_DOUBLE_EQ(r->ranks[0].straggler_score, 0.05);   // (0 + 0.1) / 2
  EXPECT_DOUBLE_EQ(r->ranks[1].straggler_score, 0.075);  // (0.2 − 0.05) / 2
  EXPECT_DOUBLE_EQ(r->ranks[2].straggler_score, 0.0);
  EXPECT_EQ(r->ranks[2].steps, 2);
  EXPECT_EQ(r->slowest_rank, 1);
}

TEST(AnalyzeCrossRank, LateArrivalAlignedOnFirstCommonStep) {
  auto ranks = ThreeRanks();
  auto r = AnalyzeCrossRank(ranks);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->aligned_on_step, 1);
  // Aligned arrivals: all_reduce#0 100/150/120, all_reduce#1 1100/1050/1300, all_gather
  // 500/400/450.
  EXPECT_EQ(r->collectives_matched, 3);
  EXPECT_EQ(r->collectives_unmatched, 1);  // rank 2's third all_reduce
  const RankSkew& r0 = r->ranks[0];
  const RankSkew& r1 = r->ranks[1];
  const RankSkew& r2 = r->ranks[2];
  EXPECT_EQ(r0.collectives, 3);
  EXPECT_EQ(r0.times_last, 1);
  EXPECT_EQ(r0.held_up_ns, 50);  // all_gather: 500 − 450
  EXPECT_EQ(r1.times_last, 1);
  EXPECT_EQ(r1.held_up_ns, 30);  // all_reduce#0: 150 − 120
  EXPECT_EQ(r2.times_last, 1);
  EXPECT_EQ(r2.held_up_ns, 200);                // all_reduce#1: 1300 − 1100
  EXPECT_DOUBLE_EQ(r0.mean_lateness_ns, 50.0);  // {0, 50, 100}
  EXPECT_DOUBLE_EQ(r0.p95_lateness_ns, 95.0);
  EXPECT_NEAR(r1.mean_lateness_ns, 50.0 / 3, 1e-9);  // {50, 0, 0}
  EXPECT_DOUBLE_EQ(r1.p95_lateness_ns, 45.0);
  EXPECT_NEAR(r2.mean_lateness_ns, 320.0 / 3, 1e-9);  // {20, 250, 50}
  EXPECT_DOUBLE_EQ(r2.p95_lateness_ns, 230.0);
  EXPECT_EQ(r->latest_rank, 2);  // tie on times_last, most held up
}

TEST(AnalyzeCrossRank, OneRankOrNothingShared) {
  auto ranks = ThreeRanks();
  EXPECT_FALSE(AnalyzeCrossRank(std::span(ranks).first(1)).has_value());
  EXPECT_FALSE(AnalyzeCrossRank({}).has_value());
  std::vector<CrossRankInput> apart = {RankInput(0, {{0, 10}}, {}), RankInput(1, {}, {})};
  auto r = AnalyzeCrossRank(apart);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->steps.empty());
  EXPECT_FALSE(r->slowest_rank.has_value());
  EXPECT_FALSE(r->latest_rank.has_value());
  EXPECT_FALSE(r->aligned_on_step.has_value());
}

// ---------------------------------------------------------------- real traces (skipped if absent)

// The HTA reference traces (tests/support/hta_traces.h).
std::optional<std::string> CrossRankHtaDir() {
  std::string dir = testing::HtaTracesDir().string();
  if (!std::filesystem::exists(dir + "/trace_filter/sampled_rank-0.json.gz")) return std::nullopt;
  return dir;
}

TEST(HtaTraces, TraceFilterCrossRank) {
  auto dir = CrossRankHtaDir();
  if (!dir) GTEST_SKIP() << "shared/traces/hta not present";
  std::vector<CrossRankInput> inputs;
  for (const char* f : {"sampled_rank-0.json.gz", "sampled_rank-1.json.gz"}) {
    auto trace = ReadTrace(*dir + "/trace_filter/" + f);
    ASSERT_TRUE(trace.ok()) << trace.error().message;
    Timeline tl = PrepareTimeline(*trace, AnalysisOptions{});
    inputs.push_back(MakeCrossRankInput(*trace, tl, AnalyzeKernels(*trace)));
  }
  auto r = AnalyzeCrossRank(inputs);
  ASSERT_TRUE(r.has_value());
  for (const RankSkew& k : r->ranks) {
    std::printf(
        "rank %d score %.4f collectives %lld last %lld held %lld ns lateness mean %.0f "
        "p95 %.0f ns\n",
        k.rank, k.straggler_score, static_cast<long long>(k.collectives),
        static_cast<long long>(k.times_last), static_cast<long long>(k.held_up_ns),
        k.mean_lateness_ns, k.p95_lateness_ns);
  }
  // ProfilerStep#551: 607312 vs 607904 µs; #552: 622928 vs 630639 µs (from the JSON).
  ASSERT_EQ(r->steps.size(), 2u);
  EXPECT_EQ(r->steps[0].min_ns, 607312000);
  EXPECT_EQ(r->steps[0].max_ns, 607904000);
  EXPECT_EQ(r->steps[1].min_ns, 622928000);
  EXPECT_EQ(r->steps[1].max_ns, 630639000);
  EXPECT_EQ(r->steps[0].slowest_rank, 1);
  EXPECT_EQ(r->steps[1].slowest_rank, 1);
  EXPECT_EQ(r->slowest_rank, 1);
  EXPECT_EQ(r->aligned_on_step, 551);
  EXPECT_EQ(r->collectives_matched, 10);  // 10 ncclKernel_SendRecv kept per rank by sampling
}

}  // namespace
}  // namespace stallscope::trace
