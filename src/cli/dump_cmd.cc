// `stallscope dump PID`: the Python stacks of every thread of a process and of its descendants,
// read from outside with process_vm_readv (src/pystack), never stopping them: hang first aid,
// like `py-spy dump` without the pause. Output: docs/commands/dump.md, --json in docs/formats.md.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "base/units.h"
#include "cli/commands.h"
#include "host/file_reader.h"
#include "host/host.h"
#include "pystack/pystack.h"
#include "stacks/source_lines.h"
#include "stacks/stack_log.h"

namespace stallscope::cli {
namespace {

// Source text and command lines are cut here in the text output (bytes, at a UTF-8 boundary).
constexpr size_t kMaxTextBytes = 120;
constexpr size_t kMaxCmdlineBytes = 160;
// Reads of a process whose walk of some thread was torn, before its error is shown.
constexpr int kReadAttempts = 3;

/// One process of the tree and what reading it gave.
struct DumpedProcess {
  int32_t pid = 0;
  int32_t ppid = 0;
  std::string cmdline;  ///< argv joined with spaces, or "[comm]" when there is none
  std::optional<pystack::PythonProcess> python;
  std::vector<pystack::ThreadStack> threads;  ///< main thread first
  std::string cut;  ///< what the reader's per-process budget left out (ProcessStacks::cut)
  std::optional<Error> error;  ///< why no stack was read
  bool not_python = false;     ///< the process runs no CPython we know of
};

/// kernel.yama.ptrace_scope, or empty without Yama.
std::optional<int64_t> PtraceScope() {
  host::FileReader reader;
  if (reader.ReadPath("/proc", "/sys/kernel/yama/ptrace_scope") != 0) return std::nullopt;
  return ParseInt64(Trim(reader.data()));
}

/// A field of /proc/PID/status ("CapEff", "Uid"), or empty.
std::optional<std::string> StatusField(const std::string& pid, std::string_view key) {
  host::FileReader reader;
  if (reader.ReadPath("/proc", "/" + pid + "/status") != 0) return std::nullopt;
  const std::string_view text = reader.data();
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line.starts_with(key) && line.size() > key.size() && line[key.size()] == ':')
      return std::string(Trim(line.substr(key.size() + 1)));
    at = end + 1;
  }
  return std::nullopt;
}

std::optional<uint64_t> CapSet(const std::string& pid, std::string_view key) {
  auto hex = StatusField(pid, key);
  if (!hex || hex->empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : *hex) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0 || value >> 60 != 0) return std::nullopt;
    value = value << 4 | static_cast<uint64_t>(digit);
  }
  return value;
}

/// "CAP_SYS_NICE, CAP_SYS_RESOURCE" of the bits in `caps` (linux/capability.h numbering).
std::string CapNames(uint64_t caps) {
  static constexpr std::string_view kNames[] = {"CHOWN",
                                                "DAC_OVERRIDE",
                                                "DAC_READ_SEARCH",
                                                "FOWNER",
                                                "FSETID",
                                                "KILL",
                                                "SETGID",
                                                "SETUID",
                                                "SETPCAP",
                                                "LINUX_IMMUTABLE",
                                                "NET_BIND_SERVICE",
                                                "NET_BROADCAST",
                                                "NET_ADMIN",
                                                "NET_RAW",
                                                "IPC_LOCK",
                                                "IPC_OWNER",
                                                "SYS_MODULE",
                                                "SYS_RAWIO",
                                                "SYS_CHROOT",
                                                "SYS_PTRACE",
                                                "SYS_PACCT",
                                                "SYS_ADMIN",
                                                "SYS_BOOT",
                                                "SYS_NICE",
                                                "SYS_RESOURCE",
                                                "SYS_TIME",
                                                "SYS_TTY_CONFIG",
                                                "MKNOD",
                                                "LEASE",
                                                "AUDIT_WRITE",
                                                "AUDIT_CONTROL",
                                                "SETFCAP",
                                                "MAC_OVERRIDE",
                                                "MAC_ADMIN",
                                                "SYSLOG",
                                                "WAKE_ALARM",
                                                "BLOCK_SUSPEND",
                                                "AUDIT_READ",
                                                "PERFMON",
                                                "BPF",
                                                "CHECKPOINT_RESTORE"};
  std::string out;
  for (size_t bit = 0; bit < 64; ++bit) {
    if ((caps >> bit & 1) == 0) continue;
    if (!out.empty()) out += ", ";
    out += bit < std::size(kNames) ? "CAP_" + std::string(kNames[bit]) : fmt::format("cap {}", bit);
  }
  return out;
}

