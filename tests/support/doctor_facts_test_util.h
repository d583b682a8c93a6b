#pragma once

// Test-only: a healthy machine as doctor Facts (one H100, 8 CPUs, torch with CUDA), for tests to
// break one fact at a time, and lookups into check lists.

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "doctor/check.h"
#include "doctor/facts.h"
#include "fakes/fake_gpu_backend.h"

namespace stallscope::doctor::testing {

inline GpuFact HealthyGpu(uint32_t index) {
  GpuFact g;
  g.info = gpu::FakeGpuBackend::MakeStatic(index);
  g.health.power_limit_default_mw = 700'000;
  g.health.pcie_gen_gpu_max = 5;
  g.health.ecc_aggregate_uncorrected = 0;
  g.health.remapped_rows_correctable = 0;
  g.health.remapped_rows_uncorrectable = 0;
  g.health.remap_pending = false;
  g.health.remap_failed = false;
  g.now.util_gpu_pct = 0;
  g.now.mem_used_bytes = 512ULL << 20;
  g.now.clock_event_reasons = gpu::kClockEventGpuIdle;
  g.now.pcie_gen = 5;
  g.now.pcie_width = 16;
  g.now.sm_clock_mhz = 345;
  g.now.temperature_c = 31;
  g.now.ecc_volatile_corrected = 0;
  g.now.ecc_volatile_uncorrected = 0;
  return g;
}

inline Facts HealthyFacts(size_t gpus = 1) {
  Facts f;
  f.gpu.driver = DriverState::kOk;
  f.gpu.driver_version = "550.54.15";
  f.gpu.cuda_driver_version = 12040;
  for (uint32_t i = 0; i < gpus; ++i) f.gpu.gpus.push_back(HealthyGpu(i));
  f.host.online_cpus = 8;
  f.host.allowed_cpus = {0, 1, 2, 3, 4, 5, 6, 7};
  f.host.mem_total_bytes = 64ULL << 30;
  f.host.mem_available_bytes = 60ULL << 30;
  f.host.shm = SpaceFacts{"/dev/shm", "", 32ULL << 30, 32ULL << 30, 1000, "tmpfs"};
  f.host.nofile_soft = 1048576;
  f.host.nofile_hard = 1048576;
  f.host.checkpoint = SpaceFacts{"/ckpt", "", 2000ULL << 30, 1000ULL << 30, 100000, "ext4"};
  f.python.interpreter = "python3";
  f.python.ran = true;
  f.python.version = "3.11.2";
  f.python.implementation = "CPython";
  f.python.executable = "/venv/bin/python3";
  f.python.venv = true;
  f.python.torch_version = "2.3.1+cu121";
  f.python.torch_cuda = "12.1";
  f.python.cuda_available = true;
  f.python.device_count = static_cast<int64_t>(gpus);
  f.python.cudnn_version = 8902;
  f.python.torch_threads = 8;
  f.env = {{"PATH", "/usr/bin"}, {"OMP_NUM_THREADS", "4"}};
  f.workers = 4;
  return f;
}

/// The checks with `id` (one per GPU for per-GPU checks), in order.
inline std::vector<Check> WithId(const std::vector<Check>& checks, std::string_view id) {
  std::vector<Check> out;
  for (const Check& c : checks) {
    if (c.id == id) out.push_back(c);
  }
  return out;
}

/// The one check with `id`; a test failure (and an empty Check) when there is not exactly one.
inline Check One(const std::vector<Check>& checks, std::string_view id) {
  const std::vector<Check> found = WithId(checks, id);
  EXPECT_EQ(found.size(), 1U) << id;
  return found.empty() ? Check{} : found.front();
}

inline bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace stallscope::doctor::testing
