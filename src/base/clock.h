#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "base/units.h"  // kNsPerSec and friends

namespace stallscope {

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

/// A clock for tests: time moves only when told. Not thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 1'000'000'000, int64_t wall_offset_ns = 0)
      : now_ns_(start_ns), wall_offset_ns_(wall_offset_ns) {}
  int64_t MonotonicNs() const override { return now_ns_; }
  int64_t WallNs() const override { return now_ns_ + wall_offset_ns_; }
  void SleepUntil(int64_t deadline_ns) override {
    if (deadline_ns > now_ns_) now_ns_ = deadline_ns;
  }
  void SleepUntil(int64_t deadline_ns, StopFlag& stop) override {
    if (!stop.requested()) SleepUntil(deadline_ns);
  }
  void Advance(int64_t delta_ns) { now_ns_ += delta_ns; }

 private:
  int64_t now_ns_;
  int64_t wall_offset_ns_;
};

}  // namespace stallscope
