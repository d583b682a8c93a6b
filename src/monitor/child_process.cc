#include "monitor/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "base/units.h"

extern char** environ;

namespace stallscope::monitor {
namespace {

int ExitCodeFromStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

Result<ChildProcess> ChildProcess::Start(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& extra_env,
                                         const std::string& output) {
  if (argv.empty()) return MakeError(ErrorCode::kInvalidArgument, "no command given after --");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // extra_env replaces variables of the same name: with both in the block, getenv() finds the
  // first, so a job with its own PYTHONPATH never saw stallscope's (the hooks did not load).
  auto overridden = [&](std::string_view kv) {
    const std::string_view name = kv.substr(0, kv.find('='));
    return std::any_of(extra_env.begin(), extra_env.end(), [&](const std::string& e) {
      return std::string_view(e).substr(0, e.find('=')) == name;
    });
  };
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e)) env.push_back(*e);
  }
  for (const auto& e : extra_env) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Own process group (signals reach the whole job); default dispositions and an empty mask
  // (our thread blocks termination signals to receive them synchronously).
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGTTOU, SIGTTIN})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  if (!output.empty()) {
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, output.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  }
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &files, &attr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return MakeError(ErrorCode::kNotFound, "cannot start '{}': {}", argv[0], std::strerror(rc));
  }
  // Interactive use: hand the terminal to the job so Ctrl-C and reads from stdin reach it.
  bool took = false;
  if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp()) {
    signal(SIGTTOU, SIG_IGN);
    took = tcsetpgrp(STDIN_FILENO, pid) == 0;
  }
  return ChildProcess(pid, took);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), took_terminal_(other.took_terminal_), exit_code_(other.exit_code_) {
  other.pid_ = -1;
  other.took_terminal_ = false;
}

ChildProcess::~ChildProcess() { RestoreTerminal(); }

void ChildProcess::RestoreTerminal() {
  if (took_terminal_) {
    tcsetpgrp(STDIN_FILENO, getpgrp());
    took_terminal_ = false;
  }
}

std::optional<int> ChildProcess::Poll() {
  if (exit_code_ || pid_ <= 0) return exit_code_;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = ExitCodeFromStatus(status);
    RestoreTerminal();
  }
  return exit_code_;
}

int ChildProcess::Wait() {
  while (!exit_code_ && pid_ > 0) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, 0);
    if (r == pid_) {
      exit_code_ = ExitCodeFromStatus(status);
      RestoreTerminal();
    } else if (r < 0 && errno != EINTR) {
      exit_code_ = 1;
    }
  }
  return exit_code_.value_or(1);
}

void ChildProcess::Signal(int sig) const {
  if (pid_ > 0 && !exit_code_) kill(-pid_, sig);
}

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitSignal(int64_t timeout_ns) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  timespec ts{static_cast<time_t>(timeout_ns / kNsPerSec),
              static_cast<long>(timeout_ns % kNsPerSec)};
  int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

}  // namespace stallscope::monitor
