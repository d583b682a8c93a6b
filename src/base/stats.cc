#include "base/stats.h"

#include <algorithm>
#include <vector>

namespace stallscope {

double QuantileOfSorted(std::span<const double> sorted, double q, QuantileMethod method) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  if (method == QuantileMethod::kLower) return sorted[static_cast<size_t>(pos)];
  if (method == QuantileMethod::kNearest) {
    return sorted[std::min(static_cast<size_t>(pos + 0.5), sorted.size() - 1)];
  }
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

std::optional<double> Quantile(std::span<const double> values, double q) {
  if (values.empty()) return std::nullopt;
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return QuantileOfSorted(sorted, std::clamp(q, 0.0, 1.0));
}

double Median(std::span<const double> values) {
  std::vector<double> copy(values.begin(), values.end());
  return MedianInPlace(std::span<double>(copy));
}

BalanceClass ClassifyCv(double cv_pct, const ThresholdSet& t) {
  if (cv_pct < t.balance_good_cv.value) return BalanceClass::kExcellent;
  if (cv_pct < t.balance_fair_cv.value) return BalanceClass::kGood;
  if (cv_pct < t.balance_poor_cv.value) return BalanceClass::kFair;
  return BalanceClass::kPoor;
}

std::string_view BalanceClassName(BalanceClass c) {
  switch (c) {
    case BalanceClass::kExcellent:
      return "Excellent";
    case BalanceClass::kGood:
      return "Good";
    case BalanceClass::kFair:
      return "Fair";
    case BalanceClass::kPoor:
      return "Poor";
  }
  return "Poor";
}

std::optional<double> CoefficientOfVariationPct(std::span<const double> values) {
  if (values.empty()) return std::nullopt;
  RunningStats stats;
  for (double v : values) stats.Add(v);
  if (stats.mean() == 0.0) return std::nullopt;
  return stats.stddev() / std::fabs(stats.mean()) * 100.0;
}

}  // namespace stallscope
