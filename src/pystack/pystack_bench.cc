// StackReader::Sample against a live CPython whose main thread sits 40 frames deep (issue 31's
// budget: <= 0.5% of a core per sampled process at 50 Hz, i.e. <= 100 us per Sample).
//   ninja -C build pystack_bench && build/src/pystack/pystack_bench
// The target is $STALLSCOPE_BENCH_PYTHON, else /usr/bin/python3. Counters per Sample: reads
// (process_vm_readv calls), frames, torn (share of samples dropped as torn).
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "pystack/pystack.h"

namespace {

using stallscope::pystack::StackReader;

// 38 levels + the innermost loop's function + <module> = 40 frames.
constexpr const char* kSleepingScript =
    "import time\n"
    "def level(n):\n"
    "    if n == 0:\n"
    "        print('ready', flush=True)\n"
    "        while True:\n"
    "            time.sleep(1)\n"
    "    level(n - 1)\n"
    "level(38)\n";
constexpr const char* kBusyScript =
    "def level(n):\n"
    "    if n == 0:\n"
    "        print('ready', flush=True)\n"
    "        x = 0\n"
    "        while True:\n"
    "            x += 1\n"
    "    level(n - 1)\n"
    "level(38)\n";

// A Python target started for the whole run, killed at exit.
struct Target {
  pid_t pid = -1;
  explicit Target(const char* script) {
    const char* env = std::getenv("STALLSCOPE_BENCH_PYTHON");
    std::string python = env != nullptr ? env : "/usr/bin/python3";
    int out[2];
    if (pipe(out) != 0) return;
    pid = fork();
    if (pid == 0) {
      dup2(out[1], 1);
      close(out[0]);
      execl(python.c_str(), python.c_str(), "-c", script, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    char line[16] = {};
    FILE* stream = fdopen(out[0], "r");
    if (stream == nullptr || fgets(line, sizeof(line), stream) == nullptr) pid = -1;
    if (stream != nullptr) fclose(stream);
  }
  ~Target() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

void Report(benchmark::State& state, const StackReader& reader, int64_t reads_before,
            int64_t torn_before, size_t frames) {
  const auto n = static_cast<double>(state.iterations());
  state.counters["reads"] = static_cast<double>(reader.stats().reads - reads_before) / n;
  state.counters["torn"] = static_cast<double>(reader.stats().torn - torn_before) / n;
  state.counters["frames"] = static_cast<double>(frames);
}

void SampleMainThread(benchmark::State& state, const char* script) {
  Target target(script);
  auto reader = StackReader::Open(target.pid);
  if (target.pid <= 0 || !reader.ok()) {
    state.SkipWithError(reader.ok() ? "no target" : reader.error().message.c_str());
    return;
  }
  (void)reader->Sample(target.pid);  // fills the code cache
  const int64_t reads = reader->stats().reads, torn = reader->stats().torn;
  size_t frames = 0;
  for (auto _ : state) {
    auto stack = reader->Sample(target.pid);
    if (stack.ok()) frames = stack->frames.size();
    benchmark::DoNotOptimize(stack);
  }
  Report(state, *reader, reads, torn, frames);
}

void BM_SampleSleeping40(benchmark::State& state) { SampleMainThread(state, kSleepingScript); }
void BM_SampleBusy40(benchmark::State& state) { SampleMainThread(state, kBusyScript); }

void BM_SampleAllSleeping40(benchmark::State& state) {
  Target target(kSleepingScript);
  auto reader = StackReader::Open(target.pid);
  if (target.pid <= 0 || !reader.ok()) {
    state.SkipWithError("no target");
    return;
  }
  (void)reader->SampleAll();
  const int64_t reads = reader->stats().reads, torn = reader->stats().torn;
  for (auto _ : state) benchmark::DoNotOptimize(reader->SampleAll());
  Report(state, *reader, reads, torn, 40);
}

// What a sampler without a reader would pay: FindPython and every code object, each time.
void BM_DumpCold40(benchmark::State& state) {
  Target target(kSleepingScript);
  if (target.pid <= 0) {
    state.SkipWithError("no target");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(stallscope::pystack::Dump(target.pid));
}

BENCHMARK(BM_SampleSleeping40)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleBusy40)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleAllSleeping40)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DumpCold40)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
