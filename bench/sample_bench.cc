// CPU time of one full sample: 8 fake GPUs (real NvmlBackend over the fake libnvidia-ml.so.1),
// the host, and a followed 20-process tree (one shell with 19 sleeping children).

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <benchmark/benchmark.h>

#include "sample/sampler.h"

extern char** environ;

namespace stallscope {
namespace {

void BM_FullSample8Gpus20Procs(benchmark::State& state) {
  setenv("STALLSCOPE_FAKE_NVML_SCENARIO", STALLSCOPE_NVML_SCENARIOS "/eight_gpus.json", 1);
  gpu::NvmlOptions options;
  options.library_path = STALLSCOPE_FAKE_NVML;
  auto gpus = gpu::OpenNvml(options);
  if (!gpus.ok()) {
    state.SkipWithError(gpus.error().message.c_str());
    return;
  }
  const char* argv[] = {"sh", "-c", "for i in $(seq 19); do sleep 1000 & done; wait", nullptr};
  pid_t root = -1;
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);  // own group: one kill ends the whole tree
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnp(&root, "sh", nullptr, &attr, const_cast<char**>(argv), environ);
  posix_spawnattr_destroy(&attr);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the children start

  host::HostSampler host_sampler{host::ProcFs{}};
  host::ProcessTracker tracker{host::ProcFs{}, root};
  SystemClock clock;
  sample::Sampler sampler(**gpus, host_sampler, &tracker, clock);
  sample::Sample s;
  sampler.SampleOnce(s);
  for (auto _ : state) {
    sampler.SampleOnce(s);
    benchmark::DoNotOptimize(s);
  }
  state.counters["gpus"] = static_cast<double>(s.gpus.size());
  state.counters["processes"] = static_cast<double>(s.processes.size());
  kill(-root, SIGTERM);
  waitpid(root, nullptr, 0);
}
BENCHMARK(BM_FullSample8Gpus20Procs)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace stallscope

BENCHMARK_MAIN();
