#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/clock.h"
#include "host/host.h"
#include "host_test_util.h"

extern char** environ;

namespace stallscope::host {
namespace {

namespace fs = std::filesystem;
using testing::CopyFixture;
using testing::DataPath;
using testing::FixtureFs;
using testing::TempDir;
using testing::WriteFile;

constexpr int64_t kTrackerT0 = 10 * kNsPerSec;

ProcFs TrackerNodeA() {
  ProcFs fs;
  fs.proc_root = DataPath("proc/node_a").string();
  return fs;
}

uint64_t PageBytes() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }
double ClockTicks() { return static_cast<double>(sysconf(_SC_CLK_TCK)); }

/// A /proc/PID/stat line with the fields the tracker reads.
std::string TrackerStatLine(int pid, std::string_view comm, char state, int ppid, int utime,
                            int stime, int start) {
  return std::to_string(pid) + " (" + std::string(comm) + ") " + state + " " +
         std::to_string(ppid) + " 1 1 0 -1 0 0 0 0 0 " + std::to_string(utime) + " " +
         std::to_string(stime) + " 0 0 20 0 1 0 " + std::to_string(start) + " 1000 10 0 0\n";
}

std::vector<int32_t> Pids(const std::vector<ProcessSample>& procs) {
  std::vector<int32_t> pids;
  for (const auto& p : procs) pids.push_back(p.pid);
  return pids;
}

/// Every field the tracker fills, compared one by one.
void ExpectSameProcess(const ProcessSample& a, const ProcessSample& b) {
  SCOPED_TRACE(a.pid);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.ppid, b.ppid);
  EXPECT_EQ(a.comm, b.comm);
  EXPECT_EQ(a.cmdline, b.cmdline);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.cpu_pct, b.cpu_pct);
  EXPECT_EQ(a.rss_bytes, b.rss_bytes);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.read_bytes, b.read_bytes);
  EXPECT_EQ(a.write_bytes, b.write_bytes);
  EXPECT_EQ(a.voluntary_ctxt_switches, b.voluntary_ctxt_switches);
  EXPECT_EQ(a.nonvoluntary_ctxt_switches, b.nonvoluntary_ctxt_switches);
  EXPECT_EQ(a.threads_running, b.threads_running);
  EXPECT_EQ(a.threads_blocked, b.threads_blocked);
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
  ProcessTracker tracker(TrackerNodeA(), 100);
  // Stale entries from an earlier, bigger tree must be overwritten field by field.
  std::vector<ProcessSample> out(7);
  for (auto& p : out) {
    p.read_bytes = 1;
    p.cpu_pct = 99;
    p.cmdline = "stale";
    p.threads_running = 9;
  }
  tracker.Sample(kTrackerT0, out);
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
    ProcessTracker tracker(TrackerNodeA(), c.root);
    std::vector<ProcessSample> out;
    tracker.Sample(kTrackerT0, out);
    std::vector<int32_t> pids;
    for (const auto& p : out) pids.push_back(p.pid);
    EXPECT_EQ(pids, c.want_pids);
  }
  ProcessTracker kthreads(TrackerNodeA(), 2);
  std::vector<ProcessSample> out;
  kthreads.Sample(kTrackerT0, out);
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
  tracker.Sample(kTrackerT0, out);
  ASSERT_EQ(out.size(), 4u);

  // 2 s later: 100 used 150 ticks, 200 used 200 ticks; 201 exited; 202 was started.
  CopyFixture("proc/node_a_next", proc);
  fs::remove_all(proc / "201");
  WriteFile(proc / "202" / "stat", TrackerStatLine(202, "new worker", 'S', 100, 5, 5, 9000));
  tracker.Sample(kTrackerT0 + 2 * kNsPerSec, out);
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
  WriteFile(proc / "300" / "stat", TrackerStatLine(300, "sh", 'S', 200, 50, 50, 7777));
  tracker.Sample(kTrackerT0 + 4 * kNsPerSec, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].cpu_pct, 0.0);
  EXPECT_FALSE(out[3].cpu_pct);

  // The root exits: the tree is empty, no error.
  fs::remove_all(proc / "100");
  tracker.Sample(kTrackerT0 + 6 * kNsPerSec, out);
  EXPECT_TRUE(out.empty());
}

