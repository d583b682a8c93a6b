#include "analysis/step_rate.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope::analysis {
namespace {

/// Step durations around `mean_s` with ±`jitter` relative noise, reproducible from `seed`.
std::vector<double> Steps(size_t n, double mean_s, double jitter, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(1 - jitter, 1 + jitter);
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) out.push_back(mean_s * u(rng));
  return out;
}

TEST(EstimateRate, ConstantStepsHaveAPointInterval) {
  std::vector<double> s(20, 0.25);
  auto r = EstimateRate(s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->steps, 20);
  EXPECT_DOUBLE_EQ(r->per_s, 4.0);
  EXPECT_DOUBLE_EQ(r->lo, 4.0);
  EXPECT_DOUBLE_EQ(r->hi, 4.0);
}

TEST(EstimateRate, NoisyStepsHaveAnIntervalAroundTheRate) {
  auto s = Steps(100, 0.1, 0.3, 1);
  auto r = EstimateRate(s);
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->per_s, 10.0, 0.5);
  EXPECT_LT(r->lo, r->per_s);
  EXPECT_GT(r->hi, r->per_s);
  EXPECT_LT(r->hi - r->lo, 1.5);  // ±30% noise on 100 steps: the mean is known to a few %
  auto again = EstimateRate(s);
  EXPECT_EQ(again->lo, r->lo);  // fixed seed: the same steps, the same interval
  EXPECT_EQ(again->hi, r->hi);
}

TEST(EstimateRate, PeriodicSlowStepsAreResampledInWholePeriods) {
  // Every 10th step is 10× slower (a checkpoint), each step ±5%: blocks of the detected period
  // hold one slow step each, so the rate over whole periods is known to a few %. A run of 3.5
  // periods (too short for the period to be significant) gets a wide interval instead.
  auto noise = Steps(100, 1.0, 0.05, 3);
  std::vector<double> periodic;
  for (int i = 0; i < 100; ++i) periodic.push_back((i % 10 == 9 ? 1.0 : 0.1) * noise[i]);
  auto p = EstimateRate(periodic);
  ASSERT_TRUE(p);
  EXPECT_LT(p->lo, p->per_s);
  EXPECT_GT(p->hi, p->per_s);
  EXPECT_LT((p->hi - p->lo) / p->per_s, 0.05);
  std::vector<double> short_run(periodic.begin(), periodic.begin() + 35);
  auto s = EstimateRate(short_run);
  EXPECT_GT((s->hi - s->lo) / s->per_s, 0.3);
}

TEST(EstimateRate, TooFewStepsGiveNoInterval) {
  std::vector<double> s = {0.1, 0.3};
  auto r = EstimateRate(s);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->per_s, 5.0);
  EXPECT_DOUBLE_EQ(r->lo, 5.0);
  EXPECT_DOUBLE_EQ(r->hi, 5.0);
  EXPECT_FALSE(EstimateRate(std::vector<double>{}));
  EXPECT_FALSE(EstimateRate(std::vector<double>{0, 0, 0}));
}

TEST(CompareRates, TheSameJobTwiceIsNoSignificantChange) {
  auto a = Steps(60, 0.1, 0.3, 1), b = Steps(60, 0.1, 0.3, 2);
  auto c = CompareRates(a, b);
  ASSERT_TRUE(c);
  EXPECT_NEAR(c->ratio, 1.0, 0.1);
  EXPECT_LT(c->lo, 1.0);
  EXPECT_GT(c->hi, 1.0);
  EXPECT_FALSE(c->significant);
}

TEST(CompareRates, TwiceAsFastIsSignificantAndInsideTheInterval) {
  auto a = Steps(60, 0.2, 0.3, 1), b = Steps(60, 0.1, 0.3, 2);
  auto c = CompareRates(a, b);
  ASSERT_TRUE(c);
  EXPECT_NEAR(c->ratio, 2.0, 0.2);
  EXPECT_LT(c->lo, c->ratio);
  EXPECT_GT(c->hi, c->ratio);
  EXPECT_GT(c->lo, 1.0);
  EXPECT_TRUE(c->significant);
  auto slower = CompareRates(b, a);
  EXPECT_TRUE(slower->significant);
  EXPECT_LT(slower->hi, 1.0);
}

TEST(CompareRates, TooFewStepsIsNeverSignificant) {
  auto c = CompareRates(std::vector<double>{1.0, 1.0}, std::vector<double>{0.1, 0.1, 0.1, 0.1});
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->ratio, 10.0);
  EXPECT_FALSE(c->significant);
  EXPECT_FALSE(CompareRates(std::vector<double>{}, std::vector<double>{0.1}));
}

TEST(StepSeconds, EveryStepOfTheRank) {
  RankSteps r;
  for (int i = 0; i < 4; ++i) {
    StepRecord s;
    s.begin_ns = i * 1'000'000'000LL;
    s.end_ns = s.begin_ns + (i == 0 ? 900'000'000 : 100'000'000);
    r.steps.push_back(s);
  }
  EXPECT_EQ(StepSeconds(r), (std::vector<double>{0.9, 0.1, 0.1, 0.1}));
  EXPECT_TRUE(StepSeconds(RankSteps{}).empty());
}

}  // namespace
}  // namespace stallscope::analysis