/// What would let `stallscope dump ROOT` read process `pid`, which it may not: what is actually
/// missing, never sudo to a root that has CAP_SYS_PTRACE already (issue 40: `dump 1` as root
/// advised sudo). Linux Documentation/admin-guide/LSM/Yama.rst; ptrace(2) "Ptrace access mode
/// checking"; capabilities(7).
std::string PermissionHint(int32_t root, int32_t pid) {
  constexpr uint64_t kSysPtrace = uint64_t{1} << 19;
  const std::optional<int64_t> scope = PtraceScope();
  if (scope && *scope >= 3) return "kernel.yama.ptrace_scope is 3: no process may, until reboot";
  const std::optional<uint64_t> ours = CapSet("self", "CapEff");
  const std::string target = std::to_string(pid);
  if (ours && (*ours & kSysPtrace) != 0) {
    return fmt::format(
        "stallscope has CAP_SYS_PTRACE{} and the kernel still refused: a security module or "
        "sandbox around stallscope (Landlock, AppArmor, SELinux, seccomp, a container's "
        "policy) forbids reading pid {}; sudo adds nothing",
        geteuid() == 0 ? " (it runs as root)" : "", pid);
  }
  if (geteuid() == 0 && ours) {
    const std::optional<uint64_t> theirs = CapSet(target, "CapPrm");
    const std::string more = theirs && (*theirs & ~*ours) != 0
                                 ? fmt::format(" and pid {} holds capabilities it lacks ({})", pid,
                                               CapNames(*theirs & ~*ours))
                                 : std::string();
    return fmt::format(
        "stallscope runs as root but without CAP_SYS_PTRACE (not in its capability bounding "
        "set: a container started without --cap-add SYS_PTRACE, or setpriv/capsh){}; sudo adds "
        "nothing",
        more);
  }
  const std::string sudo = fmt::format("CAP_SYS_PTRACE (sudo stallscope dump {})", root);
  if (scope && *scope == 2) return "kernel.yama.ptrace_scope is 2: needs " + sudo;
  if (scope && *scope == 1) {
    return "needs " + sudo +
           ", or the same user with kernel.yama.ptrace_scope 0 (it is 1: only descendants)";
  }
  return "needs the same user (and a dumpable process), or " + sudo;
}

/// The error's message without the "pid N: " that pystack puts first (the line names the pid).
std::string_view Reason(const Error& error, int32_t pid) {
  std::string_view text = error.message;
  const std::string prefix = fmt::format("pid {}: ", pid);
  if (text.starts_with(prefix)) text.remove_prefix(prefix.size());
  return text;
}

DumpedProcess DumpOne(const host::ProcessSample& p) {
  DumpedProcess out;
  out.pid = p.pid;
  out.ppid = p.ppid;
  out.cmdline = p.cmdline.empty() ? "[" + p.comm + "]" : p.cmdline;
  auto reader = pystack::StackReader::Open(p.pid);
  if (!reader.ok()) {
    out.not_python = reader.error().code == ErrorCode::kNotFound &&
                     access(fmt::format("/proc/{}", p.pid).c_str(), F_OK) == 0;
    out.error = reader.take_error();
    return out;
  }
  out.python = reader->process();
  // A thread whose walk was torn (the target moved while we read) is read again, a few times.
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    auto threads = reader->SampleAll(pystack::StackReader::kMaxFrames);
    if (!threads.ok()) {
      out.error = threads.take_error();
      return out;
    }
    out.threads = std::move(threads->threads);
    out.cut = std::move(threads->cut);
    if (std::none_of(out.threads.begin(), out.threads.end(),
                     [](const pystack::ThreadStack& t) { return t.error.has_value(); })) {
      break;
    }
  }
  std::stable_partition(
      out.threads.begin(), out.threads.end(),
      [pid = p.pid](const pystack::ThreadStack& t) { return t.native_thread_id == pid; });
  return out;
}

