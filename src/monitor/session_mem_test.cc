// Memory of a long monitoring session (issue: "24 hours of 1 Hz sampling with 8 GPUs: the
// monitor's RSS flat within 1 MB; `run` with 100k steps: bounded monitor memory"). Deterministic:
// time is a fake clock, the GPUs a fake libnvidia-ml.so.1, /proc a directory tree, and the
// measure is the heap in use (bytes allocated and not freed), not wall time or RSS.

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "host_test_util.h"
#include "temp_dir.h"

#include "base/units.h"
#include "fakes/fake_clock.h"
#include "fakes/fake_gpu_backend.h"
#include "gpu/gpu_backend.h"
#include "monitor/session.h"
#include "phase/phase_writer.h"

#include "asan.h"
#ifdef STALLSCOPE_ASAN
// The ASan runtime's (sanitizer/allocator_interface.h, which g++ 12 does not ship).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace stallscope::monitor {
namespace {

namespace fs = std::filesystem;
using host::testing::WriteFile;
using stallscope::testing::TempDir;

constexpr auto kGrowthLimitBytes = static_cast<int64_t>(kMiB);  // the bound

#ifdef STALLSCOPE_ASAN
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

/// Bytes of heap in use now. ASan replaces malloc (glibc's mallinfo2 then sees nothing): its
/// allocator counts for itself. Otherwise glibc's main arena, which is every thread's once
/// M_ARENA_MAX is 1 (see OneArena).
int64_t HeapInUseBytes() {
#ifdef STALLSCOPE_ASAN
  return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#else
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
#endif
}

/// mallinfo2 sees the main arena only: make the sampling thread allocate there too.
void OneArena() {
  if (!kAsan) mallopt(M_ARENA_MAX, 1);
}

/// A FakeClock that runs `tick` after every sleep of the sampling thread (between two samples):
/// the test changes the world and measures there, on the sampling thread.
class TickingClock final : public Clock {
 public:
  explicit TickingClock(std::function<void(int64_t)> tick) : tick_(std::move(tick)) {}
  int64_t MonotonicNs() const override { return now_ns_; }
  int64_t WallNs() const override { return now_ns_ + 1'700'000'000'000'000'000; }
  void SleepUntil(int64_t deadline_ns) override {
    if (deadline_ns > now_ns_) now_ns_ = deadline_ns;
  }
  void SleepUntil(int64_t deadline_ns, StopFlag& stop) override {
    if (stop.requested()) return;
    SleepUntil(deadline_ns);
    tick_(++ticks_);
  }

 private:
  std::function<void(int64_t)> tick_;
  int64_t now_ns_ = kNsPerSec;
  int64_t ticks_ = 0;
};

/// A /proc tree under `root`: host files plus a training process `root_pid` and
/// `workers` DataLoader workers, which Churn replaces by new pids (as each epoch restarts them).
class FakeProcTree {
 public:
  FakeProcTree(const fs::path& root, int32_t root_pid, int workers)
      : proc_(root / "proc"), root_pid_(root_pid), workers_(workers) {
    // The host files of node_a that every sample reads; no PSI and no cgroup files (absent
    // files cost one open a minute): most of a sample's time is opening fixture files.
    for (const char* name : {"stat", "meminfo", "loadavg", "diskstats"}) {
      fs::create_directories(proc_);
      fs::copy_file(host::testing::DataPath("proc/node_a") / name, proc_ / name);
    }
    AddProcess(root_pid_, 1, "python");
    Churn();
  }

  /// The workers of the last epoch exit; as many new ones start, with new pids.
  void Churn() {
    for (int32_t pid : live_) fs::remove_all(proc_ / std::to_string(pid));
    live_.clear();
    for (int i = 0; i < workers_; ++i) {
      live_.push_back(next_pid_);
      AddProcess(next_pid_++, root_pid_, "pt_data_worker");
    }
  }
  int32_t next_pid() const { return next_pid_; }

