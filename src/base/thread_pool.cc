#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace stallscope {

unsigned ThreadsFor(size_t tasks, unsigned requested) {
  unsigned threads = requested != 0 ? requested : std::max(1u, std::thread::hardware_concurrency());
  return std::min<unsigned>(threads, static_cast<unsigned>(std::max<size_t>(tasks, 1)));
}

std::vector<TaskFailure> ParallelFor(size_t count, unsigned threads,
                                     const std::function<void(size_t)>& task) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<TaskFailure> failures;
  auto work = [&] {
    for (size_t i = next++; i < count; i = next++) {
      try {
        task(i);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        failures.push_back(TaskFailure{i, e.what()});
      } catch (...) {
        std::lock_guard lock(mu);
        failures.push_back(TaskFailure{i, "unknown exception"});
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < ThreadsFor(count, threads); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  std::sort(failures.begin(), failures.end(),
            [](const TaskFailure& a, const TaskFailure& b) { return a.index < b.index; });
  return failures;
}

}  // namespace stallscope