/// The process and (unless `children` is false) its descendants, root first, then by pid.
/// Empty when `pid` is no process.
std::vector<host::ProcessSample> ProcessTree(int32_t pid, bool children) {
  host::ProcessTracker tracker(host::ProcFs{}, pid);
  std::vector<host::ProcessSample> tree;
  tracker.Sample(0, tree);
  if (!children && tree.size() > 1) tree.resize(1);
  return tree;
}

/// The one line of a process whose stacks were not read.
std::string ErrorLine(const DumpedProcess& p, int32_t root) {
  std::string reason;
  if (p.not_python) {
    reason = "not a Python process";
  } else if (p.error->code == ErrorCode::kPermission) {
    reason = "may not read its memory: " + PermissionHint(root, p.pid);
  } else {
    reason = std::string(Reason(*p.error, p.pid));
  }
  return fmt::format("pid {} ({}): {}\n", p.pid,
                     EscapeControl(CutUtf8(p.cmdline, kMaxCmdlineBytes)), EscapeControl(reason));
}

/// Frames of stallscope's own hooks are never shown as the job's (issue 40 P06): a run of them is
/// one line, so that a thread inside the hooks still says so.
std::string OwnFramesLine(size_t n) {
  return fmt::format("    ({} frame{} of stallscope's hooks)\n", n, n == 1 ? "" : "s");
}

void ThreadText(const DumpedProcess& p, const pystack::ThreadStack& t, stacks::SourceLines& sources,
                std::string& out) {
  if (t.native_thread_id) {
    out += fmt::format("  thread {}{}\n", *t.native_thread_id,
                       *t.native_thread_id == p.pid ? " (main)" : "");
  } else {
    out += fmt::format("  thread ? (pthread {:#x})\n", t.thread_id);
  }
  if (t.frames.empty() && !t.error) out += "    (no Python frames)\n";
  if (t.truncated) out += fmt::format("    (the innermost {} frames)\n", t.frames.size());
  size_t own = 0;  // stallscope's own frames in a row: one line says how many
  for (const pystack::Frame& f : t.frames) {
    if (stacks::IsStallscopeFile(f.file)) {
      ++own;
      continue;
    }
    if (own > 0) out += OwnFramesLine(std::exchange(own, 0));
    const std::string line = f.line ? std::to_string(*f.line) : "?";
    out += fmt::format("    {} ({}:{})\n", EscapeControl(f.function), EscapeControl(f.file), line);
    if (auto text = sources.Line(p.pid, f.file, f.line.value_or(0)); text && !text->empty()) {
      out += fmt::format("        {}\n", EscapeControl(CutUtf8(*text, kMaxTextBytes)));
    }
  }
  if (own > 0) out += OwnFramesLine(own);
  if (t.error) {
    out += fmt::format("    (stack cut: {})\n", EscapeControl(Reason(*t.error, p.pid)));
  }
}

std::string RenderText(const std::vector<DumpedProcess>& shown, int32_t root,
                       stacks::SourceLines& sources) {
  std::string out;
  for (const DumpedProcess& p : shown) {
    if (!out.empty() && p.python && !p.error) out += '\n';
    if (!p.python || p.error) {
      out += ErrorLine(p, root);
      continue;
    }
    out += fmt::format("pid {} ({}): Python 3.{} ({}){}\n", p.pid,
                       EscapeControl(CutUtf8(p.cmdline, kMaxCmdlineBytes)), p.python->layout.minor,
                       EscapeControl(p.python->binary),
                       p.pid == root ? "" : fmt::format(", child of {}", p.ppid));
    if (!p.cut.empty()) out += fmt::format("  (cut: {})\n", EscapeControl(p.cut));
    for (const pystack::ThreadStack& t : p.threads) ThreadText(p, t, sources, out);
  }
  return out;
}

