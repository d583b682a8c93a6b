#include "sample/history.h"

#include <cmath>

#include <gtest/gtest.h>

namespace stallscope::sample {
namespace {

TEST(History, KeepsRawPointsUntilFull) {
  History h(8);
  for (int i = 0; i < 8; ++i) h.Add(i, i);
  ASSERT_EQ(h.points().size(), 8u);
  EXPECT_EQ(h.points()[3].count, 1u);
  EXPECT_DOUBLE_EQ(h.MeanOfLast(2), 6.5);
}

TEST(History, BoundedForeverAndPreservesMeanAndExtremes) {
  History h(64);
  double sum = 0;
  for (int i = 0; i < 100'000; ++i) {
    double v = (i % 10 == 0) ? 100.0 : 1.0;
    h.Add(int64_t{i} * 1'000'000'000, v);
    sum += v;
  }
  EXPECT_LE(h.points().size(), 64u);
  EXPECT_EQ(h.total_added(), 100'000u);
  uint64_t count = 0;
  double weighted = 0, mx = 0;
  int64_t prev_end = -1;
  for (const auto& p : h.points()) {
    count += p.count;
    weighted += p.mean * static_cast<double>(p.count);
    mx = std::max(mx, p.max);
    EXPECT_GT(p.t_begin_ns, prev_end);  // ordered, non-overlapping
    prev_end = p.t_end_ns;
  }
  EXPECT_EQ(count, 100'000u);
  EXPECT_NEAR(weighted / static_cast<double>(count), sum / 100'000.0, 1e-9);
  EXPECT_DOUBLE_EQ(mx, 100.0);
  // The newest points keep full resolution; the oldest are the coarsest.
  EXPECT_EQ(h.points().back().count, 1u);
  EXPECT_GT(h.points().front().count, h.points().back().count);
}

TEST(History, EmptyMeanIsNan) { EXPECT_TRUE(std::isnan(History(4).MeanOfLast(3))); }

}  // namespace
}  // namespace stallscope::sample
