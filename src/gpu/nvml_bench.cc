// CPU cost of NvmlBackend::Sample() over 8 GPUs of the fake libnvidia-ml.so.1
// (tests/data/nvml/eight_gpus.json). Includes the fake's own work, so it bounds our overhead
// from above; the real driver's calls cost more (kernel round trips).

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdio>

#include "gpu/gpu_backend.h"

namespace stallscope::gpu {
namespace {

void BM_SampleEightGpus(benchmark::State& state) {
  setenv("STALLSCOPE_FAKE_NVML_SCENARIO", STALLSCOPE_NVML_SCENARIOS "/eight_gpus.json", 1);
  Result<std::unique_ptr<GpuBackend>> backend = OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
  if (!backend.ok()) {
    state.SkipWithError(backend.error().message.c_str());
    return;
  }
  GpuBackend& gpus = **backend;
  GpuSample sample;
  for (auto _ : state) {
    for (size_t i = 0; i < gpus.DeviceCount(); ++i) {
      gpus.Sample(i, sample);
      benchmark::DoNotOptimize(sample.util_gpu_pct);
    }
  }
  state.counters["gpus"] = static_cast<double>(gpus.DeviceCount());
}
BENCHMARK(BM_SampleEightGpus)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace stallscope::gpu

BENCHMARK_MAIN();
