// Steady-state sampling allocates nothing: counts C++ heap allocations with a replacement
// operator new. Not built under sanitizers, which replace operator new themselves.

#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "fakes/fake_gpu_backend.h"
#include "sample/recording.h"
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

// The JSON line of a sample is formatted into the writer's reused buffer: no allocation either,
// with every kind of field present (clock-event names and unknown bits, pressure, processes).
TEST(RecordingWriter, SteadyStateAppendDoesNotAllocate) {
  RecordingHeader header;
  header.gpus.resize(2);
  header.gpus[0].name = "NVIDIA H100 80GB HBM3";
  Sample s;
  s.wall_ns = 1'700'000'000'123'456'789;
  s.gpus.resize(2);
  s.gpus[0].util_gpu_pct = 97;
  s.gpus[0].power_mw = 650'000;
  s.gpus[0].clock_event_reasons = gpu::kClockEventSwPowerCap | (uint64_t{1} << 50);
  s.gpus[0].util_samples[0] = {1'700'000'000'000'000, 100};
  s.gpus[0].util_sample_count = 1;
  s.gpus[0].processes.resize(2);
  s.gpus[1].lost = true;
  s.host.cpu = host::CpuShares{45.2, 40.0, 5.2, 3.1, 0.0};
  s.host.per_cpu.assign(4, host::CpuShares{50, 45, 5, 0, 0});
  s.host.psi_cpu = host::Pressure{12.5, std::nullopt, 1000};
  s.host.psi_memory = host::Pressure{1.5, 0.5, 10};
  s.has_processes = true;
  s.processes.resize(5);
  for (auto& p : s.processes) {
    p.comm = "python3 worker";
    p.cmdline = "python3 -m torch.distributed.run --nproc-per-node 8 train.py --config big.yaml";
  }
  auto writer = RecordingWriter::Open("/dev/null", header, RecordingFormat::kJsonl);
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer->Append(s).ok());
  int64_t before = g_allocations.load();
  for (int i = 0; i < 20; ++i) {
    s.wall_ns += 100'000'000;
    ASSERT_TRUE(writer->Append(s).ok());
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace stallscope::sample
