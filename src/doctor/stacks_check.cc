#include "doctor/stacks_check.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "base/units.h"
#include "host/file_reader.h"
#include "host/proc_parse.h"

namespace stallscope::doctor {
namespace {

using S = CheckStatus;

// capability(7): CAP_SYS_PTRACE is capability 19.
constexpr int kCapSysPtrace = 19;

/// The value after "key:" on its line of /proc/PID/status, trimmed; empty when absent.
std::optional<std::string_view> StatusField(std::string_view status, std::string_view key) {
  size_t pos = 0;
  while (auto line = host::NextLine(status, pos)) {
    if (line->size() > key.size() && line->starts_with(key) && (*line)[key.size()] == ':') {
      return Trim(line->substr(key.size() + 1));
    }
  }
  return std::nullopt;
}

/// A hexadecimal capability mask ("000001ffffffffff"); empty when malformed.
std::optional<uint64_t> ParseCapMask(std::string_view hex) {
  if (hex.empty() || hex.size() > 16) return std::nullopt;
  uint64_t mask = 0;
  for (const char c : hex) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return std::nullopt;
    mask = mask << 4 | static_cast<uint64_t>(digit);
  }
  return mask;
}

/// What ptrace_scope means for reading another process (Linux
/// Documentation/admin-guide/LSM/Yama.rst; process_vm_readv is checked as a ptrace attach).
std::string ScopeText(const StackReadFacts& s) {
  if (!s.ptrace_scope) return "no Yama ptrace_scope (the same user may read a process)";
  switch (*s.ptrace_scope) {
    case 0:
      return "kernel.yama.ptrace_scope 0 (the same user may read any of its processes)";
    case 1:
      return "kernel.yama.ptrace_scope 1 (a process may read its descendants)";
    case 2:
      return "kernel.yama.ptrace_scope 2 (only with CAP_SYS_PTRACE)";
    default:
      return fmt::format("kernel.yama.ptrace_scope {} (no process may read another)",
                         *s.ptrace_scope);
  }
}

/// What `dump` of a process stallscope did not start needs, when a child can be read.
std::string DumpNote(const StackReadFacts& s) {
  if (s.cap_sys_ptrace.value_or(false)) return "`dump` may read any process (CAP_SYS_PTRACE)";
  if (!s.ptrace_scope || *s.ptrace_scope == 0) {
    return "`dump` may read this user's processes (another user's needs CAP_SYS_PTRACE)";
  }
  return "`dump` of a process stallscope did not start needs CAP_SYS_PTRACE (sudo)";
}

constexpr const char* kCapFix =
    "docker run --cap-add SYS_PTRACE (Kubernetes: securityContext.capabilities.add: "
    "[SYS_PTRACE])";

/// The cause and the fix of a failed probe, from the facts.
std::pair<std::string, std::string> FailureCause(const StackReadFacts& s) {
  const bool cap = s.cap_sys_ptrace.value_or(false);
  if (s.ptrace_scope && *s.ptrace_scope >= 3) {
    return {"ptrace_scope 3 forbids it until the next boot",
            "set kernel.yama.ptrace_scope = 1 in /etc/sysctl.d/ and reboot (3 cannot be lowered "
            "while the system runs)"};
  }
  if (s.ptrace_scope == 2 && !cap) {
    return {
        "ptrace_scope 2 lets only CAP_SYS_PTRACE read",
        fmt::format("sudo sysctl kernel.yama.ptrace_scope=1 (the host's setting), or {}", kCapFix)};
  }
  if (s.probe_errno == ENOSYS) {
    return {"the kernel, a sandbox (gVisor) or a seccomp filter has no process_vm_readv",
            "run the job outside the sandbox, or in a container runtime that allows "
            "process_vm_readv"};
  }
  if (s.seccomp == 2 && !cap) {
    // moby profiles/seccomp/default.json: process_vm_readv is allowed on kernels 4.8+, and with
    // CAP_SYS_PTRACE on any kernel; other calls it refuses fail with EPERM.
    const std::optional<bool> old = KernelBefore48(s.kernel_release);
    std::string why = "Docker's default profile allows it on kernels 4.8+, or with CAP_SYS_PTRACE";
    if (old == true) {
      why = fmt::format(
          "Docker's default profile allows it only with CAP_SYS_PTRACE before Linux "
          "4.8, and this is {}",
          s.kernel_release);
    } else if (old == false) {
      why = "a profile stricter than Docker's default, which allows it on kernels 4.8+";
    }
    return {fmt::format("a seccomp filter refuses it (Seccomp: 2: {})", why),
            fmt::format("{}, or a seccomp profile that allows process_vm_readv", kCapFix)};
  }
  return {"refused (an LSM such as AppArmor or SELinux, or another user's process)",
          fmt::format("{}; or check the AppArmor/SELinux policy", kCapFix)};
}

/// "EPERM (operation not permitted)" for the errors a read can give; else the text alone.
std::string ErrnoName(int err) {
  const char* name = err == EPERM    ? "EPERM"
                     : err == ENOSYS ? "ENOSYS"
                     : err == ESRCH  ? "ESRCH"
                     : err == EFAULT ? "EFAULT"
                     : err == EIO    ? "EIO"
                                     : nullptr;
  return name == nullptr ? ErrnoText(err) : fmt::format("{}: {}", name, ErrnoText(err));
}

}  // namespace

