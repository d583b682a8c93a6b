#pragma once

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "base/thresholds.h"

namespace stallscope::gpu {

/// The fields of a GpuSample grouped by how often the sampler reads them, which follows what they
/// cost on a real driver (issue 28: an H100 with driver 580 answers the cheap calls in 2-20 µs
/// and the buffered or counted ones in 2-4 ms of CPU each).
enum class PollTier : uint8_t {
  kTick,  ///< every sample: utilization, memory, power, temperature, clocks, events, processes
  kUtilBuffer,   ///< the driver's sub-second utilization buffer (nvmlDeviceGetSamples)
  kEnergy,       ///< total energy (nvmlDeviceGetTotalEnergyConsumption)
  kProcessUtil,  ///< per-process SM/memory utilization, only while the GPU has processes
  kSlow,         ///< PCIe link generation and width, volatile ECC counts
  kGpm,          ///< GPM metrics (Hopper and later): SM active, occupancy, tensor, DRAM, links
  kCount,
};
inline constexpr size_t kPollTierCount = static_cast<size_t>(PollTier::kCount);

/// A set of tiers (bit = PollTier).
using PollTiers = std::bitset<kPollTierCount>;

[[nodiscard]] constexpr size_t TierIndex(PollTier tier) { return static_cast<size_t>(tier); }
[[nodiscard]] inline PollTiers AllTiers() { return PollTiers().set(); }

/// Stable name of a tier ("util_buffer"): recording headers and `record --help` use it.
[[nodiscard]] std::string_view PollTierName(PollTier tier);
/// The GpuSample fields a tier fills, as recorded ("energy_mj"), comma-separated.
[[nodiscard]] std::string_view PollTierFields(PollTier tier);

/// CPU µs one GPU's round of each tier cost, measured by the backend when it probed the GPUs at
/// open (the mean over GPUs). Absent: not measured (a fake backend) or the tier is unsupported.
using TierCosts = std::array<std::optional<double>, kPollTierCount>;

/// How often each tier is read. period_ns[kTick] is the sampling interval; a tier's period is a
/// whole number of ticks. Written into the recording's header.
struct PollPlan {
  int64_t tick_ns = 0;  ///< 0: a plan that reads every tier every time (one-off samples)
  std::array<int64_t, kPollTierCount> period_ns{};
  TierCosts cost_us{};  ///< per GPU, as measured (for the header)
  int64_t pcie_ns = 0;  ///< PCIe throughput thread period; 0 = off
  size_t gpus = 0;

  /// Expected CPU of the non-tick tiers, as a fraction of one core (from the measured costs).
  [[nodiscard]] double ExpectedCpuShare() const;
};

/// What the user asked for beyond the defaults.
struct PollRequest {
  int64_t tick_ns = 0;
  size_t gpus = 0;
  TierCosts cost_us{};
  std::optional<int64_t> gpm_ns = std::nullopt;  ///< --gpm-interval: GPM at this period exactly
  bool pcie = false;                             ///< --pcie: the PCIe throughput thread
};

/// The plan: each tier's period is its base (thresholds `poll_*_s`), stretched so its CPU
/// (cost x GPUs / period) stays within its budget (`poll_*_budget`, a fraction of a core at
/// 10 samples/s, scaled down in proportion at slower rates), at most its maximum, rounded up
/// to whole ticks and never shorter than one tick. Pure: the same inputs give the same plan.
[[nodiscard]] PollPlan PlanPolling(const PollRequest& request, const ThresholdSet& t);

/// When each tier is next due, on the monotonic clock. The first Due() returns every tier (a
/// first sample is complete); then each tier comes back every period_ns of the plan.
class PollClock {
 public:
  explicit PollClock(const PollPlan& plan) : plan_(plan) {}

  /// The tiers due at `now_ns` (kTick always), and books them as read.
  [[nodiscard]] PollTiers Due(int64_t now_ns);

  /// The tiers a last sample reads when sampling stops, so that nothing buffered or counted since
  /// their last read is lost: the tick, the utilization buffer, energy and GPM. Empty when the
  /// plan reads them every tick anyway.
  [[nodiscard]] PollTiers Final() const;

  const PollPlan& plan() const { return plan_; }

 private:
  PollPlan plan_;
  std::array<int64_t, kPollTierCount> next_ns_{};
  bool started_ = false;
};

}  // namespace stallscope::gpu
