// Sample() must not allocate in steady state (house style: hot paths do not allocate). This file
// replaces the global operator new of the whole test binary with a counting one.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>

#include "gpu/nvml_backend.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<size_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) std::abort();  // no exceptions in our code; out of memory is fatal here
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t /*size*/) noexcept { std::free(p); }

namespace stallscope::gpu {
namespace {

TEST(NvmlAllocationTest, SteadyStateSampleDoesNotAllocate) {
  setenv("STALLSCOPE_FAKE_NVML_SCENARIO", STALLSCOPE_NVML_SCENARIOS "/eight_gpus_gpm.json", 1);
  Result<std::unique_ptr<GpuBackend>> backend = OpenNvml({.library_path = STALLSCOPE_FAKE_NVML});
  unsetenv("STALLSCOPE_FAKE_NVML_SCENARIO");
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  GpuBackend& gpus = **backend;
  ASSERT_EQ(gpus.DeviceCount(), 8U);
  GpuSample sample;
  for (int warm = 0; warm < 3; ++warm) {
    for (size_t i = 0; i < gpus.DeviceCount(); ++i) gpus.Sample(i, sample);
  }
  // GPM reports windows of 100 ms or more: let one grow so the counted rounds read it.
  std::this_thread::sleep_for(std::chrono::milliseconds(110));
  bool saw_gpm = false;
  g_allocations = 0;
  g_counting = true;
  for (int round = 0; round < 50; ++round) {
    for (size_t i = 0; i < gpus.DeviceCount(); ++i) {
      gpus.Sample(i, sample);
      saw_gpm = saw_gpm || sample.gpm.has_value();
    }
  }
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0U);
  EXPECT_EQ(sample.processes.size(), 1U);  // the samples were real
  EXPECT_TRUE(saw_gpm);                    // every tier, GPM included
}

}  // namespace
}  // namespace stallscope::gpu
