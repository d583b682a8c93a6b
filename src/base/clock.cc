#include "base/clock.h"

#include <cerrno>
#include <chrono>
#include <ctime>

namespace stallscope {
int64_t ReadClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

int64_t SystemClock::MonotonicNs() const { return ReadClockNs(CLOCK_MONOTONIC); }
int64_t SystemClock::WallNs() const { return ReadClockNs(CLOCK_REALTIME); }

void SystemClock::SleepUntil(int64_t deadline_ns) {
  timespec ts{};
  ts.tv_sec = deadline_ns / kNsPerSec;
  ts.tv_nsec = deadline_ns % kNsPerSec;
  // Absolute sleep: no drift across iterations; restart when a signal interrupts it.
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void SystemClock::SleepUntil(int64_t deadline_ns, StopFlag& stop) {
  std::unique_lock<std::mutex> lock(stop.mu_);
  // libstdc++'s steady_clock is CLOCK_MONOTONIC, the clock deadlines are in.
  auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns));
  stop.cv_.wait_until(lock, deadline, [&] { return stop.stop_.load(std::memory_order_relaxed); });
}

}  // namespace stallscope