TEST(ProcessTracker, MalformedStatIsCountedAndSkipped) {
  TempDir tmp;
  CopyFixture("proc/node_a", tmp.path() / "proc");
  WriteFile(tmp.path() / "proc" / "600" / "stat", "600 (oops) S 100 1 2\n");  // truncated
  ProcessTracker tracker(FixtureFs(tmp.path()), 100);
  std::vector<ProcessSample> out;
  tracker.Sample(kTrackerT0, out);
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(tracker.malformed_records(), 1u);
}

TEST(ProcessTracker, MissingProcRootGivesEmptyTree) {
  ProcFs fs;
  fs.proc_root = "/nonexistent/stallscope/proc";
  ProcessTracker tracker(fs, 1);
  std::vector<ProcessSample> out(3);
  tracker.Sample(kTrackerT0, out);
  EXPECT_TRUE(out.empty());
}

// node_a has no children files, like a kernel without CONFIG_PROC_CHILDREN: kAuto falls back to
// the full scan. Forced children files then find the root only (documented).
TEST(ProcessTracker, DiscoveryWithoutChildrenFilesTable) {
  struct Case {
    TreeDiscovery mode;
    TreeDiscovery want_used;
    std::vector<int32_t> want_pids;
  };
  const Case cases[] = {
      {TreeDiscovery::kAuto, TreeDiscovery::kFullScan, {100, 200, 201, 300}},
      {TreeDiscovery::kFullScan, TreeDiscovery::kFullScan, {100, 200, 201, 300}},
      {TreeDiscovery::kChildrenFiles, TreeDiscovery::kChildrenFiles, {100}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.mode));
    ProcessTracker tracker(TrackerNodeA(), 100, c.mode);
    EXPECT_EQ(tracker.last_discovery(), TreeDiscovery::kAuto);  // nothing sampled yet
    std::vector<ProcessSample> out;
    tracker.Sample(kTrackerT0, out);
    EXPECT_EQ(tracker.last_discovery(), c.want_used);
    EXPECT_EQ(Pids(out), c.want_pids);
    EXPECT_EQ(tracker.malformed_records(), 0u);
  }
}

// node_a with children files as a kernel with CONFIG_PROC_CHILDREN writes them. 201 was forked
// by thread 150 of the root, so only that thread lists it. 700 names 100 as its parent in its
// stat but no children file lists it: the scan finds it, the walk does not.
TEST(ProcessTracker, ChildrenFilesOnFixture) {
  TempDir tmp;
  const fs::path proc = tmp.path() / "proc";
  CopyFixture("proc/node_a", proc);
  WriteFile(proc / "100/task/100/children", "200 ");
  WriteFile(proc / "100/task/150/children", "201 ");
  WriteFile(proc / "100/task/151/children", "");
  // 201 listed again (re-parented during a walk) and a token that is not a pid.
  WriteFile(proc / "200/task/200/children", "300 201 x ");
  WriteFile(proc / "300/task/300/children", "100 ");  // a loop to the root: hand-made only
  WriteFile(proc / "700/stat", TrackerStatLine(700, "stray", 'S', 100, 1, 1, 8000));

  ProcessTracker walk(FixtureFs(tmp.path()), 100);
  std::vector<ProcessSample> walked;
  walk.Sample(kTrackerT0, walked);
  EXPECT_EQ(walk.last_discovery(), TreeDiscovery::kChildrenFiles);
  EXPECT_EQ(Pids(walked), (std::vector<int32_t>{100, 200, 201, 300}));
  EXPECT_EQ(walk.malformed_records(), 1u);  // "x"

  ProcessTracker scan(FixtureFs(tmp.path()), 100, TreeDiscovery::kFullScan);
  std::vector<ProcessSample> scanned;
  scan.Sample(kTrackerT0, scanned);
  EXPECT_EQ(Pids(scanned), (std::vector<int32_t>{100, 200, 201, 300, 700}));
  for (size_t i = 0; i < walked.size(); ++i) ExpectSameProcess(walked[i], scanned[i]);
}

