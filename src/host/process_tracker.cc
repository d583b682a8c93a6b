// ProcessTracker: the process tree under a root pid, from
// /proc/[0-9]*/{stat,cmdline,status,io,task}.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "host/file_reader.h"
#include "host/host.h"
#include "host/proc_parse.h"

namespace stallscope::host {
namespace {

// "<pid>/<file>" and "<tid>/stat" paths relative to an open /proc or /proc/PID/task.
constexpr size_t kPathChars = 64;

struct Link {
  int32_t pid = 0, ppid = 0;
};

/// CPU time of a process at the previous sample. start_time tells a reused pid apart.
struct CpuMark {
  int32_t pid = 0;
  uint64_t start_time_ticks = 0;
  uint64_t ticks = 0;
};

enum class ReadOutcome { kOk, kGone, kMalformed };

}  // namespace

struct ProcessTracker::State {
  FileReader reader;
  NumericDirLister lister;
  std::vector<int32_t> pids, tids, members;
  std::vector<Link> links;  // (pid, ppid) of every process on the host
  std::vector<CpuMark> prev_marks, cur_marks;
  std::optional<int64_t> prev_ns;
  double clock_ticks_per_s = 100;
  uint64_t page_bytes = 4096;
  uint64_t malformed = 0;
  char path[kPathChars] = {};

