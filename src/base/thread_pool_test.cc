#include "base/thread_pool.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope {
namespace {

TEST(ThreadsFor, Table) {
  struct Case {
    size_t tasks;
    unsigned requested;
    unsigned want;
  } cases[] = {
      {10, 4, 4}, {3, 4, 3}, {1, 8, 1}, {0, 8, 1}, {0, 0, 1}, {5, 1, 1},
  };
  for (const Case& c : cases) EXPECT_EQ(ThreadsFor(c.tasks, c.requested), c.want) << c.tasks;
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(ThreadsFor(1000, 0), std::min(cores, 1000u)) << "0: one thread per core";
}

TEST(ParallelFor, EveryIndexExactlyOnce) {
  for (unsigned threads : {1u, 2u, 7u}) {
    std::vector<std::atomic<int>> calls(100);
    auto failures = ParallelFor(calls.size(), threads, [&](size_t i) { ++calls[i]; });
    EXPECT_TRUE(failures.empty());
    for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].load(), 1) << i << "/" << threads;
  }
}

TEST(ParallelFor, NothingToDo) {
  bool called = false;
  EXPECT_TRUE(ParallelFor(0, 4, [&](size_t) { called = true; }).empty());
  EXPECT_FALSE(called);
}

// Three tasks that each wait until all three run at once: only three threads can finish them
// before the deadline (a serial loop would time out in the first).
TEST(ParallelFor, TasksRunConcurrently) {
  std::atomic<int> running{0};
  std::atomic<int> met{0};
  std::mutex mu;
  std::set<std::thread::id> ids;
  auto failures = ParallelFor(3, 3, [&](size_t) {
    {
      std::lock_guard lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    ++running;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (running.load() < 3 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (running.load() == 3) ++met;
  });
  EXPECT_TRUE(failures.empty());
  EXPECT_EQ(met.load(), 3);
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_TRUE(ids.count(std::this_thread::get_id())) << "the caller works too";
}

TEST(ParallelFor, ExceptionsCaughtByIndexOthersStillRun) {
  std::vector<std::atomic<int>> calls(20);
  auto failures = ParallelFor(calls.size(), 4, [&](size_t i) {
    ++calls[i];
    if (i == 13) throw std::runtime_error("thirteen");
    if (i == 2) throw std::bad_alloc();
    if (i == 5) throw 5;
  });
  ASSERT_EQ(failures.size(), 3u);
  EXPECT_EQ(failures[0].index, 2u);
  EXPECT_EQ(failures[0].what, std::bad_alloc().what());
  EXPECT_EQ(failures[1].index, 5u);
  EXPECT_EQ(failures[1].what, "unknown exception");
  EXPECT_EQ(failures[2].index, 13u);
  EXPECT_EQ(failures[2].what, "thirteen");
  for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].load(), 1) << i;
}

}  // namespace
}  // namespace stallscope
