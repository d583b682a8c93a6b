#include "base/stats.h"

#include <cstdint>
#include <span>
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

TEST(Median, MeanOfTheTwoMiddleValues) {
  EXPECT_EQ(Median(std::vector<double>{}), 0.0);
  EXPECT_EQ(Median(std::vector<double>{7}), 7.0);
  EXPECT_EQ(Median(std::vector<double>{5, 1, 3}), 3.0);
  EXPECT_EQ(Median(std::vector<double>{4, 1, 3, 2}), 2.5);
  // Not interpolated: (a + b) / 2, where Quantile(v, 0.5) gives a + (b − a) / 2.
  const std::vector<double> v = {0.1, 1e16};
  EXPECT_EQ(Median(v), (0.1 + 1e16) / 2);
  std::vector<int64_t> ns = {40, 10, 30, 20};  // integer samples by selection, reordered
  EXPECT_EQ(MedianInPlace(std::span(ns)), 25.0);
}

// The three methods on one sorted series, against numpy's percentiles of [10, 20, 30, 40, 50].
TEST(Quantile, MethodsOnSortedValues) {
  struct Case {
    double q;
    QuantileMethod method;
    double want;
  };
  const std::vector<double> sorted = {10, 20, 30, 40, 50};
  const Case cases[] = {
      {0.0, QuantileMethod::kLinear, 10},   {0.1, QuantileMethod::kLinear, 14},
      {0.5, QuantileMethod::kLinear, 30},   {0.99, QuantileMethod::kLinear, 49.6},
      {1.0, QuantileMethod::kLinear, 50},   {0.1, QuantileMethod::kLower, 10},
      {0.99, QuantileMethod::kLower, 40},   {1.0, QuantileMethod::kLower, 50},
      {0.1, QuantileMethod::kNearest, 10},  {0.125, QuantileMethod::kNearest, 20},  // tie: up
      {0.99, QuantileMethod::kNearest, 50}, {0.0, QuantileMethod::kNearest, 10},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "q " << c.q << " method " << static_cast<int>(c.method));
    EXPECT_DOUBLE_EQ(QuantileOfSorted(sorted, c.q, c.method), c.want);
    std::vector<double> shuffled = {40, 10, 50, 30, 20};
    EXPECT_DOUBLE_EQ(QuantileInPlace(std::span(shuffled), c.q, c.method), c.want);
    std::vector<uint32_t> us = {40, 10, 50, 30, 20};
    EXPECT_DOUBLE_EQ(QuantileInPlace(std::span(us), c.q, c.method), c.want);
  }
  EXPECT_DOUBLE_EQ(*Quantile(std::vector<double>{50, 10, 40, 20, 30}, 0.99), 49.6);
  EXPECT_DOUBLE_EQ(*Quantile(std::vector<double>{50, 10}, 7.0), 50.0);  // q clamped
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
