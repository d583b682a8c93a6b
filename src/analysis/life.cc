#include "analysis/life.h"

#include <algorithm>
#include <cmath>

#include "base/stats.h"

namespace stallscope::analysis {
namespace {

/// The step time above which a step is slower than the steady state: from the second half of
/// the steps (WarmupSteps' contract).
double SteadyLevel(std::span<const double> step_s, const ThresholdSet& t) {
  std::vector<double> ref(step_s.begin() + static_cast<std::ptrdiff_t>(step_s.size() / 2),
                          step_s.end());
  const double median = Quantile(ref, 0.5).value_or(0.0);
  for (double& x : ref) x = std::abs(x - median);
  const double mad = Quantile(ref, 0.5).value_or(0.0);
  // 1.4826 × MAD estimates σ for normal noise; the floor keeps a loop of identical steps from
  // calling every microsecond of jitter a change.
  const double sigma = std::max(kMadToSigma * mad, t.robust_sigma_floor.value * median);
  return std::max({median + t.warmup_robust_z.value * sigma,
                   median * (1.0 + t.warmup_min_excess.value),
                   median + t.warmup_min_excess_s.value});
}

}  // namespace

std::string_view RunStageName(RunStage stage) {
  switch (stage) {
    case RunStage::kStartup:
      return "start-up";
    case RunStage::kWarmup:
      return "warm-up";
    case RunStage::kSteady:
      return "steady";
    case RunStage::kTail:
      return "tail";
  }
  return "unknown";
}

size_t WarmupSteps(std::span<const double> step_s, const ThresholdSet& t) {
  const size_t n = step_s.size();
  if (n < 2) return 0;
  const double level = SteadyLevel(step_s, t);
  auto above = [level](double s) { return s > level; };
  // How often the steady state itself has a step above the level (periodic side work, an
  // oscillating loader): a settled window may have as many, and always one.
  const auto steady_above = static_cast<double>(
      std::count_if(step_s.begin() + static_cast<std::ptrdiff_t>(n / 2), step_s.end(), above));
  const double steady_rate = steady_above / static_cast<double>(n - n / 2);
  const auto window = static_cast<size_t>(std::max(1.0, t.warmup_settle_steps.value));
  const auto most = static_cast<size_t>(static_cast<double>(n) * t.warmup_max_share.value);
  for (size_t k = 0; k < most; ++k) {
    if (above(step_s[k])) continue;
    const size_t end = std::min(n, k + window);
    const auto slow = static_cast<double>(
        std::count_if(step_s.begin() + static_cast<std::ptrdiff_t>(k),
                      step_s.begin() + static_cast<std::ptrdiff_t>(end), above));
    const double allowed = std::max(1.0, std::ceil(steady_rate * static_cast<double>(end - k)));
    if (slow <= allowed) return k;
  }
  return most;
}

void StageTracker::Begin(int64_t ts_ns) {
  if (first_ns_ < 0) first_ns_ = last_ns_ = ts_ns;
}

void StageTracker::Step(int64_t ts_ns) {
  if (first_ns_ < 0) {
    // No record before the first boundary: its step has no known start; it only starts the next.
    first_ns_ = last_ns_ = ts_ns;
    return;
  }
  const double seconds = static_cast<double>(ts_ns - last_ns_) / 1e9;
  last_ns_ = ts_ns;
  ++steps_;
  if (stage_ == RunStage::kSteady) return;
  if (step_s_.size() < kMaxTracked) step_s_.push_back(std::max(0.0, seconds));
  warmup_ = WarmupSteps(step_s_, *t_);
  const auto settled = static_cast<size_t>(std::max(1.0, t_->warmup_settle_steps.value));
  stage_ = step_s_.size() - warmup_ >= settled || step_s_.size() >= kMaxTracked ? RunStage::kSteady
                                                                                : RunStage::kWarmup;
}

}  // namespace stallscope::analysis
