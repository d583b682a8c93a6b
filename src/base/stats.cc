#include "base/stats.h"

#include <algorithm>
#include <vector>

namespace stallscope {

std::optional<double> Quantile(std::span<const double> values, double q) {
  if (values.empty()) return std::nullopt;
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  auto lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
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
