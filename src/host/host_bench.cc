// CPU time of one host sample: HostSampler::Sample + ProcessTracker::Sample over a 20-process
// tree, on a generated /proc fixture (deterministic; found by the full scan, /0, or by children
// files, /1) and on this machine's /proc (20 sleeps); HostSampler::Sample alone on both;
// ProcessTracker::Sample alone on this machine's /proc with this process given N idle threads
// (BM_TreeLiveThreads/N: a training job's main process has dozens).
//
//   build-host/src/host/host_bench --benchmark_min_time=2s

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "host/host.h"

extern char** environ;

namespace stallscope::host {
namespace {

namespace fs = std::filesystem;

constexpr int kTreeSize = 20;       // the training job: root + 19 descendants
constexpr int kThreadsPerProc = 8;  // task/*/stat files per process
constexpr int kOtherProcs = 300;    // unrelated processes the tree scan must skip
constexpr int kCpus = 32;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string StatLine(int pid, int ppid, char state) {
  return std::to_string(pid) + " (python worker) " + state + " " + std::to_string(ppid) +
         " 1 1 0 -1 4194560 12000 0 12 0 1200 300 0 0 20 0 8 0 5000 8405381120 250000 "
         "18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0\n";
}

/// A /proc + cgroup + sysfs tree in a temp dir, removed at exit of the benchmark.
class FixtureTree {
 public:
  explicit FixtureTree(bool children_files) {
    std::string templ = "/tmp/stallscope_host_bench_XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) root_ = templ;
    const fs::path proc = root_ / "proc";
    std::string stat = "cpu  10000 100 3000 90000 500 10 20 5 0 0\n";
    for (int c = 0; c < kCpus; ++c) {
      stat += "cpu" + std::to_string(c) + " 10000 100 3000 90000 500 10 20 5 0 0\n";
    }
    Write(proc / "stat", stat + "intr 1 2 3\nctxt 99\nbtime 1700000000\nprocs_running 3\n");
    Write(proc / "meminfo", "MemTotal: 16384000 kB\nMemFree: 1 kB\nMemAvailable: 8192000 kB\n");
    Write(proc / "loadavg", "2.50 1.75 1.00 3/456 7890\n");
    for (const char* res : {"cpu", "io", "memory"}) {
      Write(proc / "pressure" / res,
            "some avg10=1.00 avg60=1.00 avg300=1.00 total=100\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
    }
    Write(proc / "diskstats",
          "   7 0 loop0 1 0 2 3 0 0 0 0 0 4 3 0 0 0 0 0 0\n"
          " 259 0 nvme0n1 1 2 3 4 5 6 7 8 0 9 10 0 0 0 0 0 0\n"
          " 259 1 nvme0n1p1 1 2 3 4 5 6 7 8 0 9 10 0 0 0 0 0 0\n");
    Write(proc / "self" / "cgroup", "0::/job\n");
    Write(root_ / "cgroup" / "job" / "cpu.max", "800000 100000\n");
    Write(root_ / "cgroup" / "job" / "memory.max", "max\n");
    Write(root_ / "cgroup" / "job" / "cpu.stat",
          "usage_usec 1\nnr_throttled 2\nthrottled_usec 3\n");
    Write(root_ / "sys" / "block" / "nvme0n1" / "size", "1\n");
    for (int i = 0; i < kOtherProcs; ++i)
      Write(proc / std::to_string(2 + i) / "stat", StatLine(2 + i, 1, 'S'));
    // The job: root 1000; 1001..1019 are children of the root or of 1001 (dataloader workers).
    for (int i = 0; i < kTreeSize; ++i) {
      const int pid = 1000 + i;
      const int ppid = i == 0 ? 1 : (i < 10 ? 1000 : 1001);
      const fs::path dir = proc / std::to_string(pid);
      Write(dir / "stat", StatLine(pid, ppid, 'S'));
      Write(dir / "cmdline", std::string("python\0train.py\0--workers\0"
                                         "8\0",
                                         26));
      Write(dir / "status",
            "Name:\tpython\nState:\tS (sleeping)\nThreads:\t8\n"
            "voluntary_ctxt_switches:\t1500\nnonvoluntary_ctxt_switches:\t250\n");
      Write(dir / "io",
            "rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 5\nwrite_bytes: 6\n"
            "cancelled_write_bytes: 0\n");
      for (int t = 0; t < kThreadsPerProc; ++t) {
        const int tid = t == 0 ? pid : 100000 + pid * 10 + t;
        const fs::path task = dir / "task" / std::to_string(tid);
        Write(task / "stat", StatLine(tid, ppid, t == 1 ? 'R' : 'S'));
        if (!children_files) continue;
        std::string children;
        for (int c = 1; c < kTreeSize && t == 0; ++c) {
          if ((c < 10 ? 1000 : 1001) == pid) children += std::to_string(1000 + c) + " ";
        }
        Write(task / "children", children);
      }
    }
  }
  ~FixtureTree() {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
  }

  ProcFs Fs() const {
    ProcFs pfs;
    pfs.proc_root = (root_ / "proc").string();
    pfs.cgroup_root = (root_ / "cgroup").string();
    pfs.sys_root = (root_ / "sys").string();
    pfs.shm_path = root_.string();
    return pfs;
  }

 private:
  fs::path root_;
};

void BM_HostAndTreeFixture(benchmark::State& state) {
  FixtureTree tree(state.range(0) != 0);
  HostSampler host(tree.Fs());
  ProcessTracker tracker(tree.Fs(), 1000);
  HostSample host_out;
  std::vector<ProcessSample> procs;
  int64_t now_ns = 1'000'000'000;
  for (auto _ : state) {
    now_ns += 100'000'000;
    host.Sample(now_ns, host_out);
    tracker.Sample(now_ns, procs);
    benchmark::DoNotOptimize(procs.data());
  }
  if (procs.size() != kTreeSize) state.SkipWithError("wrong tree size");
  state.counters["processes"] = static_cast<double>(procs.size());
}
BENCHMARK(BM_HostAndTreeFixture)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_HostOnlyFixture(benchmark::State& state) {
  FixtureTree tree(false);
  HostSampler host(tree.Fs());
  HostSample out;
  int64_t now_ns = 1'000'000'000;
  for (auto _ : state) {
    now_ns += 100'000'000;
    host.Sample(now_ns, out);
    benchmark::DoNotOptimize(out.cpu_count);
  }
}
BENCHMARK(BM_HostOnlyFixture)->Unit(benchmark::kMicrosecond);

void BM_HostOnlyLive(benchmark::State& state) {
  HostSampler host(ProcFs{});
  HostSample out;
  int64_t now_ns = 1'000'000'000;
  for (auto _ : state) {
    now_ns += 100'000'000;
    host.Sample(now_ns, out);
    benchmark::DoNotOptimize(out.cpu_count);
  }
}
BENCHMARK(BM_HostOnlyLive)->Unit(benchmark::kMicrosecond);

/// 20 `sleep` children of this process, killed (by pid) and reaped on destruction.
class SleepChildren {
 public:
  explicit SleepChildren(int n) {
    const char* argv[] = {"/bin/sleep", "600", nullptr};
    for (int i = 0; i < n; ++i) {
      pid_t pid = 0;
      if (posix_spawn(&pid, "/bin/sleep", nullptr, nullptr, const_cast<char**>(argv), environ) ==
          0) {
        pids_.push_back(pid);
      }
    }
  }
  ~SleepChildren() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  SleepChildren(const SleepChildren&) = delete;
  SleepChildren& operator=(const SleepChildren&) = delete;

