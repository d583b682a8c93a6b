#pragma once

// Test code (stallscope_testing, tests/fakes/CMakeLists.txt): never linked into the tool.

#include <cstdint>

#include "base/clock.h"

namespace stallscope {

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
