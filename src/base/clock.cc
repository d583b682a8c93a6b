#include "base/clock.h"

#include <cerrno>
#include <ctime>

namespace stallscope {
namespace {

int64_t Read(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

}  // namespace

int64_t SystemClock::MonotonicNs() const { return Read(CLOCK_MONOTONIC); }
int64_t SystemClock::WallNs() const { return Read(CLOCK_REALTIME); }

void SystemClock::SleepUntil(int64_t deadline_ns) {
  timespec ts{};
  ts.tv_sec = deadline_ns / kNsPerSec;
  ts.tv_nsec = deadline_ns % kNsPerSec;
  // Absolute sleep: no drift across iterations; restart when a signal interrupts it.
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace stallscope
