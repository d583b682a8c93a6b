#pragma once

// The one way stallscope spreads independent tasks (one trace file, one rank) over threads.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace stallscope {

/// A task that threw: its index and the exception's message.
struct TaskFailure {
  size_t index = 0;
  std::string what;
};

/// How many threads ParallelFor uses for `tasks` tasks: `requested`, or one per core when 0;
/// never more than `tasks`, never fewer than 1.
[[nodiscard]] unsigned ThreadsFor(size_t tasks, unsigned requested);

/// Runs task(i) for every i in [0, count) on ThreadsFor(count, threads) threads, the calling
/// thread among them; each thread takes the next index until none is left. Returns when every
/// task has finished. `task` must be safe to call concurrently for different indices.
/// This is a thread entry point: an exception escaping task(i) (std::bad_alloc, ...) is caught,
/// the other tasks still run, and the failures come back sorted by index.
[[nodiscard]] std::vector<TaskFailure> ParallelFor(size_t count, unsigned threads,
                                                   const std::function<void(size_t)>& task);

}  // namespace stallscope
