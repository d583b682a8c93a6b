#include "analysis/detect.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace stallscope::analysis {
namespace {

using PhaseMap = std::map<std::string, double>;

/// A rank whose step windows are back to back and as long as the sum of their phases.
RankSteps MakeRank(const std::vector<PhaseMap>& steps, int32_t rank = 0) {
  RankSteps r;
  r.rank = rank;
  int64_t t_ns = 1'000'000'000;
  for (size_t i = 0; i < steps.size(); ++i) {
    StepRecord s;
    s.index = static_cast<int64_t>(i) + 1;
    s.begin_ns = t_ns;
    double total_s = 0;
    for (const auto& [name, seconds] : steps[i]) total_s += seconds;
    t_ns += std::llround(total_s * 1e9);
    s.end_ns = t_ns;
    s.phase_s = steps[i];
    r.duration_s += total_s;
    r.steps.push_back(std::move(s));
  }
  r.count = static_cast<int64_t>(steps.size());
  return r;
}

/// `n` ordinary training steps (~112 ms) with a little seeded noise.
std::vector<PhaseMap> BaseSteps(size_t n, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<PhaseMap> steps(n);
  for (PhaseMap& s : steps) {
    s["forward_pass"] = 0.100 + 0.002 * noise(rng);
    s["data_loading"] = 0.010 + 0.0005 * std::abs(noise(rng));
    s["other"] = 0.002;
  }
  return steps;
}

/// Adds `extra_s` to `phase` in the steps whose 1-based index is in `indices`.
void AddAt(std::vector<PhaseMap>& steps, const std::string& phase, double extra_s,
           const std::vector<int64_t>& indices) {
  for (int64_t index : indices) steps.at(static_cast<size_t>(index - 1))[phase] += extra_s;
}

std::vector<int64_t> Every(int64_t period, int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t i = first; i <= last; i += period) out.push_back(i);
  return out;
}

PhaseAnalysis OneRank(std::vector<PhaseMap> steps) {
  PhaseAnalysis a;
  a.ranks.push_back(MakeRank(steps));
  return a;
}

// --- FindOutliers -------------------------------------------------------------------------------

TEST(FindOutliers, Table) {
  struct Case {
    const char* name;
    std::vector<double> values;
    std::vector<size_t> indices;
    double median;
  };
  const Case cases[] = {
      {"empty", {}, {}, 0.0},
      {"single", {5.0}, {}, 5.0},
      {"two", {1.0, 100.0}, {}, 50.5},
      {"spikes", {1.00, 1.02, 0.98, 5.0, 1.01, 0.99, 1.00, 7.0, 1.03, 0.97}, {3, 7}, 1.005},
      {"all equal: no outliers", {2.0, 2.0, 2.0, 2.0, 2.0}, {}, 2.0},
      // Zero MAD: the floor (1% of the median) tolerates +2% but not +10%.
      {"zero MAD floor", {2.0, 2.0, 2.04, 2.0, 2.2, 2.0, 2.0}, {4}, 2.0},
      {"all zero but one", {0.0, 0.0, 0.0, 0.3, 0.0}, {3}, 0.0},
      {"low values are never outliers", {1.0, 1.01, 0.99, 0.0, 1.0, -5.0}, {}, 0.995},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Outliers o = FindOutliers(c.values);
    EXPECT_EQ(o.indices, c.indices);
    EXPECT_NEAR(o.median, c.median, 1e-12);
  }
}

TEST(FindOutliers, ThresholdIsMedianPlusScaledMad) {
  const std::vector<double> v = {1, 2, 3, 4, 100};  // median 3, deviations {2,1,0,1,97}: MAD 1
  const Outliers o = FindOutliers(v);
  EXPECT_DOUBLE_EQ(o.median, 3.0);
  EXPECT_DOUBLE_EQ(o.mad, 1.0);
  EXPECT_NEAR(o.threshold, 3.0 + 3.5 * 1.4826, 1e-12);
  EXPECT_EQ(o.indices, std::vector<size_t>{4});
  // The cut is data: a laxer table finds none.
  ThresholdSet lax;
  lax.outlier_robust_z.value = 100.0;
  EXPECT_TRUE(FindOutliers(v, lax).indices.empty());
}