// cmdline is read again only after an exec (comm changed), a pid reuse (start time changed) or
// kStaticRefreshNs; so is a missing io file. Steps run in order on one tracker.
TEST(ProcessTracker, StaticFieldsCacheTable) {
  static_assert(ProcessTracker::kStaticRefreshNs == 10 * kNsPerSec);
  TempDir tmp;
  const fs::path proc = tmp.path() / "proc";
  CopyFixture("proc/node_a", proc);
  ProcessTracker tracker(FixtureFs(tmp.path()), 100);
  std::vector<ProcessSample> out;
  tracker.Sample(kTrackerT0, out);
  ASSERT_EQ(Pids(out), (std::vector<int32_t>{100, 200, 201, 300}));
  ASSERT_EQ(out[1].cmdline, "worker -n 3");
  ASSERT_FALSE(out[2].read_bytes);  // 201 has no io file
  WriteFile(proc / "201" / "io", "read_bytes: 7\nwrite_bytes: 8\n");

  struct Step {
    const char* what;
    int64_t at_s;              // since kTrackerT0
    std::string stat_200;      // the new /proc/200/stat; empty: unchanged
    std::string cmdline_200;   // the new /proc/200/cmdline
    std::string want_cmdline;  // of 200
    bool want_cpu;             // a CPU delta for 200: taken as the same process
    bool want_io_201;          // 201's new io file seen
  };
  const Step steps[] = {
      {"argv rewritten, same process: cached", 1, "", "worker -n 4", "worker -n 3", true, false},
      {"pid reused: same comm, other start time", 2,
       TrackerStatLine(200, "a) (b", 'R', 100, 1, 1, 6500), "fresh", "fresh", false, false},
      {"exec: comm changed, same start time", 3, TrackerStatLine(200, "b", 'R', 100, 2, 2, 6500),
       "exec", "exec", true, false},
      {"argv rewritten again: cached", 9, "", "renamed", "exec", true, false},
      {"10 s after the last read: read again", 13, "", "renamed", "renamed", true, true},
  };
  for (const Step& step : steps) {
    SCOPED_TRACE(step.what);
    if (!step.stat_200.empty()) WriteFile(proc / "200" / "stat", step.stat_200);
    WriteFile(proc / "200" / "cmdline", step.cmdline_200);
    tracker.Sample(kTrackerT0 + step.at_s * kNsPerSec, out);
    ASSERT_EQ(Pids(out), (std::vector<int32_t>{100, 200, 201, 300}));
    EXPECT_EQ(out[1].cmdline, step.want_cmdline);
    EXPECT_EQ(out[1].cpu_pct.has_value(), step.want_cpu);
    EXPECT_EQ(out[2].read_bytes.has_value(), step.want_io_201);
    EXPECT_EQ(out[0].cmdline, "python train.py --epochs 10");
  }
}

