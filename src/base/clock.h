#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <mutex>

#include "base/units.h"  // kNsPerSec and friends

namespace stallscope {

/// clock_gettime(`id`) in ns (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, ...), for code that reads
/// a clock directly rather than through a Clock (NVML's per-tier cost, GPM windows).
[[nodiscard]] int64_t ReadClockNs(clockid_t id);

/// CLOCK_MONOTONIC in ns, for code that times itself without a Clock (the TUI's key polling,
/// doctor's probes, GPM windows): the clock the phase ring and SystemClock use.
[[nodiscard]] inline int64_t MonotonicNs() { return ReadClockNs(CLOCK_MONOTONIC); }

/// A stop request one thread makes and another thread's sleep ends on at once (no polling, so an
/// idle sampler wakes only when it has work). Thread-safe.
class StopFlag {
 public:
  void Request() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true, std::memory_order_relaxed);
    }
    cv_.notify_all();
  }
  bool requested() const { return stop_.load(std::memory_order_relaxed); }

 private:
  friend class SystemClock;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

/// Source of time. All times are int64 nanoseconds. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  /// Monotonic time (CLOCK_MONOTONIC) in ns: for intervals and for aligning with phase events.
  virtual int64_t MonotonicNs() const = 0;
  /// Wall-clock time (CLOCK_REALTIME) in ns since the Unix epoch: for timestamps people read.
  virtual int64_t WallNs() const = 0;
  /// Sleeps until MonotonicNs() >= deadline_ns (a fake clock just advances).
  virtual void SleepUntil(int64_t deadline_ns) = 0;
  /// Sleeps until deadline_ns or until `stop` is requested, whichever comes first.
  virtual void SleepUntil(int64_t deadline_ns, StopFlag& stop) = 0;
};

/// The real clocks of this machine.
class SystemClock final : public Clock {
 public:
  int64_t MonotonicNs() const override;
  int64_t WallNs() const override;
  void SleepUntil(int64_t deadline_ns) override;
  void SleepUntil(int64_t deadline_ns, StopFlag& stop) override;
};

}  // namespace stallscope