std::optional<bool> KernelBefore48(std::string_view release) {
  const size_t dot = release.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  size_t end = dot + 1;
  while (end < release.size() && release[end] >= '0' && release[end] <= '9') ++end;
  const auto major = ParseInt64(release.substr(0, dot));
  const auto minor = ParseInt64(release.substr(dot + 1, end - dot - 1));
  if (!major || !minor) return std::nullopt;
  return *major < 4 || (*major == 4 && *minor < 8);
}

StackReadFacts ParseStackReadFacts(std::optional<std::string_view> ptrace_scope,
                                   std::optional<std::string_view> self_status) {
  StackReadFacts out;
  if (ptrace_scope) {
    const auto scope = ParseInt64(Trim(*ptrace_scope));
    if (scope && *scope >= 0 && *scope <= 3) out.ptrace_scope = static_cast<int32_t>(*scope);
  }
  if (self_status) {
    if (auto cap = StatusField(*self_status, "CapEff")) {
      if (auto mask = ParseCapMask(*cap)) out.cap_sys_ptrace = ((*mask >> kCapSysPtrace) & 1U) != 0;
    }
    if (auto mode = StatusField(*self_status, "Seccomp")) {
      const auto value = ParseInt64(*mode);
      if (value && *value >= 0 && *value <= 2) out.seccomp = static_cast<int32_t>(*value);
    }
  }
  return out;
}

void ProbeChildRead(StackReadFacts& out) {
  // The child inherits this word at the same address; reading it back proves the read works.
  volatile uint64_t word = 0x5374616c6c53636fULL;
  int fds[2] = {-1, -1};
  if (pipe2(fds, O_CLOEXEC) != 0) {
    out.probe_error = fmt::format("pipe: {}", ErrnoText(errno));
    return;
  }
  const pid_t child = fork();
  if (child < 0) {
    out.probe_error = fmt::format("fork: {}", ErrnoText(errno));
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (child == 0) {
    // Only async-signal-safe calls here: block until the parent closes its end, then leave.
    close(fds[1]);
    char byte = 0;
    while (read(fds[0], &byte, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(fds[0]);
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{const_cast<uint64_t*>(&word), sizeof word};  // NOLINT: the child's copy
  const ssize_t n = process_vm_readv(child, &local, 1, &remote, 1, 0);
  const int err = errno;
  close(fds[1]);
  while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  out.probed = true;
  if (n < 0) {
    out.probe_errno = err;
  } else if (n != static_cast<ssize_t>(sizeof got) || got != word) {
    out.probe_errno = EIO;
  }
}

StackReadFacts GatherStackRead(const host::ProcFs& fs) {
  host::FileReader reader;
  std::optional<std::string> scope;
  if (reader.ReadPath(fs.proc_root, "/sys/kernel/yama/ptrace_scope") == 0) {
    scope = std::string(reader.data());
  }
  std::optional<std::string> status;
  if (reader.ReadPath(fs.proc_root, "/self/status") == 0) status = std::string(reader.data());
  StackReadFacts out = ParseStackReadFacts(scope, status);
  utsname name{};
  if (uname(&name) == 0) out.kernel_release = name.release;
  ProbeChildRead(out);
  return out;
}

Check PythonStacksCheck(const StackReadFacts& s) {
  const std::string id = "host.python_stacks";
  const std::string title = "Python stacks readable";
  const std::string scope = ScopeText(s);
  if (!s.probed) {
    return MakeCheck(id, title, S::kSkip,
                     fmt::format("could not test a read ({}); {}", s.probe_error, scope));
  }
  if (s.probe_errno == 0) {
    return MakeCheck(id, title, S::kOk,
                     fmt::format("a child's memory reads (process_vm_readv): `run` reads its "
                                 "job's Python stacks; {}; {}",
                                 DumpNote(s), scope));
  }
  auto [cause, fix] = FailureCause(s);
  return MakeCheck(id, title, S::kWarn,
                   fmt::format("reading a child's memory fails ({}): {}; {}: `run` cannot name "
                               "its job's Python lines, `dump` reads no stack",
                               ErrnoName(s.probe_errno), cause, scope),
                   std::move(fix));
}

std::vector<Check> StackChecks(const Facts& facts) {
  if (!facts.host.python_stacks) return {};
  return {PythonStacksCheck(*facts.host.python_stacks)};
}

}  // namespace stallscope::doctor