// status and io hold cumulative counters, read again only kSlowRefreshNs after the last read;
// in between a sample repeats the last values. A process seen for the first time reads them
// at once. Steps run in order on one tracker.
TEST(ProcessTracker, SlowCountersRefreshTable) {
  static_assert(ProcessTracker::kSlowRefreshNs == kNsPerSec);
  TempDir tmp;
  const fs::path proc = tmp.path() / "proc";
  CopyFixture("proc/node_a", proc);
  auto counters = [&](int pid, int n) {
    WriteFile(proc / std::to_string(pid) / "status",
              "Name:\tx\nvoluntary_ctxt_switches:\t" + std::to_string(n) +
                  "\nnonvoluntary_ctxt_switches:\t" + std::to_string(n + 1) + "\n");
    WriteFile(
        proc / std::to_string(pid) / "io",
        "read_bytes: " + std::to_string(n + 2) + "\nwrite_bytes: " + std::to_string(n + 3) + "\n");
  };
  ProcessTracker tracker(FixtureFs(tmp.path()), 100);
  std::vector<ProcessSample> out;
  tracker.Sample(kTrackerT0, out);
  ASSERT_EQ(Pids(out), (std::vector<int32_t>{100, 200, 201, 300}));
  ASSERT_EQ(out[0].voluntary_ctxt_switches, 1500u);
  ASSERT_EQ(out[0].read_bytes, 524288000u);

  struct Step {
    const char* what;
    int64_t at_ms;             // since kTrackerT0
    int write_100, write_202;  // new counters (n, n+1, n+2, n+3) of 100 and 202; 0: unchanged
    uint64_t want_100;         // voluntary switches of 100; the other three follow
    std::optional<uint64_t> want_202;
  };
  const Step steps[] = {
      {"100 changed: the last values repeated", 100, 10, 0, 1500, std::nullopt},
      {"202 appears (found by the discovery at 600): read at once", 600, 0, 20, 1500, 20},
      {"999 ms after the last read: repeated", 999, 0, 30, 1500, 20},
      {"1 s after the last read of 100: read again", 1000, 0, 0, 10, 20},
      {"999 ms after the first read of 202: repeated", 1599, 0, 0, 10, 20},
      {"1 s after the first read of 202: read again", 1600, 0, 0, 10, 30},
  };
  for (const Step& step : steps) {
    SCOPED_TRACE(step.what);
    if (step.write_100 != 0) counters(100, step.write_100);
    if (step.write_202 != 0) {
      WriteFile(proc / "202" / "stat", TrackerStatLine(202, "new", 'S', 100, 1, 1, 9000));
      counters(202, step.write_202);
    }
    tracker.Sample(kTrackerT0 + step.at_ms * 1'000'000, out);
    const ProcessSample& p = out[0];
    EXPECT_EQ(p.voluntary_ctxt_switches, step.want_100);
    if (step.want_100 != 1500) {
      EXPECT_EQ(p.nonvoluntary_ctxt_switches, step.want_100 + 1);
      EXPECT_EQ(p.read_bytes, step.want_100 + 2);
      EXPECT_EQ(p.write_bytes, step.want_100 + 3);
    } else {
      EXPECT_EQ(p.nonvoluntary_ctxt_switches, 250u);
      EXPECT_EQ(p.read_bytes, 524288000u);
      EXPECT_EQ(p.write_bytes, 65536u);
    }
    auto it = std::find_if(out.begin(), out.end(), [](const auto& q) { return q.pid == 202; });
    ASSERT_EQ(it != out.end(), step.want_202.has_value());
    if (it == out.end()) continue;
    EXPECT_EQ(it->voluntary_ctxt_switches, step.want_202);
    EXPECT_EQ(it->write_bytes, *step.want_202 + 3);
  }
}

