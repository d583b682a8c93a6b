#include "doctor/python_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/json_fields.h"
#include "base/units.h"
#include "host/file_reader.h"

extern char** environ;

namespace stallscope::doctor {
namespace {

constexpr size_t kMaxOutputBytes = 1 << 20;

// Standard library only, and no syntax newer than Python 3.0 so that an old interpreter still
// answers with its version. BaseException: a broken torch install can raise anything, even
// SystemExit, while importing.
constexpr std::string_view kScript = R"PY(
import json, platform, sys, warnings
r = {"python": platform.python_version(), "implementation": platform.python_implementation(),
     "executable": sys.executable, "venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix)}
try:
    import torch
except BaseException as e:
    r["torch_error"] = ("%s: %s" % (type(e).__name__, e))[:500]
else:
    r["torch"] = str(getattr(torch, "__version__", "unknown"))
    v = getattr(torch, "version", None)
    r["torch_cuda"] = getattr(v, "cuda", None)
    r["torch_hip"] = getattr(v, "hip", None)
    notes = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r["torch_threads"] = torch.get_num_threads()
            r["cuda_available"] = bool(torch.cuda.is_available())
            r["device_count"] = torch.cuda.device_count() if r["cuda_available"] else 0
            r["cudnn"] = torch.backends.cudnn.version()
        except BaseException as e:
            notes.append("%s: %s" % (type(e).__name__, e))
    r["warnings"] = [(str(w.message).strip() or "?")[:500] for w in caught][:5] + notes[:1]
sys.stdout.write("STALLSCOPE_DOCTOR_PROBE " + json.dumps(r) + "\n")
sys.stdout.flush()
)PY";

/// Reads what is there from `fd` into `out` (up to the cap); false at EOF or error.
bool Drain(int fd, std::string& out) {
  std::array<char, 16384> buf{};
  const ssize_t n = read(fd, buf.data(), buf.size());
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  const size_t room = kMaxOutputBytes - std::min(kMaxOutputBytes, out.size());
  out.append(buf.data(), std::min(room, static_cast<size_t>(n)));
  return true;
}

int ExitCodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Reads both pipes until they close or the deadline passes (then kills the group), then reaps.
CommandOutput Collect(pid_t pid, host::ScopedFd out_fd, host::ScopedFd err_fd, int64_t deadline) {
  CommandOutput o;
  std::array<pollfd, 2> fds{{{out_fd.get(), POLLIN, 0}, {err_fd.get(), POLLIN, 0}}};
  int open = 2;
  while (open > 0) {
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    if (left_ms <= 0) {
      o.timed_out = true;
      break;
    }
    const int ready =
        poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (ready < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].fd < 0 || (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      if (!Drain(fds[k].fd, k == 0 ? o.out : o.err)) {
        fds[k].fd = -1;
        --open;
      }
    }
  }
  if (o.timed_out) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  o.exit_code = ExitCodeOf(status);
  return o;
}

/// `name` as execv wants it: itself when it holds a '/', else the first executable file of that
/// name in $PATH (as execvp searches). Resolved before fork: the child only calls what is safe
/// between fork and exec.
std::optional<std::string> FindProgram(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) return name;
  const char* env = std::getenv("PATH");
  const std::string_view path = env != nullptr ? env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= path.size()) {
    const size_t end = std::min(path.find(':', begin), path.size());
    const std::string_view dir = path.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    begin = end + 1;
  }
  return std::nullopt;
}

/// Moves `fd` to `target` with close-on-exec off (dup2 onto itself would leave it on).
void MoveFd(int fd, int target) {
  if (fd == target) {
    fcntl(fd, F_SETFD, 0);
  } else {
    dup2(fd, target);
  }
}

/// In the forked child: its own process group (a timeout kills its children too), a
/// parent-death signal (B04: when doctor dies, of SIGTERM from `timeout` or anything else, the
/// helper dies with it instead of living on blocked on a FIFO), stdin from /dev/null, default
/// signals, then exec. Only async-signal-safe calls. Never returns.
[[noreturn]] void ExecChild(pid_t parent, const char* program, char* const* args, int out_fd,
                            int err_fd, int exec_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died before the prctl: no signal comes
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) MoveFd(null_fd, STDIN_FILENO);
  MoveFd(out_fd, STDOUT_FILENO);
  MoveFd(err_fd, STDERR_FILENO);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // ignored ones too
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(program, args, environ);
  const int e = errno;
  (void)!write(exec_fd, &e, sizeof e);
  _exit(127);
}

}  // namespace

std::string_view PythonProbeScript() { return kScript; }

