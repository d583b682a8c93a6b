// CPU time of one full sample as `stallscope record` takes it: 8 fake GPUs (the real NvmlBackend
// over the fake libnvidia-ml.so.1, tests/data/nvml/eight_gpus.json), the host (this machine's
// /proc), a followed process tree (a shell with sleeping children: /5 = 5 processes, /20 = 20)
// and the JSON line written by RecordingWriter to /dev/null. Then each part alone, to see where
// the time goes: NVML queries, host /proc reads, the process-tree walk, JSON formatting.
//
// Time advances 100 ms per sample (10 Hz, `record -i 100ms`), so the once-a-second and
// twice-a-second work of ProcessTracker (status/io refresh, tree re-discovery) is paid as often
// as in a recording. The fake NVML's own work is included: it bounds our cost from above.
//
//   build/bench/sample_bench --benchmark_min_time=2
//   build/bench/sample_bench --benchmark_filter=sleep:1   # cold caches only

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <benchmark/benchmark.h>

#include "sample/recording.h"
#include "sample/sampler.h"

extern char** environ;

namespace stallscope {
namespace {

constexpr int64_t kIntervalNs = 100'000'000;  // 10 Hz

/// Monotonic time that moves 100 ms per Step(): a 10 Hz recording, without waiting for it.
class SteppedClock final : public Clock {
 public:
  int64_t MonotonicNs() const override { return now_ns_; }
  int64_t WallNs() const override { return now_ns_ + wall_offset_ns_; }
  void SleepUntil(int64_t deadline_ns) override { now_ns_ = std::max(now_ns_, deadline_ns); }
  void SleepUntil(int64_t deadline_ns, StopFlag&) override { SleepUntil(deadline_ns); }
  void Step() { now_ns_ += kIntervalNs; }

 private:
  int64_t now_ns_ = SystemClock().MonotonicNs();
  int64_t wall_offset_ns_ = SystemClock().WallNs() - now_ns_;
};

/// A shell with `size - 1` sleeping children, in its own process group; killed on destruction.
class ProcessTree {
 public:
  explicit ProcessTree(int size) {
    const std::string script =
        "for i in $(seq " + std::to_string(size - 1) + "); do sleep 100000 & done; wait";
    const char* argv[] = {"sh", "-c", script.c_str(), nullptr};
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);  // own group: one kill ends the whole tree
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    if (posix_spawnp(&root_, "sh", nullptr, &attr, const_cast<char**>(argv), environ) != 0) {
      root_ = -1;
    }
    posix_spawnattr_destroy(&attr);
  }
  ~ProcessTree() {
    if (root_ <= 0) return;
    kill(-root_, SIGTERM);
    waitpid(root_, nullptr, 0);
  }
  ProcessTree(const ProcessTree&) = delete;
  ProcessTree& operator=(const ProcessTree&) = delete;
  pid_t root() const { return root_; }

 private:
  pid_t root_ = -1;
};

/// Everything `record` samples with, set up as `record` does.
struct Rig {
  std::unique_ptr<gpu::GpuBackend> gpus;
  std::optional<ProcessTree> tree;
  std::optional<host::HostSampler> host;
  std::optional<host::ProcessTracker> tracker;
  SteppedClock clock;
  std::optional<sample::Sampler> sampler;
  sample::RecordingHeader header;
  std::optional<sample::RecordingWriter> writer;
  sample::Sample sample;
  std::string error;