TEST(FindOutliers, NormalSampleWithSpikes) {
  std::mt19937 rng(42);
  std::normal_distribution<double> normal(10.0, 1.0);
  std::vector<double> v(2000);
  for (double& x : v) x = normal(rng);
  for (size_t i = 100; i < v.size(); i += 200) v[i] = 30.0;
  const Outliers o = FindOutliers(v);
  const std::set<size_t> found(o.indices.begin(), o.indices.end());
  for (size_t i = 100; i < v.size(); i += 200) EXPECT_TRUE(found.count(i)) << i;
  // 3.5 robust σ one-sided: ~0.02% of a normal sample, so at most a stray one besides the spikes.
  EXPECT_LE(o.indices.size(), 12u);
  EXPECT_NEAR(o.mad * 1.4826, 1.0, 0.1);
}

// --- DetectPeriod -------------------------------------------------------------------------------

std::vector<double> Sine(size_t n, double period) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = 5.0 + std::sin(2 * std::numbers::pi * static_cast<double>(i) / period);
  }
  return v;
}

TEST(DetectPeriod, Table) {
  struct Case {
    const char* name;
    std::vector<double> values;
    double period;
  };
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 0.1);
  std::vector<double> spikes(500), square(300), noisy_sine = Sine(600, 33.0);
  for (size_t i = 0; i < spikes.size(); ++i) spikes[i] = noise(rng) + (i % 25 == 0 ? 1.0 : 0.0);
  for (size_t i = 0; i < square.size(); ++i) square[i] = (i % 10) < 3 ? 2.0 : 1.0;
  for (double& v : noisy_sine) v += 3 * noise(rng);
  const Case cases[] = {
      {"sine period 20 over 400", Sine(400, 20.0), 20.0},
      {"sine period 7", Sine(200, 7.0), 7.0},
      {"sine period 12.5", Sine(500, 12.5), 12.5},
      {"spikes every 25 on noise", spikes, 25.0},
      {"square wave period 10", square, 10.0},
      {"noisy sine period 33", noisy_sine, 33.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto p = DetectPeriod(c.values);
    ASSERT_TRUE(p.has_value());
    EXPECT_TRUE(p->significant);
    EXPECT_NEAR(p->period, c.period, 0.5);
    EXPECT_LT(p->p_value, kThresholds.period_alpha.value);
    EXPECT_GE(p->strength, kThresholds.period_min_strength.value);
    EXPECT_LE(p->strength, 1.0);
  }
}

TEST(DetectPeriod, WhiteNoiseIsNotSignificant) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    std::normal_distribution<double> noise(1.0, 0.2);
    std::vector<double> v(1000);
    for (double& x : v) x = noise(rng);
    const auto p = DetectPeriod(v);
    ASSERT_TRUE(p.has_value());
    EXPECT_FALSE(p->significant);
    EXPECT_LT(p->strength, kThresholds.period_min_strength.value);
  }
}

TEST(DetectPeriod, NoCandidate) {
  EXPECT_FALSE(DetectPeriod(std::vector<double>{}).has_value());
  EXPECT_FALSE(DetectPeriod(Sine(15, 5.0)).has_value());                  // < 16 points
  EXPECT_FALSE(DetectPeriod(std::vector<double>(100, 3.0)).has_value());  // constant
  EXPECT_TRUE(DetectPeriod(Sine(16, 5.0)).has_value());
}

TEST(DetectPeriod, NeedsThreePeriods) {
  // Period 80 over 200 points is only 2.5 periods: whatever is found is shorter than N/3.
  const auto p = DetectPeriod(Sine(200, 80.0));
  ASSERT_TRUE(p.has_value());
  EXPECT_LE(p->period, 200.0 / 3 + 0.5);
}

TEST(DetectPeriodScale, HundredThousandPoints) {
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 0.5);
  std::vector<double> v = Sine(100'000, 50.0);
  for (double& x : v) x += noise(rng);
  const auto start = std::chrono::steady_clock::now();
  const auto p = DetectPeriod(v);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("DetectPeriod: %zu points in %.1f ms\n", v.size(), ms);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->significant);
  EXPECT_NEAR(p->period, 50.0, 0.5);
}

// --- FindPeriodicPhases -------------------------------------------------------------------------

