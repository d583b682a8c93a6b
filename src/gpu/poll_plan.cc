#include "gpu/poll_plan.h"

#include <algorithm>
#include <cmath>

namespace stallscope::gpu {
namespace {

constexpr double kNsPerS = 1e9;
/// Budgets are set for this rate; slower sampling gets proportionally less.
constexpr double kBudgetRateHz = 10.0;

constexpr std::array<std::string_view, kPollTierCount> kTierNames{
    "tick", "util_buffer", "energy", "process_util", "slow", "gpm"};

constexpr std::array<std::string_view, kPollTierCount> kTierFields{
    "utilization,utilization_memory_pct,memory_used_bytes,power_mw,power_limit_mw,temperature,"
    "sm_clock_mhz,mem_clock_mhz,clock_event_mask,processes",
    "util_samples",
    "energy_mj",
    "processes[].sm_util_pct,processes[].mem_util_pct",
    "pcie_gen,pcie_width,ecc_volatile_corrected,ecc_volatile_uncorrected",
    "gpm"};

int64_t RoundUpToTicks(int64_t period_ns, int64_t tick_ns) {
  if (tick_ns <= 0) return period_ns;
  const int64_t ticks = std::max<int64_t>(1, (period_ns + tick_ns - 1) / tick_ns);
  return ticks * tick_ns;
}

/// A tier's period: `base_s` stretched so cost x GPUs / period stays within `budget` (scaled to the
/// sampling rate), at most `max_s`.
int64_t Stretched(const std::optional<double>& cost_us, size_t gpus, double budget_scale,
                  const Threshold& base_s, const Threshold& max_s, const Threshold& budget_share) {
  double period_s = base_s.value;
  const double budget = budget_share.value * budget_scale;
  if (cost_us && *cost_us > 0 && budget > 0) {
    const double round_s = *cost_us * 1e-6 * static_cast<double>(std::max<size_t>(gpus, 1));
    period_s = std::max(period_s, round_s / budget);
  }
  period_s = std::min(period_s, std::max(max_s.value, base_s.value));
  return static_cast<int64_t>(std::ceil(period_s * kNsPerS));
}

}  // namespace

std::string_view PollTierName(PollTier tier) {
  const size_t i = TierIndex(tier);
  return i < kTierNames.size() ? kTierNames[i] : "unknown";
}

std::string_view PollTierFields(PollTier tier) {
  const size_t i = TierIndex(tier);
  return i < kTierFields.size() ? kTierFields[i] : "";
}

double PollPlan::ExpectedCpuShare() const {
  double share = 0;
  for (size_t i = 1; i < kPollTierCount; ++i) {
    if (cost_us[i] && period_ns[i] > 0) {
      share += *cost_us[i] * 1e-6 * static_cast<double>(gpus) /
               (static_cast<double>(period_ns[i]) / kNsPerS);
    }
  }
  return share;
}

PollPlan PlanPolling(const PollRequest& request, const ThresholdSet& t) {
  PollPlan plan;
  plan.tick_ns = request.tick_ns;
  plan.gpus = request.gpus;
  plan.cost_us = request.cost_us;
  const double rate_hz = request.tick_ns > 0 ? kNsPerS / static_cast<double>(request.tick_ns) : 0;
  const double scale = std::min(1.0, rate_hz / kBudgetRateHz);
  auto set = [&](PollTier tier, int64_t period_ns) {
    plan.period_ns[TierIndex(tier)] = RoundUpToTicks(period_ns, request.tick_ns);
  };
  set(PollTier::kTick, request.tick_ns);
  const auto stretch = [&](PollTier tier, const Threshold& base_s, const Threshold& max_s,
                           const Threshold& budget) {
    set(tier,
        Stretched(request.cost_us[TierIndex(tier)], request.gpus, scale, base_s, max_s, budget));
  };
  stretch(PollTier::kUtilBuffer, t.poll_util_buffer_s, t.poll_util_buffer_max_s,
          t.poll_util_buffer_budget);
  stretch(PollTier::kEnergy, t.poll_energy_s, t.poll_energy_max_s, t.poll_energy_budget);
  stretch(PollTier::kProcessUtil, t.poll_process_util_s, t.poll_process_util_max_s,
          t.poll_process_util_budget);
  set(PollTier::kSlow, static_cast<int64_t>(t.poll_slow_s.value * kNsPerS));
  if (request.gpm_ns) {
    set(PollTier::kGpm, std::max<int64_t>(*request.gpm_ns, 1));
  } else {
    stretch(PollTier::kGpm, t.poll_gpm_s, t.poll_gpm_max_s, t.poll_gpm_budget);
  }
  plan.pcie_ns = request.pcie ? static_cast<int64_t>(t.poll_pcie_s.value * kNsPerS) : 0;
  return plan;
}

PollTiers PollClock::Due(int64_t now_ns) {
  PollTiers due;
  due.set(TierIndex(PollTier::kTick));
  if (!started_ || plan_.tick_ns <= 0) {
    started_ = true;
    for (size_t i = 0; i < kPollTierCount; ++i) next_ns_[i] = now_ns + plan_.period_ns[i];
    return AllTiers();
  }
  // Ticks wake a little late or early: a tier is due within half a tick of its time.
  const int64_t slack = plan_.tick_ns / 2;
  for (size_t i = 1; i < kPollTierCount; ++i) {
    const int64_t period = plan_.period_ns[i];
    if (period <= 0 || now_ns + slack < next_ns_[i]) continue;
    due.set(i);
    next_ns_[i] += period;
    if (next_ns_[i] <= now_ns) next_ns_[i] = now_ns + period;  // fell behind: restart the grid
  }
  return due;
}

}  // namespace stallscope::gpu

namespace stallscope::gpu {

PollTiers PollClock::Final() const {
  PollTiers tiers;
  if (plan_.tick_ns <= 0) return tiers;
  for (PollTier tier : {PollTier::kUtilBuffer, PollTier::kEnergy, PollTier::kGpm}) {
    if (plan_.period_ns[TierIndex(tier)] > plan_.tick_ns) tiers.set(TierIndex(tier));
  }
  if (tiers.any()) tiers.set(TierIndex(PollTier::kTick));
  return tiers;
}

}  // namespace stallscope::gpu