 private:
  std::vector<pid_t> pids_;
};

void BM_HostAndTreeLive(benchmark::State& state) {
  SleepChildren children(kTreeSize - 1);  // with this process: a 20-process tree
  HostSampler host(ProcFs{});
  ProcessTracker tracker(ProcFs{}, getpid());
  HostSample host_out;
  std::vector<ProcessSample> procs;
  int64_t now_ns = 1'000'000'000;
  for (auto _ : state) {
    now_ns += 100'000'000;
    host.Sample(now_ns, host_out);
    tracker.Sample(now_ns, procs);
    benchmark::DoNotOptimize(procs.data());
  }
  state.counters["processes"] = static_cast<double>(procs.size());
}
BENCHMARK(BM_HostAndTreeLive)->Unit(benchmark::kMicrosecond);

/// `n` threads of this process that wait until destruction.
class IdleThreads {
 public:
  explicit IdleThreads(int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stop_; });
      });
    }
  }
  ~IdleThreads() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  IdleThreads(const IdleThreads&) = delete;
  IdleThreads& operator=(const IdleThreads&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

void BM_TreeLiveThreads(benchmark::State& state) {
  SleepChildren children(kTreeSize - 1);
  IdleThreads threads(static_cast<int>(state.range(0)));
  ProcessTracker tracker(ProcFs{}, getpid());
  std::vector<ProcessSample> procs;
  int64_t now_ns = 1'000'000'000;
  for (auto _ : state) {
    now_ns += 100'000'000;  // 10 Hz, as `record -i 100ms`
    tracker.Sample(now_ns, procs);
    benchmark::DoNotOptimize(procs.data());
  }
  state.counters["processes"] = static_cast<double>(procs.size());
}
BENCHMARK(BM_TreeLiveThreads)->Arg(0)->Arg(32)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace stallscope::host

BENCHMARK_MAIN();