Result<CommandOutput> RunCommand(const std::vector<std::string>& argv, int64_t timeout_ns) {
  if (argv.empty()) return Error{ErrorCode::kInvalidArgument, "no command"};
  const std::optional<std::string> program = FindProgram(argv[0]);
  if (!program) {
    return MakeError(ErrorCode::kNotFound, "cannot run '{}': {}", argv[0], std::strerror(ENOENT));
  }
  std::array<int, 2> out_pipe{-1, -1}, err_pipe{-1, -1}, exec_pipe{-1, -1};
  if (pipe2(out_pipe.data(), O_CLOEXEC) != 0)
    return MakeError(ErrorCode::kIo, "pipe: {}", std::strerror(errno));
  host::ScopedFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe.data(), O_CLOEXEC) != 0)
    return MakeError(ErrorCode::kIo, "pipe: {}", std::strerror(errno));
  host::ScopedFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  // The child writes exec's errno here; a successful exec closes it (O_CLOEXEC) with nothing.
  if (pipe2(exec_pipe.data(), O_CLOEXEC) != 0)
    return MakeError(ErrorCode::kIo, "pipe: {}", std::strerror(errno));
  host::ScopedFd exec_read(exec_pipe[0]), exec_write(exec_pipe[1]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return MakeError(ErrorCode::kIo, "fork: {}", std::strerror(errno));
  if (pid == 0) {
    ExecChild(parent, program->c_str(), args.data(), out_write.get(), err_write.get(),
              exec_write.get());
  }
  setpgid(pid, pid);             // as the child does: kill(-pid) must find the group at once
  out_write = host::ScopedFd();  // the child holds the write ends; EOF comes when it exits
  err_write = host::ScopedFd();
  exec_write = host::ScopedFd();
  int exec_errno = 0;
  ssize_t n = 0;
  while ((n = read(exec_read.get(), &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return MakeError(exec_errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                     "cannot run '{}': {}", argv[0], std::strerror(exec_errno));
  }
  return Collect(pid, std::move(out_read), std::move(err_read), MonotonicNs() + timeout_ns);
}

PythonFacts ParsePythonProbe(std::string_view text) {
  PythonFacts p;
  const std::string marker = std::string(kPythonProbeMarker) + " ";
  size_t at = text.find(marker);
  // The marker must start a line: a job's sitecustomize may print before it.
  while (at != std::string_view::npos && at > 0 && text[at - 1] != '\n') {
    at = text.find(marker, at + 1);
  }
  if (at == std::string_view::npos) {
    p.error = "it printed no probe line";
    return p;
  }
  const size_t begin = at + marker.size();
  const size_t end = text.find('\n', begin);
  const nlohmann::json j = nlohmann::json::parse(
      text.substr(begin, end == std::string_view::npos ? end : end - begin), nullptr,
      /*allow_exceptions=*/false);
  if (!j.is_object()) {
    p.error = "its probe line is not a JSON object";
    return p;
  }
  p.ran = true;
  p.version = JsonOpt<std::string>(j, "python").value_or("");
  p.implementation = JsonOpt<std::string>(j, "implementation").value_or("");
  p.executable = JsonOpt<std::string>(j, "executable").value_or("");
  p.venv = JsonOpt<bool>(j, "venv").value_or(false);
  p.torch_version = JsonOpt<std::string>(j, "torch");
  p.torch_error = JsonOpt<std::string>(j, "torch_error").value_or("");
  p.torch_cuda = JsonOpt<std::string>(j, "torch_cuda");
  p.torch_hip = JsonOpt<std::string>(j, "torch_hip");
  p.cuda_available = JsonOpt<bool>(j, "cuda_available");
  p.device_count = JsonOpt<int64_t>(j, "device_count");
  p.cudnn_version = JsonOpt<int64_t>(j, "cudnn");
  p.torch_threads = JsonOpt<int64_t>(j, "torch_threads");
  if (const auto it = j.find("warnings"); it != j.end() && it->is_array()) {
    for (const auto& w : *it) {
      if (w.is_string()) p.warnings.push_back(w.get<std::string>());
    }
  }
  return p;
}

PythonFacts ProbePython(const std::string& python, int64_t timeout_ns) {
  Result<CommandOutput> run = RunCommand({python, "-c", std::string(kScript)}, timeout_ns);
  PythonFacts p;
  if (!run.ok()) {
    p.error =
        run.error().code == ErrorCode::kNotFound
            ? fmt::format("not found{}", python.find('/') == std::string::npos ? " on PATH" : "")
            : run.error().message;
  } else if (run->timed_out) {
    p.error =
        fmt::format("no answer within {:g} s (importing torch hung?)", NsToSeconds(timeout_ns));
  } else {
    p = ParsePythonProbe(run->out);
    if (!p.ran) {
      // The last line of stderr says why (a SyntaxError of a Python 2, a crash).
      std::string_view err = run->err;
      while (!err.empty() && err.back() == '\n') err.remove_suffix(1);
      const size_t nl = err.rfind('\n');
      const std::string_view last = nl == std::string_view::npos ? err : err.substr(nl + 1);
      p.error =
          fmt::format("exit {}: {}", run->exit_code, last.empty() ? p.error : std::string(last));
    }
  }
  p.interpreter = python;
  return p;
}

}  // namespace stallscope::doctor