  void ScanLinks(int proc_fd);
  void CollectMembers(int32_t root_pid);
  bool IsGone(int err, int proc_fd, int32_t pid);
  ReadOutcome ReadProcess(int proc_fd, int32_t pid, std::optional<int64_t> interval_ns,
                          ProcessSample& out);
  ReadOutcome ReadStat(int proc_fd, int32_t pid, std::optional<int64_t> interval_ns,
                       ProcessSample& out);
  ReadOutcome ReadThreadStates(int proc_fd, int32_t pid, ProcessSample& out);
};

ProcessTracker::ProcessTracker(ProcFs fs, int32_t root_pid)
    : fs_(std::move(fs)), root_pid_(root_pid), state_(std::make_shared<State>()) {
  const long ticks = sysconf(_SC_CLK_TCK);
  if (ticks > 0) state_->clock_ticks_per_s = static_cast<double>(ticks);
  const long page = sysconf(_SC_PAGESIZE);
  if (page > 0) state_->page_bytes = static_cast<uint64_t>(page);
}

uint64_t ProcessTracker::malformed_records() const { return state_->malformed; }

void ProcessTracker::Sample(int64_t now_ns, std::vector<ProcessSample>& out) {
  State& st = *state_;
  std::optional<int64_t> interval_ns;
  if (st.prev_ns && now_ns > *st.prev_ns) interval_ns = now_ns - *st.prev_ns;
  st.prev_ns = now_ns;
  st.cur_marks.clear();
  size_t n = 0;
  ScopedFd proc = OpenDir(AT_FDCWD, fs_.proc_root.c_str());
  if (proc.valid()) {
    st.ScanLinks(proc.get());
    st.CollectMembers(root_pid_);
  } else {
    st.members.clear();
  }
  for (int32_t pid : st.members) {
    // Entries are overwritten in place so their strings keep their capacity.
    if (n == out.size()) out.emplace_back();
    const ReadOutcome outcome = st.ReadProcess(proc.get(), pid, interval_ns, out[n]);
    if (outcome == ReadOutcome::kMalformed) ++st.malformed;
    if (outcome == ReadOutcome::kOk) {
      ++n;
    } else if (pid == root_pid_) {
      break;  // the root exited (or is unreadable): an empty tree
    }
  }
  out.resize(n);
  std::sort(st.cur_marks.begin(), st.cur_marks.end(),
            [](const CpuMark& a, const CpuMark& b) { return a.pid < b.pid; });
  std::swap(st.prev_marks, st.cur_marks);
}

void ProcessTracker::State::ScanLinks(int proc_fd) {
  links.clear();
  if (lister.List(proc_fd, ".", pids) != 0) return;
  for (int32_t pid : pids) {
    FormatPidPath(path, pid, "stat");
    // A process that exits between the listing and this read is simply not there.
    if (reader.ReadAt(proc_fd, path) != 0) continue;
    if (auto stat = ParsePidStat(reader.data())) {
      links.push_back({pid, stat->ppid});
    } else {
      ++malformed;  // cannot tell whose child it is: left out of every tree
    }
  }
}

void ProcessTracker::State::CollectMembers(int32_t root_pid) {
  members.clear();
  const bool root_alive = std::any_of(links.begin(), links.end(),
                                      [root_pid](const Link& l) { return l.pid == root_pid; });
  if (!root_alive) return;
  std::sort(links.begin(), links.end(), [](const Link& a, const Link& b) {
    return a.ppid != b.ppid ? a.ppid < b.ppid : a.pid < b.pid;
  });
  // Breadth-first over ppid links. Each pid has one parent, so only a link back to the root
  // could loop (possible in a hand-made fixture, never in /proc).
  members.push_back(root_pid);
  for (size_t i = 0; i < members.size(); ++i) {
    const int32_t parent = members[i];
    auto first = std::lower_bound(links.begin(), links.end(), parent,
                                  [](const Link& l, int32_t ppid) { return l.ppid < ppid; });
    for (auto it = first; it != links.end() && it->ppid == parent; ++it) {
      if (it->pid != root_pid && it->pid != parent) members.push_back(it->pid);
    }
  }
  std::sort(members.begin() + 1, members.end());
}

bool ProcessTracker::State::IsGone(int err, int proc_fd, int32_t pid) {
  // ESRCH: the task died while its file was open. ENOENT: either the process is gone, or this
  // file does not exist for it (no CONFIG_TASK_IO_ACCOUNTING, a fixture): ask whether the
  // /proc/PID directory is still there.
  if (err == ESRCH) return true;
  if (err != ENOENT) return false;
  FormatPidPath(path, pid, "");
  struct stat st {};
  return fstatat(proc_fd, path, &st, 0) != 0;
}

ReadOutcome ProcessTracker::State::ReadStat(int proc_fd, int32_t pid,
                                            std::optional<int64_t> interval_ns,
                                            ProcessSample& out) {
  FormatPidPath(path, pid, "stat");
  if (reader.ReadAt(proc_fd, path) != 0) return ReadOutcome::kGone;
  auto stat = ParsePidStat(reader.data());
  if (!stat) return ReadOutcome::kMalformed;
  out.pid = pid;
  out.ppid = stat->ppid;
  out.comm.assign(stat->comm);
  out.state = stat->state;
  out.rss_bytes = stat->rss_pages * page_bytes;
  out.threads = stat->num_threads;
  const uint64_t ticks = stat->utime_ticks + stat->stime_ticks;
  out.cpu_pct.reset();
  auto prev = std::lower_bound(prev_marks.begin(), prev_marks.end(), pid,
                               [](const CpuMark& m, int32_t p) { return m.pid < p; });
  if (interval_ns && prev != prev_marks.end() && prev->pid == pid &&
      prev->start_time_ticks == stat->start_time_ticks && ticks >= prev->ticks) {
    // 100 % = one core busy for the whole interval.
    const double cpu_s = static_cast<double>(ticks - prev->ticks) / clock_ticks_per_s;
    out.cpu_pct = cpu_s * 1e9 / static_cast<double>(*interval_ns) * 100.0;
  }
  cur_marks.push_back({pid, stat->start_time_ticks, ticks});
  return ReadOutcome::kOk;
}

ReadOutcome ProcessTracker::State::ReadThreadStates(int proc_fd, int32_t pid, ProcessSample& out) {
  out.threads_running = 0;
  out.threads_blocked = 0;
  FormatPidPath(path, pid, "task");
  ScopedFd task_dir = OpenDir(proc_fd, path);
  const int err = task_dir.valid() ? lister.List(task_dir.get(), ".", tids) : errno;
  if (err != 0) {
    if (IsGone(err, proc_fd, pid)) return ReadOutcome::kGone;
    // No task list: the main thread's state is the best we know.
    out.threads_running = out.state == 'R' ? 1 : 0;
    out.threads_blocked = out.state == 'D' ? 1 : 0;
    return ReadOutcome::kOk;
  }
  for (int32_t tid : tids) {
    FormatPidPath(path, tid, "stat");
    if (reader.ReadAt(task_dir.get(), path) != 0) continue;  // the thread exited
    auto stat = ParsePidStat(reader.data());
    if (!stat) continue;
    if (stat->state == 'R') ++out.threads_running;
    if (stat->state == 'D') ++out.threads_blocked;
  }
  return ReadOutcome::kOk;
}

ReadOutcome ProcessTracker::State::ReadProcess(int proc_fd, int32_t pid,
                                               std::optional<int64_t> interval_ns,
                                               ProcessSample& out) {
  const size_t marks_before = cur_marks.size();
  ReadOutcome outcome = ReadStat(proc_fd, pid, interval_ns, out);
  if (outcome != ReadOutcome::kOk) return outcome;
  auto drop = [&] {
    cur_marks.resize(marks_before);
    return ReadOutcome::kGone;
  };

  FormatPidPath(path, pid, "cmdline");
  int err = reader.ReadAt(proc_fd, path);
  if (err != 0 && IsGone(err, proc_fd, pid)) return drop();
  JoinCmdline(err == 0 ? reader.data() : std::string_view(), out.cmdline);

  // A permission error (another user's process) or a missing file leaves the fields empty.
  FormatPidPath(path, pid, "status");
  err = reader.ReadAt(proc_fd, path);
  if (err != 0 && IsGone(err, proc_fd, pid)) return drop();
  out.voluntary_ctxt_switches = FindU64Field(reader.data(), "voluntary_ctxt_switches");
  out.nonvoluntary_ctxt_switches = FindU64Field(reader.data(), "nonvoluntary_ctxt_switches");

  FormatPidPath(path, pid, "io");
  err = reader.ReadAt(proc_fd, path);
  if (err != 0 && IsGone(err, proc_fd, pid)) return drop();
  out.read_bytes = FindU64Field(reader.data(), "read_bytes");
  out.write_bytes = FindU64Field(reader.data(), "write_bytes");

  if (ReadThreadStates(proc_fd, pid, out) == ReadOutcome::kGone) return drop();
  return ReadOutcome::kOk;
}

}  // namespace stallscope::host
