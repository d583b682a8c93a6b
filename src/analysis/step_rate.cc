#include "analysis/step_rate.h"

#include "analysis/detect.h"
#include "base/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace stallscope::analysis {
namespace {

constexpr int kResamples = 2000;
constexpr uint64_t kSeed = 0x5eed'0013ULL;  // any fixed value: reproducible output

/// The mean step duration of each bootstrap resample, sorted.
std::vector<double> ResampledMeans(std::span<const double> x, uint64_t seed,
                                   const ThresholdSet& t) {
  const size_t n = x.size();
  size_t block = std::max<size_t>(1, static_cast<size_t>(std::ceil(std::sqrt(n))));
  // Periodic slow steps (a checkpoint every k steps): blocks of whole periods, so that each
  // resample holds as many of them as the run did.
  if (auto p = DetectPeriod(x, t); p && p->significant && p->period * 2 <= static_cast<double>(n)) {
    block = std::max(block, static_cast<size_t>(std::lround(p->period)));
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> start(0, n - 1);
  std::vector<double> means;
  means.reserve(kResamples);
  for (int r = 0; r < kResamples; ++r) {
    double sum = 0;
    size_t taken = 0;
    while (taken < n) {
      size_t s = start(rng);
      for (size_t i = 0; i < block && taken < n; ++i, ++taken) sum += x[(s + i) % n];  // circular
    }
    means.push_back(sum / static_cast<double>(n));
  }
  std::sort(means.begin(), means.end());
  return means;
}

/// An end of a bootstrap interval: the nearest resample, not an interpolation between two.
double At(const std::vector<double>& sorted, double q) {
  return QuantileOfSorted(sorted, q, QuantileMethod::kNearest);
}

bool Usable(std::span<const double> step_s) {
  return !step_s.empty() && std::accumulate(step_s.begin(), step_s.end(), 0.0) > 0;
}

}  // namespace

std::optional<RateEstimate> EstimateRate(std::span<const double> step_s, const ThresholdSet& t) {
  if (!Usable(step_s)) return std::nullopt;
  RateEstimate e;
  e.steps = static_cast<int64_t>(step_s.size());
  e.per_s = static_cast<double>(step_s.size()) / std::accumulate(step_s.begin(), step_s.end(), 0.0);
  e.lo = e.hi = e.per_s;
  if (static_cast<double>(e.steps) < t.rate_min_steps.value) return e;
  auto means = ResampledMeans(step_s, kSeed, t);
  // Steps/s is 1 / mean duration: the interval's ends swap.
  double slow = At(means, 0.975), fast = At(means, 0.025);
  if (slow > 0) e.lo = 1.0 / slow;
  if (fast > 0) e.hi = 1.0 / fast;
  return e;
}

std::optional<RateChange> CompareRates(std::span<const double> a, std::span<const double> b,
                                       double min_ratio, const ThresholdSet& t) {
  auto ra = EstimateRate(a, t), rb = EstimateRate(b, t);
  if (!ra || !rb) return std::nullopt;
  RateChange c;
  c.ratio = rb->per_s / ra->per_s;
  c.lo = c.hi = c.ratio;
  const double min_steps = t.rate_min_steps.value;
  if (static_cast<double>(ra->steps) < min_steps || static_cast<double>(rb->steps) < min_steps) {
    return c;
  }
  // Independent resamples (different seeds), paired by index: a ratio of two bootstrap
  // distributions. ratio = rate_b / rate_a = mean_a / mean_b.
  auto ma = ResampledMeans(a, kSeed, t), mb = ResampledMeans(b, kSeed + 1, t);
  std::mt19937_64 rng(kSeed + 2);
  std::shuffle(mb.begin(), mb.end(), rng);  // ma is sorted: unpair the orders
  std::vector<double> ratios;
  ratios.reserve(ma.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    if (mb[i] > 0) ratios.push_back(ma[i] / mb[i]);
  }
  if (ratios.empty()) return c;
  std::sort(ratios.begin(), ratios.end());
  c.lo = At(ratios, 0.025);
  c.hi = At(ratios, 0.975);
  c.significant = c.lo > min_ratio || c.hi < 1.0 / min_ratio;
  return c;
}

std::vector<double> StepSeconds(const RankSteps& rank) {
  std::vector<double> out;
  out.reserve(rank.steps.size());
  for (const StepRecord& s : rank.steps)
    out.push_back(static_cast<double>(s.end_ns - s.begin_ns) / 1e9);
  return out;
}

}  // namespace stallscope::analysis