TEST(FindPeriodicPhases, CheckpointEveryTwentySteps) {
  std::vector<PhaseMap> steps = BaseSteps(200);
  AddAt(steps, "checkpointing", 0.9, Every(20, 20, 200));
  const PhaseAnalysis a = OneRank(steps);
  const auto found = FindPeriodicPhases(a);
  ASSERT_EQ(found.size(), 1u);
  const PeriodicPhase& p = found[0];
  EXPECT_EQ(p.phase, "checkpointing");
  EXPECT_EQ(p.every_steps, 20);
  EXPECT_EQ(p.occurrences, 10);
  EXPECT_EQ(p.steps, Every(20, 20, 200));
  EXPECT_NEAR(p.extra_s_each, 0.9, 0.01);
  EXPECT_NEAR(p.share_of_wall, 10 * p.extra_s_each / a.ranks[0].duration_s, 1e-12);
  EXPECT_NEAR(p.share_of_wall, 9.0 / (200 * 0.112 + 9.0), 0.005);
}

TEST(FindPeriodicPhases, WhatAnOccurrenceHoldsBeyondAnOrdinaryStep) {
  std::vector<PhaseMap> steps = BaseSteps(120);
  AddAt(steps, "other", 0.4, Every(15, 15, 120));
  AddAt(steps, "eval_forward", 0.05, Every(15, 15, 120));
  PhaseAnalysis a = OneRank(steps);
  for (auto& s : a.ranks[0].steps) {
    s.phase_n = {{"forward_pass", 1}, {"data_loading", 1}};
    s.counters = {{"host_sync.item", 1}};
    if (s.index % 15 == 0) {
      s.phase_n["eval_forward"] = 40;
      s.counters["host_sync.item"] = 4;
    }
  }
  const auto found = FindPeriodicPhases(a);
  ASSERT_EQ(found.size(), 1u);
  const PeriodicPhase& p = found[0];
  EXPECT_EQ(p.phase, "other");
  EXPECT_NEAR(p.extra_phase_s.at("other"), 0.4, 1e-9);
  EXPECT_NEAR(p.extra_phase_s.at("eval_forward"), 0.05, 1e-9);
  EXPECT_EQ(p.extra_phase_n, (std::map<std::string, double>{{"eval_forward", 40.0}}));
  EXPECT_EQ(p.extra_counters, (std::map<std::string, double>{{"host_sync.item", 3.0}}));
  ASSERT_EQ(p.windows.size(), 8u);
  EXPECT_EQ(p.windows[0].first, a.ranks[0].steps[14].begin_ns);
  EXPECT_EQ(p.windows[0].second, a.ranks[0].steps[14].end_ns);
}

TEST(FindPeriodicPhases, TwoInterleavedSideWorks) {
  std::vector<PhaseMap> steps = BaseSteps(300);
  AddAt(steps, "checkpointing", 0.9, Every(30, 30, 300));
  AddAt(steps, "eval", 0.5, Every(25, 25, 300));
  const auto found = FindPeriodicPhases(OneRank(steps));
  ASSERT_EQ(found.size(), 2u);
  // Steps 150 and 300 carry both: the larger excess (checkpointing) takes them.
  EXPECT_EQ(found[0].phase, "checkpointing");
  EXPECT_EQ(found[0].every_steps, 30);
  EXPECT_EQ(found[0].occurrences, 10);
  EXPECT_EQ(found[1].phase, "eval");
  EXPECT_EQ(found[1].every_steps, 25);
  EXPECT_EQ(found[1].occurrences, 10);
  EXPECT_NEAR(found[1].extra_s_each, 0.5, 0.01);
  EXPECT_GT(found[0].share_of_wall, found[1].share_of_wall);
}

TEST(FindPeriodicPhases, NoOutliersNoGroups) {
  EXPECT_TRUE(FindPeriodicPhases(OneRank(BaseSteps(500))).empty());
  EXPECT_TRUE(FindPeriodicPhases(PhaseAnalysis{}).empty());
  EXPECT_TRUE(FindPeriodicPhases(OneRank({})).empty());
}

TEST(FindPeriodicPhases, SingleSlowStepIsNoGroup) {
  std::vector<PhaseMap> steps = BaseSteps(100);
  AddAt(steps, "checkpointing", 2.0, {50});
  EXPECT_TRUE(FindPeriodicPhases(OneRank(steps)).empty());
}

TEST(FindPeriodicPhases, UnmarkedWorkIsOther) {
  std::vector<PhaseMap> steps = BaseSteps(120);
  AddAt(steps, "other", 0.4, Every(12, 12, 120));
  const auto found = FindPeriodicPhases(OneRank(steps));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].phase, "other");
  EXPECT_EQ(found[0].every_steps, 12);
}

