#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace stallscope::monitor {

/// A command started without a shell in its own process group, so signals can be forwarded to
/// the whole job (launchers such as torchrun start workers in the same group).
class ChildProcess {
 public:
  /// Starts argv[0] (searched in PATH) with argv, the current environment plus `extra_env`
  /// ("KEY=VALUE"). `output`: when not empty, the file (created or truncated) the job's stdout and
  /// stderr go to; else ours. Errors name the command: "cannot start 'foo': No such file or
  /// directory".
  [[nodiscard]] static Result<ChildProcess> Start(const std::vector<std::string>& argv,
                                                  const std::vector<std::string>& extra_env = {},
                                                  const std::string& output = {});
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  /// Non-blocking: the exit code once the child has exited (128+N when killed by signal N).
  std::optional<int> Poll();
  /// Blocks until exit; returns the exit code as Poll does.
  int Wait();
  /// Sends `sig` to the child's process group.
  void Signal(int sig) const;

 private:
  explicit ChildProcess(pid_t pid, bool took_terminal) : pid_(pid), took_terminal_(took_terminal) {}
  void RestoreTerminal();

  pid_t pid_ = -1;
  bool took_terminal_ = false;
  std::optional<int> exit_code_;
};

/// Blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in the calling thread (call before starting
/// threads so they inherit it); WaitSignal() then receives them synchronously.
void BlockTerminationSignals();
/// Waits up to `timeout_ns` for a blocked signal; returns it, or 0 on timeout.
int WaitSignal(int64_t timeout_ns);

}  // namespace stallscope::monitor