void ThreadJson(const DumpedProcess& p, const pystack::ThreadStack& t, stacks::SourceLines& sources,
                JsonWriter& w) {
  w.BeginObject();
  w.Field("native_tid", t.native_thread_id ? std::optional<int64_t>(*t.native_thread_id)
                                           : std::optional<int64_t>());
  w.Field("thread_id", t.thread_id);
  w.FieldBool("main", t.native_thread_id == p.pid);
  w.FieldBool("truncated", t.truncated);
  if (t.error) w.Field("error", t.error->message);
  const auto own = std::count_if(t.frames.begin(), t.frames.end(), [](const pystack::Frame& f) {
    return stacks::IsStallscopeFile(f.file);
  });
  if (own > 0) w.Field("stallscope_frames", static_cast<int64_t>(own));
  w.Key("frames").BeginArray();
  for (const pystack::Frame& f : t.frames) {
    if (stacks::IsStallscopeFile(f.file)) continue;
    w.BeginObject().Field("file", f.file).Field("function", f.function);
    w.Field("line", f.line ? std::optional<int64_t>(*f.line) : std::optional<int64_t>());
    if (auto text = sources.Line(p.pid, f.file, f.line.value_or(0)); text && !text->empty()) {
      w.Field("text", *text);
    }
    w.EndObject();
  }
  w.EndArray().EndObject();
}

std::string RenderJson(const std::vector<DumpedProcess>& shown, int32_t root,
                       stacks::SourceLines& sources) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject().Field("schema_version", 1).Field("tool", "stallscope dump");
  w.Field("version", ToolVersion()).Field("pid", root);
  w.Key("processes").BeginArray();
  for (const DumpedProcess& p : shown) {
    w.BeginObject().Field("pid", p.pid).Field("ppid", p.ppid).Field("cmdline", p.cmdline);
    if (p.python) {
      w.Field("python_version", fmt::format("3.{}", p.python->layout.minor));
      w.Field("binary", p.python->binary);
    } else {
      w.Key("python_version").Null().Key("binary").Null();
    }
    if (p.not_python) {
      w.Field("error", "not a Python process");
    } else if (p.error) {
      w.Field("error", p.error->message);
    }
    if (!p.cut.empty()) w.Field("cut", p.cut);
    w.Key("threads").BeginArray();
    for (const pystack::ThreadStack& t : p.threads) ThreadJson(p, t, sources, w);
    w.EndArray().EndObject();
  }
  w.EndArray().EndObject();
  out += '\n';
  return out;
}

}  // namespace

int RunDump(const DumpOptions& o) {
  const std::vector<host::ProcessSample> tree = ProcessTree(o.pid, !o.no_children);
  if (tree.empty()) {
    fmt::print(stderr, "stallscope dump: no process with pid {}\n", o.pid);
    return 1;
  }
  std::vector<DumpedProcess> shown;
  size_t hidden = 0;
  bool read_any = false;
  for (const host::ProcessSample& p : tree) {
    DumpedProcess d = DumpOne(p);
    read_any = read_any || !d.threads.empty();
    // A descendant that runs no Python (a shell, a compiler, `sleep`) only with --all.
    if (d.not_python && p.pid != o.pid && !o.all) {
      ++hidden;
      continue;
    }
    shown.push_back(std::move(d));
  }
  stacks::SourceLines sources;
  if (o.json) {
    fmt::print("{}", RenderJson(shown, o.pid, sources));
  } else {
    fmt::print("{}", RenderText(shown, o.pid, sources));
    if (!read_any && hidden > 0) {
      fmt::print("no Python stack read; {} descendant process{} not Python (--all lists them)\n",
                 hidden, hidden == 1 ? " is" : "es are");
    }
  }
  return read_any ? 0 : 1;
}

}  // namespace stallscope::cli
