#pragma once
// The sampling thread of `run --stacks`: reads the Python stack of each of the job's processes
// (pystack::StackReader: process_vm_readv, never stopping them) at a fixed rate and writes
// stacks.jsonl. The main thread of a rank's process at `main_hz`, a DataLoader worker's main
// thread at `worker_hz`.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "pystack/stack_reader.h"
#include "stacks/source_lines.h"
#include "stacks/stack_log.h"

namespace stallscope::stacks {

/// A process to sample.
struct StackTarget {
  int32_t pid = 0;
  int32_t rank = 0;
  bool worker = false;  ///< a DataLoader worker: sampled at worker_hz
  int32_t forked_from = 0;
  /// A process of the job that runs no hooks (no phase ring: a launcher, a script without a
  /// training loop, a helper): sampled at worker_hz, and a worker when its parent (forked_from:
  /// its ppid) is a rank's process or a worker. Not Python: noted with the reason.
  bool other = false;
};

struct StackSamplerOptions {
  int main_hz = 50;
  int worker_hz = 10;
  /// Every thread of the ranks' processes (and the job's other processes) this often, 0 for the
  /// main thread only (`run --stacks-threads all`: worker_hz). At those ticks the main thread's
  /// sample comes from the same read.
  int all_threads_hz = 0;
  size_t max_frames = 128;  ///< deeper frames (the outermost) are dropped
  /// Files of stallscope's own Python (the package and sitecustomize.py `run` puts on
  /// PYTHONPATH), by path prefix: their frames are left out of every stack (IsStallscopeFile
  /// finds the package wherever it is installed).
  std::vector<std::string> own_files;
  /// How often the ranks' children are listed (/proc); the target list is asked for every
  /// 100 ms, and a new rank's children at once.
  int64_t refresh_ns = 500'000'000;
};

/// Samples the processes `targets()` names (asked every refresh_ns) until stopped. Each process
/// is opened once (pystack::StackReader::Open); one that cannot be read is noted in the file with
/// the reason and not tried again. A process whose reads keep failing (its thread not found,
/// every read torn: a forged or corrupt interpreter) is sampled less and less often, then
/// dropped with a note; one that exec'd into another Python is opened again (a new process
/// line), into something else noted and dropped.
class StackSampler {
 public:
  using Targets = std::function<std::vector<StackTarget>()>;
  /// Opens `path` and starts the thread. Errors name the file.
  [[nodiscard]] static Result<std::unique_ptr<StackSampler>> Start(const std::string& path,
                                                                   StackSamplerOptions options,
                                                                   Targets targets);
  ~StackSampler();
  StackSampler(const StackSampler&) = delete;
  StackSampler& operator=(const StackSampler&) = delete;

  /// Stops and joins the thread and writes the end line. Returns the first write error.
  [[nodiscard]] Status Stop();
  /// What was sampled so far (thread-safe).
  [[nodiscard]] StackTotals totals() const;

 private:
  struct Process;
  struct Refused;
  enum class Exec { kNone, kReopened, kNotPython };
  StackSampler(StackLogWriter writer, StackSamplerOptions options, Targets targets);
  void Run();
  /// Opens the processes `targets_` names that are new (and their children when `children`).
  void Refresh(bool children);
  void Open(const StackTarget& t);
  void Promote(const StackTarget& t);
  StackProcess ProcessLine(const Process& p);
  /// Takes one sample (every thread's when `all`); false when the process is to be dropped.
  bool SampleOne(Process& p, int64_t now, bool all);
  /// The frames of `stack` without stallscope's own, into views_.
  void ViewsOf(const pystack::ThreadStack& stack);
  /// After a failed sample: back off, notice an exec, or drop (false).
  bool Failed(Process& p, const Error& error, int64_t now);
  Exec CheckExec(Process& p);
  bool Drop(Process& p);
  /// The sample of views_ for thread `tid`.
  void Write(Process& p, int64_t now, int32_t tid);
  void Note(const StackTarget& t, std::string error);
  bool Known(int32_t pid) const;
  Refused* RefusedOf(int32_t pid);

  StackLogWriter writer_;
  StackSamplerOptions options_;
  Targets targets_;
  std::vector<std::unique_ptr<Process>> processes_;
  int64_t reads_of_gone_ = 0;
  std::vector<Refused> refused_;  ///< pids that could not be opened (noted once)
  SourceLines sources_;
  pystack::ThreadStack stack_;  ///< reused per sample: no allocation once warm
  pystack::ProcessStacks all_;  ///< reused per all-threads sample
  std::vector<FrameView> views_;
  StopFlag stop_;
  std::thread thread_;
  mutable std::mutex mu_;
  StackTotals totals_;  ///< under mu_
  Status write_status_ = OkStatus();
  bool stopped_ = false;
};

}  // namespace stallscope::stacks
