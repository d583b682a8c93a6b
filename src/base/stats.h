#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/thresholds.h"

namespace stallscope {

/// Streaming mean and population standard deviation (Welford). O(1) memory, no allocation.
class RunningStats {
 public:
  void Add(double x) {
    ++count_;
    double delta = x - mean_;
    mean_ += delta / static_cast<double>(count_);
    m2_ += delta * (x - mean_);
    if (count_ == 1 || x < min_) min_ = x;
    if (count_ == 1 || x > max_) max_ = x;
  }
  int64_t count() const { return count_; }
  double mean() const { return mean_; }
  /// Population standard deviation (divides by n), 0 for fewer than 2 values.
  double stddev() const { return count_ < 2 ? 0.0 : std::sqrt(m2_ / static_cast<double>(count_)); }
  double min() const { return min_; }
  double max() const { return max_; }

 private:
  int64_t count_ = 0;
  double mean_ = 0;
  double m2_ = 0;
  double min_ = 0;
  double max_ = 0;
};

/// Quantile q in [0,1] of `values` by linear interpolation between closest ranks (numpy's
/// default). Sorts a copy; empty input → nullopt.
[[nodiscard]] std::optional<double> Quantile(std::span<const double> values, double q);

/// Seed 002: load-balance quality from the coefficient of variation (std/mean × 100%).
enum class BalanceClass { kExcellent, kGood, kFair, kPoor };

/// Seed 002 classes, cut at `t.balance_good_cv` / `balance_fair_cv` / `balance_poor_cv`
/// (5/10/20%): below the first Excellent, then Good, Fair, and Poor from the last on.
[[nodiscard]] BalanceClass ClassifyCv(double cv_pct, const ThresholdSet& t);
[[nodiscard]] std::string_view BalanceClassName(BalanceClass c);

/// Coefficient of variation in percent of `values` (population std / mean × 100).
/// Empty input or a zero mean → nullopt (undefined, not "perfectly balanced").
[[nodiscard]] std::optional<double> CoefficientOfVariationPct(std::span<const double> values);

}  // namespace stallscope
