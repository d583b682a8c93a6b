#pragma once

// What each NVML entry point costs on a real driver, and the spending of it: with
// $STALLSCOPE_FAKE_NVML_COST set, every call into the fake burns the CPU and wall time the real
// call takes, so overhead measured against the fake is the overhead a GPU machine would see
// (issue 28). The built-in "h100" table and the file format: README.md next to this file.

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>

#include "base/result.h"

namespace stallscope::fake_nvml {

inline constexpr const char* kCostEnv = "STALLSCOPE_FAKE_NVML_COST";

/// The pseudo entry point whose cost the first nvmlGpmMetricsGet per GPU after nvmlInit pays
/// instead of nvmlGpmMetricsGet's (the real first call is several times slower).
inline constexpr std::string_view kGpmMetricsGetFirst = "nvmlGpmMetricsGet/first";

inline int64_t ClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// The CPU and wall time of one call, µs (cpu_us <= wall_us: the rest is spent asleep, as a
/// driver call waiting on the GPU).
struct CallCost {
  double cpu_us = 0;
  double wall_us = 0;
};

/// Every entry point the fake defines (full build), plus kGpmMetricsGetFirst: the names a cost
/// file may use.
[[nodiscard]] std::span<const std::string_view> CostEntryPoints();

/// A cost per entry point; entry points without one cost nothing.
class CostTable {
 public:
  /// The real H100 of shared/gpu/h100-2026-11-26 (driver 580; its README, section 2).
  [[nodiscard]] static CostTable H100();
  /// Parses {"nvmlX": {"cpu_us": 2391, "wall_us": 2404}, ...}. Errors (kParse) name the entry
  /// point: "unknown entry point 'nvmlDeviceGetSampels'".
  [[nodiscard]] static Result<CostTable> Parse(std::string_view json_text);
  /// What $STALLSCOPE_FAKE_NVML_COST holds: empty (no cost), "h100", or a JSON file's path.
  /// Errors name the file: "/tmp/cost.json: unknown entry point 'nvmlX'".
  [[nodiscard]] static Result<CostTable> Load(std::string_view spec);

  /// The cost of one call to `fn`, or empty when the table has none.
  [[nodiscard]] std::optional<CallCost> Of(std::string_view fn) const;
  /// Whether any call costs anything.
  [[nodiscard]] bool empty() const;

  static constexpr size_t kRows = 55;  ///< CostEntryPoints().size()

 private:
  std::array<std::optional<CallCost>, kRows> costs_{};
};

/// Spends `cost` in the calling thread: spins until the thread has used cost.cpu_us of CPU time
/// since `cpu_start_ns` (CLOCK_THREAD_CPUTIME_ID), then sleeps until cost.wall_us have passed
/// since `wall_start_ns` (CLOCK_MONOTONIC).
void Spend(CallCost cost, int64_t cpu_start_ns, int64_t wall_start_ns);

/// The table in force. Thread-safe, with a lock of its own: a call is charged before the fake
/// takes State::mu, so that one thread blocked 20 ms in nvmlDeviceGetPcieThroughput does not block
/// another thread's cheap calls (NVML is thread-safe; the real driver runs them side by side).
class CostModel {
 public:
  void Set(CostTable table);
  /// Charges one call to `fn` (an entry point's name). Call with no lock held.
  void Charge(std::string_view fn);
  /// Charges the first nvmlGpmMetricsGet of a GPU on top of the nvmlGpmMetricsGet already charged:
  /// the difference between kGpmMetricsGetFirst's cost and nvmlGpmMetricsGet's. No lock held.
  void ChargeFirstGpmMetrics();

 private:
  std::mutex mu_;
  CostTable table_;
  std::atomic<bool> enabled_{false};  ///< skips the clocks and the lock when nothing costs
};

}  // namespace stallscope::fake_nvml
