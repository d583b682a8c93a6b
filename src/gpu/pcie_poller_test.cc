#include "gpu/pcie_poller.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace stallscope::gpu {
namespace {

/// Waits (up to 10 s) until GPU `i` has a new reading.
bool WaitNew(PciePoller& poller, size_t i, uint32_t* tx, uint32_t* rx) {
  for (int k = 0; k < 1000; ++k) {
    if (poller.TakeNew(i, tx, rx)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(PciePoller, ANewReadingIsTakenOnceAndUnsupportedGpusAreNotAskedAgain) {
  std::atomic<int> calls_gpu0{0}, calls_gpu1{0};
  PciePoller poller(2, 20'000'000, [&](size_t gpu, uint32_t* tx, uint32_t* rx, bool* unsupported) {
    if (gpu == 1) {
      ++calls_gpu1;
      *unsupported = true;
      return false;
    }
    const int n = ++calls_gpu0;
    *tx = 1000 * static_cast<uint32_t>(n);
    *rx = 2000 * static_cast<uint32_t>(n);
    return true;
  });
  uint32_t tx = 0, rx = 0;
  ASSERT_TRUE(WaitNew(poller, 0, &tx, &rx));
  EXPECT_GT(tx, 0u);
  EXPECT_EQ(rx, 2 * tx);
  // Several rounds later GPU 1 was asked once, and GPU 0 keeps giving new readings.
  ASSERT_TRUE(WaitNew(poller, 0, &tx, &rx));
  ASSERT_TRUE(WaitNew(poller, 0, &tx, &rx));
  EXPECT_EQ(calls_gpu1.load(), 1);
  EXPECT_FALSE(poller.TakeNew(1, &tx, &rx));
  EXPECT_FALSE(poller.TakeNew(7, &tx, &rx));  // no such GPU
}

TEST(PciePoller, StopsWithoutWaitingForItsPeriod) {
  std::atomic<int> calls{0};
  {
    // A one-hour period: the destructor must not wait for it (ctest's timeout would catch it).
    PciePoller poller(1, int64_t{3600} * 1'000'000'000, [&](size_t, uint32_t*, uint32_t*, bool*) {
      ++calls;
      return true;
    });
    uint32_t tx = 0, rx = 0;
    ASSERT_TRUE(WaitNew(poller, 0, &tx, &rx));
  }
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace stallscope::gpu