  explicit Rig(int tree_size) {
    setenv("STALLSCOPE_FAKE_NVML_SCENARIO", STALLSCOPE_NVML_SCENARIOS "/eight_gpus.json", 1);
    auto opened = gpu::OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
    if (!opened.ok()) {
      error = opened.error().message;
      return;
    }
    gpus = std::move(*opened);
    tree.emplace(tree_size);
    host.emplace(host::ProcFs{});
    tracker.emplace(host::ProcFs{}, tree->root());
    sampler.emplace(*gpus, *host, &*tracker, clock);
    header.gpu_backend = "nvml";
    header.driver_version = gpus->DriverVersion();
    header.interval_ns = kIntervalNs;
    for (size_t i = 0; i < gpus->DeviceCount(); ++i) header.gpus.push_back(gpus->Static(i));
    auto w = sample::RecordingWriter::Open("/dev/null", header, sample::RecordingFormat::kJsonl);
    if (!w.ok()) {
      error = w.error().message;
      return;
    }
    writer.emplace(std::move(*w));
    // Wait until every child has started, then warm up (buffers grow, files are kept open).
    for (int tries = 0; tries < 200; ++tries) {
      sampler->SampleOnce(sample);
      clock.Step();
      if (sample.processes.size() >= static_cast<size_t>(tree_size)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (sample.processes.size() != static_cast<size_t>(tree_size)) {
      error = "the process tree did not start: " + std::to_string(sample.processes.size());
    }
    for (int i = 0; i < 20; ++i) {
      Step();
    }
  }

  /// One sample and its line, as `record` takes them.
  void Step() {
    sampler->SampleOnce(sample);
    if (!writer->Append(sample).ok()) error = "write to /dev/null failed";
    clock.Step();
  }

  void Report(benchmark::State& state) const {
    state.counters["gpus"] = static_cast<double>(sample.gpus.size());
    state.counters["processes"] = static_cast<double>(sample.processes.size());
  }
};

bool Ready(const Rig& rig, benchmark::State& state) {
  if (rig.error.empty()) return true;
  state.SkipWithError(rig.error.c_str());
  return false;
}

/// Sleeps 100 ms with the timer paused, when the benchmark's argument 1 says so: then every
/// sample starts with cold caches, as in a 10 Hz recording (other processes ran meanwhile).
void MaybeSleep(benchmark::State& state) {
  if (state.range(1) == 0) return;
  state.PauseTiming();
  std::this_thread::sleep_for(std::chrono::nanoseconds(kIntervalNs));
  state.ResumeTiming();
}

/// Registers `fn` as /procs:N/sleep:0 (back to back, warm caches) and /procs:N/sleep:1 (one
/// sample per 100 ms, 30 samples: cold caches).
void Variants(const char* name, void (*fn)(benchmark::State&),
              std::initializer_list<int64_t> procs) {
  auto* warm = benchmark::RegisterBenchmark(name, fn);
  auto* cold = benchmark::RegisterBenchmark(name, fn);
  for (auto* b : {warm, cold}) b->ArgNames({"procs", "sleep"})->Unit(benchmark::kMicrosecond);
  for (int64_t n : procs) {
    warm->Args({n, 0});
    cold->Args({n, 1});
  }
  cold->Iterations(30);
}

/// The whole sample path: GPUs + host + tree + the JSON line written.
void BM_FullSample8Gpus(benchmark::State& state) {
  Rig rig(static_cast<int>(state.range(0)));
  if (!Ready(rig, state)) return;
  for (auto _ : state) {
    MaybeSleep(state);
    rig.Step();
  }
  rig.Report(state);
}

/// NvmlBackend::Sample of the 8 GPUs (includes the fake library's own work).
void BM_PartNvml8Gpus(benchmark::State& state) {
  Rig rig(5);
  if (!Ready(rig, state)) return;
  for (auto _ : state) {
    MaybeSleep(state);
    for (size_t i = 0; i < rig.gpus->DeviceCount(); ++i) rig.gpus->Sample(i, rig.sample.gpus[i]);
    benchmark::DoNotOptimize(rig.sample.gpus.data());
  }
  rig.Report(state);
}

/// HostSampler::Sample on this machine's /proc.
void BM_PartHost(benchmark::State& state) {
  Rig rig(5);
  if (!Ready(rig, state)) return;
  for (auto _ : state) {
    MaybeSleep(state);
    rig.host->Sample(rig.clock.MonotonicNs(), rig.sample.host);
    rig.clock.Step();
  }
  rig.Report(state);
}

/// ProcessTracker::Sample of the tree, at 10 Hz.
void BM_PartProcessTree(benchmark::State& state) {
  Rig rig(static_cast<int>(state.range(0)));
  if (!Ready(rig, state)) return;
  for (auto _ : state) {
    MaybeSleep(state);
    rig.tracker->Sample(rig.clock.MonotonicNs(), rig.sample.processes);
    rig.clock.Step();
  }
  rig.Report(state);
}

/// AppendSampleJson of one sample (8 GPUs, host, 5 processes) into a reused string.
void BM_PartJson(benchmark::State& state) {
  Rig rig(5);
  if (!Ready(rig, state)) return;
  std::string line;
  line.reserve(64 * 1024);
  for (auto _ : state) {
    MaybeSleep(state);
    line.clear();
    sample::AppendSampleJson(rig.header, rig.sample, line);
    benchmark::DoNotOptimize(line.data());
  }
  state.counters["bytes"] = static_cast<double>(line.size());
  rig.Report(state);
}
/// The JSON line written to /dev/null by RecordingWriter::Append (formatting + write(2)).
void BM_PartWriteLine(benchmark::State& state) {
  Rig rig(5);
  if (!Ready(rig, state)) return;
  for (auto _ : state) {
    MaybeSleep(state);
    if (!rig.writer->Append(rig.sample).ok()) state.SkipWithError("write failed");
  }
  rig.Report(state);
}

}  // namespace
}  // namespace stallscope

int main(int argc, char** argv) {
  using namespace stallscope;  // NOLINT: the benchmarks' names
  Variants("BM_FullSample8Gpus", BM_FullSample8Gpus, {5, 20});
  Variants("BM_PartNvml8Gpus", BM_PartNvml8Gpus, {5});
  Variants("BM_PartHost", BM_PartHost, {5});
  Variants("BM_PartProcessTree", BM_PartProcessTree, {5, 20});
  Variants("BM_PartJson", BM_PartJson, {5});
  Variants("BM_PartWriteLine", BM_PartWriteLine, {5});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
