#pragma once

// Process helpers for end-to-end tests: start the real binary with a chosen environment, stdout
// and stderr to files, stdin from /dev/null; wait with a timeout; read files back.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace stallscope::testing {

/// The whole content of `path` ("" when it cannot be read).
inline std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// This process's environment without variables starting with any of `drop_prefixes`.
inline std::vector<std::string> EnvironmentWithout(
    const std::vector<std::string_view>& drop_prefixes) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    bool drop = false;
    for (auto prefix : drop_prefixes) drop |= kv.rfind(prefix, 0) == 0;
    if (!drop) env.push_back(kv);
  }
  return env;
}

/// Starts argv[0] (a path) with `env`; stdout/stderr go to `out_path`/`err_path` (stderr to
/// stdout when `err_path` is empty). Returns the pid (-1 and a test failure when it cannot).
inline pid_t Spawn(std::vector<std::string> argv, std::vector<std::string> env,
                   const std::string& out_path, const std::string& err_path) {
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (err_path.empty()) {
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  } else {
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data()), 0) << argv[0];
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

/// An exit status as a code: the exit code, 128+N when killed by signal N.
inline int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// The exit code of `pid` (reaped now) when it has ended, else nullopt; never blocks.
inline std::optional<int> PollExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return std::nullopt;
  return ExitCode(status);
}

/// Waits for `pid` up to `timeout_s` (then SIGKILL and a test failure); returns its exit code,
/// 128+N when killed by signal N.
inline int WaitExit(pid_t pid, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "timed out after " << timeout_s << " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ExitCode(status);
}

/// What a finished process left.
struct ProcessOutput {
  int exit_code = -1;  ///< 128+N when killed by signal N
  std::string out;
  std::string err;
};

/// Waits for `pid` (as WaitExit) and reads back the files its stdout and stderr went to.
inline ProcessOutput CollectOutput(pid_t pid, const std::filesystem::path& out_path,
                                   const std::filesystem::path& err_path, double timeout_s) {
  ProcessOutput o;
  o.exit_code = WaitExit(pid, timeout_s);
  o.out = Slurp(out_path);
  o.err = Slurp(err_path);
  return o;
}

/// Runs argv (argv[0] a path) with `env` to the end, stdout and stderr through `dir`/stdout and
/// `dir`/stderr.
inline ProcessOutput RunProcess(const std::vector<std::string>& argv,
                                const std::vector<std::string>& env,
                                const std::filesystem::path& dir, double timeout_s) {
  const std::filesystem::path out = dir / "stdout", err = dir / "stderr";
  return CollectOutput(Spawn(argv, env, out.string(), err.string()), out, err, timeout_s);
}

/// True when /usr/bin/python3 imports torch: the e2e tests that train for real skip otherwise.
inline bool HaveTorch() {
  static const bool have = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return have;
}

/// A fresh `$TMPDIR/<prefix>_<pid>_<test name>` for the running test (emptied if it exists).
inline std::filesystem::path FreshTestDir(const std::string& prefix) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      (prefix + "_" + std::to_string(getpid()) + "_" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace stallscope::testing