 private:
  void AddProcess(int32_t pid, int32_t ppid, const std::string& comm) {
    const fs::path dir = proc_ / std::to_string(pid);
    WriteFile(dir / "stat",
              fmt::format("{} ({}) S {} {} {} 0 -1 4194560 12000 0 12 0 1200 300 0 0 20 0 1 0 {} "
                          "8405381120 250000 18446744073709551615 94283413766144 94283416603285 "
                          "140723477113744 0 0 0 0 16781312 134234626 0 0 0 17 3 0 0 0 0 0\n",
                          pid, comm, ppid, pid, pid, 5000 + pid));
    WriteFile(dir / "status", fmt::format("Name:\t{}\nPid:\t{}\nPPid:\t{}\nThreads:\t1\n"
                                          "voluntary_ctxt_switches:\t15\n"
                                          "nonvoluntary_ctxt_switches:\t2\n",
                                          comm, pid, ppid));
    WriteFile(dir / "io", "read_bytes: 524288000\nwrite_bytes: 65536\n");
    WriteFile(dir / "cmdline", std::string("python\0train.py\0", 16));
  }

  fs::path proc_;
  int32_t root_pid_;
  int workers_;
  int32_t next_pid_ = 3'000'000;  // above any real pid here (ours is the root)
  std::vector<int32_t> live_;
};

sample::RecordingHeader MemHeader(const gpu::GpuBackend& gpus) {
  sample::RecordingHeader h;
  h.tool_version = "stallscope test";
  h.interval_ns = kNsPerSec;
  for (size_t i = 0; i < gpus.DeviceCount(); ++i) h.gpus.push_back(gpus.Static(i));
  return h;
}

// 24 h of 1 Hz sampling of 8 GPUs (fake NVML, eight_gpus.json) and a job whose 2 DataLoader
// workers restart every 5 minutes, recorded as `run` records: the heap after the last sample is
// within 1 MB of the heap after 1,000. Under ASan the loop is shorter (the bound is the same).
TEST(SessionMemoryScale, DayOfSamplingEightGpusStaysFlat) {
  OneArena();
  const int64_t samples = kAsan ? 20'000 : 86'400;
  constexpr int64_t kWarmup = 1'000;
  constexpr int64_t kEpochSamples = 300;
  setenv("STALLSCOPE_FAKE_NVML_SCENARIO", STALLSCOPE_NVML_SCENARIOS "/eight_gpus.json", 1);
  auto gpus = gpu::OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  ASSERT_EQ((*gpus)->DeviceCount(), 8u);

  TempDir dir;
  FakeProcTree tree(dir.path(), getpid(), 2);
  int64_t heap_warm = 0, heap_end = 0;
  size_t processes_seen = 0;
  TickingClock clock([&](int64_t tick) {
    if (tick % kEpochSamples == 0) tree.Churn();
    if (tick == kWarmup) heap_warm = HeapInUseBytes();
    if (tick == samples) heap_end = HeapInUseBytes();
  });
  SessionOptions options;
  options.max_samples = samples;
  options.on_write_error = OnWriteError::kContinue;  // as `run`
  Session session(**gpus, host::testing::FixtureFs(dir.path()), clock, MemHeader(**gpus),
                  std::move(options));
  ASSERT_TRUE(session.FollowPid(getpid()).ok());
  // The recording's lines are the product, but on disk: /dev/null takes them all the same.
  ASSERT_TRUE(session.OpenRecording("/dev/null", sample::RecordingFormat::kJsonl).ok());
  session.StartSampling();
  while (!session.stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  sample::Sample latest;
  ASSERT_TRUE(session.CopyLatest(latest));
  processes_seen = latest.processes.size();
  ASSERT_TRUE(session.Finish(0).ok());
  unsetenv("STALLSCOPE_FAKE_NVML_SCENARIO");

  EXPECT_EQ(session.samples_written(), samples);
  EXPECT_EQ(processes_seen, 3u) << "the root and its 2 workers";
  EXPECT_GT(tree.next_pid(), 3'000'000 + 2 * (samples / kEpochSamples)) << "workers churned";
  ASSERT_GT(heap_warm, 0);
  std::cout << "[ heap     ] after " << kWarmup << " samples " << heap_warm << " B, after "
            << samples << " " << heap_end << " B: growth " << heap_end - heap_warm << " B\n";
  EXPECT_LT(heap_end - heap_warm, kGrowthLimitBytes)
      << "heap after " << kWarmup << " samples: " << heap_warm << " B, after " << samples << ": "
      << heap_end << " B";
}

/// A DataLoader worker: a forked process that records a few phases into its own ring (1 Ki
/// records) and exits.
void RunWorker(const std::string& phases_dir) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    phase::PhaseWriter writer({.phases_dir = phases_dir, .capacity = 1024});
    const uint16_t id = writer.NameId("worker_fetch");
    for (int i = 0; i < 50; ++i) {
      writer.Begin(id);
      writer.End(id);
    }
    _exit(writer.enabled() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// `run` of a 100k-step job: the phase records of every step go through the live path (ring →
// RingDirWatcher → events.bin + LiveStats), with status windows and interim reports as `run`
// takes them, while 4 workers per 1,000-step epoch come and go (each with its own ring) and a
// new thread of the training process opens a phase each epoch. Heap after the last step is
// within 1 MB of the heap after 1,000 steps; events.bin has every record.
TEST(SessionMemory, HundredThousandStepsStayBounded) {
  OneArena();
  const int64_t steps = kAsan ? 20'000 : 100'000;
  constexpr int64_t kWarmup = 1'000;
  constexpr int64_t kEpochSteps = 1'000;
  constexpr int64_t kDrainEverySteps = 500;
  constexpr int kWorkersPerEpoch = 4;
  TempDir dir;
  const std::string phases = dir.Sub("phases");
  fs::create_directories(phases);
  gpu::FakeGpuBackend gpus({});
  FakeClock clock;
  Session session(gpus, host::ProcFs{}, clock, MemHeader(gpus), SessionOptions{});
  ASSERT_TRUE(session.WatchPhases(dir.path().string()).ok());

  phase::PhaseWriter writer({.phases_dir = phases});
  const uint16_t data = writer.NameId("data_loading");
  const uint16_t forward = writer.NameId("forward_pass");
  const uint16_t backward = writer.NameId("backward_pass");
  const uint16_t pin = writer.NameId("pin_memory");
  int64_t heap_warm = 0;
  int64_t windows = 0, workers = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    for (uint16_t id : {data, forward, backward}) {
      writer.Begin(id);
      writer.End(id);
    }
    writer.Step();
    if (step % kEpochSteps == 0) {
      std::thread([&] { writer.Begin(pin), writer.End(pin); }).join();
      for (int w = 0; w < kWorkersPerEpoch; ++w, ++workers) RunWorker(phases);
    }
    if (step % kDrainEverySteps == 0) {
      clock.Advance(kNsPerSec);
      for (const auto& warning : session.DrainPhases(phase::DrainMode::kLive))
        ADD_FAILURE() << warning;
      if (session.TakeLiveWindow(kNsPerSec)) ++windows;
      (void)session.TakeLiveInterim(100, kNsPerSec);
    }
    if (step == kWarmup) heap_warm = HeapInUseBytes();
  }
  const int64_t heap_end = HeapInUseBytes();
  EXPECT_TRUE(session.DrainPhases(phase::DrainMode::kFinal).empty());
  auto totals = session.LiveTotals(steps * kNsPerSec);
  ASSERT_TRUE(totals.has_value());
  EXPECT_EQ(totals->steps, static_cast<uint64_t>(steps));
  EXPECT_EQ(windows, steps / kDrainEverySteps);

  // Every record reached events.bin: 7 per step (3 phases, a step), 2 per pin_memory, 100 per
  // worker. Its 16-byte header, 32 bytes a record.
  const int64_t records = steps * 7 + steps / kEpochSteps * 2 + workers * 100;
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(dir.Sub("events.bin"))), 16 + records * 32);
  std::cout << "[ heap     ] after " << kWarmup << " steps " << heap_warm << " B, after " << steps
            << " " << heap_end << " B: growth " << heap_end - heap_warm << " B\n";
  EXPECT_LT(heap_end - heap_warm, kGrowthLimitBytes)
      << "heap after " << kWarmup << " steps: " << heap_warm << " B, after " << steps << ": "
      << heap_end << " B (" << workers << " worker rings came and went)";
}

}  // namespace
}  // namespace stallscope::monitor