// Between discoveries (kRediscoverNs, or the sample after a change) the tree is the last
// sample's processes: a new one waits for the next discovery, one that exits, is re-parented
// out of the tree or whose pid is reused drops out at once. Both discovery modes alike.
TEST(ProcessTracker, KnownTreeBetweenDiscoveriesTable) {
  static_assert(ProcessTracker::kRediscoverNs == 500'000'000);
  struct Step {
    const char* what;
    int64_t at_ms;  // since kTrackerT0
    void (*change)(const fs::path& proc, bool children_files);
    std::vector<int32_t> want_pids;
  };
  // With children files: lists the children of `pid` in its main thread's file.
  static auto children = [](const fs::path& proc, bool on, int pid, const char* list) {
    if (on) WriteFile(proc / std::to_string(pid) / "task" / std::to_string(pid) / "children", list);
  };
  const Step steps[] = {
      {"first discovery", 0, nullptr, {100, 200, 201, 300}},
      {"discovered again after the change from nothing", 100, nullptr, {100, 200, 201, 300}},
      {"new child 202: not yet seen",
       200,
       [](const fs::path& proc, bool on) {
         WriteFile(proc / "202" / "stat", TrackerStatLine(202, "new", 'S', 100, 1, 1, 9000));
         children(proc, on, 100, "200 202 ");
       },
       {100, 200, 201, 300}},
      {"201 exits: gone at once",
       300,
       [](const fs::path& proc, bool on) {
         fs::remove_all(proc / "201");
         if (on) WriteFile(proc / "100/task/150/children", "");
       },
       {100, 200, 300}},
      {"changed: discovered again, 202 found", 400, nullptr, {100, 200, 202, 300}},
      {"changed: discovered again, unchanged", 500, nullptr, {100, 200, 202, 300}},
      {"300 re-parented to init: gone at once",
       600,
       [](const fs::path& proc, bool on) {
         WriteFile(proc / "300" / "stat", TrackerStatLine(300, "sh", 'S', 1, 1, 1, 7000));
         children(proc, on, 200, "");
       },
       {100, 200, 202}},
      {"changed: discovered again", 700, nullptr, {100, 200, 202}},
      {"pid 202 reused outside the tree: gone at once",
       800,
       [](const fs::path& proc, bool on) {
         WriteFile(proc / "202" / "stat", TrackerStatLine(202, "other", 'S', 1, 1, 1, 9500));
         children(proc, on, 100, "200 ");
       },
       {100, 200}},
      {"changed: discovered again", 900, nullptr, {100, 200}},
      {"new child 203 of 200: not yet seen",
       1000,
       [](const fs::path& proc, bool on) {
         WriteFile(proc / "203" / "stat", TrackerStatLine(203, "late", 'S', 200, 1, 1, 9600));
         children(proc, on, 200, "203 ");
       },
       {100, 200}},
      {"499 ms after the discovery: not yet seen", 1399, nullptr, {100, 200}},
      {"500 ms after: found", 1400, nullptr, {100, 200, 203}},
  };
  for (const bool children_files : {false, true}) {
    SCOPED_TRACE(children_files ? "children files" : "full scan");
    TempDir tmp;
    const fs::path proc = tmp.path() / "proc";
    CopyFixture("proc/node_a", proc);
    if (children_files) {
      children(proc, true, 100, "200 ");
      WriteFile(proc / "100/task/150/children", "201 ");
      children(proc, true, 200, "300 ");
    }
    ProcessTracker tracker(FixtureFs(tmp.path()), 100);
    std::vector<ProcessSample> out;
    for (const Step& step : steps) {
      SCOPED_TRACE(step.what);
      if (step.change != nullptr) step.change(proc, children_files);
      tracker.Sample(kTrackerT0 + step.at_ms * 1'000'000, out);
      EXPECT_EQ(Pids(out), step.want_pids);
      EXPECT_EQ(tracker.last_discovery(),
                children_files ? TreeDiscovery::kChildrenFiles : TreeDiscovery::kFullScan);
    }
    EXPECT_EQ(tracker.malformed_records(), 0u);
  }
}

/// Spawns `/bin/sh -c <script>` in its own process group; kills the group on destruction.
class SpawnedShell {
 public:
  explicit SpawnedShell(const char* script) {
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    const char* argv[] = {"/bin/sh", "-c", script, nullptr};
    const int rc = posix_spawn(&pid_, "/bin/sh", nullptr, &attr, const_cast<char**>(argv), environ);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) pid_ = 0;
  }
  ~SpawnedShell() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGKILL);  // the group we created: sh and its children
    waitpid(pid_, nullptr, 0);
  }
  SpawnedShell(const SpawnedShell&) = delete;
  SpawnedShell& operator=(const SpawnedShell&) = delete;

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
};

TEST(ProcessTrackerLive, SpawnedShellAndItsChild) {
  SpawnedShell shell("sleep 30 & wait");
  ASSERT_GT(shell.pid(), 0);
  SystemClock clock;
  ProcessTracker tracker(ProcFs{}, shell.pid());
  std::vector<ProcessSample> out;
  // The shell forks sleep soon after it starts; wait up to 10 s for it. execve sets comm before
  // it maps the new argv and touches its pages, so a sample can see comm "sleep" with an empty
  // cmdline and no resident memory yet: wait for the exec to be complete, not just begun.
  for (int i = 0; i < 1000; ++i) {
    tracker.Sample(clock.MonotonicNs(), out);
    if (out.size() >= 2 && out[1].comm == "sleep" && !out[1].cmdline.empty() &&
        out[1].rss_bytes > 0) {
      break;
    }
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

/// A thread of this process that spawns `sleep 30` and lives until destruction, so that the
/// child stays listed in that thread's children file (and not the main thread's).
class ThreadWithChild {
 public:
  ThreadWithChild() : thread_([this] { Run(); }) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return started_; });
  }
  ~ThreadWithChild() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  ThreadWithChild(const ThreadWithChild&) = delete;
  ThreadWithChild& operator=(const ThreadWithChild&) = delete;

  pid_t child() const { return child_; }
  pid_t tid() const { return tid_; }

 private:
  void Run() {
    const char* argv[] = {"/bin/sleep", "30", nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, "/bin/sleep", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) {
      pid = 0;
    }
    std::unique_lock lock(mu_);
    child_ = pid;
    tid_ = static_cast<pid_t>(syscall(SYS_gettid));
    started_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return stop_; });
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false, stop_ = false;
  pid_t child_ = 0, tid_ = 0;
  std::thread thread_;  // last: runs once the members above exist
};

