#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/clock.h"
#include "host/host.h"
#include "host/host_test_util.h"

extern char** environ;

namespace stallscope::host {
namespace {

namespace fs = std::filesystem;
using testing::CopyFixture;
using testing::DataPath;
using testing::FixtureFs;
using testing::TempDir;
using testing::WriteFile;

constexpr int64_t kT0 = 10 * kNsPerSec;

ProcFs NodeA() {
  ProcFs fs;
  fs.proc_root = DataPath("proc/node_a").string();
  return fs;
}

uint64_t PageBytes() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }
double ClockTicks() { return static_cast<double>(sysconf(_SC_CLK_TCK)); }

/// A /proc/PID/stat line with the fields the tracker reads.
std::string StatLine(int pid, std::string_view comm, char state, int ppid, int utime, int stime,
                     int start) {
  return std::to_string(pid) + " (" + std::string(comm) + ") " + state + " " +
         std::to_string(ppid) + " 1 1 0 -1 0 0 0 0 0 " + std::to_string(utime) + " " +
         std::to_string(stime) + " 0 0 20 0 1 0 " + std::to_string(start) + " 1000 10 0 0\n";
}

// The node_a tree under the python job (pid 100). See tests/data/proc/node_a.
TEST(ProcessTracker, NodeATreeTable) {
  struct Want {
    int32_t pid, ppid;
    std::string comm, cmdline;
    char state;
    uint32_t threads;
    uint64_t rss_pages;
    std::optional<uint64_t> read_bytes, write_bytes, voluntary, nonvoluntary;
    uint32_t running, blocked;
  };
  const Want want[] = {
      {100, 1, "python", "python train.py --epochs 10", 'S', 3, 250000, 524288000, 65536, 1500, 250,
       1, 1},
      {200, 100, "a) (b", "worker -n 3", 'R', 1, 50000, 4096, 8192, 20, 700, 1, 0},
      // No io file (as for another user's process): io fields absent, the rest is there.
      {201, 100, "my prog) S 1 (", "my prog", 'D', 1, 1000, std::nullopt, std::nullopt, 5, 6, 0, 1},
      // Zombie: empty cmdline, no io, no task list. 250 (no stat: vanished) is skipped.
      {300, 200, "sh", "", 'Z', 1, 0, std::nullopt, std::nullopt, 2, 0, 0, 0},
  };
  ProcessTracker tracker(NodeA(), 100);
  // Stale entries from an earlier, bigger tree must be overwritten field by field.
  std::vector<ProcessSample> out(7);
  for (auto& p : out) {
    p.read_bytes = 1;
    p.cpu_pct = 99;
    p.cmdline = "stale";
    p.threads_running = 9;
  }
  tracker.Sample(kT0, out);
  ASSERT_EQ(out.size(), std::size(want));
  for (size_t i = 0; i < out.size(); ++i) {
    const ProcessSample& p = out[i];
    const Want& w = want[i];
    SCOPED_TRACE(w.pid);
    EXPECT_EQ(p.pid, w.pid);
    EXPECT_EQ(p.ppid, w.ppid);
    EXPECT_EQ(p.comm, w.comm);
    EXPECT_EQ(p.cmdline, w.cmdline);
    EXPECT_EQ(p.state, w.state);
    EXPECT_EQ(p.threads, w.threads);
    EXPECT_EQ(p.rss_bytes, w.rss_pages * PageBytes());
    EXPECT_EQ(p.read_bytes, w.read_bytes);
    EXPECT_EQ(p.write_bytes, w.write_bytes);
    EXPECT_EQ(p.voluntary_ctxt_switches, w.voluntary);
    EXPECT_EQ(p.nonvoluntary_ctxt_switches, w.nonvoluntary);
    EXPECT_EQ(p.threads_running, w.running);
    EXPECT_EQ(p.threads_blocked, w.blocked);
    EXPECT_FALSE(p.cpu_pct);  // first sample
  }
  EXPECT_EQ(tracker.malformed_records(), 0u);
}

TEST(ProcessTracker, RootsTable) {
  struct Case {
    int32_t root;
    std::vector<int32_t> want_pids;
  };
  const Case cases[] = {
      {2, {2, 500}},                      // kthreadd and a kernel worker (empty cmdline)
      {200, {200, 300}},                  // a subtree
      {300, {300}},                       // a zombie leaf
      {1, {1, 100, 200, 201, 300, 400}},  // init: everything but kernel threads
      {999, {}},                          // no such process
      {250, {}},                          // listed but its stat is gone
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.root);
    ProcessTracker tracker(NodeA(), c.root);
    std::vector<ProcessSample> out;
    tracker.Sample(kT0, out);
    std::vector<int32_t> pids;
    for (const auto& p : out) pids.push_back(p.pid);
    EXPECT_EQ(pids, c.want_pids);
  }
  ProcessTracker kthreads(NodeA(), 2);
  std::vector<ProcessSample> out;
  kthreads.Sample(kT0, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].comm, "kworker/0:1-events");
  EXPECT_EQ(out[1].cmdline, "");
  EXPECT_EQ(out[1].state, 'I');
}