TEST(FindPeriodicPhases, SpacingTable) {
  struct Case {
    const char* name;
    std::vector<int64_t> at;
    int64_t every_steps;
  };
  const Case cases[] = {
      {"exact", Every(20, 20, 400), 20},
      {"jitter of one step", {20, 41, 60, 80, 99, 120, 140, 161, 180, 200}, 20},
      {"one missing occurrence", {20, 40, 60, 100, 120, 140, 160, 180}, 20},
      {"two occurrences make no period", {100, 300}, 0},
      {"burst of consecutive slow steps", {200, 201, 202, 203}, 0},
      {"irregular", {13, 40, 44, 90, 161, 170, 260, 281, 333, 390}, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<PhaseMap> steps = BaseSteps(400);
    AddAt(steps, "eval", 0.6, c.at);
    const auto found = FindPeriodicPhases(OneRank(steps));
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].steps, c.at);
    EXPECT_EQ(found[0].every_steps, c.every_steps);
  }
}

TEST(FindPeriodicPhases, RanksAreSeparateAndSortedByShare) {
  PhaseAnalysis a;
  std::vector<PhaseMap> r0 = BaseSteps(200, 1), r1 = BaseSteps(200, 2);
  AddAt(r0, "checkpointing", 0.3, Every(50, 50, 200));
  AddAt(r1, "checkpointing", 0.3, Every(10, 10, 200));
  a.ranks.push_back(MakeRank(r0, 0));
  a.ranks.push_back(MakeRank(r1, 1));
  const auto found = FindPeriodicPhases(a);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].rank, 1);
  EXPECT_EQ(found[0].every_steps, 10);
  EXPECT_EQ(found[1].rank, 0);
  EXPECT_EQ(found[1].every_steps, 50);
}

TEST(FindPeriodicPhasesScale, MillionSteps) {
  // Two phases per step keep the fixture small (~200 MB); the work is per step and per phase.
  constexpr size_t kSteps = 1'000'000;
  PhaseAnalysis a;
  RankSteps& r = a.ranks.emplace_back();
  r.steps.resize(kSteps);
  int64_t t_ns = 0;
  for (size_t i = 0; i < kSteps; ++i) {
    StepRecord& s = r.steps[i];
    s.index = static_cast<int64_t>(i) + 1;
    const double compute_s = 0.1 + 0.001 * static_cast<double>(i % 7);
    s.phase_s.emplace("forward_pass", compute_s);
    double step_s = compute_s;
    if (s.index % 100 == 0) s.phase_s.emplace("checkpointing", 0.5), step_s += 0.5;
    s.begin_ns = t_ns;
    t_ns += std::llround(step_s * 1e9);
    s.end_ns = t_ns;
    r.duration_s += step_s;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto found = FindPeriodicPhases(a);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("FindPeriodicPhases: %zu steps in %.1f ms\n", kSteps, ms);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].every_steps, 100);
  EXPECT_EQ(found[0].occurrences, 10'000);
}

// --- FindEpochStartStalls -----------------------------------------------------------------------

TEST(FindEpochStartStalls, StallAtEveryEpochStart) {
  std::vector<PhaseMap> steps = BaseSteps(128);
  AddAt(steps, "data_loading", 0.5, {1, 33, 65, 97});
  const RankSteps rank = MakeRank(steps);
  const auto stall = FindEpochStartStalls(rank, 32);
  ASSERT_TRUE(stall.has_value());
  EXPECT_EQ(stall->every_steps, 32);
  EXPECT_EQ(stall->stalls, 4);
  EXPECT_EQ(stall->steps, (std::vector<int64_t>{1, 33, 65, 97}));
  EXPECT_NEAR(stall->extra_s_each, 0.5, 0.01);
  EXPECT_NEAR(stall->share_of_wall, 4 * stall->extra_s_each / rank.duration_s, 1e-12);
}