std::vector<int32_t> ReadPidList(const std::string& path) {
  std::ifstream in(path);
  return std::vector<int32_t>(std::istream_iterator<int32_t>(in), std::istream_iterator<int32_t>());
}

bool Contains(const std::vector<int32_t>& pids, int32_t pid) {
  return std::find(pids.begin(), pids.end(), pid) != pids.end();
}

bool HasChildrenFiles() {
  return fs::exists("/proc/self/task/" + std::to_string(getpid()) + "/children");
}

TEST(ProcessTrackerLive, ChildOfNonMainThreadIsFound) {
  if (!HasChildrenFiles()) GTEST_SKIP() << "kernel without CONFIG_PROC_CHILDREN";
  ThreadWithChild thread;
  ASSERT_GT(thread.child(), 0);
  // The premise: the kernel lists the child under the thread that spawned it, only.
  const std::string task = "/proc/self/task/";
  EXPECT_TRUE(
      Contains(ReadPidList(task + std::to_string(thread.tid()) + "/children"), thread.child()));
  EXPECT_FALSE(
      Contains(ReadPidList(task + std::to_string(getpid()) + "/children"), thread.child()));

  ProcessTracker tracker(ProcFs{}, getpid(), TreeDiscovery::kChildrenFiles);
  std::vector<ProcessSample> out;
  auto child = out.end();
  // posix_spawn returns once exec has begun, possibly before the new argv is mapped (then
  // cmdline reads empty, and is read again on the next sample): wait up to 5 s.
  for (int i = 0; i < 500; ++i) {
    tracker.Sample(SystemClock().MonotonicNs(), out);
    child = std::find_if(out.begin(), out.end(),
                         [&](const ProcessSample& p) { return p.pid == thread.child(); });
    ASSERT_NE(child, out.end());
    if (!child->cmdline.empty()) break;
    usleep(10 * 1000);
  }
  EXPECT_EQ(tracker.last_discovery(), TreeDiscovery::kChildrenFiles);
  EXPECT_EQ(child->ppid, getpid());
  EXPECT_EQ(child->cmdline, "/bin/sleep 30");
  EXPECT_GE(out[0].threads, 2u);
}

