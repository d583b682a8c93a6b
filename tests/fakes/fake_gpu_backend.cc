#include "fakes/fake_gpu_backend.h"

#include <fmt/format.h>

#include <memory>
#include <utility>

namespace stallscope::gpu {

FakeGpuBackend::FakeGpuBackend(std::vector<GpuStatic> gpus, SampleFn fn, std::string driver_version)
    : gpus_(std::move(gpus)),
      fn_(std::move(fn)),
      driver_version_(std::move(driver_version)),
      calls_(gpus_.size(), 0),
      last_due_(gpus_.size()),
      health_(gpus_.size()) {}

FakeGpuBackend FakeGpuBackend::Scripted(std::vector<GpuStatic> gpus,
                                        std::vector<std::vector<GpuSample>> script) {
  auto shared = std::make_shared<std::vector<std::vector<GpuSample>>>(std::move(script));
  return FakeGpuBackend(std::move(gpus), [shared](size_t gpu, size_t call, GpuSample& out) {
    if (gpu >= shared->size() || (*shared)[gpu].empty()) return;
    const std::vector<GpuSample>& steps = (*shared)[gpu];
    out = steps[std::min(call, steps.size() - 1)];
  });
}

GpuStatic FakeGpuBackend::MakeStatic(uint32_t index) {
  GpuStatic info;
  info.index = index;
  info.name = "NVIDIA H100 80GB HBM3";
  info.uuid = fmt::format("GPU-00000000-0000-0000-0000-{:012x}", index);
  info.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x17 + index);
  info.mem_total_bytes = 81559ULL << 20;
  info.power_limit_mw = 700'000;
  info.sm_clock_max_mhz = 1980;
  info.mem_clock_max_mhz = 2619;
  info.pcie_gen_max = 5;
  info.pcie_width_max = 16;
  info.persistence_mode = true;
  info.mig_mode = MigMode::kDisabled;
  return info;
}

void FakeGpuBackend::Sample(size_t i, PollTiers due, GpuSample& out) {
  out.Clear();
  last_due_[i] = due;
  const size_t call = calls_[i]++;
  if (fn_) fn_(i, call, out);
}

}  // namespace stallscope::gpu
