// Steady-state sampling allocates nothing: counts C++ heap allocations with a replacement
// operator new. Not built under sanitizers, which replace operator new themselves.

#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "fakes/fake_gpu_backend.h"
#include "sample/sampler.h"

// Counts C++ heap allocations so the test can show steady-state sampling allocates nothing.
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// The replacement pair is malloc/free on both sides, which GCC cannot see across the definitions.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace stallscope::sample {
namespace {

TEST(Sampler, SteadyStateGpuAndHostSamplingDoesNotAllocate) {
  std::vector<gpu::GpuStatic> statics(2);
  gpu::FakeGpuBackend gpus(statics, [](size_t, size_t, gpu::GpuSample& out) {
    out.util_gpu_pct = 50;
    out.mem_used_bytes = 1ull << 30;
    out.processes.resize(3);
  });
  host::HostSampler host_sampler{host::ProcFs{}};
  FakeClock clock;
  Sampler sampler(gpus, host_sampler, nullptr, clock);
  Sample s;
  for (int i = 0; i < 3; ++i) {  // warm-up: buffers grow to size
    sampler.SampleOnce(s);
    clock.Advance(100'000'000);
  }
  int64_t before = g_allocations.load();
  for (int i = 0; i < 20; ++i) {
    sampler.SampleOnce(s);
    clock.Advance(100'000'000);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace stallscope::sample