// The walk and the scan find the same processes with the same values: a child of a non-main
// thread, and a shell with two children and a subshell with its own child.
TEST(ProcessTrackerLive, DiscoveryModesAgree) {
  if (!HasChildrenFiles()) GTEST_SKIP() << "kernel without CONFIG_PROC_CHILDREN";
  ThreadWithChild thread;
  SpawnedShell shell("sleep 30 & sleep 30 & (sleep 30 & wait) & wait");
  ASSERT_GT(thread.child(), 0);
  ASSERT_GT(shell.pid(), 0);
  SystemClock clock;
  ProcessTracker walk(ProcFs{}, getpid());
  ProcessTracker scan(ProcFs{}, getpid(), TreeDiscovery::kFullScan);
  std::vector<ProcessSample> walked, scanned;
  // Self, the thread's sleep, sh, its two sleeps, the subshell and its sleep; wait up to 5 s for
  // the shells to fork and exec them.
  // A sleep counts once its exec is complete: comm changes before the new command line is
  // readable, and a read between the two sees "sleep" with an empty cmdline.
  auto sleeps = [](const std::vector<ProcessSample>& procs) {
    return std::count_if(procs.begin(), procs.end(), [](const ProcessSample& p) {
      return p.comm == "sleep" && p.cmdline.find("sleep 30") != std::string::npos;
    });
  };
  for (int i = 0; i < 500; ++i) {
    scan.Sample(clock.MonotonicNs(), scanned);
    if (scanned.size() == 7 && sleeps(scanned) == 4) break;
    usleep(10 * 1000);
  }
  ASSERT_EQ(scanned.size(), 7u);
  // States and counters move between two reads; the tree and what names it do not.
  auto tree = [](const std::vector<ProcessSample>& procs) {
    std::vector<std::tuple<int32_t, int32_t, std::string, std::string, uint32_t>> rows;
    for (const auto& p : procs) rows.emplace_back(p.pid, p.ppid, p.comm, p.cmdline, p.threads);
    return rows;
  };
  for (int i = 0; i < 3; ++i) {
    const int64_t now_ns = clock.MonotonicNs();
    walk.Sample(now_ns, walked);
    scan.Sample(now_ns, scanned);
    EXPECT_EQ(walk.last_discovery(), TreeDiscovery::kChildrenFiles);
    EXPECT_EQ(tree(walked), tree(scanned));
  }
  EXPECT_EQ(walk.malformed_records(), 0u);
  EXPECT_EQ(scan.malformed_records(), 0u);
}

size_t CountOpenFds() {
  return static_cast<size_t>(
      std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator()));
}

int64_t ProcessCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * kNsPerSec + ts.tv_nsec;
}

// On procfs the per-process files stay open between samples: they must give fresh values, show
// a process turning zombie and then vanishing, and be closed with the tracker.
TEST(ProcessTrackerLive, KeptFilesAreFreshAndClosed) {
  const size_t fds_before = CountOpenFds();
  SystemClock clock;
  {
    ProcessTracker self(ProcFs{}, getpid());
    std::vector<ProcessSample> out;
    self.Sample(clock.MonotonicNs(), out);
    const int64_t busy_until = ProcessCpuNs() + 60'000'000;  // 60 ms: several clock ticks
    while (ProcessCpuNs() < busy_until) {
    }
    self.Sample(clock.MonotonicNs(), out);
    ASSERT_FALSE(out.empty());
    ASSERT_TRUE(out[0].cpu_pct);
    EXPECT_GT(*out[0].cpu_pct, 0.0);
  }
  {
    SpawnedShell shell("sleep 30 & sleep 30 & wait");
    ASSERT_GT(shell.pid(), 0);
    ProcessTracker tracker(ProcFs{}, shell.pid());
    std::vector<ProcessSample> out;
    auto sample_until = [&](auto done) {
      for (int i = 0; i < 500; ++i) {
        tracker.Sample(clock.MonotonicNs(), out);
        if (done()) return true;
        usleep(10 * 1000);
      }
      return false;
    };
    // comm changes before execve maps the new argv (process_tracker.cc ReadStatic): wait for
    // both, or a sample inside that window reads an empty cmdline (seen once in CI-like load).
    ASSERT_TRUE(sample_until([&] {
      return out.size() == 3 && out[1].comm == "sleep" && out[2].comm == "sleep" &&
             !out[1].cmdline.empty() && !out[2].cmdline.empty();
    }));
    const int32_t victim = out[1].pid;
    EXPECT_EQ(out[1].cmdline, "sleep 30");
    // With the shell stopped the killed sleep stays a zombie; once it runs, it reaps it.
    kill(shell.pid(), SIGSTOP);
    kill(victim, SIGKILL);
    ASSERT_TRUE(sample_until([&] { return out.size() == 3 && out[1].state == 'Z'; }));
    EXPECT_EQ(out[1].pid, victim);
    EXPECT_EQ(out[1].cmdline, "");
    kill(shell.pid(), SIGCONT);
    ASSERT_TRUE(sample_until([&] { return out.size() == 2; }));
    EXPECT_FALSE(Contains(Pids(out), victim));
  }
  EXPECT_EQ(CountOpenFds(), fds_before);
}

}  // namespace
}  // namespace stallscope::host
