#pragma once

// host.python_stacks: may stallscope read a Python process's memory (process_vm_readv), as
// `stallscope run` does for its job's stacks and `stallscope dump` for any process's? Judged from
// Yama's ptrace_scope, CAP_SYS_PTRACE, the seccomp mode, and a probe that reads a forked child.

#include <optional>
#include <string_view>
#include <vector>

#include "doctor/check.h"
#include "doctor/facts.h"
#include "host/host.h"

namespace stallscope::doctor {

/// StackReadFacts from the text of <proc>/sys/kernel/yama/ptrace_scope and of <proc>/self/status
/// (each empty when the file could not be read). Malformed values stay empty. Does not probe.
[[nodiscard]] StackReadFacts ParseStackReadFacts(std::optional<std::string_view> ptrace_scope,
                                                 std::optional<std::string_view> self_status);

/// Forks a child that blocks on a pipe, reads one word of it with process_vm_readv, ends it and
/// reaps it; sets `out.probed`, `probe_errno` (0: the word read back right) or `probe_error`.
/// Never waits on time: the child exits when the pipe closes.
void ProbeChildRead(StackReadFacts& out);

/// ParseStackReadFacts of fs.proc_root's files, uname's release and ProbeChildRead.
[[nodiscard]] StackReadFacts GatherStackRead(const host::ProcFs& fs);

/// host.python_stacks: OK when the probe read its child (with what `dump` of other processes
/// needs), WARN with the cause and the fix when it could not, SKIP when the probe did not run.
/// Never FAIL: the job trains either way; only its stacks go unread.
[[nodiscard]] Check PythonStacksCheck(const StackReadFacts& s);

/// PythonStacksCheck when facts.host.python_stacks was gathered; else none.
[[nodiscard]] std::vector<Check> StackChecks(const Facts& facts);

/// Whether `release` (uname -r, "4.4.0-210-generic") is older than Linux 4.8; empty when it
/// does not start with MAJOR.MINOR.
[[nodiscard]] std::optional<bool> KernelBefore48(std::string_view release);

}  // namespace stallscope::doctor
