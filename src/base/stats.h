#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
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

/// 1.4826 × MAD (median absolute deviation) estimates σ for normal data (Rousseeuw & Croux 1993,
/// "Alternatives to the median absolute deviation", JASA 88:1273).
inline constexpr double kMadToSigma = 1.4826;

/// How a quantile between two order statistics is read (numpy's `method` names). The one
/// quantile of the tree: every percentile, median of a sorted series and bootstrap interval end.
enum class QuantileMethod {
  kLinear,   ///< interpolate between the two closest ranks (numpy's and pandas' default)
  kLower,    ///< the lower of the two: sorted[⌊q·(n−1)⌋]
  kNearest,  ///< the nearer of the two, a tie going up: sorted[⌊q·(n−1) + ½⌋] (numpy rounds
             ///< ties to even: this does not)
};

/// Quantile q of `sorted` (ascending, non-empty; q in [0,1], not clamped). O(1): for callers that
/// sort once and read several quantiles.
[[nodiscard]] double QuantileOfSorted(std::span<const double> sorted, double q,
                                      QuantileMethod method = QuantileMethod::kLinear);

/// Quantile q in [0,1] (clamped) of `values` by linear interpolation between closest ranks
/// (numpy's default). Sorts a copy; empty input → nullopt. Quantile(v, 0.5) is a median whose
/// even-count value is v[k] + (v[k+1] − v[k]) / 2; Median's is (v[k] + v[k+1]) / 2: equal, or
/// one ulp apart.
[[nodiscard]] std::optional<double> Quantile(std::span<const double> values, double q);

/// Quantile q of `values` by selection (nth_element: O(n), no sort), which reorders `values`
/// (non-empty; q in [0,1], not clamped). Integer samples (ns, µs) are read as doubles; the
/// result is that of QuantileOfSorted on the sorted values.
template <typename T>
[[nodiscard]] double QuantileInPlace(std::span<T> values, double q,
                                     QuantileMethod method = QuantileMethod::kLinear) {
  const double pos = q * static_cast<double>(values.size() - 1);
  auto select = [&values](size_t k) {
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
    return values[k];
  };
  if (method == QuantileMethod::kLower)
    return static_cast<double>(select(static_cast<size_t>(pos)));
  if (method == QuantileMethod::kNearest) {
    return static_cast<double>(select(std::min(static_cast<size_t>(pos + 0.5), values.size() - 1)));
  }
  const auto lo = static_cast<size_t>(pos);
  const auto lo_value = static_cast<double>(select(lo));
  // After nth_element everything past lo is >= values[lo]: the next order statistic is their
  // minimum.
  const double hi_value =
      lo + 1 < values.size()
          ? static_cast<double>(*std::min_element(
                values.begin() + static_cast<std::ptrdiff_t>(lo) + 1, values.end()))
          : lo_value;
  return lo_value + (hi_value - lo_value) * (pos - static_cast<double>(lo));
}

/// The median by selection (O(n)), which reorders `values`: the middle value, for an even count
/// the mean of the two middle ones, (a + b) / 2 (numpy's and pandas' median). Empty → 0.
template <typename T>
[[nodiscard]] double MedianInPlace(std::span<T> values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const auto upper = static_cast<double>(values[mid]);
  if (values.size() % 2 == 1) return upper;
  const auto lower = static_cast<double>(
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid)));
  return (lower + upper) / 2.0;
}

/// MedianInPlace of a copy of `values`. Empty → 0.
[[nodiscard]] double Median(std::span<const double> values);

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