TEST(FindEpochStartStalls, Table) {
  struct Case {
    const char* name;
    std::vector<int64_t> slow;
    int64_t steps_per_epoch;
    bool detected;
  };
  const Case cases[] = {
      {"off by one tolerated", {1, 34, 64, 97, 129}, 32, true},
      {"run start excluded but counted with others", {33, 65, 97, 129}, 32, true},
      {"only the first step (startup)", {1}, 32, false},
      {"first plus one of four later starts", {1, 65}, 32, false},
      {"three of four later starts", {1, 33, 65, 129}, 32, true},
      {"stalls mid-epoch", {16, 48, 80, 112, 144}, 32, false},
      {"random stalls", {7, 23, 58, 91, 120, 131}, 32, false},
      {"no epoch boundary", {1, 33}, 0, false},
      {"one step per epoch", {1, 2, 3}, 1, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<PhaseMap> steps = BaseSteps(150);
    AddAt(steps, "data_loading", 0.5, c.slow);
    EXPECT_EQ(FindEpochStartStalls(MakeRank(steps), c.steps_per_epoch).has_value(), c.detected);
  }
}

TEST(FindEpochStartStalls, HugeStepsPerEpochDoesNotOverflow) {
  std::vector<PhaseMap> steps = BaseSteps(100);
  AddAt(steps, "data_loading", 0.5, {1, 50});
  EXPECT_FALSE(FindEpochStartStalls(MakeRank(steps), INT64_MAX).has_value());
  EXPECT_FALSE(FindPrefetchStalls(MakeRank(steps), INT64_MAX).has_value());
}

TEST(FindEpochStartStalls, StepsNotStartingAtOne) {
  // A recording that starts mid-run: indices 1001..1128, epochs of 32 start at 1025, 1057, ….
  std::vector<PhaseMap> steps = BaseSteps(128);
  AddAt(steps, "data_loading", 0.5, {25, 57, 89, 121});
  RankSteps rank = MakeRank(steps);
  for (StepRecord& s : rank.steps) s.index += 1000;
  const auto stall = FindEpochStartStalls(rank, 32);
  ASSERT_TRUE(stall.has_value());
  EXPECT_EQ(stall->steps, (std::vector<int64_t>{1025, 1057, 1089, 1121}));
}

TEST(FindEpochStartStalls, NoDataLoadingPhase) {
  std::vector<PhaseMap> steps(100, PhaseMap{{"forward_pass", 0.1}});
  EXPECT_FALSE(FindEpochStartStalls(MakeRank(steps), 10).has_value());
  EXPECT_FALSE(FindEpochStartStalls(RankSteps{}, 10).has_value());
}

// --- FindPrefetchStalls -------------------------------------------------------------------------

TEST(FindPrefetchStalls, EveryNumWorkersStep) {
  std::vector<PhaseMap> steps = BaseSteps(200);
  AddAt(steps, "data_loading", 0.3, Every(4, 4, 200));
  const RankSteps rank = MakeRank(steps);
  const auto stall = FindPrefetchStalls(rank, 4);
  ASSERT_TRUE(stall.has_value());
  EXPECT_EQ(stall->every_steps, 4);
  EXPECT_EQ(stall->stalls, 50);
  EXPECT_EQ(stall->steps, Every(4, 4, 200));
  EXPECT_NEAR(stall->extra_s_each, 0.3, 0.01);
  EXPECT_NEAR(stall->share_of_wall, 50 * stall->extra_s_each / rank.duration_s, 1e-12);
}

TEST(FindPrefetchStalls, Table) {
  std::mt19937 rng(5);
  std::vector<int64_t> random_stalls, most_cycles, few_cycles;
  for (int64_t i = 1; i <= 200; ++i) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < 0.15) random_stalls.push_back(i);
  }
  for (int64_t i = 2; i <= 200; i += 4) {
    if (i % 20 != 2) most_cycles.push_back(i);                // 80% of the cycles
    if (i % 20 == 2 || i % 20 == 6) few_cycles.push_back(i);  // 40%
  }
  struct Case {
    const char* name;
    std::vector<int64_t> slow;
    int64_t num_workers;
    bool detected;
  };
  const Case cases[] = {
      {"every 3rd step, 3 workers", Every(3, 1, 200), 3, true},
      {"80% of the cycles", most_cycles, 4, true},
      {"40% of the cycles", few_cycles, 4, false},
      {"random stalls", random_stalls, 4, false},
      {"every 4th step but 3 workers", Every(4, 4, 200), 3, false},
      {"one worker", Every(4, 4, 200), 1, false},
      {"no workers", Every(4, 4, 200), 0, false},
      {"negative workers", Every(4, 4, 200), -4, false},
      {"no stalls", {}, 4, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<PhaseMap> steps = BaseSteps(200);
    AddAt(steps, "data_loading", 0.3, c.slow);
    EXPECT_EQ(FindPrefetchStalls(MakeRank(steps), c.num_workers).has_value(), c.detected);
  }
}

TEST(FindPrefetchStalls, TooFewSteps) {
  std::vector<PhaseMap> steps = BaseSteps(7);
  AddAt(steps, "data_loading", 0.3, {4});
  EXPECT_FALSE(FindPrefetchStalls(MakeRank(steps), 4).has_value());
}

}  // namespace
}  // namespace stallscope::analysis