TEST(ProcessTracker, CpuPercentAndChurnBetweenSamples) {
  TempDir tmp;
  CopyFixture("proc/node_a", tmp.path() / "proc");
  const fs::path proc = tmp.path() / "proc";
  ProcessTracker tracker(FixtureFs(tmp.path()), 100);
  std::vector<ProcessSample> out;
  tracker.Sample(kT0, out);
  ASSERT_EQ(out.size(), 4u);

  // 2 s later: 100 used 150 ticks, 200 used 200 ticks; 201 exited; 202 was started.
  CopyFixture("proc/node_a_next", proc);
  fs::remove_all(proc / "201");
  WriteFile(proc / "202" / "stat", StatLine(202, "new worker", 'S', 100, 5, 5, 9000));
  tracker.Sample(kT0 + 2 * kNsPerSec, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].pid, 100);
  EXPECT_EQ(out[1].pid, 200);
  EXPECT_EQ(out[2].pid, 202);
  EXPECT_EQ(out[3].pid, 300);
  ASSERT_TRUE(out[0].cpu_pct);
  EXPECT_DOUBLE_EQ(*out[0].cpu_pct, 150 / ClockTicks() / 2.0 * 100.0);
  ASSERT_TRUE(out[1].cpu_pct);
  EXPECT_DOUBLE_EQ(*out[1].cpu_pct, 200 / ClockTicks() / 2.0 * 100.0);
  EXPECT_FALSE(out[2].cpu_pct);                  // new: no previous reading
  EXPECT_FALSE(out[2].voluntary_ctxt_switches);  // only a stat file
  EXPECT_EQ(out[3].cpu_pct, 0.0);                // zombie: no ticks

  // pid 300 reused by a new process (other start time): no delta against the old one.
  WriteFile(proc / "300" / "stat", StatLine(300, "sh", 'S', 200, 50, 50, 7777));
  tracker.Sample(kT0 + 4 * kNsPerSec, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].cpu_pct, 0.0);
  EXPECT_FALSE(out[3].cpu_pct);

  // The root exits: the tree is empty, no error.
  fs::remove_all(proc / "100");
  tracker.Sample(kT0 + 6 * kNsPerSec, out);
  EXPECT_TRUE(out.empty());
}

TEST(ProcessTracker, MalformedStatIsCountedAndSkipped) {
  TempDir tmp;
  CopyFixture("proc/node_a", tmp.path() / "proc");
  WriteFile(tmp.path() / "proc" / "600" / "stat", "600 (oops) S 100 1 2\n");  // truncated
  ProcessTracker tracker(FixtureFs(tmp.path()), 100);
  std::vector<ProcessSample> out;
  tracker.Sample(kT0, out);
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(tracker.malformed_records(), 1u);
}

TEST(ProcessTracker, MissingProcRootGivesEmptyTree) {
  ProcFs fs;
  fs.proc_root = "/nonexistent/stallscope/proc";
  ProcessTracker tracker(fs, 1);
  std::vector<ProcessSample> out(3);
  tracker.Sample(kT0, out);
  EXPECT_TRUE(out.empty());
}

/// Spawns `sh -c "sleep 30 & wait"` in its own process group; kills the group on destruction.
class ShellWithChild {
 public:
  ShellWithChild() {
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    const char* argv[] = {"/bin/sh", "-c", "sleep 30 & wait", nullptr};
    const int rc = posix_spawn(&pid_, "/bin/sh", nullptr, &attr, const_cast<char**>(argv), environ);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) pid_ = 0;
  }
  ~ShellWithChild() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGKILL);  // the group we created: sh and its sleep
    waitpid(pid_, nullptr, 0);
  }
  ShellWithChild(const ShellWithChild&) = delete;
  ShellWithChild& operator=(const ShellWithChild&) = delete;

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
};

TEST(ProcessTrackerLive, SpawnedShellAndItsChild) {
  ShellWithChild shell;
  ASSERT_GT(shell.pid(), 0);
  SystemClock clock;
  ProcessTracker tracker(ProcFs{}, shell.pid());
  std::vector<ProcessSample> out;
  // The shell forks sleep soon after it starts; wait up to 5 s for it.
  for (int i = 0; i < 500; ++i) {
    tracker.Sample(clock.MonotonicNs(), out);
    if (out.size() >= 2 && out[1].comm == "sleep") break;
    usleep(10 * 1000);
  }
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].pid, shell.pid());
  EXPECT_EQ(out[0].ppid, getpid());
  EXPECT_EQ(out[0].cmdline, "/bin/sh -c sleep 30 & wait");
  EXPECT_EQ(out[1].ppid, shell.pid());
  EXPECT_EQ(out[1].comm, "sleep");
  EXPECT_EQ(out[1].cmdline, "sleep 30");
  EXPECT_GE(out[1].threads, 1u);
  EXPECT_GT(out[1].rss_bytes, 0u);
  EXPECT_TRUE(out[0].voluntary_ctxt_switches);
  tracker.Sample(clock.MonotonicNs(), out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].cpu_pct);
  EXPECT_EQ(tracker.malformed_records(), 0u);
}

TEST(ProcessTrackerLive, SelfIsRootWithThreads) {
  ProcessTracker tracker(ProcFs{}, getpid());
  std::vector<ProcessSample> out;
  tracker.Sample(SystemClock().MonotonicNs(), out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].pid, getpid());
  EXPECT_EQ(out[0].state, 'R');  // we are reading our own stat
  EXPECT_GE(out[0].threads_running, 1u);
  EXPECT_TRUE(out[0].read_bytes);  // our own io file is readable
}

}  // namespace
}  // namespace stallscope::host
