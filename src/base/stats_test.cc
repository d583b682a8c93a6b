#include "base/stats.h"

#include <vector>

#include <gtest/gtest.h>

namespace stallscope {
namespace {

TEST(RunningStats, MeanAndPopulationStd) {
  RunningStats s;
  for (double x : {2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0}) s.Add(x);
  EXPECT_EQ(s.count(), 8);
  EXPECT_DOUBLE_EQ(s.mean(), 5.0);
  EXPECT_DOUBLE_EQ(s.stddev(), 2.0);
  EXPECT_DOUBLE_EQ(s.min(), 2.0);
  EXPECT_DOUBLE_EQ(s.max(), 9.0);
}

TEST(Quantile, LinearInterpolation) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(*Quantile(v, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(*Quantile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(*Quantile(v, 1.0), 4.0);
  EXPECT_FALSE(Quantile({}, 0.5).has_value());
}

// Seed 002 classes at and around their boundaries: < 5 Excellent, 5–10 Good, 10–20 Fair, ≥ 20 Poor.
TEST(ClassifyCv, Boundaries) {
  struct Case {
    double cv;
    BalanceClass want;
  };
  const Case cases[] = {
      {0.0, BalanceClass::kExcellent}, {4.999, BalanceClass::kExcellent},
      {5.0, BalanceClass::kGood},      {9.999, BalanceClass::kGood},
      {10.0, BalanceClass::kFair},     {19.999, BalanceClass::kFair},
      {20.0, BalanceClass::kPoor},     {250.0, BalanceClass::kPoor},
  };
  for (const auto& c : cases) EXPECT_EQ(ClassifyCv(c.cv, kThresholds), c.want) << c.cv;
  EXPECT_EQ(BalanceClassName(BalanceClass::kFair), "Fair");
  // The cuts are data: a stricter table moves them.
  ThresholdSet strict;
  strict.balance_good_cv.value = 1;
  EXPECT_EQ(ClassifyCv(2.0, strict), BalanceClass::kGood);
}

TEST(CoefficientOfVariation, SeedExample) {
  // Seed 002's example: 12800, 12750, 12825, 12780 MB → CV = 0.2%, Excellent.
  std::vector<double> mem = {12800, 12750, 12825, 12780};
  auto cv = CoefficientOfVariationPct(mem);
  ASSERT_TRUE(cv.has_value());
  EXPECT_NEAR(*cv, 0.2156, 1e-3);
  EXPECT_EQ(ClassifyCv(*cv, kThresholds), BalanceClass::kExcellent);
  EXPECT_FALSE(CoefficientOfVariationPct(std::vector<double>{0, 0}).has_value());
  EXPECT_FALSE(CoefficientOfVariationPct({}).has_value());
}

}  // namespace
}  // namespace stallscope
